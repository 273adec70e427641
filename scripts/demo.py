"""`make demo`: the whole pipeline on the shipped demo corpus with CPU models.

OpenIE (SmolLM2-135M) -> embeddings (MiniLM) -> graph -> HippoRAG 2 with the LLM
recognition-memory filter -> QA reader, and the dense baseline with the same reader,
then a table of recall@2/5 and EM/F1. Everything is cached under
.hipporag2_cache, so a second `make demo` takes seconds.

The numbers show the pipeline working end to end on a 135M-parameter model; they say
nothing about HippoRAG 2's accuracy with the paper's 70B model.

Settings for a small model on a small CPU (DEMO_LLM below): JSON-schema constrained
decoding for OpenIE and the filter (valid, short answers that end at the closing
brace), separate output limits for NER, triples and the rest, batches of 32 (the
decode step is memory-bound, so a larger batch costs little more per step), and
torch threads chosen from the load average (2 on an idle 2-core machine, 1 on a
busy one). Budget: under 10 minutes on an idle 2-core machine; see
results/demo/README.md for measurements.

Extra arguments are Hydra overrides applied to both runs, e.g.
`python scripts/demo.py cache_dir=/tmp/fresh_cache` for a cold-cache timing run.
"""
from __future__ import annotations

import logging
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
# Before torch loads OpenMP: idle worker threads sleep instead of spinning. With
# spinning, 2 threads on 2 cores run 10-30x slower as soon as another process
# needs a core; passive, they cost about what 1 thread does (measured).
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from hipporag2.cli import compose  # noqa: E402
from hipporag2.pipeline import run  # noqa: E402

RUNS = {
    "dense": ["retrieval=dense"],
    # Our own 3-demo filter program: the authors' 10-demo prompt is beyond a 135M model.
    # Constrained decoding answers bare JSON (no field header), hence the lenient reader.
    "hipporag2": ["retrieval=hipporag2", "retrieval.filter=llm", "retrieval.filter_program=own",
                  "retrieval.filter_parse=lenient", "retrieval.filter_max_new_tokens=64"],
}
COMMON = ["dataset=demo", "embedding=minilm", "llm=smollm2_cpu", "qa=reader"]
DEMO_LLM = [
    "llm.constrained_decoding=true",
    "llm.batch_size=32",
    "llm.cpu_threads=null",  # automatic: see transformers_backend.resolve_cpu_threads
    "llm.max_new_tokens=64",  # filter and reader
    "openie.ner_max_new_tokens=48",
    "openie.triples_max_new_tokens=128",
]


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    extra = sys.argv[1:]
    t0 = time.time()
    rows = []
    for name, overrides in RUNS.items():
        run_dir = REPO / "runs" / "demo" / name
        args = COMMON + DEMO_LLM + overrides + extra
        print(f"\n=== {name}: hipporag2 {' '.join(args)} run_dir={run_dir.relative_to(REPO)}", flush=True)
        metrics = run(compose(args + [f"run_dir={run_dir}"]))
        rows.append((name, metrics))
    wall = time.time() - t0
    print("\nDemo results (28 invented-world multi-hop questions, 53 passages; SmolLM2-135M + MiniLM on CPU)")
    print(f"{'method':<12}{'R@2':>7}{'R@5':>7}{'EM':>7}{'F1':>7}{'fallbacks':>11}")
    for name, m in rows:
        print(f"{name:<12}{m['recall@2']:>7.1f}{m['recall@5']:>7.1f}{m.get('qa_em', float('nan')):>7.1f}"
              f"{m.get('qa_f1', float('nan')):>7.1f}{m.get('dense_fallbacks', 0):>11}")
    cpu = sum(os.times()[:2])
    print(f"wall time: {wall:.0f} s (process CPU time {cpu:.0f} s, load average now "
          f"{os.getloadavg()[0]:.1f} on {os.cpu_count()} cores); run directories under runs/demo/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
