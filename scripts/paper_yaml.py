#!/usr/bin/env python3
"""Generate results/reference/paper.yaml from the paper's tables (paper_tables.md).

    python scripts/paper_yaml.py ../shared/paper_tables.md > results/reference/paper.yaml

Every cell of Tables 2, 3, 4, 5, 7, 8 (both LLM blocks), 9, 10 (both LLMs), 12, 13 and
14 becomes data, each cell matched to the settings it was measured under (the row's
retriever, encoder and LLM, the column's dataset) so that `hipporag2-report` can put it
beside a run made under the same settings and `--check` can judge it. What this script
decides, the rest is copied:

- which settings a row label stands for (ROWS below);
- which metric a table reports (METRICS);
- that dense and BM25 recall do not depend on the LLM (`llm.name: "*"`), while QA does
  (the reader) and so do HippoRAG, HippoRAG 2 and RAPTOR recall (NER, filter, summaries);
- which tables are hardware- or OpenIE-dependent (Table 10, 12: shown, not checked).

The file is committed beside this script; `tests/test_paper_yaml.py` checks that the
committed file is what this script makes of the shared paper_tables.md and that every
number of that file is in it.
"""
from __future__ import annotations

import re
import sys
from pathlib import Path
from typing import Any, Dict, List, Optional, Tuple

import yaml

DATASETS = {"NQ": "nq", "PopQA": "popqa", "MuSiQue": "musique", "2Wiki": "2wikimultihopqa", "HotpotQA": "hotpotqa",
            "LV-Eval": "lveval", "NarrativeQA": "narrativeqa"}
QUESTIONS = {"nq": 1000, "popqa": 1000, "musique": 1000, "2wikimultihopqa": 1000, "hotpotqa": 1000, "lveval": 124,
             "narrativeqa": 293}
PASSAGES = {"nq": 9633, "popqa": 8676, "musique": 11656, "2wikimultihopqa": 6119, "hotpotqa": 9811, "lveval": 22849,
            "narrativeqa": 4111}
LLMS = {"Llama-3.3-70B": "llama33_70b_vllm", "GPT-4o-mini": "gpt4o_mini"}

# Row label -> (row key, settings). Settings use `variant` (the file's `variants`) and
# plain config keys. `llm_free` rows do not depend on the LLM for retrieval.
ROWS: Dict[str, Tuple[str, Dict[str, Any], bool]] = {
    "None": ("none", {"variant": "none"}, True),
    "Contriever": ("contriever", {"variant": "dense", "embedding.name": "contriever"}, True),
    "BM25": ("bm25", {"variant": "bm25"}, True),
    "GTR": ("gtr", {"variant": "dense", "embedding.name": "gtr"}, True),
    "GTE-Qwen2-7B": ("gte_qwen2_7b", {"variant": "dense", "embedding.name": "gte_qwen2_7b"}, True),
    "GritLM-7B": ("gritlm_7b", {"variant": "dense", "embedding.name": "gritlm_7b"}, True),
    "NV-Embed-v2": ("nv_embed_v2", {"variant": "dense", "embedding.name": "nv_embed_v2"}, True),
    "RAPTOR": ("raptor", {"variant": "raptor"}, False),
    "GraphRAG": ("graphrag", {"variant": "graphrag"}, False),
    "LightRAG": ("lightrag", {"variant": "lightrag"}, False),
    "HippoRAG": ("hipporag1", {"variant": "hipporag1"}, False),
    # Table 3 / 9: the numbers of the HippoRAG (NeurIPS 2024) paper, another setting
    # (ColBERTv2, GPT-3.5): a key no run has, so no run matches them.
    "HippoRAG (as first published)": ("hipporag1_as_published", {"variant": "hipporag1", "paper.reported_in": "hipporag_neurips2024"}, False),
    "HippoRAG 2": ("hipporag2", {"variant": "hipporag2"}, False),
    # Table 4
    "NER to node (no filter)": ("hipporag2_ner_to_node", {"variant": "hipporag2_ner_to_node"}, False),
    "Query to node (no filter)": ("hipporag2_query_to_node", {"variant": "hipporag2_query_to_node"}, False),
    "without passage nodes": ("hipporag2_no_passage_nodes", {"variant": "hipporag2_no_passage_nodes"}, False),
    "without filter": ("hipporag2_no_filter", {"variant": "hipporag2_no_filter"}, False),
}
ALIASES = {
    "None (no retrieval)": "None", "GTR (T5-base)": "GTR", "GTE-Qwen2-7B-Instruct": "GTE-Qwen2-7B",
    "NV-Embed-v2 (7B)": "NV-Embed-v2", "HippoRAG (re-run, same LLM and retriever)": "HippoRAG",
}
TABLE12_SYSTEMS = {"NV-Embed-v2": "nv_embed_v2", "RAPTOR": "RAPTOR", "LightRAG": "LightRAG", "GraphRAG": "GraphRAG",
                   "HippoRAG": "HippoRAG", "HippoRAG 2": "HippoRAG 2"}
TABLE10_METRICS = {"phrase nodes": "phrase_nodes", "passage nodes": "passage_nodes", "total nodes": "total_nodes",
                   "extracted edges": "extracted_edges", "synonym edges": "synonym_edges",
                   "context edges": "context_edges", "total edges": "total_edges"}
TABLE12_METRICS = {"indexing input tokens": "openie_input_tokens_millions",
                   "indexing output tokens": "openie_output_tokens_millions",
                   "indexing time (min)": "indexing_minutes", "QA time per query (s)": "seconds_per_query",
                   "QA GPU memory (GB, weights excluded)": "qa_gpu_memory_gb"}
TABLE13 = {"synonym threshold": "graph.synonymy_edge_sim_threshold", "PPR damping": "retrieval.damping",
           "temperature": "llm.temperature"}

HEADER = """\
# The numbers of the HippoRAG 2 paper, every cell of Tables 2-5 and 7-14, each with
# the settings it was measured under, as data for `hipporag2-report` (side-by-side
# columns, "not run" rows, averages and `--check`).
#
# GENERATED by scripts/paper_yaml.py from ../shared/paper_tables.md; do not edit by
# hand (tests/test_paper_yaml.py checks that this file is what the script makes).
#
# An entry matches a run when every key of `defaults_match`, overlaid with the entry's
# `match`, equals the run's resolved setting ("*" = any value). `variant: NAME` in a
# match stands for the settings listed under `variants`, named like our retrieval
# configs (raptor / graphrag / lightrag: the structure-augmented baselines; a row no
# run covers shows as "not run"). `paper.reported_in` names a number the paper quotes from
# another paper: no run has that key, so nothing matches it.
#
# `row` is the paper's row, `block` the LLM of a table printed for two LLMs (Tables 8
# and 10), `dagger` the metrics the paper marks † (HippoRAG 2 significantly better than
# the best NV-Embed-v2 baseline, bootstrap p < 0.05). `averages` are the paper's Avg
# column, with how the paper computes it (`questions`: mean over all questions, each
# dataset weighted by its number of questions; the report averages the same way).
#
# Loose matching (for orientation only, marked "~" in tables): the run's embedding and
# LLM are taken to be the paper's (`loose_as`) and our dataset may stand for one of the
# paper's (`dataset_aliases`), e.g. the shared 100 MuSiQue questions for MuSiQue; if
# still nothing matches, the keys in `loose_ignore` are disregarded too.
"""


def parse_number(cell: str) -> Tuple[Optional[float], bool]:
    """(value, dagger) of a printed cell; (None, False) for "-" or text."""
    s = cell.strip()
    dagger = s.endswith("†")
    s = s.rstrip("†").strip()
    mult = 1.0
    if s.endswith("M"):
        s, mult = s[:-1], 1.0
    s = s.replace(",", "")
    try:
        v = float(s) * mult
    except ValueError:
        return None, False
    return (int(v) if v.is_integer() and "." not in s else v), dagger


def sections(text: str) -> Dict[str, List[str]]:
    out: Dict[str, List[str]] = {}
    current = None
    for line in text.splitlines():
        m = re.match(r"^## Table (\d+)", line)
        if m:
            current = f"table{m.group(1)}"
            out[current] = []
        elif line.startswith("## "):
            current = None
        elif current:
            out[current].append(line)
    return out


def md_tables(lines: List[str]) -> List[Tuple[str, List[str], List[List[str]]]]:
    """(the prose line before it, header, rows) of each Markdown table in a section."""
    found = []
    i = 0
    last_text = ""
    while i < len(lines):
        line = lines[i]
        if line.startswith("|"):
            header = [c.strip() for c in line.strip().strip("|").split("|")]
            rows = []
            i += 2  # the |---| line
            while i < len(lines) and lines[i].startswith("|"):
                rows.append([c.strip() for c in lines[i].strip().strip("|").split("|")])
                i += 1
            found.append((last_text, header, rows))
            continue
        if line.strip():
            last_text = line.strip()
        i += 1
    return found


def block_of(text: str) -> Optional[str]:
    for name, key in LLMS.items():
        if name in text:
            return key
    return None


def row_settings(label: str, recall: bool) -> Tuple[str, Dict[str, Any]]:
    """(row key, match) of a row label; Table 9's "(GPT-4o-mini)" suffix names the LLM."""
    llm = None
    m = re.match(r"^(.*) \((GPT-4o-mini|Llama-3.3-70B)\)$", label)
    if m and m.group(1) in ROWS | {k: None for k in ALIASES}:
        label, llm = m.group(1), LLMS[m.group(2)]
    label = ALIASES.get(label, label)
    if label not in ROWS:
        raise SystemExit(f"paper_yaml.py: no settings for the row {label!r}; add it to ROWS")
    key, match, llm_free = ROWS[label]
    match = dict(match)
    if llm:
        match["llm.name"] = llm
        key = f"{key}_{llm}"
    elif recall and llm_free:
        match["llm.name"] = "*"
    return key, match


def dataset_entries(table: str, header: List[str], rows: List[List[str]], metrics: List[str], recall: bool,
                    block: Optional[str], extra: Dict[str, Any], entries: List[Dict], averages: List[Dict]) -> None:
    cols = header[1:]
    for row in rows:
        label = row[0]
        key, match = row_settings(label, recall)
        if block:
            match.setdefault("llm.name", block)
        for col, cell in zip(cols, row[1:]):
            parts = [p.strip() for p in cell.split("/")] if len(metrics) > 1 else [cell]
            got = [parse_number(p) for p in parts]
            if col == "Avg":
                vals = {m: v for m, (v, _) in zip(metrics, got) if v is not None}
                if vals:
                    averages.append({"table": table, "row": label, **({"block": block} if block else {}),
                                     "weighting": "questions", "values": vals})
                continue
            ds = DATASETS[col]
            vals = {m: v for m, (v, _) in zip(metrics, got) if v is not None}
            if not vals:
                continue
            entry: Dict[str, Any] = {"table": table, "row": label}
            if block:
                entry["block"] = block
            entry["match"] = {"dataset.name": ds, **match, **extra}
            entry["values"] = vals
            dag = [m for m, (_, d) in zip(metrics, got) if d]
            if dag:
                entry["dagger"] = dag
            if "paper.reported_in" in match:
                entry["check"] = False
            entries.append(entry)


def build(text: str) -> Dict[str, Any]:
    secs = sections(text)
    entries: List[Dict] = []
    averages: List[Dict] = []
    qa = {"qa.name": "reader"}
    for table, metrics, recall, extra in (
        ("table2", ["qa_f1"], False, qa),
        ("table3", ["recall@5"], True, {}),
        ("table4", ["recall@5"], False, {}),
        ("table8", ["qa_em", "qa_f1"], False, qa),
        ("table9", ["recall@2", "recall@5"], True, {}),
    ):
        for prose, header, rows in md_tables(secs[table]):
            dataset_entries(table, header, rows, metrics, recall, block_of(prose) if table == "table8" else None,
                            extra, entries, averages)
    # Table 5: passage-node weight on the dev sets.
    for _, header, rows in md_tables(secs["table5"]):
        for row in rows:
            ds = {"MuSiQue dev": "musique_dev", "NQ dev": "nq_dev"}[row[0]]
            for w, cell in zip(header[1:], row[1:]):
                v, _ = parse_number(cell)
                entries.append({"table": "table5", "row": row[0], "match": {"dataset.name": ds, "variant": "hipporag2",
                                "retrieval.passage_node_weight": float(w)}, "values": {"recall@5": v}})
    # Table 7: dense vs HippoRAG 2 on MuSiQue, per encoder.
    for _, header, rows in md_tables(secs["table7"]):
        for row in rows:
            key, match = row_settings(row[0], True)
            emb = match["embedding.name"]
            dense_v, _ = parse_number(row[1])
            h2_v, _ = parse_number(row[2])
            entries.append({"table": "table7", "row": row[0], "match": {"dataset.name": "musique", "variant": "dense",
                            "embedding.name": emb, "llm.name": "*"}, "values": {"recall@5": dense_v}})
            entries.append({"table": "table7", "row": f"{row[0]} + HippoRAG 2", "match": {"dataset.name": "musique",
                            "variant": "hipporag2", "embedding.name": emb}, "values": {"recall@5": h2_v}})
    # Table 10: graph statistics, per OpenIE LLM and dataset (counted as the reference counts).
    for prose, header, rows in md_tables(secs["table10"]):
        block = block_of(prose)
        for ci, col in enumerate(header[1:], start=1):
            vals = {}
            for row in rows:
                v, _ = parse_number(row[ci])
                if v is not None:
                    vals[TABLE10_METRICS[row[0]]] = v
            entries.append({"table": "table10", "row": DATASETS[col], "block": block, "check": False,
                            "match": {"dataset.name": DATASETS[col], "llm.name": block, "variant": "hipporag2_any_filter"},
                            "values": vals})
    # Table 12: cost on MuSiQue, one column per system.
    for _, header, rows in md_tables(secs["table12"]):
        for ci, col in enumerate(header[1:], start=1):
            vals = {}
            for row in rows:
                v, _ = parse_number(row[ci])
                if v is not None:
                    vals[TABLE12_METRICS[row[0]]] = v
            _, match = row_settings(col, False)
            if match.get("variant") == "dense":
                match["llm.name"] = "*"
            entries.append({"table": "table12", "row": col, "check": False, "match": {"dataset.name": "musique", **match},
                            "values": vals})
    # Table 13: the hyperparameters, as settings of the paper preset.
    t13 = {}
    for line in secs["table13"]:
        for name, key in TABLE13.items():
            m = re.search(re.escape(name) + r" ([0-9]+(?:\.[0-9]+)?)", line)
            if m:
                t13[key] = float(m.group(1))
    # Table 14: GraphRAG / LightRAG settings (for the baselines' configs).
    t14: Dict[str, Dict[str, Any]] = {"graphrag": {}, "lightrag": {}}
    for _, header, rows in md_tables(secs["table14"]):
        for row in rows:
            for sys_name, cell in zip(("graphrag", "lightrag"), row[1:3]):
                if cell.strip() == "-":
                    continue
                v, _ = parse_number(cell)
                t14[sys_name][row[0]] = v if v is not None else cell
    return {
        "source": ("Gutiérrez, Shu, Qi, Zhou, Su. From RAG to Memory: Non-Parametric Continual Learning for Large "
                   "Language Models (HippoRAG 2). ICML 2025 (arXiv 2502.14802)."),
        "condition": ("NV-Embed-v2 retriever, Llama-3.3-70B-Instruct OpenIE / filter / reader, 1,000 questions per "
                      "dataset (LV-Eval 124, NarrativeQA 293)"),
        "tolerance": {"ok": 1.0, "okish": 3.0},
        "questions": QUESTIONS,
        "passages": PASSAGES,
        "defaults_match": {
            "embedding.name": "nv_embed_v2", "llm.name": "llama33_70b_vllm", "retrieval.damping": 0.5,
            "retrieval.passage_node_weight": 0.05, "retrieval.linking_top_k": 5, "retrieval.node_specificity": True,
            "retrieval.passage_seed_top_k": None, "graph.synonymy_edge_sim_threshold": 0.8, "graph.double_edges": True,
            "graph.synonym_edges": True, "graph.synonym_overwrites_relation": True, "graph.dedup_before_normalise": True,
            "dataset.corpus_segments": 1, "dataset.max_queries": None,
        },
        "loose_as": {"embedding.name": "nv_embed_v2", "llm.name": "llama33_70b_vllm", "dataset.max_queries": None},
        "dataset_aliases": {"musique_train": ["musique", "musique_dev"]},
        "loose_ignore": ["retrieval.filter"],
        "variants": {
            "none": {"retrieval.method": "none"},
            "dense": {"retrieval.method": "dense"},
            "bm25": {"retrieval.method": "bm25"},
            "raptor": {"retrieval.method": "raptor"},
            "graphrag": {"retrieval.method": "graphrag"},
            "lightrag": {"retrieval.method": "lightrag"},
            "hipporag1": {"retrieval.method": "hipporag1", "retrieval.linking": "ner_to_node", "retrieval.passage_nodes": False},
            "hipporag2": {"retrieval.method": "hipporag2", "retrieval.linking": "query_to_triple", "retrieval.filter": "llm",
                          "retrieval.passage_nodes": True},
            "hipporag2_any_filter": {"retrieval.method": "hipporag2", "retrieval.filter": "*"},
            "hipporag2_no_filter": {"retrieval.method": "hipporag2", "retrieval.linking": "query_to_triple",
                                    "retrieval.filter": "none", "retrieval.passage_nodes": True},
            "hipporag2_ner_to_node": {"retrieval.method": "hipporag2", "retrieval.linking": "ner_to_node",
                                      "retrieval.filter": "llm", "retrieval.passage_nodes": True},
            "hipporag2_query_to_node": {"retrieval.method": "hipporag2", "retrieval.linking": "query_to_node",
                                        "retrieval.filter": "llm", "retrieval.passage_nodes": True},
            "hipporag2_no_passage_nodes": {"retrieval.method": "hipporag2", "retrieval.linking": "query_to_triple",
                                           "retrieval.filter": "llm", "retrieval.passage_nodes": False},
        },
        "table13": t13,
        "table14": t14,
        "entries": entries,
        "averages": averages,
    }


class _Dumper(yaml.SafeDumper):
    pass


def _flow_dict(dumper, data):
    # Small mappings (match, values) on one line, the rest in block style.
    flow = all(not isinstance(v, (dict, list)) for v in data.values()) and len(data) <= 8
    return dumper.represent_mapping("tag:yaml.org,2002:map", data, flow_style=flow)


_Dumper.add_representer(dict, _flow_dict)

TITLES = {
    "table2": "Table 2: QA F1, Llama-3.3-70B reader on the top-5 passages",
    "table3": "Table 3: passage recall@5",
    "table4": "Table 4: ablations, recall@5",
    "table5": "Table 5: passage_node_weight on the dev (tuning) sets, recall@5; the dev sets are not in the "
              "release layout, the shared 100 MuSiQue questions stand for musique_dev loosely",
    "table7": "Table 7: retriever swap on MuSiQue, recall@5 (dense -> HippoRAG 2)",
    "table8": "Table 8: QA EM / F1, both LLM blocks (block = the LLM of OpenIE, filter and reader)",
    "table9": "Table 9: passage recall@2 / recall@5",
    "table10": "Table 10: graph statistics, as the reference counts them (extracted edges = unique facts; "
               "synonym edges = total - extracted - context); OpenIE-dependent: shown, not checked",
    "table12": "Table 12: cost on MuSiQue (hardware-dependent: shown, not checked)",
}


def _one_line(obj) -> str:
    return yaml.dump(obj, Dumper=yaml.SafeDumper, default_flow_style=True, sort_keys=False, allow_unicode=True,
                     width=10**6).strip()


def render(text: str) -> str:
    data = build(text)
    entries, averages = data.pop("entries"), data.pop("averages")
    out = [HEADER, yaml.dump(data, Dumper=_Dumper, sort_keys=False, allow_unicode=True, width=120), "entries:"]
    last = None
    for e in entries:
        if e["table"] != last:
            last = e["table"]
            out.append(f"  # ---- {TITLES[last]}")
        out.append(f"  - {_one_line(e)}")
    out.append("# The paper's Avg columns (recomputed by the report from the cells above, weighted as `weighting` says).")
    out.append("averages:")
    for a in averages:
        out.append(f"  - {_one_line(a)}")
    return "\n".join(out) + "\n"


def main(argv: List[str]) -> int:
    src = Path(argv[1]) if len(argv) > 1 else Path(__file__).resolve().parents[1].parent / "shared" / "paper_tables.md"
    sys.stdout.write(render(src.read_text(encoding="utf-8")))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
