"""A small slice of the shipped demo set for the baseline systems' end-to-end tests:
the first questions and the passages they need, padded with others."""
from __future__ import annotations

import json
from pathlib import Path

DEMO = Path(__file__).resolve().parents[1] / "hipporag2" / "resources" / "demo"


def demo_slice(folder: Path, n_questions: int, n_passages: int, supporting_only: bool = False) -> tuple[int, int]:
    """Write demo.json / demo_corpus.json of the slice into `folder`; (questions, passages).
    `supporting_only`: only the questions' supporting paragraphs are forced in (others pad)."""
    qs = json.loads((DEMO / "demo.json").read_text())[:n_questions]
    corpus = json.loads((DEMO / "demo_corpus.json").read_text())
    titles = {p["title"] for q in qs for p in q["paragraphs"] if p.get("is_supporting") or not supporting_only}
    chosen = [c for c in corpus if c["title"] in titles]
    chosen += [c for c in corpus if c["title"] not in titles][: max(0, n_passages - len(chosen))]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "demo.json").write_text(json.dumps(qs))
    (folder / "demo_corpus.json").write_text(json.dumps(chosen))
    return len(qs), len(chosen)
