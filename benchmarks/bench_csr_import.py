"""What reaching scipy's CSR product costs a fresh process (after numpy): CPU and wall ms.

    python -m benchmarks.bench_csr_import [--repeats 7]

Each way runs in its own interpreter, `--repeats` times, alternating; medians. The last
is `retrieve/csr.py`'s loader (scipy's compiled `_sparsetools` from its file).
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

WAYS = {
    "import scipy.sparse": "import scipy.sparse",
    "import scipy (the package alone)": "import scipy",
    "from scipy.sparse import _sparsetools": "from scipy.sparse import _sparsetools",
    "csr.sparsetools() (the private load)": "from hipporag2.retrieve.csr import sparsetools; sparsetools()",
}
CODE = ("import sys, time, numpy\nt, w = time.process_time(), time.perf_counter()\n{stmt}\n"
        "print(time.process_time() - t, time.perf_counter() - w, sum(m.startswith('scipy') for m in sys.modules))")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args(argv)
    got = {k: [] for k in WAYS}
    for _ in range(args.repeats):
        for k, stmt in WAYS.items():
            out = subprocess.run([sys.executable, "-c", CODE.format(stmt=stmt)], capture_output=True, text=True, check=True)
            cpu, wall, mods = out.stdout.split()
            got[k].append((float(cpu), float(wall), int(mods)))
    print(f"load average after: {os.getloadavg()[0]:.1f}")
    print("| way | CPU ms (median) | wall ms (median) | scipy modules loaded |")
    print("| --- | ---: | ---: | ---: |")
    for k, v in got.items():
        print(f"| `{k}` | {1e3 * statistics.median(c for c, _, _ in v):.1f} | {1e3 * statistics.median(w for _, w, _ in v):.1f} | {v[0][2]} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
