"""The files of a run folder, written one way by every client (`hipporag2`, the library's
`pipeline.run`, `hipporag2-sweep`): `retrieval.jsonl`, `graph_stats.json` and
`metrics.json`, which is written last and marks the folder as a finished run.

`retrieval.jsonl` is also the retrieval checkpoint: each finished block of queries is
appended to it (one write, flushed and fsynced), so an interrupted run leaves the
blocks it finished, and a rerun with the same retrieval key reads them back and goes
on with the next block. The key (a hash of every setting and input that can change a
ranking) lives beside it in `.retrieval.key` until the run is complete; a file
without a matching key is started over. Blocks are the retriever's own query blocks,
so a resumed run computes exactly what an uninterrupted one does, and every line is
encoded once (`result_lines`).

`metrics.json` carries what the report needs to know about the run (the composed
config, the overrides, the working directory, under "run"), so a folder made by the
sweep or the library reads like one made by Hydra, without a `.hydra/` of its own.
"""
from __future__ import annotations

import json
import logging
import os
from dataclasses import asdict
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from hipporag2.files import atomicio
from hipporag2.files.atomicio import crash_hit, crash_now, crash_point
from hipporag2.files.result_lines import RetrievalLines
from hipporag2.results import QueryResult
from hipporag2.files.stagekeys import digest

log = logging.getLogger("hipporag2")

RETRIEVAL_FILE = "retrieval.jsonl"
KEY_FILE = ".retrieval.key"

# Bumped whenever a change can move a ranking (as the tie order once did); written to
# metrics.json so that the report never puts runs of different semantics side by side
# without saying so. 1: the semantics of the first versioned release.
RETRIEVAL_SEMANTICS = 1


def retrieval_key(cfg, data_files: Dict[str, str], index_key: Optional[str]) -> str:
    """Hash of everything that changes retrieval output: settings (not paths of the run
    or cache, progress bars, QA or recall cut-offs), input file contents, the index."""
    settings = asdict(cfg)
    for k in ("run_dir", "cache_dir", "progress", "qa", "recall_k", "checkpoint_s"):
        settings.pop(k, None)
    # Gates decide whether results are accepted, not what they are: relaxing one
    # resumes from the checkpoint.
    settings["retrieval"].pop("max_fallback_rate", None)
    settings["openie"].pop("min_coverage", None)
    return digest({"settings": settings, "inputs": sorted(data_files.values()), "index": index_key,
                   "semantics": RETRIEVAL_SEMANTICS})


class RetrievalFile:
    """`retrieval.jsonl` written block by block, and read back on resume."""

    def __init__(self, run_dir: Path, key: str, queries: Sequence, corpus, block_size: int):
        self.path, self.key_path = Path(run_dir) / RETRIEVAL_FILE, Path(run_dir) / KEY_FILE
        self.queries, self.corpus, self.block_size = list(queries), corpus, block_size
        self.header = {"key": key, "n_queries": len(self.queries), "block_size": block_size,
                       "ids": digest([q.id for q in self.queries])}
        self.lines = RetrievalLines(corpus)
        self._f = None

    def resume(self) -> List[QueryResult]:
        """The results of the blocks a previous process finished (a torn or foreign tail
        is cut off); with another key, or none, the file starts over."""
        saved = None
        if self.key_path.is_file():
            try:
                saved = json.loads(self.key_path.read_text(encoding="utf-8"))
            except (ValueError, UnicodeDecodeError):
                saved = None
        if saved != self.header or not self.path.is_file():
            if self.path.is_file() or self.key_path.is_file():
                log.info("%s is from other settings or data (or unfinished without a key); starting retrieval over",
                         self.path)
            self.path.unlink(missing_ok=True)
            self.path.parent.mkdir(parents=True, exist_ok=True)
            atomicio.write_json(self.key_path, self.header)
            return []
        results, good_bytes = self._read_back()
        with open(self.path, "r+b") as f:  # drop a torn or foreign tail
            f.truncate(good_bytes)
            f.flush()
            os.fsync(f.fileno())
        if results:
            log.info("retrieval checkpoint %s: %d of %d queries already done, resuming",
                     self.path, len(results), len(self.queries))
        return results

    def _read_back(self) -> Tuple[List[QueryResult], int]:
        with open(self.path, "rb") as f:
            lines = f.read().split(b"\n")
        results: List[QueryResult] = []
        ends = [0]  # byte offset after each accepted line
        for line in lines[:-1]:  # what follows the last newline is torn
            n = len(results)
            if n >= len(self.queries):
                break
            try:
                result = self.lines.read(line)
            except (ValueError, UnicodeDecodeError, KeyError, TypeError, AttributeError):
                break
            if result.query_id != self.queries[n].id:
                break
            results.append(result)
            ends.append(ends[-1] + len(line) + 1)
        done = len(results)
        if done < len(self.queries):
            done -= done % self.block_size  # a block is whole or not there
        return results[:done], ends[done]

    def append(self, start: int, results: Sequence[QueryResult]) -> None:
        """Persist one finished block (its lines in one write, flushed and fsynced)."""
        if self._f is None:
            self._f = open(self.path, "ab")
        block = self.queries[start : start + len(results)]
        data = "".join(line + "\n" for line in self.lines.lines(block, results)).encode("utf-8")
        if crash_hit("retrieval_torn_write"):  # tests: a kill halfway through the write
            self._write(data[: len(data) // 2])
            crash_now()
        self._write(data)

    def _write(self, data: bytes) -> None:
        self._f.write(data)
        self._f.flush()
        os.fsync(self._f.fileno())

    def close(self) -> None:
        if self._f is not None:
            self._f.close()
            self._f = None

    def complete(self) -> None:
        """The run is finished (metrics.json written): the key has done its work."""
        self.close()
        self.key_path.unlink(missing_ok=True)
        atomicio.fsync_dir(self.key_path.parent)


def retrieve_into(retriever, queries: Sequence, out: RetrievalFile, stage) -> Tuple[List[QueryResult], int]:
    """Results for all queries, and how many of them a previous process had finished;
    each block is appended to `out` as it is done. `stage`: a context manager factory
    (Timings.stage) timing the work as "retrieval"."""
    results = out.resume()
    done = len(results)
    with stage("retrieval"):
        try:
            for start in range(done, len(queries), out.block_size):
                block = retriever.retrieve(queries[start : start + out.block_size])
                out.append(start, block)
                results.extend(block)
                crash_point("retrieval_block")
        finally:
            out.close()
    return results, done


def write_results(run_dir: Path, queries: Sequence, results: Sequence[QueryResult], corpus) -> None:
    """retrieval.jsonl of results computed elsewhere (the sweep's grid points), atomically."""
    atomicio.write_lines(Path(run_dir) / RETRIEVAL_FILE, RetrievalLines(corpus).lines(queries, results))


def run_record(cfg, overrides: Sequence[str]) -> Dict[str, Any]:
    """What the report reads of a run besides its numbers: the composed config (secrets
    masked), the overrides that made it and the folder it was started from (relative
    data paths are relative to it)."""
    from omegaconf import OmegaConf

    from hipporag2.files.redact import redact, redact_obj

    config = redact_obj(OmegaConf.to_container(OmegaConf.structured(cfg)))
    return {"config": config, "overrides": [redact(str(o)) for o in overrides], "cwd": os.getcwd()}


def write_run(run_dir: Path, report, graph_stats: Optional[Dict[str, Any]], cfg, overrides: Sequence[str] = ()):
    """The rest of a finished run's files, metrics.json last: `report` (a RunReport)
    becomes metrics.json with the run record and the retrieval-semantics version.
    retrieval.jsonl is there already (RetrievalFile, or `write_results`). Returns the
    RunReport as written."""
    from hipporag2.files.redact import redact_obj
    from hipporag2.results import RunReport

    run_dir = Path(run_dir)
    if graph_stats is not None:
        atomicio.write_json(run_dir / "graph_stats.json", graph_stats)
    metrics = report.to_json()
    metrics["retrieval_semantics"] = RETRIEVAL_SEMANTICS
    metrics["run"] = run_record(cfg, overrides)
    metrics = redact_obj(metrics)
    crash_point("before_metrics")
    atomicio.write_json(run_dir / "metrics.json", metrics)
    crash_point("metrics_written")
    return RunReport.from_json(metrics)
