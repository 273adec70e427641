"""Tables for results/vllm_cpu/README.md from the report tests/test_vllm_engine.py writes.

    HIPPORAG2_VLLM_REPORT=results/vllm_cpu/report.json \
        .venv/bin/python -m pytest -q -p no:cacheprovider tests/test_vllm_engine.py
    .venv/bin/python benchmarks/vllm_cpu_report.py results/vllm_cpu/report.json > results/vllm_cpu/tables.md

The numbers are the test run's own measurements (one run, wall-clock on a shared
machine): engine start-up, per-stage time, token counts, agreement with the
transformers backend on the same prompts, and the stages' outputs.
"""
from __future__ import annotations

import json
import sys
from typing import Any, Dict, List

STAGES = ("openie_ner", "openie_triples", "filter", "qa")


def _cell(text: str, width: int = 160) -> str:
    flat = " ".join(str(text).split()).replace("|", "\\|")
    return flat if len(flat) <= width else flat[: width - 1] + "…"


def runs_table(report: Dict[str, Any]) -> List[str]:
    rows = ["| run | wall s | engine starts | engine start s | prompts per generate call | OpenIE s | filter (retrieval) s | QA s | R@5 | QA F1 |",
            "|---|---:|---:|---:|---|---:|---:|---:|---:|---:|"]
    runs = dict(report.get("offline", {}))
    if "served" in report:
        runs["served (vllm serve + openai backend)"] = report["served"]
    for name, r in runs.items():
        e = r.get("llm_engine") or {}
        t = r.get("timings") or {}
        rows.append(f"| {name} | {r['wall_s']} | {e.get('engine_starts', '—')} | {e.get('engine_start_s') or '—'} | "
                    f"{e.get('generate_calls', '—')} | {t.get('openie', '—')} | {t.get('retrieval', '—')} | "
                    f"{t.get('qa', '—')} | {r.get('recall@5')} | {r.get('qa_f1') if r.get('qa_f1') is not None else '—'} |")
    if "served_start_s" in report:
        rows.append("")
        rows.append(f"`vllm serve` ready (GET /health) after {report['served_start_s']} s.")
    return rows


def tokens_table(report: Dict[str, Any]) -> List[str]:
    rows = ["| run | stage | requests | cache hits | backend calls | input tokens | output tokens | cached in / out |",
            "|---|---|---:|---:|---:|---:|---:|---|"]
    runs = dict(report.get("offline", {}))
    if "served" in report:
        runs["served"] = report["served"]
    for name, r in runs.items():
        for stage, s in r["stages"].items():
            u = s["usage"]
            rows.append(f"| {name} | {stage} | {u['requests']} | {u['cache_hits']} | {u.get('backend_calls', '—')} | "
                        f"{u['input_tokens']} | {u['output_tokens']} | {u['cached_input_tokens']} / {u['cached_output_tokens']} |")
    return rows


def agreement_table(report: Dict[str, Any]) -> List[str]:
    a = report.get("agreement_with_transformers")
    if not a:
        return ["(no agreement measured)"]
    rows = ["| run | stage | prompts | identical answers | mean shared prefix (chars, fraction) |", "|---|---|---:|---:|---:|"]
    for name in ("first", "constrained"):
        for stage, s in a.get(name, {}).items():
            rows.append(f"| {name} | {stage} | {s['n']} | {s['identical']} | {s['mean_shared_prefix']} |")
    rows.append(f"| **all** | | {a['total']} | **{a['identical']}** | |")
    for name in ("first", "constrained"):
        for stage, s in a.get(name, {}).items():
            for d in s["differing"]:
                rows += ["", f"Differing ({name}, {stage}):", "", f"- vLLM: `{_cell(d['vllm'], 400)}`",
                         f"- transformers: `{_cell(d['transformers'], 400)}`"]
    sv = report.get("served_vs_offline")
    if sv:
        rows += ["", f"Served vs offline vLLM on the prompts both runs sent: {sv['identical']} of "
                     f"{sv['shared_prompts']} answers identical."]
    return rows


def outputs_section(report: Dict[str, Any], run: str = "first") -> List[str]:
    r = report.get("offline", {}).get(run)
    if not r:
        return []
    out = []
    for stage in STAGES:
        s = r["stages"].get(stage)
        if not s:
            continue
        out += [f"**{stage}** ({len(s['outputs'])} answers)", "", "| # | answer |", "|---:|---|"]
        out += [f"| {i} | {_cell(t)} |" for i, t in enumerate(s["outputs"], 1)]
        out.append("")
    return out


def main(argv: List[str]) -> None:
    report = json.loads(open(argv[1], encoding="utf-8").read())
    parts = [
        "### Runs", "", *runs_table(report), "",
        "### Token counts (metrics.json → llm_usage)", "", *tokens_table(report), "",
        "### Greedy agreement with the transformers backend (same prompts, float32)", "", *agreement_table(report), "",
        "### Stage outputs (offline, free decoding)", "", *outputs_section(report, "first"),
        "### Stage outputs (offline, constrained decoding)", "", *outputs_section(report, "constrained"),
    ]
    sys.stdout.write("\n".join(parts) + "\n")


if __name__ == "__main__":
    main(sys.argv)
