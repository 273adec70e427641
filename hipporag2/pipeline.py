"""One run: data -> OpenIE -> index (embeddings + graph) -> retrieval -> evaluation.

This is the stage layer under the library (`hipporag2.api.HippoRAG`): the CLI's
`run`, `hipporag2-sweep`, `hipporag2-tune-filter` and the demo call the functions in
`__all__` (and nothing else of this module; tests/test_public_surface.py checks), and
so does the library for the stages it shares with them (OpenIE, the LLM).
docs/own_corpus.md ("Which layer to call") says which client uses which.

Each stage either loads its cached output or computes it; the log says which.
All files of a run land in `run_dir`; shared artefacts in `cache_dir`.
"""
from __future__ import annotations

__all__ = [
    "run", "Timings", "LazyLLM", "Inputs", "load_inputs", "load_dataset", "dataset_paths", "get_openie", "get_index",
    "make_retriever", "retrieval_rows", "write_retrieval_jsonl", "count_fallbacks", "run_metrics", "provenance", "input_files",
    "write_json", "write_jsonl",
]

import json
import logging
import platform
import time
from contextlib import contextmanager
from dataclasses import asdict
from pathlib import Path
from typing import Any, Dict, Iterator, List, NamedTuple, Optional, Tuple

from filelock import FileLock, Timeout

from hipporag2 import atomicio
from hipporag2.atomicio import crash_point
from hipporag2.config import Config, ConfigError
from hipporag2.data.errors import DataError
from hipporag2.data.validate import check_input_paths
from hipporag2.data.loaders import Corpus, Query, check_gold_in_corpus, load_corpus, load_queries
from hipporag2.embed.store import open_store
from hipporag2.evaluate.metrics import mean_recall
from hipporag2.gates import check_fallback_rate, check_has_facts, check_openie_coverage, fallback_rate
from hipporag2.graph.store import Index, IndexCorrupt, index_exists, load_index, remove_index, save_index
from hipporag2.indexing import build_index
from hipporag2.interrupts import in_stage
from hipporag2.openie.interchange import Extraction, import_openie
from hipporag2.redact import install_log_redaction, redact, redact_hydra_dir, redact_obj, register_key_env, url_has_credentials
from hipporag2.result_lines import RetrievalLines, checkpoint_block, result_of_checkpoint_row
from hipporag2.results import RunReport
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
    check_has_facts(sum(len(ex.triples) for ex in extractions.values()), str(report.get("openie_source", "OpenIE")),
                    len(corpus), fallback_gate)
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
                check_has_facts(int(index.stats.get("facts", 0)), str(report.get("openie_source", "OpenIE")),
                                len(corpus), fallback_gate)
                return index
    log.info("index cache hit %s: OpenIE, embeddings and graph reused, nothing rebuilt", path)
    check_has_facts(int(index.stats.get("facts", 0)), str(report.get("openie_source", "OpenIE")), len(corpus),
                    fallback_gate)
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


def write_jsonl(path: Path, rows) -> None:
    """Atomic: temp file, fsync, rename, fsync of the folder."""
    atomicio.write_jsonl(path, rows)


def write_json(path: Path, obj) -> None:
    """Atomic: temp file, fsync, rename, fsync of the folder."""
    atomicio.write_json(path, obj)


# ---- retrieval checkpoint -----------------------------------------------------------

PARTIAL = "retrieval.partial.jsonl"


def retrieval_key(cfg: Config, data_files: Dict[str, str], report: Dict) -> str:
    """Hash of everything that changes retrieval output: settings (not paths of the run
    or cache, progress bars, QA or recall cut-offs), input file contents, the index."""
    settings = asdict(cfg)
    for k in ("run_dir", "cache_dir", "progress", "qa", "recall_k", "checkpoint_s"):
        settings.pop(k, None)
    # Gates decide whether results are accepted, not what they are: relaxing one
    # resumes from the checkpoint.
    settings["retrieval"].pop("max_fallback_rate", None)
    settings["openie"].pop("min_coverage", None)
    return digest({"settings": settings, "inputs": sorted(data_files.values()), "index": report.get("index_key")})


class RetrievalCheckpoint:
    """`retrieval.partial.jsonl` in the run dir: a header line with the retrieval key,
    then one line per finished block of queries (appended, flushed and fsynced).

    On restart with the same key, the finished blocks are read back (a torn last line
    from a kill mid-write is cut off) and retrieval continues with the next block; with
    another key the file is discarded. Blocks are the retriever's own query blocks, so
    a resumed run computes exactly what an uninterrupted one does."""

    def __init__(self, path: Path, key: str, query_ids: List[str], block_size: int):
        self.path, self.key, self.block_size = path, key, block_size
        self.ids = query_ids
        self.results: List[RetrievalResult] = []
        # json's text of each result's scores where this process wrote them (None: read
        # back from the file, or not of the plain shape), for retrieval.jsonl
        self.score_texts: List[Optional[List[str]]] = []
        self._log = atomicio.CheckpointLog(path, self._header(), torn_crash="retrieval_torn_write")

    def _header(self) -> Dict:
        return {"checkpoint": {"key": self.key, "n_queries": len(self.ids), "block_size": self.block_size, "ids": digest(self.ids)}}

    def resume(self) -> int:
        """Load finished blocks; returns the number of queries already done."""
        def accept(obj, start: int):
            block = obj.get("rows")
            if obj.get("start") != start or not isinstance(block, list) or \
                    [r.get("id") for r in block] != self.ids[start : start + len(block)]:
                return None
            return [result_of_checkpoint_row(r) for r in block]

        existed = self.path.is_file()
        results = atomicio.read_checkpoint_lines(self.path, self._header(), accept)
        if results is None:
            if existed:
                log.info("retrieval checkpoint %s is from other settings or data; starting retrieval over", self.path)
            return 0
        self.results = results
        self.score_texts = [None] * len(results)
        if results:
            log.info("retrieval checkpoint %s: %d of %d queries already done, resuming", self.path, len(results), len(self.ids))
        return len(results)

    def append(self, start: int, results: List[RetrievalResult]) -> List[RetrievalResult]:
        """Persist a finished block; returns its results as read back from JSON (so a
        resumed and an uninterrupted run hold exactly the same values)."""
        # json.dumps({"start": start, "rows": [...]}) and its json.loads, made cheaper (result_lines);
        block = checkpoint_block(start, results)
        self._log.write_text(block.text)
        self.results.extend(block.results)
        self.score_texts.extend(block.score_texts)
        return block.results

    def close(self) -> None:
        self._log.close()

    def remove(self) -> None:
        self._log.remove()


def retrieve_checkpointed(retriever, queries: List[Query], ckpt: RetrievalCheckpoint, timings: Timings) -> Tuple[List[RetrievalResult], int]:
    """Results for all queries, and how many of them came from the checkpoint."""
    done = ckpt.resume()
    with timings.stage("retrieval"):
        try:
            for start in range(done, len(queries), ckpt.block_size):
                block = queries[start : start + ckpt.block_size]
                ckpt.append(start, retriever.retrieve(block))
                crash_point("retrieval_block")
        finally:
            ckpt.close()
    return ckpt.results, done


# ---- the run ------------------------------------------------------------------------


@contextmanager
def run_dir_lock(run_dir: Path) -> Iterator[None]:
    """One process per run directory: a second run of the same command waits, then
    resumes from (or recomputes) what the first left."""
    lock = FileLock(str(run_dir / ".run.lock"))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        log.warning("another process is using run_dir %s; waiting for it to finish", run_dir)
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


def retrieval_rows(queries, results, corpus: Corpus) -> List[Dict]:
    """The lines of retrieval.jsonl: id, question, ranked passages, retriever details."""
    lines = RetrievalLines(corpus)
    return [lines.row(q, r) for q, r in zip(queries, results)]


def write_retrieval_jsonl(path: Path, queries, results, corpus: Corpus, score_texts=None) -> None:
    """retrieval.jsonl, atomically: `write_jsonl(path, retrieval_rows(...))` byte for byte,
    encoded from per-passage pieces instead of 200 small objects per line (result_lines);
    `score_texts` (RetrievalCheckpoint.score_texts, aligned with results) saves
    formatting the scores a second time."""
    atomicio.write_lines(path, RetrievalLines(corpus).lines(queries, results, score_texts))


def count_fallbacks(results: List[RetrievalResult]) -> int:
    """Queries answered by the dense ranking because nothing seeded the graph."""
    return sum(1 for r in results if r.details.get("fallback"))


def run_metrics(cfg: Config, queries, corpus: Corpus, cov, results, store, recall: Dict) -> Dict:
    """The part of metrics.json shared by a single run and each point of a sweep."""
    return {
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
        "dense_fallbacks": count_fallbacks(results),
        "dense_fallback_rate": round(fallback_rate(count_fallbacks(results), len(results)), 4),
        "embedded_this_run": store.encoded,
        "embedding_shards_corrupt_rebuilt": store.corrupt_shards,
    }


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


def llm_failures(usage: Dict[str, Dict[str, int]]) -> Dict[str, int]:
    """Calls that failed in the LLM after its retries, by stage (openie_ner, openie_triples,
    query_ner, filter, qa), for metrics.json and the printed summary: a query-time stage
    goes on without the answer (no NER entities, no kept fact), which must show."""
    return {stage: int(u.get("failures", 0)) for stage, u in usage.items()}


def run(cfg: Config) -> RunReport:
    run_dir = Path(cfg.run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    install_log_redaction(cfg.llm.api_key_env)
    register_key_env(cfg.embedding.api_key_env)
    # Hydra saved the composed config (and overrides) before this point.
    redact_hydra_dir(run_dir)
    if url_has_credentials(cfg.llm.base_url):
        log.warning(
            "llm.base_url carries credentials; they are masked in logs and saved files, "
            "but prefer the environment variable named by llm.api_key_env (%s)", cfg.llm.api_key_env,
        )
    with run_dir_lock(run_dir):
        return _run(cfg, run_dir)


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


def _run(cfg: Config, run_dir: Path) -> RunReport:
    atomicio.remove_stale_temps(run_dir, any_pid=True)  # we hold the run dir's lock
    timings = Timings()
    report: Dict = {}
    corpus, queries, qpath, cpath, data_files, cov = load_inputs(cfg, timings)
    crash_point("data_loaded")
    store = open_store(cfg.cache_dir, cfg.embedding, checkpoint_s=cfg.checkpoint_s)
    llm = LazyLLM(cfg)
    retriever, index = make_retriever(cfg, corpus, store, llm, report, timings)
    if index is not None:
        write_json(run_dir / "graph_stats.json", index.stats)
    crash_point("retriever_ready")
    block = cfg.retrieval.query_batch_size
    ckpt = RetrievalCheckpoint(run_dir / PARTIAL, retrieval_key(cfg, data_files, report), [q.id for q in queries], block)
    results, resumed = retrieve_checkpointed(retriever, queries, ckpt, timings)
    if index is not None:
        check_fallback_rate(cfg.retrieval.method, count_fallbacks(results), len(results),
                            cfg.retrieval.max_fallback_rate, int(index.stats.get("facts", 0)))
    report.update(llm_stage_stats(retriever))
    method_report = getattr(retriever, "run_report", None)  # a baseline's own counters (hipporag2/baselines)
    strings = corpus.strings
    write_retrieval_jsonl(run_dir / "retrieval.jsonl", queries, results, corpus, ckpt.score_texts)
    crash_point("retrieval_written")
    with timings.stage("evaluate"):
        recall = mean_recall([q.gold_passages for q in queries], [[strings[i] for i in r.ranked] for r in results], cfg.recall_k)
    if cfg.qa.enabled:
        from hipporag2.qa.reader import run_qa

        with timings.stage("qa"):
            report.update(run_qa(cfg, llm.get(), queries, corpus, results, run_dir))
    if method_report is not None:
        report.update(method_report(queries, results, corpus, cfg.recall_k, timings))
    if llm.usage():
        report["llm_usage"] = llm.usage()
        report["llm_failures"] = llm_failures(llm.usage())
    if llm.engine_report():
        report["llm_engine"] = llm.engine_report()
    llm.close()  # the last LLM stage is done (a failed run relies on the backend's atexit)
    metrics = {
        **run_metrics(cfg, queries, corpus, cov, results, store, recall),
        "retrieval_resumed_queries": resumed,
        **report,
        "timings": timings.seconds,
        "provenance": provenance(cfg, qpath, cpath, data_files),
    }
    metrics = redact_obj(metrics)
    crash_point("before_metrics")
    write_json(run_dir / "metrics.json", metrics)
    crash_point("metrics_written")
    ckpt.remove()  # the run is complete: its outputs replace the checkpoints
    if cfg.qa.enabled:
        from hipporag2.qa.checkpoint import remove_checkpoint

        remove_checkpoint(run_dir)
    log.info("recall: %s", "  ".join(f"{k}={v}" for k, v in recall.items()))
    log.info("timings (s): %s", timings.seconds)
    return RunReport.from_json(metrics)
