"""Run directories as the report sees them: metrics, resolved settings, the command.

A run directory is any folder with a `metrics.json` (written by `hipporag2.files.run_files.write_run`
for a run and each sweep point); its "run" record gives the composed config, the
command-line overrides and the working directory the run was started from (relative
data paths are relative to it). Older folders give them in Hydra's `.hydra/`.
"""
from __future__ import annotations

import glob
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, Iterable, List, Optional, Sequence

import yaml

from hipporag2.results import QueryResult

# Settings that name where things go, not what a run computes.
NON_SETTINGS = ("run_dir", "cache_dir", "progress", "data_dir", "openie.import_path", "openie.output_path", "dataset.description")
# Methods that use no embedding model (so the encoder is not part of their identity).
NO_EMBEDDING_METHODS = ("bm25",)


def _flatten(obj: Any, prefix: str = "") -> Dict[str, Any]:
    out: Dict[str, Any] = {}
    if isinstance(obj, dict):
        for k, v in obj.items():
            out.update(_flatten(v, f"{prefix}{k}."))
    else:
        out[prefix[:-1]] = obj
    return out


def _resolve_config(path: Path) -> Dict[str, Any]:
    """Flattened config; interpolations resolved where possible, else kept as written."""
    from omegaconf import OmegaConf

    try:  # registers the project's resolvers (${hash:...}, ${resources:...})
        import hipporag2.compose  # noqa: F401
    except Exception:  # pragma: no cover - the report still works on literal configs
        pass
    cfg = OmegaConf.load(path)
    raw = _flatten(OmegaConf.to_container(cfg, resolve=False))
    out = {}
    for key, value in raw.items():
        if isinstance(value, str) and "${" in value:
            try:
                value = OmegaConf.select(cfg, key, throw_on_resolution_failure=True)
            except Exception:
                pass
        out[key] = value
    return out


def reference_graph_counts(stats: Dict[str, Any]) -> Dict[str, int]:
    """Table 10's counts as the reference counts them (`HippoRAG.get_graph_info`), from
    our graph_stats.json: its edge total is the number of distinct ordered node pairs
    it recorded (self-pairs included, which our graph drops and counts), "extracted
    edges" are the unique facts, "context edges" the passage-phrase pairs, and
    "synonym edges" whatever remains (total - extracted - context; so it also holds the
    second direction of every fact's phrase pair). With graph.synonym_overwrites_relation
    =false our graph keeps a synonym beside a relation edge of the same pair, which the
    reference's pair map cannot: the total then counts that pair twice."""
    phrase = int(stats.get("phrase_nodes", 0))
    passage = int(stats.get("passage_nodes", 0))
    facts = int(stats.get("facts", 0))
    context = int(stats.get("context_edges", 0))
    total = int(stats.get("edges_total", 0)) + int(stats.get("self_loops_dropped", 0))
    return {
        "phrase_nodes": phrase, "passage_nodes": passage, "total_nodes": phrase + passage,
        "extracted_edges": facts, "synonym_edges": total - facts - context, "context_edges": context,
        "total_edges": total,
    }


@dataclass
class Run:
    path: Path
    metrics: Dict[str, Any]
    config: Dict[str, Any] = field(default_factory=dict)
    overrides: List[str] = field(default_factory=list)
    cwd: Optional[str] = None
    graph_stats: Optional[Dict[str, Any]] = None

    # --- identity -------------------------------------------------------------
    def get(self, key: str, default: Any = None) -> Any:
        return self.config.get(key, default)

    @property
    def dataset(self) -> str:
        return str(self.get("dataset.name", self.metrics.get("dataset", "?")))

    @property
    def method(self) -> str:
        return str(self.get("retrieval.name", self.metrics.get("method", "?")))

    @property
    def embedding(self) -> str:
        return str(self.get("embedding.name", "?"))

    @property
    def embedding_model(self) -> str:
        return str(self.metrics.get("provenance", {}).get("models", {}).get("embedding") or self.get("embedding.model", "?"))

    @property
    def llm_model(self) -> Optional[str]:
        m = self.metrics.get("provenance", {}).get("models", {}).get("llm")
        return m or None

    @property
    def uses_embedding(self) -> bool:
        return self.get("retrieval.method", self.method) not in NO_EMBEDDING_METHODS

    @property
    def experiment(self) -> Optional[str]:
        for o in self.overrides:
            key, _, value = o.partition("=")
            if key.lstrip("+~") == "experiment":
                return value
        return None

    # --- data -----------------------------------------------------------------
    @property
    def data_files(self) -> Dict[str, str]:
        """Recorded input files (path as written) -> content hash."""
        return dict(self.metrics.get("provenance", {}).get("data_files", {}))

    @property
    def data_hashes(self) -> Dict[str, str]:
        """Basename -> hash: how two runs' data are compared."""
        return {Path(p).name: h for p, h in self.data_files.items()}

    def resolve_path(self, p: str) -> Path:
        path = Path(p)
        if not path.is_absolute() and self.cwd:
            path = Path(self.cwd) / path
        return path

    # --- results --------------------------------------------------------------
    def metric(self, name: str) -> Optional[float]:
        """A metric of metrics.json, else a graph count (Table 10's as the reference
        counts them, then graph_stats.json's own)."""
        v = self.metrics.get(name)
        if isinstance(v, (int, float)) and not isinstance(v, bool):
            return float(v)
        if self.graph_stats:
            counts = reference_graph_counts(self.graph_stats)
            if name in counts:
                return float(counts[name])
            v = self.graph_stats.get(name)
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                return float(v)
        return None

    def results(self) -> List[QueryResult]:
        """retrieval.jsonl, typed (`passage_ids` names the ranked passages)."""
        return [QueryResult.from_json(row) for row in self.rows()]

    def rows(self, name: str = "retrieval.jsonl") -> List[Dict[str, Any]]:
        path = self.path / name
        if not path.is_file():
            return []
        with open(path, encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]

    @property
    def settings(self) -> Dict[str, Any]:
        """The config keys that define what the run computes."""
        return {k: v for k, v in self.config.items() if not k.startswith(NON_SETTINGS) and not k.startswith("hydra.")}


def hydra_cwd(run_dir: Path) -> Optional[str]:
    """The folder a run without metrics.json's run record was started in (`.hydra/hydra.yaml`)."""
    path = run_dir / ".hydra" / "hydra.yaml"
    h = (yaml.safe_load(path.read_text()) or {}) if path.is_file() else {}
    return ((h.get("hydra") or {}).get("runtime") or {}).get("cwd")


def load_run(path: Path | str) -> Run:
    """A run folder: metrics.json's "run" record (`run_files.write_run`) gives the
    config, overrides and working directory; folders written before it had one give
    them in Hydra's `.hydra/`."""
    path = Path(path)
    metrics = json.loads((path / "metrics.json").read_text())
    record = metrics.pop("run", None)
    hydra_dir = path / ".hydra"
    config: Dict[str, Any] = {}
    overrides: List[str] = []
    cwd = None
    if isinstance(record, dict):
        config = _flatten(record.get("config") or {})
        overrides = [str(o) for o in record.get("overrides") or []]
        cwd = record.get("cwd")
    elif (hydra_dir / "config.yaml").is_file():
        config = _resolve_config(hydra_dir / "config.yaml")
    if record is None and (hydra_dir / "overrides.yaml").is_file():
        overrides = [str(o) for o in (yaml.safe_load((hydra_dir / "overrides.yaml").read_text()) or [])]
    if record is None:
        cwd = hydra_cwd(path)
    stats = None
    if (path / "graph_stats.json").is_file():
        stats = json.loads((path / "graph_stats.json").read_text())
    return Run(path=path, metrics=metrics, config=config, overrides=overrides, cwd=cwd, graph_stats=stats)


def find_run_dirs(patterns: Iterable[str]) -> List[Path]:
    """Run folders under the given folders / globs (a folder is searched recursively)."""
    found: Dict[str, Path] = {}
    for pattern in patterns:
        matches = [Path(p) for p in glob.glob(pattern, recursive=True)] or ([Path(pattern)] if Path(pattern).exists() else [])
        for m in matches:
            if m.is_file() and m.name == "metrics.json":
                m = m.parent
            if not m.is_dir():
                continue
            if (m / "metrics.json").is_file():
                found[str(m.resolve())] = m
            for sub in m.rglob("metrics.json"):
                if ".hydra" in sub.parts:
                    continue
                found[str(sub.parent.resolve())] = sub.parent
    return [found[k] for k in sorted(found)]


def load_runs(patterns: Iterable[str]) -> List[Run]:
    return [load_run(p) for p in find_run_dirs(patterns)]


def mixed_data(runs: Sequence[Run]) -> List[str]:
    """Datasets whose runs read different files (by content hash)."""
    problems = []
    by_ds: Dict[str, Dict[str, Dict[str, List[str]]]] = {}
    for r in runs:
        for name, h in r.data_hashes.items():
            by_ds.setdefault(r.dataset, {}).setdefault(name, {}).setdefault(h, []).append(str(r.path))
    for ds, files in by_ds.items():
        for name, hashes in files.items():
            if len(hashes) > 1:
                detail = "; ".join(f"{h}: {len(p)} run(s), e.g. {p[0]}" for h, p in hashes.items())
                problems.append(f"dataset {ds}: {name} differs between runs ({detail})")
    return problems


def mixed_semantics(runs: Sequence[Run]) -> Optional[str]:
    """A warning when the runs were made under different retrieval-semantics versions
    (metrics.json "retrieval_semantics", bumped when a change can move a ranking; a run
    without one predates the versioning): their differences may come from the code,
    not the settings."""
    versions: Dict[str, List[str]] = {}
    for r in runs:
        versions.setdefault(str(r.metrics.get("retrieval_semantics", "none (before versioning)")), []).append(str(r.path))
    if len(versions) < 2:
        return None
    detail = "; ".join(f"{v}: {len(p)} run(s), e.g. {p[0]}" for v, p in sorted(versions.items()))
    return f"warning: these runs were made under different retrieval semantics ({detail}); rankings may differ by code, not settings"
