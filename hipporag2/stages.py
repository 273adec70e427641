"""The stages of a run over dataset files: data -> OpenIE -> index (embeddings + graph)
-> retriever, and the numbers of a finished run (`run_report`).

The library's dataset mode (`HippoRAG.for_dataset`, which `pipeline.run` and
`hipporag2-sweep` use) is built from these, and so is `hipporag2-tune-filter`; the
library's own index life cycle in a save_dir shares OpenIE and the LLM with them.
docs/own_corpus.md ("Which layer to call") says which client uses which.

Each stage either loads its cached output or computes it; the log says which.
Shared artefacts (embeddings, indexes by content key) live in `cache_dir`.
"""
from __future__ import annotations

__all__ = [
    "Timings", "LazyLLM", "Inputs", "load_inputs", "load_dataset", "dataset_paths", "get_openie", "get_index",
    "make_retriever", "count_fallbacks", "run_report", "llm_stage_stats", "llm_failures", "provenance", "input_files",
]

import json
import logging
import platform
import time
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any, Dict, Iterator, List, NamedTuple, Optional, Tuple

from filelock import FileLock

from hipporag2.files.atomicio import crash_point
from hipporag2.config import Config, ConfigError
from hipporag2.data.errors import DataError
from hipporag2.data.inputs import check_input_paths
from hipporag2.data.loaders import Corpus, Query, check_gold_in_corpus, load_corpus, load_queries
from hipporag2.evaluate.metrics import mean_recall
from hipporag2.gates import check_has_facts, check_openie_coverage, fallback_rate
from hipporag2.graph.store import Index, IndexCorrupt, index_exists, load_index, remove_index, save_index
from hipporag2.indexing import build_index
from hipporag2.runtime.interrupts import in_stage
from hipporag2.openie.interchange import Extraction, import_openie
from hipporag2.files.redact import redact, redact_obj
from hipporag2.results import RunReport
from hipporag2.results import QueryResult
from hipporag2.files.stagekeys import corpus_digest, digest, file_digest, index_key

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
            with in_stage(name):
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
    corpus = load_corpus(cpath, cfg.dataset.sentence_joiner, strict=cfg.dataset.strict)
    queries = load_queries(qpath, cfg.dataset.sentence_joiner, cfg.dataset.max_queries, cfg.dataset.decode_json_answers)
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

            self._llm = build_llm(self.cfg.llm, Path(self.cfg.cache_dir) / "llm", log_dir=Path(self.cfg.run_dir))
        return self._llm

    def usage(self) -> Dict:
        return self._llm.usage() if self._llm is not None else {}

    def engine_report(self) -> Dict:
        return self._llm.engine_report() if self._llm is not None else {}

    def close(self) -> None:
        """Release the backend (a vLLM engine's processes) once the run is done with it."""
        if self._llm is not None:
            self._llm.close()

    def release(self) -> None:
        """`close`, then forget the LLM and close its response cache: for an owner that is
        done with it for good (`HippoRAG.close`); `get` would build a new one."""
        llm, self._llm = self._llm, None
        if llm is not None:
            llm.close()
            if llm.cache is not None:
                llm.cache.close()


def get_openie(cfg: Config, corpus: Corpus, llm: LazyLLM, report: Dict) -> Tuple[Dict[str, Extraction], str]:
    """Extractions by passage id, and the key that identifies them."""
    if cfg.openie.name == "spacy":
        raise ConfigError("openie=spacy makes phrases, not extractions: it is indexed by the CLI's get_index; "
                          "the library's insert/delete do not support it yet")
    if cfg.openie.import_path:
        imp = import_openie(cfg.openie.import_path, corpus)
        report.update(
            openie_source=str(cfg.openie.import_path),
            openie_passages_missing=len(imp.missing),
            openie_entries_unmatched=imp.unmatched,
            openie_entries_duplicate=imp.duplicates,
            openie_triples_not_three=imp.triples_not_three,
            openie_triples_non_string=imp.triples_non_string,
        )
        if imp.triples_not_three or imp.triples_non_string:
            log.warning(
                "%s: %d triples are not lists of three (skipped) and %d have non-string elements (str()'d, kept)",
                cfg.openie.import_path, imp.triples_not_three, imp.triples_non_string,
            )
        if imp.missing:
            msg = f"{len(imp.missing)} corpus passages have no extraction in {cfg.openie.import_path} (first: {imp.missing[0][:80]!r})"
            if cfg.openie.require_complete:
                raise DataError(cfg.openie.import_path, msg)
            report["openie_coverage"] = check_openie_coverage(
                str(cfg.openie.import_path), len(corpus), imp.missing, cfg.openie.min_coverage
            )
            log.warning(msg + "; they enter the graph without triples")
        return imp.by_passage_id, "import-" + file_digest(cfg.openie.import_path)
    from hipporag2.openie.extract import extract_corpus  # LLM-bound; imported only when used

    return extract_corpus(cfg, corpus, llm.get(), report)


def input_files(cfg: Config, qpath: Path, cpath: Path) -> Dict[str, str]:
    """Every input file of the run and its content hash (sha256, 16 hex)."""
    files = {str(qpath): file_digest(qpath), str(cpath): file_digest(cpath)}
    if cfg.openie.import_path:
        files[str(cfg.openie.import_path)] = file_digest(cfg.openie.import_path)
    r = cfg.retrieval
    from hipporag2.retrieve.filter_program import program_file

    prog = program_file(r.filter_program)
    if r.filter == "llm" and prog is not None and prog.is_file():
        files[str(prog)] = file_digest(prog)
    return files


def provenance(cfg: Config, qpath: Path, cpath: Path, data_files: Optional[Dict[str, str]] = None) -> Dict:
    import importlib.metadata as md

    versions = {}
    for pkg in ("hipporag2", "numpy", "scipy", "python-igraph", "torch", "transformers", "sentence-transformers", "bm25s", "hydra-core"):
        try:
            versions[pkg] = md.version(pkg)
        except md.PackageNotFoundError:
            pass
    return {
        "config_hash": digest(asdict(cfg) if not isinstance(cfg, dict) else cfg),
        "data_files": data_files if data_files is not None else input_files(cfg, qpath, cpath),
        "models": {
            "embedding": cfg.embedding.model,
            "llm": cfg.llm.model or None,
            "llm_backend": cfg.llm.backend if cfg.llm.model else None,
            "llm_base_url": redact(cfg.llm.base_url) if cfg.llm.base_url else None,
        },
        "python": platform.python_version(),
        "packages": versions,
    }


def _load_verified(path: Path, report: Dict, timings: Timings, under_lock: bool,
                   defer: Tuple[str, ...] = ()) -> Optional[Index]:
    """The index at `path` if complete and intact; None if absent. A corrupt one is
    reported and, when the caller holds the build lock, removed for rebuilding. The
    embedding matrices in `defer` (ones the run's retriever does not read) are checked
    on first read instead (`load_index`)."""
    if not index_exists(path):
        return None
    try:
        with timings.stage("index_load"):
            return load_index(path, defer=defer)
    except IndexCorrupt as e:
        if not under_lock:
            return None  # decided again under the lock (another process may be rewriting it)
        log.warning("index cache %s failed verification (%s: %s); deleting it and rebuilding", path, e.file, e.reason)
        report["index_corrupt_rebuilt"] = f"{e.file}: {e.reason}"
        remove_index(path)
        return None


def get_index(cfg: Config, corpus: Corpus, store, llm: LazyLLM, report: Dict, timings: Timings) -> Index:
    sentences = None
    with timings.stage("openie"):
        if cfg.openie.name == "spacy":  # no LLM, no facts: phrases by sentence (issue 27)
            from hipporag2.openie.spacy_extract import spacy_corpus

            extractions, (sentences, openie_key) = {}, spacy_corpus(cfg.openie, corpus.strings, cfg.cache_dir, report)
        else:
            extractions, openie_key = get_openie(cfg, corpus, llm, report)
    # Before anything is embedded: an OpenIE without one triple cannot make a graph run.
    # (openie=spacy makes no facts by design; its queries link to phrase nodes.)
    fallback_gate = 1.0 if sentences is not None else cfg.retrieval.max_fallback_rate
    source = str(report.get("openie_source", "OpenIE"))
    check_has_facts(sum(len(ex.triples) for ex in extractions.values()), source, len(corpus), fallback_gate)
    key = index_key(corpus_digest(corpus.strings), openie_key, store.dir.name, cfg.graph)
    path = Path(cfg.cache_dir) / "index" / key
    report["index_key"] = key
    from hipporag2.retrieve.factory import unread_embeddings

    defer = unread_embeddings(cfg)
    index = _load_verified(path, report, timings, under_lock=False, defer=defer)
    if index is None:
        path.parent.mkdir(parents=True, exist_ok=True)
        # Two runs sharing a cache (e.g. a parallel sweep) build an index once: the
        # second waits for the lock and then finds the index.
        with FileLock(str(path) + ".lock"):
            index = _load_verified(path, report, timings, under_lock=True, defer=defer)
            if index is None:
                log.info("building index %s", path)
                with timings.stage("index_build"):
                    index = build_index(corpus, extractions, store, cfg.graph, progress=cfg.progress,
                                        sentence_phrases=sentences)
                    crash_point("index_built")
                    save_index(index, path)
                crash_point("index_saved")
                log.info("graph: %s", json.dumps(index.stats))
                check_has_facts(int(index.stats.get("facts", 0)), source, len(corpus), fallback_gate)
                return index
    log.info("index cache hit %s: OpenIE, embeddings and graph reused, nothing rebuilt", path)
    check_has_facts(int(index.stats.get("facts", 0)), source, len(corpus), fallback_gate)
    return index


def make_retriever(cfg: Config, corpus: Corpus, store, llm: LazyLLM, report: Dict, timings: Timings):
    """The configured retriever over the run's corpus, and the graph index (None for
    methods without one). Built by `hipporag2.retrieve.factory`, as in the library."""
    from hipporag2.registry import GRAPH_METHODS
    from hipporag2.retrieve.factory import RetrieverParts, build_retriever

    parts = RetrieverParts(cfg=cfg, passages=corpus.strings, store=store, llm=llm)
    if cfg.retrieval.method in GRAPH_METHODS:
        parts.index = get_index(cfg, corpus, store, llm, report, timings)
    elif cfg.retrieval.method == "dense":
        with timings.stage("embed_passages"):
            parts.passage_emb = store.embed(corpus.strings, desc="embed passages", progress=cfg.progress)
    with timings.stage("retrieval_setup"):
        retriever = build_retriever(parts)
    return retriever, parts.index


def count_fallbacks(results: List[QueryResult]) -> int:
    """Queries answered by the dense ranking because nothing seeded the graph."""
    return sum(1 for r in results if r.fallback)


def run_report(cfg: Config, inputs: "Inputs", results: List[QueryResult], store, report: Dict, timings: Dict[str, float],
               resumed: int = 0, recall: Optional[Dict[str, float]] = None) -> RunReport:
    """A run's numbers as one RunReport, for a single run and each point of a sweep
    alike: recall over the queries' gold passages (unless given), data counts,
    fallbacks, the stages' reports and provenance."""
    corpus, queries, cov = inputs.corpus, inputs.queries, inputs.coverage
    if recall is None:
        strings = corpus.strings
        recall = mean_recall([q.gold_passages for q in queries], [[strings[i] for i in r.ranked] for r in results], cfg.recall_k)
    fallbacks = count_fallbacks(results)
    metrics = {
        "dataset": cfg.dataset.name,
        "method": cfg.retrieval.name,
        "n_queries": len(queries),
        **recall,
        "gold_passages": cov.n_gold,
        "gold_passages_missing_from_corpus": cov.n_missing,
        "queries_without_gold": len(cov.queries_without_gold),
        "corpus_passages": len(corpus),
        "corpus_duplicates_skipped": corpus.duplicates,
        "corpus_empty_passages_skipped": corpus.empty,
        "dense_fallbacks": fallbacks,
        "dense_fallback_rate": round(fallback_rate(fallbacks, len(results)), 4),
        "embedded_this_run": store.encoded,
        "embedding_shards_corrupt_rebuilt": store.corrupt_shards,
        "retrieval_resumed_queries": resumed,
        **report,
        "timings": timings,
        "provenance": provenance(cfg, inputs.queries_path, inputs.corpus_path, inputs.data_files),
    }
    return RunReport.from_json(redact_obj(metrics))


def llm_stage_stats(retriever) -> Dict[str, Dict[str, int]]:
    """The query-time LLM stages' answer counts (questions, unparsable answers, failed
    calls), for metrics.json: a filter that mostly failed to parse would otherwise look
    like a weak filter. They cover the queries retrieved by this process (a resumed run
    does not re-ask for the checkpointed ones)."""
    out = {}
    for key, part in (("filter_stats", getattr(retriever, "fact_filter", None)),
                      ("query_ner_stats", getattr(retriever, "query_ner", None))):
        stats = getattr(part, "stats", None)
        if stats:
            out[key] = dict(stats)
    info = getattr(getattr(retriever, "fact_filter", None), "program_info", None)
    if info:
        out["filter_program"] = dict(info)  # which program (name, source, sha256) ran
    prompt_info = getattr(getattr(retriever, "query_ner", None), "prompt_info", None)
    if prompt_info:
        out["query_ner_prompts"] = dict(prompt_info)  # which prompt (source, template sha256) ran
    return out


class Inputs(NamedTuple):
    """A run's checked inputs (a NamedTuple: fields by name, or unpacked in this order)."""

    corpus: Corpus
    queries: List[Query]
    queries_path: Path
    corpus_path: Path
    data_files: Dict[str, str]  # every input file -> content hash, for provenance
    coverage: Any  # data.loaders gold coverage (n_gold, n_missing, queries without gold)


def load_inputs(cfg: Config, timings: Timings) -> Inputs:
    """Corpus and queries, checked. Gold passages missing from the corpus are logged
    here, once, for every entry point that scores a run."""
    check_input_paths(cfg)
    with timings.stage("load_data"):
        corpus, queries = load_dataset(cfg)
    qpath, cpath = dataset_paths(cfg)
    data_files = input_files(cfg, qpath, cpath)
    log.info("dataset %s: %d queries, %d unique passages (%d duplicates dropped)", cfg.dataset.name, len(queries), len(corpus), corpus.duplicates)
    if corpus.empty:
        log.warning(
            "%s: %d passages with an empty text skipped (first: record %d); dataset.strict=true makes this an error",
            cpath, corpus.empty, corpus.first_empty,
        )
    cov = check_gold_in_corpus(queries, corpus)
    if cov.n_missing:
        log.warning(
            "%d of %d gold passages (in %d queries) are not in the corpus; they count as misses (first query: %s)",
            cov.n_missing, cov.n_gold, len(cov.queries_with_missing), cov.queries_with_missing[0],
        )
    if cov.queries_without_gold:
        log.warning("%d queries have no gold passage; recall counts 0 for them", len(cov.queries_without_gold))
    return Inputs(corpus, queries, qpath, cpath, data_files, cov)


def llm_failures(usage: Dict[str, Dict[str, int]]) -> Dict[str, int]:
    """Calls that failed in the LLM after its retries, by stage (openie_ner, openie_triples,
    query_ner, filter, qa), for metrics.json and the printed summary: a query-time stage
    goes on without the answer (no NER entities, no kept fact), which must show."""
    return {stage: int(u.get("failures", 0)) for stage, u in usage.items()}
