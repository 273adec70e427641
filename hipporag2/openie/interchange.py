"""The OpenIE results file of the reference implementation (SPEC §1).

Read and written here so that published extractions can be reused and our own
extractions can be used by other tools. Older files lack `idx` and are matched to
corpus passages by the passage string.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from hipporag2.data.errors import DataError
from hipporag2.data.loaders import Corpus, passage_string, read_json
from hipporag2.text import passage_id


@dataclass
class Extraction:
    """Raw OpenIE output of one passage: triples are kept exactly as the LLM wrote them."""

    passage: str
    entities: List[str] = field(default_factory=list)
    triples: List[list] = field(default_factory=list)

    @property
    def idx(self) -> str:
        return passage_id(self.passage)


@dataclass
class OpenIEImport:
    by_passage_id: Dict[str, Extraction]
    # Corpus passages that the file has no entry for.
    missing: List[str]
    # File entries that match no corpus passage.
    unmatched: int
    path: str = ""


def _doc_passage(path, i, doc) -> str:
    if "passage" in doc and isinstance(doc["passage"], str):
        return doc["passage"]
    if "title" in doc and "text" in doc:
        return passage_string(doc["title"], doc["text"])
    raise DataError(path, "needs 'passage' (or 'title' and 'text')", doc.get("idx", i), "passage")


def parse_openie(path: Path | str) -> List[Extraction]:
    data = read_json(path)
    if not isinstance(data, dict) or "docs" not in data:
        raise DataError(path, "expected an object with a 'docs' list (OpenIE interchange format)")
    if not isinstance(data["docs"], list):
        raise DataError(path, "expected a list", field="docs")
    out = []
    for i, doc in enumerate(data["docs"]):
        if not isinstance(doc, dict):
            raise DataError(path, "expected an object", f"docs[{i}]")
        passage = _doc_passage(path, i, doc)
        ents = doc.get("extracted_entities", []) or []
        triples = doc.get("extracted_triples", []) or []
        if not isinstance(ents, list):
            raise DataError(path, "expected a list of strings", f"docs[{i}]", "extracted_entities")
        if not isinstance(triples, list):
            raise DataError(path, "expected a list of [s, p, o] lists", f"docs[{i}]", "extracted_triples")
        out.append(Extraction(passage=passage, entities=list(ents), triples=[t if isinstance(t, list) else [t] for t in triples]))
    return out


def import_openie(path: Path | str, corpus: Corpus) -> OpenIEImport:
    """Match a file's extractions to the corpus by passage string (hence by `chunk-` id)."""
    by_id: Dict[str, Extraction] = {}
    corpus_ids = {passage_id(s) for s in corpus.strings}
    unmatched = 0
    for ex in parse_openie(path):
        pid = ex.idx
        if pid not in corpus_ids:
            unmatched += 1
            continue
        by_id.setdefault(pid, ex)
    missing = [s for s in corpus.strings if passage_id(s) not in by_id]
    return OpenIEImport(by_passage_id=by_id, missing=missing, unmatched=unmatched, path=str(path))


def _avg(values: Sequence[float]) -> float:
    return float(sum(values) / len(values)) if values else 0.0


def write_openie(path: Path | str, extractions: Sequence[Extraction]) -> None:
    """Write atomically (temp file + rename) so a crash never leaves half a file."""
    ents = [e for ex in extractions for e in ex.entities if isinstance(e, str)]
    payload = {
        "docs": [
            {
                "idx": ex.idx,
                "passage": ex.passage,
                "extracted_entities": ex.entities,
                "extracted_triples": ex.triples,
            }
            for ex in extractions
        ],
        "avg_ent_chars": round(_avg([len(e) for e in ents]), 4),
        "avg_ent_words": round(_avg([len(e.split()) for e in ents]), 4),
    }
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + f".tmp-{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(payload, f, ensure_ascii=False)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
