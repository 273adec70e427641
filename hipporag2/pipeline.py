"""One run: data -> OpenIE -> index (embeddings + graph) -> retrieval -> evaluation.

Each stage either loads its cached output or computes it; the log says which.
All files of a run land in `run_dir`; shared artefacts in `cache_dir`.
"""
from __future__ import annotations

import json
import logging
import os
import platform
import time
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Dict, Iterator, List, Tuple

from filelock import FileLock

from hipporag2.config import Config, ConfigError
from hipporag2.data.errors import DataError
from hipporag2.data.loaders import Corpus, Query, check_gold_in_corpus, load_corpus, load_queries
from hipporag2.embed.encoders import Encoder
from hipporag2.embed.store import open_store
from hipporag2.evaluate.metrics import mean_recall
from hipporag2.graph.store import Index, index_exists, load_index, save_index
from hipporag2.indexing import build_index
from hipporag2.openie.interchange import Extraction, import_openie
from hipporag2.retrieve.base import RetrievalResult
from hipporag2.stagekeys import corpus_digest, digest, file_digest, index_key

log = logging.getLogger("hipporag2")

DOWNLOAD_HINT = (
    "The HippoRAG 2 release publishes these files on the Hugging Face hub "
    "(dataset osunlp/HippoRAG_2); run `hipporag2-download {name} --data-dir {data_dir}` "
    "on a machine that is online, or copy them into that folder."
)


class Timings:
    def __init__(self) -> None:
        self.seconds: Dict[str, float] = {}

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        t0 = time.perf_counter()
        try:
            yield
        finally:
            self.seconds[name] = round(self.seconds.get(name, 0.0) + time.perf_counter() - t0, 3)


def dataset_paths(cfg: Config) -> Tuple[Path, Path]:
    stem = cfg.dataset.file_stem or cfg.dataset.name
    data_dir = Path(cfg.data_dir)
    return data_dir / f"{stem}.json", data_dir / f"{stem}_corpus.json"


def load_dataset(cfg: Config) -> Tuple[Corpus, List[Query]]:
    qpath, cpath = dataset_paths(cfg)
    missing = [str(p) for p in (qpath, cpath) if not p.is_file()]
    if missing:
        raise DataError(
            missing[0],
            f"dataset {cfg.dataset.name!r} not found: missing {', '.join(missing)} "
            f"(looked in data_dir={cfg.data_dir!r}, resolved {Path(cfg.data_dir).resolve()}). "
            + DOWNLOAD_HINT.format(name=cfg.dataset.name, data_dir=cfg.data_dir),
        )
    corpus = load_corpus(cpath, cfg.dataset.sentence_joiner)
    queries = load_queries(qpath, cfg.dataset.sentence_joiner, cfg.dataset.max_queries)
    if cfg.dataset.corpus_segments > 1 or cfg.dataset.segments_indexed is not None:
        from hipporag2.continual import restrict

        corpus, queries = restrict(corpus, queries, cfg.dataset)
    return corpus, queries


class LazyLLM:
    """One LLM per run, built on first use: a run that imports OpenIE and needs no
    filter or reader never loads a model; stages that do share one engine."""

    def __init__(self, cfg: Config):
        self.cfg = cfg
        self._llm = None

    def get(self):
        if self._llm is None:
            if self.cfg.llm.name == "none" or not self.cfg.llm.model:
                raise ConfigError(
                    "this run needs an LLM (fresh OpenIE, retrieval.filter=llm, query NER or QA) "
                    "but llm=none; choose one, e.g. llm=smollm2_cpu, or set openie.import_path / retrieval.filter=none"
                )
            from hipporag2.llm.base import build_llm

            self._llm = build_llm(self.cfg.llm, Path(self.cfg.cache_dir) / "llm")
        return self._llm

    def usage(self) -> Dict:
        return self._llm.usage() if self._llm is not None else {}


def get_openie(cfg: Config, corpus: Corpus, llm: LazyLLM, report: Dict) -> Tuple[Dict[str, Extraction], str]:
    """Extractions by passage id, and the key that identifies them."""
    if cfg.openie.import_path:
        imp = import_openie(cfg.openie.import_path, corpus)
        report.update(
            openie_source=str(cfg.openie.import_path),
            openie_passages_missing=len(imp.missing),
            openie_entries_unmatched=imp.unmatched,
        )
        if imp.missing:
            msg = f"{len(imp.missing)} corpus passages have no extraction in {cfg.openie.import_path} (first: {imp.missing[0][:80]!r})"
            if cfg.openie.require_complete:
                raise DataError(cfg.openie.import_path, msg)
            log.warning(msg + "; they enter the graph without triples")
        return imp.by_passage_id, "import-" + file_digest(cfg.openie.import_path)
    from hipporag2.openie.extract import extract_corpus  # LLM-bound; imported only when used

    return extract_corpus(cfg, corpus, llm.get(), report)


def _provenance(cfg: Config, qpath: Path, cpath: Path) -> Dict:
    import importlib.metadata as md

    versions = {}
    for pkg in ("hipporag2", "numpy", "scipy", "python-igraph", "torch", "transformers", "sentence-transformers", "bm25s", "hydra-core"):
        try:
            versions[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            pass
    return {
        "config_hash": digest(asdict(cfg) if not isinstance(cfg, dict) else cfg),
        "data_files": {str(qpath): file_digest(qpath), str(cpath): file_digest(cpath)},
        "models": {"embedding": cfg.embedding.model, "llm": cfg.llm.model or None},
        "python": platform.python_version(),
        "packages": versions,
    }


def get_index(cfg: Config, corpus: Corpus, store, llm: LazyLLM, report: Dict, timings: Timings) -> Index:
    with timings.stage("openie"):
        extractions, openie_key = get_openie(cfg, corpus, llm, report)
    key = index_key(corpus_digest(corpus.strings), openie_key, store.dir.name, cfg.graph)
    path = Path(cfg.cache_dir) / "index" / key
    report["index_key"] = key
    if not index_exists(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        # Two runs sharing a cache (e.g. a parallel sweep) build an index once: the
        # second waits for the lock and then finds the index.
        with FileLock(str(path) + ".lock"):
            if not index_exists(path):
                log.info("building index %s", path)
                with timings.stage("index_build"):
                    index = build_index(corpus, extractions, store, cfg.graph, progress=cfg.progress)
                    save_index(index, path)
                log.info("graph: %s", json.dumps(index.stats))
                return index
    log.info("index cache hit %s: OpenIE, embeddings and graph reused, nothing rebuilt", path)
    with timings.stage("index_load"):
        return load_index(path)


def make_retriever(cfg: Config, corpus: Corpus, store, llm: LazyLLM, report: Dict, timings: Timings):
    method = cfg.retrieval.method
    if method == "bm25":
        from hipporag2.retrieve.bm25 import BM25Retriever

        return BM25Retriever(corpus.strings, cfg.retrieval), None
    if method == "dense":
        from hipporag2.retrieve.graph_retriever import DenseRetriever

        with timings.stage("embed_passages"):
            emb = store.embed(corpus.strings, desc="embed passages", progress=cfg.progress)
        return DenseRetriever(emb, store, cfg.retrieval, progress=cfg.progress), None
    from hipporag2.retrieve.graph_retriever import GraphRetriever

    index = get_index(cfg, corpus, store, llm, report, timings)
    fact_filter = query_ner = None
    if cfg.retrieval.filter == "llm" and cfg.retrieval.linking == "query_to_triple":
        from hipporag2.retrieve.filter_llm import build_filter

        fact_filter = build_filter(cfg, llm.get())
    if cfg.retrieval.linking == "ner_to_node":
        from hipporag2.openie.query_ner import build_query_ner

        query_ner = build_query_ner(cfg, llm.get())
    with timings.stage("retrieval_setup"):
        retriever = GraphRetriever(index, store, cfg.retrieval, fact_filter, query_ner, progress=cfg.progress)
    return retriever, index


def write_jsonl(path: Path, rows) -> None:
    tmp = path.with_name(path.name + f".tmp-{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    os.replace(tmp, path)


def write_json(path: Path, obj) -> None:
    tmp = path.with_name(path.name + f".tmp-{os.getpid()}")
    tmp.write_text(json.dumps(obj, indent=2, ensure_ascii=False))
    os.replace(tmp, path)


def run(cfg: Config) -> Dict:
    run_dir = Path(cfg.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    timings = Timings()
    report: Dict = {}
    with timings.stage("load_data"):
        corpus, queries = load_dataset(cfg)
    log.info("dataset %s: %d queries, %d unique passages (%d duplicates dropped)", cfg.dataset.name, len(queries), len(corpus), corpus.duplicates)
    cov = check_gold_in_corpus(queries, corpus)
    if cov.n_missing:
        log.warning(
            "%d of %d gold passages (in %d queries) are not in the corpus; they count as misses (first query: %s)",
            cov.n_missing, cov.n_gold, len(cov.queries_with_missing), cov.queries_with_missing[0],
        )
    if cov.queries_without_gold:
        log.warning("%d queries have no gold passage; recall counts 0 for them", len(cov.queries_without_gold))
    store = open_store(cfg.cache_dir, cfg.embedding)
    llm = LazyLLM(cfg)
    retriever, index = make_retriever(cfg, corpus, store, llm, report, timings)
    if index is not None:
        write_json(run_dir / "graph_stats.json", index.stats)
    with timings.stage("retrieval"):
        results: List[RetrievalResult] = retriever.retrieve(queries)
    strings = corpus.strings
    rows = []
    for q, r in zip(queries, results):
        row = {
            "id": q.id,
            "question": q.question,
            "ranked": [
                {"title": corpus.passages[i].title, "corpus_idx": corpus.passages[i].corpus_idx, "score": s}
                for i, s in zip(r.ranked, r.scores)
            ],
        }
        row.update(r.details)
        rows.append(row)
    write_jsonl(run_dir / "retrieval.jsonl", rows)
    with timings.stage("evaluate"):
        recall = mean_recall([q.gold_passages for q in queries], [[strings[i] for i in r.ranked] for r in results], cfg.recall_k)
    if cfg.qa.enabled:
        from hipporag2.qa.reader import run_qa

        with timings.stage("qa"):
            report.update(run_qa(cfg, llm.get(), queries, corpus, results, run_dir))
    if llm.usage():
        report["llm_usage"] = llm.usage()
    qpath, cpath = dataset_paths(cfg)
    metrics = {
        "dataset": cfg.dataset.name,
        "method": cfg.retrieval.name,
        "n_queries": len(queries),
        **recall,
        "gold_passages": cov.n_gold,
        "gold_passages_missing_from_corpus": cov.n_missing,
        "queries_without_gold": len(cov.queries_without_gold),
        "dense_fallbacks": sum(1 for r in results if r.details.get("fallback")),
        "embedded_this_run": store.encoded,
        **report,
        "timings": timings.seconds,
        "provenance": _provenance(cfg, qpath, cpath),
    }
    write_json(run_dir / "metrics.json", metrics)
    log.info("recall: %s", "  ".join(f"{k}={v}" for k, v in recall.items()))
    log.info("timings (s): %s", timings.seconds)
    return metrics
