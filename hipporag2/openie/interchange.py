"""The OpenIE results file of the reference implementation (SPEC §1).

Read and written here so that published extractions can be reused and our own
extractions can be used by other tools. Older files lack `idx` and are matched to
corpus passages by the passage string.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional, Sequence

from hipporag2.files import atomicio
from hipporag2.data.errors import DataError
from hipporag2.data.loaders import Corpus, passage_string, read_json
from hipporag2.data.validate import check_text, max_field_bytes, require_list, require_str, type_name
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
    # Entries whose passage repeats an earlier entry (the first is used).
    duplicates: int = 0
    # Triples the graph stage will skip or coerce (counted again in graph_stats.json).
    triples_not_three: int = 0
    triples_non_string: int = 0


@dataclass
class ParseStats:
    docs: int = 0
    triples: int = 0
    # not a list, or not exactly 3 elements: skipped by the graph stage (SPEC §2.2)
    triples_not_three: int = 0
    # exactly 3 elements but not all strings: str()'d as the reference does, and kept
    triples_non_string: int = 0


def _doc_passage(path, i, doc) -> str:
    rec = f"docs[{i}]"
    if "passage" in doc and doc["passage"] is not None:
        return require_str(path, rec, "passage", doc["passage"])
    if "title" in doc and "text" in doc:
        return passage_string(require_str(path, rec, "title", doc["title"]), require_str(path, rec, "text", doc["text"]))
    raise DataError(path, "needs 'passage' (or 'title' and 'text')", rec, "passage")


def parse_openie(path: Path | str, stats: Optional[ParseStats] = None) -> List[Extraction]:
    """Read an interchange-format file (SPEC §1); every malformed part is a DataError.

    Triples are kept exactly as written: a triple that is not a list of three elements
    is skipped by the graph stage and one with non-string elements is str()'d there
    (both counted in `stats` here and in graph_stats.json). A bare non-list triple is
    wrapped in a list so the graph stage counts it as the wrong length.
    """
    stats = stats if stats is not None else ParseStats()
    data = read_json(path)
    if not isinstance(data, dict) or "docs" not in data:
        raise DataError(path, f"expected an object with a 'docs' list (OpenIE interchange format), got {type_name(data)}" + (" without 'docs'" if isinstance(data, dict) else ""))
    docs = require_list(path, None, "docs", data["docs"])
    limit = max_field_bytes()  # once, not once for each of the file's ~76k strings
    out = []
    for i, doc in enumerate(docs):
        rec = f"docs[{i}]"
        if not isinstance(doc, dict):
            raise DataError(path, f"expected an object, got {type_name(doc)}", rec)
        passage = _doc_passage(path, i, doc)
        if doc.get("idx") is not None:
            require_str(path, rec, "idx", doc["idx"], "a 'chunk-...' id string")
        ents = doc.get("extracted_entities")
        triples = doc.get("extracted_triples")
        ents = [] if ents is None else require_list(path, rec, "extracted_entities", ents, "a list of strings")
        triples = [] if triples is None else require_list(path, rec, "extracted_triples", triples, "a list of [s, p, o] lists")
        for j, e in enumerate(ents):
            # an ASCII string within the limit passes check_text: checked here without naming the field first
            if isinstance(e, str) and not (e.isascii() and len(e) <= limit):
                check_text(path, rec, f"extracted_entities[{j}]", e, limit)
        kept = []
        for j, t in enumerate(triples):
            stats.triples += 1
            if not isinstance(t, list):
                t = [t]
            if len(t) != 3:
                stats.triples_not_three += 1
            elif not all(isinstance(x, str) for x in t):
                stats.triples_non_string += 1
            for k, x in enumerate(t):
                if isinstance(x, str) and not (x.isascii() and len(x) <= limit):
                    check_text(path, rec, f"extracted_triples[{j}][{k}]", x, limit)
            kept.append(t)
        stats.docs += 1
        out.append(Extraction(passage=passage, entities=list(ents), triples=kept))
    return out


def import_openie(path: Path | str, corpus: Corpus) -> OpenIEImport:
    """Match a file's extractions to the corpus by passage string (hence by `chunk-` id)."""
    by_id: Dict[str, Extraction] = {}
    corpus_ids = {passage_id(s) for s in corpus.strings}
    unmatched = duplicates = 0
    stats = ParseStats()
    for ex in parse_openie(path, stats):
        pid = ex.idx
        if pid not in corpus_ids:
            unmatched += 1
            continue
        if pid in by_id:
            duplicates += 1
            continue
        by_id[pid] = ex
    missing = [s for s in corpus.strings if passage_id(s) not in by_id]
    return OpenIEImport(
        by_passage_id=by_id, missing=missing, unmatched=unmatched, path=str(path), duplicates=duplicates,
        triples_not_three=stats.triples_not_three, triples_non_string=stats.triples_non_string,
    )


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
    atomicio.make_dirs(path.parent)
    atomicio.write_json(path, payload, indent=None, what="OpenIE extraction")
