"""Expected scores as data: the paper's numbers and the numbers we publish.

Both files (results/reference/paper.yaml, results/reference/musique_train.yaml) hold
entries of the same shape:

    - match: {dataset.name: musique, retrieval.name: hipporag2, embedding.name: nv_embed_v2}
      values: {recall@5: 74.7}
      tolerance: {ok: 1.0, okish: 3.0}      # optional, else the file's
      command: ...                          # optional
      note: ...                             # optional

A run matches an entry when every key of the file's `defaults_match` overlaid with
the entry's `match` equals the run's resolved setting (numbers compared as numbers;
"*" matches anything; a key the run lacks does not match; `variant: NAME` in a match
stands for the settings the file lists under `variants: NAME`). A loose match pretends the
run's settings in `loose_as` (e.g. the paper's encoder and LLM) and lets our dataset
stand for the paper's ones in `dataset_aliases` (and, failing that, disregards the
keys in `loose_ignore`), so that the paper's number under its
own condition can be shown beside a run made under another (marked "~"). `--check`
uses strict matches of entries without `check: false` only.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

import yaml

from hipporag2.report.runs import Run

REFERENCE_DIR = Path(__file__).resolve().parents[2] / "results" / "reference"
OK, OKISH, FAIL = "OK", "OKish", "FAIL"


def _same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return a is b or (a == b and type(a) is type(b))
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return abs(float(a) - float(b)) < 1e-9
    if a is None or b is None:
        return a is None and b is None
    return str(a) == str(b)


@dataclass
class Entry:
    match: Dict[str, Any]
    values: Dict[str, float]
    tolerance: Dict[str, float]
    source: str
    table: Optional[str] = None
    command: Optional[str] = None
    note: Optional[str] = None
    condition: Optional[str] = None
    data_files: Dict[str, str] = field(default_factory=dict)
    check: bool = True
    # The paper's row label, the LLM block of a two-block table, the metrics marked †.
    row: Optional[str] = None
    block: Optional[str] = None
    dagger: Tuple[str, ...] = ()

    @property
    def dataset(self) -> Optional[str]:
        d = self.match.get("dataset.name")
        return None if d is None else str(d)


@dataclass
class Average:
    """One printed Avg cell of the paper: `weighting` is `questions` (each dataset
    weighted by its number of questions, as the paper averages Tables 2 and 8) or
    `columns` (the mean of the cells)."""

    table: str
    row: str
    values: Dict[str, float]
    weighting: str = "questions"
    block: Optional[str] = None


@dataclass
class Reference:
    name: str
    entries: List[Entry]
    loose_as: Dict[str, Any] = field(default_factory=dict)
    loose_ignore: Tuple[str, ...] = ()
    dataset_aliases: Dict[str, List[str]] = field(default_factory=dict)
    condition: str = ""
    source: str = ""
    questions: Dict[str, int] = field(default_factory=dict)
    averages: List[Average] = field(default_factory=list)
    raw: Dict[str, Any] = field(default_factory=dict)

    def row_entries(self, table: str, row: str, block: Optional[str] = None) -> List[Entry]:
        return [e for e in self.entries if e.table == table and e.row == row and e.block == block]

    def rows(self, table: str) -> List[Tuple[str, Optional[str]]]:
        """(row, block) of a table's entries, in the paper's order."""
        seen: List[Tuple[str, Optional[str]]] = []
        for e in self.entries:
            if e.table == table and e.row is not None and (e.row, e.block) not in seen:
                seen.append((e.row, e.block))
        return seen

    def average_of(self, table: str, row: str, metric: str, block: Optional[str] = None,
                   datasets: Optional[Sequence[str]] = None) -> Optional[float]:
        """The paper's average of a row recomputed from its cells, weighted by the
        paper's number of questions per dataset (as the paper averages); over
        `datasets` only when given (None if one of them has no cell)."""
        cells = {e.dataset: e.values[metric] for e in self.row_entries(table, row, block) if metric in e.values}
        want = list(datasets) if datasets is not None else list(cells)
        if not want or any(d not in cells for d in want):
            return None
        return weighted_mean([(cells[d], self.questions.get(str(d), 1)) for d in want])

    def _matches(self, run: Run, entry: Entry, loose: int, ignore: Sequence[str] = ()) -> bool:
        """loose: 0 strict, 1 with `loose_as`, 2 also ignoring `loose_ignore`."""
        for key, want in entry.match.items():
            if want == "*" or key in ignore or (loose >= 2 and key in self.loose_ignore):
                continue
            if key == "embedding.name" and not run.uses_embedding:
                continue
            if loose and key in self.loose_as:
                have = self.loose_as[key]
            else:
                have = run.get(key, _MISSING)
            if have is _MISSING:
                # A run made before the setting existed had its default.
                have = schema_defaults().get(key, _MISSING)
                if have is _MISSING:
                    return False
            if key == "dataset.name" and loose:
                if str(want) in [str(have)] + list(self.dataset_aliases.get(str(have), [])):
                    continue
                return False
            if not _same(have, want):
                return False
        return True

    def lookup(
        self, run: Run, metric: str, loose: bool = False, table: Optional[str] = None, ignore: Sequence[str] = ()
    ) -> Optional[Tuple[Entry, float, bool]]:
        """(entry, expected value, is_loose) for a run's metric; strict matches first,
        then (if `loose`) the paper's condition; the most specific entry wins."""
        for is_loose in ((0, 1, 2) if loose else (0,)):
            best = None
            for e in self.entries:
                if table is not None and e.table != table:
                    continue
                if metric in e.values and self._matches(run, e, is_loose, ignore):
                    if best is None or len(e.match) > len(best.match):
                        best = e
            if best is not None:
                return best, float(best.values[metric]), bool(is_loose)
        return None

    def matching(self, run: Run) -> List[Entry]:
        """Entries that apply to the run under its own condition and are checkable."""
        return [e for e in self.entries if e.check and self._matches(run, e, 0)]


_MISSING = object()
_SCHEMA_DEFAULTS: Dict[str, Any] = {}


def schema_defaults() -> Dict[str, Any]:
    """Flattened defaults of the config schema (hipporag2.config.Config)."""
    if not _SCHEMA_DEFAULTS:
        from omegaconf import OmegaConf

        from hipporag2.config import Config
        from hipporag2.report.runs import _flatten

        conf = OmegaConf.structured(Config)
        for key, value in _flatten(OmegaConf.to_container(conf, resolve=False, throw_on_missing=False)).items():
            if value != "???":
                _SCHEMA_DEFAULTS[key] = value
    return _SCHEMA_DEFAULTS


def weighted_mean(pairs: Sequence[Tuple[float, float]]) -> Optional[float]:
    """Mean of (value, weight) pairs, rounded to one decimal as the paper prints; the
    paper's Avg of Tables 2 and 8 is this with weight = questions of the dataset."""
    total = sum(w for _, w in pairs)
    if not pairs or total <= 0:
        return None
    return round(sum(v * w for v, w in pairs) / total + 1e-9, 1)


def load_reference(path: Path | str) -> Reference:
    path = Path(path)
    data = yaml.safe_load(path.read_text()) or {}
    defaults = dict(data.get("defaults_match") or {})
    tol = dict(data.get("tolerance") or {"ok": 0.1, "okish": 1.0})
    data_files = dict(data.get("data_files") or {})
    variants = {str(k): dict(v) for k, v in (data.get("variants") or {}).items()}
    entries = []
    for raw in data.get("entries") or []:
        match = dict(defaults)
        own = dict(raw.get("match") or {})
        if "variant" in own:
            name = str(own.pop("variant"))
            if name not in variants:
                raise ValueError(f"{path}: entry uses variant {name!r}, which `variants` does not define")
            match.update(variants[name])
        match.update(own)
        t = dict(tol)
        t.update(raw.get("tolerance") or {})
        entries.append(
            Entry(
                match=match,
                values={k: float(v) for k, v in (raw.get("values") or {}).items()},
                tolerance=t,
                source=path.name,
                table=raw.get("table"),
                command=raw.get("command"),
                note=raw.get("note"),
                condition=raw.get("condition") or data.get("condition"),
                data_files=data_files,
                check=bool(raw.get("check", True)),
                row=raw.get("row"),
                block=raw.get("block"),
                dagger=tuple(raw.get("dagger") or ()),
            )
        )
    averages = [
        Average(table=str(a["table"]), row=str(a["row"]), values={k: float(v) for k, v in (a.get("values") or {}).items()},
                weighting=str(a.get("weighting", "questions")), block=a.get("block"))
        for a in data.get("averages") or []
    ]
    aliases = {str(k): [str(x) for x in (v if isinstance(v, list) else [v])] for k, v in (data.get("dataset_aliases") or {}).items()}
    return Reference(
        name=path.stem,
        entries=entries,
        loose_as=dict(data.get("loose_as") or {}),
        loose_ignore=tuple(data.get("loose_ignore") or ()),
        dataset_aliases=aliases,
        condition=str(data.get("condition") or ""),
        source=str(data.get("source") or ""),
        questions={str(k): int(v) for k, v in (data.get("questions") or {}).items()},
        averages=averages,
        raw=data,
    )


def default_references() -> Tuple[Optional[Reference], List[Reference]]:
    """The paper file and our published files, from results/reference/."""
    paper = None
    ours = []
    if REFERENCE_DIR.is_dir():
        for p in sorted(REFERENCE_DIR.glob("*.yaml")):
            ref = load_reference(p)
            if p.stem == "paper":
                paper = ref
            else:
                ours.append(ref)
    return paper, ours


@dataclass
class CheckLine:
    metric: str
    ours: Optional[float]
    expected: float
    status: str
    source: str
    why: str = ""


def status_of(diff: float, tol: Dict[str, float]) -> str:
    if abs(diff) <= tol.get("ok", 0.1) + 1e-9:
        return OK
    if abs(diff) <= tol.get("okish", 1.0) + 1e-9:
        return OKISH
    return FAIL


def check_run(run: Run, refs: List[Reference]) -> List[CheckLine]:
    """Every expected number that applies to the run (strict matches only)."""
    lines: List[CheckLine] = []
    for ref in refs:
        for e in ref.matching(run):
            bad_data = []
            have = run.data_hashes
            for name, h in e.data_files.items():
                if name in have and have[name] != h:
                    bad_data.append(f"{name} hash {have[name]} != {h}")
            for metric, want in e.values.items():
                ours = run.metric(metric)
                if bad_data:
                    lines.append(CheckLine(metric, ours, want, FAIL, e.source, "data differ: " + "; ".join(bad_data)))
                elif ours is None:
                    lines.append(CheckLine(metric, None, want, FAIL, e.source, "metric missing from the run"))
                else:
                    lines.append(CheckLine(metric, ours, want, status_of(ours - want, e.tolerance), e.source))
    return lines


def worst(statuses: List[str]) -> Optional[str]:
    for s in (FAIL, OKISH, OK):
        if s in statuses:
            return s
    return None
