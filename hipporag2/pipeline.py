"""One run over dataset files: the library (`HippoRAG.for_dataset`) retrieves every
question into the run folder's retrieval.jsonl, then evaluation (recall, and QA when
configured), then `run_files.write_run`, the one writer of a run's files that
`hipporag2-sweep` uses too. `hipporag2` (cli.py), the demo and the tests call `run`.

The stage functions (`hipporag2.stages`) are re-exported here for the clients written
against this module; `__all__` lists what they may use (tests/test_public_surface.py).
"""
from __future__ import annotations

__all__ = [
    "run", "Timings", "LazyLLM", "Inputs", "load_inputs", "load_dataset", "dataset_paths", "get_openie", "get_index",
    "make_retriever", "count_fallbacks", "run_report", "llm_stage_stats", "llm_failures", "provenance", "input_files",
]

import logging
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator, Optional, Sequence

from filelock import FileLock, Timeout

from hipporag2.files import atomicio
from hipporag2.api import HippoRAG
from hipporag2.files.atomicio import crash_point
from hipporag2.config import Config
from hipporag2.evaluate.metrics import mean_recall
from hipporag2.files.redact import install_log_redaction, redact_hydra_dir, register_key_env, url_has_credentials
from hipporag2.results import RunReport
from hipporag2.files.run_files import RetrievalFile, retrieval_key, write_run
from hipporag2.stages import (  # noqa: F401 (re-exported)
    Inputs, LazyLLM, Timings, count_fallbacks, dataset_paths, get_index, get_openie, input_files, llm_failures, llm_stage_stats,
    load_dataset, load_inputs, make_retriever, provenance, run_report,
)

log = logging.getLogger("hipporag2")


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


def run(cfg: Config, overrides: Optional[Sequence[str]] = None) -> RunReport:
    """Run `cfg` into `cfg.run_dir`. `overrides`: the command line that made `cfg`, kept
    in metrics.json for the report (the CLI passes Hydra's)."""
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
        return _run(cfg, run_dir, list(overrides or []))


def _run(cfg: Config, run_dir: Path, overrides: Sequence[str]) -> RunReport:
    atomicio.remove_stale_temps(run_dir, any_pid=True)  # we hold the run dir's lock
    rag = HippoRAG.for_dataset(cfg)
    inputs, timings, report = rag.inputs, rag.timings, rag.report
    crash_point("retriever_ready")
    out = RetrievalFile(run_dir, retrieval_key(cfg, inputs.data_files, report.get("index_key")), inputs.queries,
                        inputs.corpus, cfg.retrieval.query_batch_size)
    results, resumed = rag.retrieve_dataset(out)
    method_report = getattr(rag.retriever, "run_report", None)  # a baseline's own counters (hipporag2/baselines)
    crash_point("retrieval_written")
    strings = inputs.corpus.strings
    with timings.stage("evaluate"):
        recall = mean_recall([q.gold_passages for q in inputs.queries], [[strings[i] for i in r.ranked] for r in results],
                             cfg.recall_k)
    if cfg.qa.enabled:
        from hipporag2.qa.reader import run_qa

        with timings.stage("qa"):
            report.update(run_qa(cfg, rag.llm(), inputs.queries, inputs.corpus, results, run_dir))
    if method_report is not None:
        report.update(method_report(inputs.queries, results, inputs.corpus, cfg.recall_k, timings))
    report.update(rag.llm_report())
    metrics = run_report(cfg, inputs, results, rag.store(), report, timings.seconds, resumed=resumed, recall=recall)
    graph_stats = rag.index_data.stats if rag.index_data is not None else None
    rag.close()  # the last LLM stage is done (a failed run relies on the backend's atexit)
    metrics = write_run(run_dir, metrics, graph_stats, cfg, overrides)
    out.complete()  # the run is complete: its outputs replace the checkpoints
    if cfg.qa.enabled:
        from hipporag2.qa.checkpoint import remove_checkpoint

        remove_checkpoint(run_dir)
    log.info("recall: %s", "  ".join(f"{k}={v}" for k, v in recall.items()))
    log.info("timings (s): %s", timings.seconds)
    return metrics
