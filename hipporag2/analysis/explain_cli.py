"""`hipporag2-explain RUN QUESTION_ID`: a picture and a text of one question's retrieval.

    hipporag2-explain runs/musique_train/hipporag2_nofilter 2hop__1234_5678
    hipporag2-explain RUN ID1 ID2 --out results/musique_train/explain

Writes OUT/ID.png and OUT/ID.txt (default OUT: RUN/explain/) and prints the text.
The run's index must still be in its cache (it is reloaded, not rebuilt); the
question's embedding is read from the embedding cache (encoded if missing).
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path
from typing import Optional, Sequence

from hipporag2.analysis.run_view import RunUnavailable, open_run


def safe_name(query_id: str) -> str:
    return re.sub(r"[^A-Za-z0-9._-]+", "_", query_id)


def main(argv: Optional[Sequence[str]] = None) -> int:
    p = argparse.ArgumentParser(prog="hipporag2-explain", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("run", type=Path, help="run directory of a hipporag2 run")
    p.add_argument("question_ids", nargs="+", help="question id(s) as in retrieval.jsonl")
    p.add_argument("--out", type=Path, help="output folder (default RUN/explain)")
    p.add_argument("--top", type=int, default=5, help="passages listed by PPR mass (default 5)")
    args = p.parse_args(argv)
    from hipporag2.analysis.explain import explanation_text
    from hipporag2.analysis.figure import draw_explanation
    from hipporag2.files import atomicio
    from hipporag2.registry import ANALYSES

    out = args.out or args.run / "explain"
    with atomicio.os_errors_exit():  # a full disk or read-only --out: one line, exit 2
        try:
            view = open_run(args.run)
            for qid in args.question_ids:
                e = ANALYSES.load("explain")(view, qid, top_n=args.top)
                text = explanation_text(e)
                out.mkdir(parents=True, exist_ok=True)
                atomicio.write_text(out / f"{safe_name(qid)}.txt", text)
                png = draw_explanation(e, out / f"{safe_name(qid)}.png")
                print(text)
                print(f"picture: {png}\n")
        except RunUnavailable as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
