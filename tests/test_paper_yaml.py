"""results/reference/paper.yaml: every number of the paper's tables, matched to the
settings it was measured under; the report averages as the paper does and lists the
rows no run stands for as "not run"."""
import importlib.util
import re
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from hipporag2.cli import compose
from hipporag2.report.reference import load_reference
from hipporag2.report.runs import Run, reference_graph_counts
from hipporag2.report.tables import Cell, Context, average_cell, table_pivot

REPO = Path(__file__).resolve().parent.parent
PAPER_YAML = REPO / "results" / "reference" / "paper.yaml"
PAPER_MD = REPO.parent / "shared" / "paper_tables.md"
if not PAPER_MD.is_file():
    PAPER_MD = Path("/work/shared/paper_tables.md") if Path("/work/shared/paper_tables.md").is_file() else PAPER_MD


@pytest.fixture(scope="module")
def paper():
    return load_reference(PAPER_YAML)


def _generator():
    spec = importlib.util.spec_from_file_location("paper_yaml", REPO / "scripts" / "paper_yaml.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def _needs_md():
    if not PAPER_MD.is_file():
        pytest.skip(f"the paper's tables are not here ({PAPER_MD}; ../shared absent)")


def test_paper_yaml_is_what_the_script_makes_of_paper_tables():
    _needs_md()
    assert _generator().render(PAPER_MD.read_text(encoding="utf-8")) == PAPER_YAML.read_text(encoding="utf-8"), (
        "results/reference/paper.yaml is stale: python scripts/paper_yaml.py ../shared/paper_tables.md > results/reference/paper.yaml")


def _md_numbers(text: str):
    """{table: [numbers of every table cell but the row label, and Table 13's prose]}."""
    out = {}
    current = None
    lines = text.splitlines()
    for i, line in enumerate(lines):
        header = i + 1 < len(lines) and lines[i + 1].startswith("|") and set(lines[i + 1]) <= set("|-: ")
        m = re.match(r"^## Table (\d+)", line)
        if m:
            current = f"table{m.group(1)}"
            out[current] = []
            continue
        if line.startswith("## "):
            current = None
        if current is None:
            continue
        if current == "table13":
            out[current] += [float(x) for x in re.findall(r"(\d+\.\d+)", line)]
        elif line.startswith("|") and not set(line) <= set("|-: ") and (not header or current == "table5"):
            cells = [c.strip() for c in line.strip().strip("|").split("|")][1:]
            for c in cells:
                for tok in re.findall(r"\d[\d,]*(?:\.\d+)?", c):
                    out[current].append(float(tok.replace(",", "")))
    return out


def _yaml_numbers(paper, raw):
    out = {}
    for e in paper.entries:
        out.setdefault(e.table, []).extend(float(v) for v in e.values.values())
        out[e.table].extend(float(v) for k, v in e.match.items() if k == "retrieval.passage_node_weight")
    for a in paper.averages:
        out.setdefault(a.table, []).extend(a.values.values())
    out["table13"] = [float(v) for v in raw["table13"].values()]
    out["table14"] = [float(v) for d in raw["table14"].values() for v in d.values() if isinstance(v, (int, float))]
    return out


def test_every_number_of_the_paper_is_in_paper_yaml(paper):
    _needs_md()
    md = _md_numbers(PAPER_MD.read_text(encoding="utf-8"))
    ours = _yaml_numbers(paper, paper.raw)
    assert set(md) == {"table2", "table3", "table4", "table5", "table7", "table8", "table9", "table10", "table12",
                       "table13", "table14"}
    for table, numbers in md.items():
        have = list(ours.get(table, []))
        missing = []
        for x in numbers:  # as a multiset: a number printed twice is held twice
            hit = next((i for i, y in enumerate(have) if abs(x - y) < 1e-9), None)
            if hit is None:
                missing.append(x)
            else:
                have.pop(hit)
        assert not missing, f"{table}: {len(missing)} numbers of paper_tables.md not in paper.yaml, e.g. {missing[:5]}"
    # Size: Table 10 has 98 cells, one of them unknown; Table 8 two blocks.
    t10 = [e for e in paper.entries if e.table == "table10"]
    assert sum(len(e.values) for e in t10) == 97 and {e.block for e in t10} == {"llama33_70b_vllm", "gpt4o_mini"}
    assert {e.block for e in paper.entries if e.table == "table8"} == {"llama33_70b_vllm", "gpt4o_mini"}
    assert len({e.row for e in paper.entries if e.table == "table12"}) == 6


def test_daggers_are_kept(paper):
    h2 = {e.dataset: e for e in paper.row_entries("table2", "HippoRAG 2")}
    assert h2["nq"].dagger == ("qa_f1",) and h2["popqa"].dagger == () and h2["lveval"].dagger == ("qa_f1",)


def _run(dataset, metrics):
    return Run(path=Path("/nonexistent"), metrics=metrics, config={"dataset.name": dataset})


def test_averages_are_question_weighted_as_the_paper(paper):
    # The paper's own cells give its Avg: 59.8 (HippoRAG 2) and 57.0 (NV-Embed-v2) ...
    assert paper.average_of("table2", "HippoRAG 2", "qa_f1") == 59.8
    assert paper.average_of("table2", "NV-Embed-v2 (7B)", "qa_f1") == 57.0
    # ... and so does the report's Avg cell over runs holding those numbers.
    ctx = Context(paper=paper, ours=[], baselines=[])
    for row, want in (("HippoRAG 2", 59.8), ("NV-Embed-v2 (7B)", 57.0)):
        cells = [Cell(ours=e.values["qa_f1"], run=_run(e.dataset, {"qa_f1": e.values["qa_f1"], "qa_n": paper.questions[e.dataset]}))
                 for e in paper.row_entries("table2", row)]
        assert average_cell(cells, "qa_f1", ctx).ours == want
        assert round(sum(c.ours for c in cells) / len(cells), 1) != want  # the column mean is not the paper's
    # Every printed average agrees with its cells (within the paper's own rounding).
    for a in paper.averages:
        for metric, printed in a.values.items():
            got = paper.average_of(a.table, a.row, metric, a.block)
            assert got is not None and abs(got - printed) <= 0.1 + 1e-9, (a.table, a.row, a.block, metric, printed, got)


def test_table10_counts_as_the_reference():
    stats = {"phrase_nodes": 10, "passage_nodes": 4, "facts": 7, "relation_edges": 12, "context_edges": 9,
             "synonym_edges": 5, "edges_total": 26, "self_loops_dropped": 1}
    c = reference_graph_counts(stats)
    assert c == {"phrase_nodes": 10, "passage_nodes": 4, "total_nodes": 14, "extracted_edges": 7,
                 "synonym_edges": 27 - 7 - 9, "context_edges": 9, "total_edges": 27}
    run = Run(path=Path("/x"), metrics={}, graph_stats=stats)
    assert run.metric("extracted_edges") == 7.0 and run.metric("relation_edges") == 12.0


# ---- every row the harness runs is known to --check; the rest show as "not run" -------

ROWS = [  # (experiment, retriever row, paper table, paper row, block)
    ("table2_qa", "none", "table2", "None (no retrieval)", None),
    ("table2_qa", "bm25", "table2", "BM25", None),
    ("table2_qa", "contriever", "table2", "Contriever", None),
    ("table2_qa", "gtr", "table2", "GTR (T5-base)", None),
    ("table2_qa", "gte_qwen2_7b", "table2", "GTE-Qwen2-7B-Instruct", None),
    ("table2_qa", "gritlm_7b", "table2", "GritLM-7B", None),
    ("table2_qa", "nv_embed_v2", "table2", "NV-Embed-v2 (7B)", None),
    ("table2_qa", "hipporag1", "table2", "HippoRAG", None),
    ("table2_qa", "hipporag2", "table2", "HippoRAG 2", None),
    ("table2_qa", "none", "table8", "None", "llama33_70b_vllm"),
    ("table8_qa", "none", "table8", "None", "gpt4o_mini"),
    ("table8_qa", "nv_embed_v2", "table8", "NV-Embed-v2", "gpt4o_mini"),
    ("table8_qa", "hipporag1", "table8", "HippoRAG", "gpt4o_mini"),
    ("table8_qa", "hipporag2", "table8", "HippoRAG 2", "gpt4o_mini"),
    ("table8_qa", "hipporag2", "table9", "HippoRAG 2 (GPT-4o-mini)", None),
    ("table3_recall", "bm25", "table3", "BM25", None),
    ("table3_recall", "hipporag1", "table3", "HippoRAG (re-run, same LLM and retriever)", None),
    ("table9_recall2_5", "gtr", "table9", "GTR (T5-base)", None),
    ("table9_recall2_5", "hipporag1", "table9", "HippoRAG (Llama-3.3-70B)", None),
    ("table12_cost", "hipporag1", "table12", "HippoRAG", None),
    ("table12_cost", "nv_embed_v2", "table12", "NV-Embed-v2", None),
    ("table2_qa", "graphrag", "table2", "GraphRAG", None),
    ("table2_qa", "graphrag", "table8", "GraphRAG", "llama33_70b_vllm"),
    ("table8_qa", "graphrag", "table8", "GraphRAG", "gpt4o_mini"),
    ("table12_cost", "graphrag", "table12", "GraphRAG", None),
]


def _flatten(obj, prefix=""):
    if isinstance(obj, dict):
        return {k: v for key, val in obj.items() for k, v in _flatten(val, f"{prefix}{key}.").items()}
    return {prefix[:-1]: obj}


def _composed_run(*overrides):
    cfg = compose(list(overrides))
    flat = _flatten(OmegaConf.to_container(OmegaConf.structured(cfg), resolve=True))
    return Run(path=Path("/x"), metrics={}, config=flat)


@pytest.mark.parametrize("experiment,retriever,table,row,block", ROWS)
def test_every_runnable_row_matches_its_paper_entry(paper, experiment, retriever, table, row, block):
    run = _composed_run(f"+experiment={experiment}", f"experiment/retriever@_global_={retriever}", "dataset=musique")
    want = [e for e in paper.row_entries(table, row, block) if e.dataset == "musique"]
    assert len(want) == 1
    metric = next(iter(want[0].values))
    hit = paper.lookup(run, metric, table=table)
    assert hit is not None and hit[0] is want[0] and not hit[2], (experiment, retriever, hit and (hit[0].row, hit[0].block))
    if want[0].check:
        assert want[0] in paper.matching(run)  # --check judges it


def test_rows_the_harness_cannot_run_are_listed_as_not_run(paper):
    run = _composed_run("+experiment=table2_qa", "experiment/retriever@_global_=hipporag2", "dataset=musique")
    run.metrics = {"qa_f1": 50.0, "qa_n": 1000, "n_queries": 1000}
    ctx = Context(paper=paper, ours=[], baselines=[])
    md = table_pivot([run], ctx, "t2", "Table 2", ["qa_f1"], paper_table="table2").markdown()
    assert "| RAPTOR | not run (28.9) |" in md and "| LightRAG | not run (1.6) |" in md
    assert "| GraphRAG | not run (38.5) |" in md and "| None (no retrieval) | not run (26.1) |" in md
    assert "HippoRAG 2 |" not in md.split("| hipporag2")[1]  # the run stands for the HippoRAG 2 row
    assert "50.0 (48.6†, +1.4)" in md


def test_table13_hyperparameters_are_the_paper_presets(paper):
    cfg = _composed_run("+experiment=table2_qa")
    assert paper.raw["table13"] == {"graph.synonymy_edge_sim_threshold": 0.8, "retrieval.damping": 0.5, "llm.temperature": 0.0}
    for key, value in paper.raw["table13"].items():
        assert cfg.get(key) == value, key


def test_table8_has_both_llm_blocks_and_table12_all_six_systems(paper):
    from hipporag2.report.tables import table_cost

    ctx = Context(paper=paper, ours=[], baselines=[])
    llama = _composed_run("+experiment=table2_qa", "experiment/retriever@_global_=hipporag2", "dataset=musique")
    mini = _composed_run("+experiment=table8_qa", "experiment/retriever@_global_=none", "dataset=musique")
    llama.metrics = {"qa_em": 30.0, "qa_f1": 40.0, "qa_n": 1000, "n_queries": 1000}
    mini.metrics = {"qa_em": 10.0, "qa_f1": 20.0, "qa_n": 1000, "n_queries": 1000}
    md = table_pivot([llama, mini], ctx, "t8", "Table 8", ["qa_em", "qa_f1"], paper_table="table8").markdown()
    assert "30.0 (37.2, −7.2) | 40.0 (48.6, −8.6) |" in md  # HippoRAG 2, Llama block
    assert "10.0 (11.2, −1.2) | 20.0 (22.0, −2.0) |" in md  # None, GPT-4o-mini block
    assert "| None [llama33_70b_vllm] | not run (17.6) | not run (26.1) |" in md
    assert "| HippoRAG 2 [gpt4o_mini] | not run (35.0) | not run (49.3) |" in md
    assert "| None [gpt4o_mini] |" not in md and "| HippoRAG 2 [llama33_70b_vllm] |" not in md
    dense = _composed_run("+experiment=table12_cost", "experiment/retriever@_global_=nv_embed_v2")
    dense.metrics = {"n_queries": 1000, "timings": {"retrieval": 300.0, "embed_passages": 600.0}}
    md = table_cost([dense], ctx).markdown()
    # the five systems no run stands for: their n and query_peak_rss_gb cells (no paper number)
    assert "(0.3)" in md and md.count("| not run |") == 10
    assert "| LightRAG | not run | not run (235) | not run (68.5) | not run (18.3) | not run (13.3) | not run (4.5) | not run |" in md
