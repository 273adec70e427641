"""`make demo`: the whole pipeline on the shipped demo corpus with CPU models.

OpenIE (SmolLM2-135M) -> embeddings (MiniLM) -> graph -> HippoRAG 2 with the LLM
recognition-memory filter -> QA reader, and the dense baseline with the same reader,
then a table of recall@2/5 and EM/F1. Everything is cached under
.hipporag2_cache, so a second `make demo` takes seconds.

The numbers show the pipeline working end to end on a 135M-parameter model; they say
nothing about HippoRAG 2's accuracy with the paper's 70B model.
"""
from __future__ import annotations

import logging
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from hipporag2.cli import compose  # noqa: E402
from hipporag2.pipeline import run  # noqa: E402

RUNS = {
    "dense": ["retrieval=dense"],
    "hipporag2": ["retrieval=hipporag2", "retrieval.filter=llm"],
}
COMMON = ["dataset=demo", "embedding=minilm", "llm=smollm2_cpu", "qa=reader"]


def main() -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s: %(message)s", datefmt="%H:%M:%S")
    t0 = time.time()
    rows = []
    for name, overrides in RUNS.items():
        run_dir = REPO / "runs" / "demo" / name
        print(f"\n=== {name}: hipporag2 {' '.join(COMMON + overrides)} run_dir={run_dir.relative_to(REPO)}", flush=True)
        metrics = run(compose(COMMON + overrides + [f"run_dir={run_dir}"]))
        rows.append((name, metrics))
    wall = time.time() - t0
    print("\nDemo results (28 invented-world multi-hop questions, 53 passages; SmolLM2-135M + MiniLM on CPU)")
    print(f"{'method':<12}{'R@2':>7}{'R@5':>7}{'EM':>7}{'F1':>7}{'fallbacks':>11}")
    for name, m in rows:
        print(f"{name:<12}{m['recall@2']:>7.1f}{m['recall@5']:>7.1f}{m.get('qa_em', float('nan')):>7.1f}"
              f"{m.get('qa_f1', float('nan')):>7.1f}{m.get('dense_fallbacks', 0):>11}")
    print(f"wall time: {wall:.0f} s; run directories under runs/demo/")
    return 0


if __name__ == "__main__":
    sys.exit(main())
