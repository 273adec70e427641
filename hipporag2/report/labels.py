"""How a report table names its runs and says what made them: row labels (the
settings that differ between the runs), the command that makes the runs, and the
provenance block (models, data, command) under every table."""
from __future__ import annotations

from collections import Counter, OrderedDict
from pathlib import Path
from typing import Any, Callable, Dict, List, Sequence, Tuple

import yaml

from hipporag2.report.runs import Run

CONFIG_DIR = Path(__file__).resolve().parents[1] / "configs"  # package data (hipporag2.compose.CONFIG_DIR)

# Column order and display names of the paper's datasets.
DATASET_ORDER = ["nq", "popqa", "musique", "2wikimultihopqa", "hotpotqa", "lveval", "narrativeqa", "musique_train"]
DATASET_NAMES = {
    "nq": "NQ", "popqa": "PopQA", "musique": "MuSiQue", "2wikimultihopqa": "2Wiki", "hotpotqa": "HotpotQA",
    "lveval": "LV-Eval", "narrativeqa": "NarrativeQA", "musique_train": "MuSiQue (shared 100)", "demo": "demo",
}


# ---------------------------------------------------------------------------------
# Labels: what distinguishes the runs of a table


def value_str(v: Any) -> str:
    """A setting as a label shows it: empty or blank strings quoted, so none is invisible."""
    if v is None:
        return "null"
    if isinstance(v, str) and (not v.strip() or v != v.strip()):
        return repr(v)
    return str(v)


def varying_keys(runs: Sequence[Run], exclude: Sequence[str] = ()) -> List[str]:
    """Settings whose value differs between the runs, among those that change results
    (operational keys such as batch sizes or paths are never part of a label)."""
    from hipporag2.helptext import NOT_RESULT_CHANGING

    keys = sorted({k for r in runs for k in r.settings})
    out = []
    for k in keys:
        if k in NOT_RESULT_CHANGING or any(k == e or k.startswith(e + ".") for e in exclude):
            continue
        values = {value_str(r.settings.get(k)) for r in runs}
        if len(values) > 1:
            out.append(k)
    return out


NAME_ORDER = ("retrieval.name", "embedding.name", "llm.name", "qa.name", "dataset.name", "openie.name")


def make_labeller(runs: Sequence[Run], exclude: Sequence[str] = ()) -> Callable[[Run], str]:
    """Label = the varying config-group names, then other varying settings where a run
    departs from the most common value (settings implied by a group name are hidden)."""
    vary = varying_keys(runs, exclude)
    # Rows chosen through a nested experiment group (e.g. experiment/quirk@_global_=single_edges)
    # are named by that choice.
    rows_by = sorted({o.split("=", 1)[0] for r in runs for o in r.overrides if o.startswith("experiment/")})
    row_choice = {id(r): dict(o.split("=", 1) for o in r.overrides if o.startswith("experiment/")) for r in runs}
    rows_by = [k for k in rows_by if len({row_choice[id(r)].get(k) for r in runs}) > 1]
    names = [k for k in NAME_ORDER if k in vary] + [k for k in vary if k.endswith(".name") and k not in NAME_ORDER]

    def ident(r: Run, k: str) -> str:
        return str(row_choice[id(r)].get(k)) if k in rows_by else value_str(r.settings.get(k))

    if rows_by:  # a name the row's choice already fixes (e.g. retrieval.name of retriever=hipporag2) is not repeated
        by_choice: Dict[Tuple, List[Run]] = {}
        for r in runs:
            by_choice.setdefault(tuple(ident(r, k) for k in rows_by), []).append(r)
        names = [k for k in names if any(len({value_str(r.settings.get(k)) for r in g}) > 1 for g in by_choice.values())]

    groups: Dict[Tuple, List[Run]] = {}
    for r in runs:
        groups.setdefault(tuple(ident(r, k) for k in rows_by + names), []).append(r)
    others = []
    for k in vary:
        if k in names:
            continue
        implied = (names or rows_by) and all(len({value_str(r.settings.get(k)) for r in g}) == 1 for g in groups.values())
        if not implied:
            others.append(k)
    modal = {k: Counter(value_str(r.settings.get(k)) for r in runs).most_common(1)[0][0] for k in others}

    def label(run: Run) -> str:
        parts = [ident(run, k) for k in rows_by]
        for k in names:
            if k == "embedding.name" and not run.uses_embedding:
                continue
            parts.append(value_str(run.settings.get(k)))
        for k in others:
            if k.startswith("embedding.") and not run.uses_embedding:
                continue
            v = value_str(run.settings.get(k))
            if v != modal[k]:
                parts.append(f"{k.split('.')[-1]}={v}")
        text = " / ".join(parts) if parts else run.method
        if _without_filter(run) and "filter" not in text:
            text += " / no filter"
        return text

    return label


def _without_filter(run: Run) -> bool:
    """HippoRAG 2's query-to-triple linking with the recognition-memory filter off: a
    different method from the paper's default, which a label must say."""
    return (run.get("retrieval.method", run.method) == "hipporag2"
            and run.get("retrieval.linking", "query_to_triple") == "query_to_triple"
            and run.get("retrieval.filter", "llm") == "none")


# ---------------------------------------------------------------------------------
# Provenance block: models, data, command


def _experiment_params(name: str) -> Dict[str, str]:
    path = CONFIG_DIR / "experiment" / f"{name}.yaml"
    if not path.is_file():
        return {}
    data = yaml.safe_load(path.read_text()) or {}
    return {str(k): str(v) for k, v in (((data.get("hydra") or {}).get("sweeper") or {}).get("params") or {}).items()}


_SKIP_OVERRIDES = ("run_dir", "cache_dir", "progress", "hydra.", "hydra/")


def command_for(runs: Sequence[Run]) -> str:
    """The command that makes these runs, rebuilt from their .hydra/overrides.yaml."""
    per_key: "OrderedDict[str, List[str]]" = OrderedDict()
    present: Counter = Counter()
    for r in runs:
        seen = set()
        for o in r.overrides:
            key, _, value = o.partition("=")
            if key.startswith(_SKIP_OVERRIDES) or key in seen:
                continue
            seen.add(key)
            present[key] += 1
            vals = per_key.setdefault(key, [])
            if value not in vals:
                vals.append(value)
    if not per_key:
        return "hipporag2" + (" (defaults)" if runs else "")
    experiments = per_key.get("+experiment", [])
    swept = {}
    if len(experiments) == 1 and present["+experiment"] == len(runs):
        swept = _experiment_params(experiments[0])
    parts = []
    approximate = False
    product = 1
    for key, vals in per_key.items():
        if key in swept and set(vals) == set(swept[key].split(",")):
            product *= len(swept[key].split(","))
            continue  # the experiment's own sweep makes these
        if present[key] != len(runs):
            approximate = True
        product *= len(vals)
        parts.append(f"{key}={','.join(vals)}")
    if product != len(runs):
        approximate = True
    multi = len(runs) > 1
    cmd = "hipporag2 " + ("-m " if multi else "") + " ".join(parts)
    return cmd + ("   # (runs were made by several commands; this is their union)" if approximate else "")


def provenance_lines(runs: Sequence[Run]) -> List[str]:
    emb = sorted({r.embedding_model for r in runs if r.uses_embedding})
    llms = sorted({r.llm_model for r in runs if r.llm_model})
    openie = sorted({Path(str(r.metrics.get("openie_source"))).name for r in runs if r.metrics.get("openie_source")})
    if any(not r.metrics.get("openie_source") and r.graph_stats for r in runs):
        openie.append("extracted by the run's LLM")
    data: Dict[str, set] = {}
    nq: Dict[str, set] = {}
    for r in runs:
        data.setdefault(r.dataset, set()).update(f"{n} `{h}`" for n, h in sorted(r.data_hashes.items()))
        nq.setdefault(r.dataset, set()).add(int(r.metrics.get("n_queries", 0)))
    lines = [
        f"- **Models**: embedding {', '.join(emb) or 'none'}; LLM {', '.join(llms) or 'none'}; OpenIE {', '.join(openie) or 'n/a'}",
        "- **Data**: " + "; ".join(
            f"{DATASET_NAMES.get(d, d)} ({', '.join(sorted(data[d]))}; {'/'.join(str(n) for n in sorted(nq[d]))} questions)" for d in data
        ),
        f"- **Command**: `{command_for(runs)}`",
        f"- **Runs**: {len(runs)} ({', '.join(sorted({str(r.path.parent) for r in runs}))})",
    ]
    return lines
