"""A finished run opened for analysis: its config, its retrieval rows, its questions
(with gold passages) and the index it searched.

The analysis tools read what a run left behind rather than re-running it: the
composed config (metrics.json's "run" record, or `.hydra/config.yaml` of older runs),
`retrieval.jsonl`, `metrics.json` (which names the index by its cache key) and the
dataset files recorded in its provenance. Relative paths in the config are taken from
the directory the run was started in (the run record, or `.hydra/hydra.yaml`), so a
run can be analysed from anywhere. When the data files
changed since the run, or the index is no longer in the cache, loading stops with
one line saying which file and why, instead of analysing something else.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Dict, List, Optional

from hipporag2.config import Config, ConfigError
from hipporag2.results import QueryResult

# Config fields that hold paths, resolved against the run's working directory.
_PATH_FIELDS = ("data_dir", "cache_dir", "openie.import_path", "retrieval.filter_program")


class RunUnavailable(Exception):
    """The run folder lacks what an analysis needs (one line, naming the file)."""


def _run_record(run_dir: Path) -> dict:
    """metrics.json's "run" record (config, overrides, cwd), or {} for a run without one."""
    import json

    try:
        record = json.loads((run_dir / "metrics.json").read_text(encoding="utf-8")).get("run")
    except (OSError, ValueError, AttributeError):
        return {}
    return record if isinstance(record, dict) else {}


def load_run_config(run_dir: Path | str) -> Config:
    """The run's composed Config, with its relative paths made absolute."""
    from omegaconf import OmegaConf

    from hipporag2.config import validate

    run_dir = Path(run_dir)
    import hipporag2.compose  # noqa: F401  (registers the config schema and resolvers)

    record = _run_record(run_dir)
    path = run_dir / ".hydra" / "config.yaml"
    if record.get("config"):  # metrics.json's run record (run_files.write_run): any client's run
        path = run_dir / "metrics.json"
        saved = OmegaConf.create(record["config"])
    elif path.is_file():
        saved = OmegaConf.load(path)
    else:
        raise RunUnavailable(f"{path}: not there (is {run_dir} a run directory of `hipporag2`?)")
    saved.run_dir = str(run_dir)  # Hydra saves it unresolved (${hydra:...})
    try:
        merged = OmegaConf.merge(OmegaConf.structured(Config), saved)
        cfg = OmegaConf.to_object(merged)
    except Exception as e:  # omegaconf's validation errors have no common base we can name
        raise RunUnavailable(f"{path}: does not match the config schema ({type(e).__name__}: {e})") from None
    try:
        cfg = validate(cfg)
    except ConfigError as e:
        raise RunUnavailable(f"{path}: {e}") from None
    from hipporag2.report.runs import hydra_cwd

    cwd = Path(record.get("cwd") or hydra_cwd(run_dir) or Path.cwd())
    for dotted in _PATH_FIELDS:
        section, _, name = dotted.rpartition(".")
        obj = getattr(cfg, section) if section else cfg
        value = getattr(obj, name)
        if value and not Path(value).is_absolute():
            setattr(obj, name, str(cwd / value))
    return cfg


@dataclass
class RunView:
    path: Path
    cfg: Config
    metrics: Dict
    rows: List[QueryResult]  # retrieval.jsonl (`passage_ids`: the ranked corpus_idx)
    gold: Dict[str, List[str]]  # query id -> gold passage strings
    answers: Dict[str, List[str]]  # query id -> gold answers
    passage_strings: Dict[int, str]  # corpus_idx -> passage string
    titles: Dict[int, str]  # corpus_idx -> title
    _index: Optional[object] = field(default=None, repr=False)

    @property
    def is_graph_run(self) -> bool:
        return self.cfg.retrieval.method in ("hipporag2", "hipporag1")

    @property
    def filter_applied(self) -> bool:
        """Whether recognition memory ran (filter=llm on query-to-triple linking)."""
        r = self.cfg.retrieval
        return r.filter == "llm" and r.linking == "query_to_triple"

    def row(self, query_id: str) -> QueryResult:
        for r in self.rows:
            if r.query_id == query_id:
                return r
        raise RunUnavailable(f"{self.path / 'retrieval.jsonl'}: no question with id {query_id!r} "
                             f"(ids look like {self.rows[0].query_id!r})" if self.rows else f"{self.path}: no retrieval rows")

    def index(self):
        """The run's index, from the cache named in metrics.json (verified on load)."""
        if self._index is None:
            from hipporag2.graph.store import IndexCorrupt, index_exists, load_index

            key = self.metrics.get("index_key")
            if not key:
                raise RunUnavailable(f"{self.path / 'metrics.json'}: no index_key (a {self.cfg.retrieval.method} run has no graph index)")
            path = Path(self.cfg.cache_dir) / "index" / key
            if not index_exists(path):
                raise RunUnavailable(f"{path}: the run's index is not in the cache any more; re-run the run's command to rebuild it")
            try:
                self._index = load_index(path)
            except IndexCorrupt as e:
                raise RunUnavailable(str(e)) from None
        return self._index


def open_run(run_dir: Path | str, cfg: Optional[Config] = None) -> RunView:
    """Config, retrieval rows and gold data of a finished run; the index loads on demand.

    `cfg`: the run's Config, for callers that ran it in-process (a run made through
    the library has no `.hydra/` folder); by default it is read from `.hydra/`."""
    from hipporag2.data.loaders import load_corpus, load_queries
    from hipporag2.stages import dataset_paths
    from hipporag2.files.stagekeys import file_digest

    run_dir = Path(run_dir)
    for name in ("metrics.json", "retrieval.jsonl"):
        if not (run_dir / name).is_file():
            raise RunUnavailable(f"{run_dir / name}: not there (an unfinished or foreign run directory?)")
    cfg = cfg if cfg is not None else load_run_config(run_dir)
    metrics = json.loads((run_dir / "metrics.json").read_text())
    qpath, cpath = dataset_paths(cfg)
    recorded = {Path(p).name: h for p, h in (metrics.get("provenance", {}).get("data_files") or {}).items()}
    for path in (qpath, cpath):
        if not path.is_file():
            raise RunUnavailable(f"{path}: the run's dataset file is not there")
        if path.name in recorded and file_digest(path) != recorded[path.name]:
            raise RunUnavailable(f"{path}: changed since the run (content hash differs from metrics.json)")
    corpus = load_corpus(cpath, cfg.dataset.sentence_joiner)
    queries = load_queries(qpath, cfg.dataset.sentence_joiner, cfg.dataset.max_queries, cfg.dataset.decode_json_answers)
    with open(run_dir / "retrieval.jsonl", encoding="utf-8") as f:
        rows = [QueryResult.from_json(json.loads(line)) for line in f if line.strip()]
    return RunView(
        path=run_dir,
        cfg=cfg,
        metrics=metrics,
        rows=rows,
        gold={q.id: list(q.gold_passages) for q in queries},
        answers={q.id: list(q.gold_answers) for q in queries},
        passage_strings={p.corpus_idx: p.string for p in corpus.passages},
        titles={p.corpus_idx: p.title for p in corpus.passages},
    )
