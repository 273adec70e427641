"""Every malformed input gives a DataError naming file, record and field (docs/reliability.md).

Hand-written cases for each outcome, then hypothesis fuzzing: arbitrary JSON (and
arbitrary bytes) fed to the corpus, query, OpenIE and filter-program readers yields a
valid result or a DataError, never another exception.
"""
from __future__ import annotations

import atexit
import json
import os
import re
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from hipporag2.data.errors import DataError
from hipporag2.data.loaders import Corpus, load_corpus, load_queries, read_json
from hipporag2.data.inputs import check_input_paths
from hipporag2.data.validate import validate_filter_program
from hipporag2.graph.triples import TripleStats, clean_triples
from hipporag2.openie.interchange import import_openie, parse_openie


def _write(tmp_path: Path, name: str, obj) -> Path:
    p = tmp_path / name
    p.write_text(json.dumps(obj), encoding="utf-8")
    return p


def _pat(name: str, where: str, msg: str) -> str:
    """'FILE, record R, field F: message' with `where` a regex for the part after the file."""
    return re.escape(name) + (f", (.*, )?{where}" if where else "") + f": .*{msg}"


def _raw(tmp_path: Path, name: str, data: bytes) -> Path:
    p = tmp_path / name
    p.write_bytes(data)
    return p


# ---- files that are not JSON at all ------------------------------------------------


def test_unreadable_files(tmp_path):
    cases = [
        (b"", "the file is empty"),
        (b"  \n", "the file is empty"),
        (b"[\xff]", r"not valid UTF-8 \(byte offset 1\)"),
        (b'[{"title": "a", "text": "b"},]', "not valid JSON: .* line 1 column"),
        (b"[" * 100_000 + b"]" * 100_000, "nested too deeply"),
    ]
    for i, (data, msg) in enumerate(cases):
        with pytest.raises(DataError, match=msg):
            load_corpus(_raw(tmp_path, f"c{i}.json", data))
    with pytest.raises(DataError, match="not a regular file"):
        load_corpus(tmp_path)
    with pytest.raises(DataError, match="file not found"):
        load_queries(tmp_path / "missing.json")
    # A UTF-8 byte-order mark is accepted.
    bom = _raw(tmp_path, "bom.json", b"\xef\xbb\xbf" + json.dumps([{"title": "T", "text": "x"}]).encode())
    assert load_corpus(bom).strings == ["T\nx"]


def test_lone_surrogate_is_an_error_not_a_crash_later(tmp_path):
    p = _raw(tmp_path, "c.json", b'[{"title": "T", "text": "ok"}, {"title": "T", "text": "bad \\ud800"}]')
    with pytest.raises(DataError, match=r"c\.json, record 1, field 'text': invalid Unicode"):
        load_corpus(p)


# ---- corpus ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "obj, where, msg",
    [
        ("passages", "", "expected a JSON list of passages, got string"),
        (None, "", "got null"),
        ([], "", "the corpus is empty"),
        ({}, "", "the corpus is empty"),
        ([{"title": "A", "text": "x"}, 3], "record 1", "expected an object with 'title' and 'text', got number"),
        ([{"text": "x"}], "record 0, field 'title'", "missing field"),
        ([{"title": "A", "text": ["x"]}], "record 0, field 'text'", "expected a string, got list"),
        ([{"title": None, "text": "x"}], "record 0, field 'title'", "expected a string, got null"),
        ({"T": {"a": 1}}, "field 'text'", "expected a list of sentence strings, got object"),
        ({"T": ["a", 2]}, "field 'text\\[1\\]'", "expected a sentence string, got number"),
    ],
)
def test_corpus_wrong_types(tmp_path, obj, where, msg):
    with pytest.raises(DataError, match=_pat("c.json", where, msg)):
        load_corpus(_write(tmp_path, "c.json", obj))


def test_duplicates_are_counted_skips(tmp_path):
    c = load_corpus(_write(tmp_path, "c.json", [{"title": "A", "text": "x"}] * 3 + [{"title": "B", "text": "x"}]))
    assert len(c) == 2 and c.duplicates == 2


def test_field_size_limit(tmp_path, monkeypatch):
    ok = _write(tmp_path, "ok.json", [{"title": "T", "text": "é" * 50}])  # 100 bytes
    big = _write(tmp_path, "big.json", [{"title": "T", "text": "é" * 50 + "x"}])
    monkeypatch.setenv("HIPPORAG2_MAX_FIELD_BYTES", "100")
    assert len(load_corpus(ok)) == 1
    with pytest.raises(DataError, match=r"big\.json, record 0, field 'text': string of 101 bytes exceeds the limit of 100 bytes"):
        load_corpus(big)
    monkeypatch.setenv("HIPPORAG2_MAX_FIELD_BYTES", "lots")
    with pytest.raises(DataError, match="HIPPORAG2_MAX_FIELD_BYTES"):
        load_corpus(ok)
    monkeypatch.delenv("HIPPORAG2_MAX_FIELD_BYTES")
    huge = _write(tmp_path, "huge.json", [{"title": "T", "text": "x" * 1_000_001}])  # default limit: 1 MB
    with pytest.raises(DataError, match="exceeds the limit of 1,000,000 bytes"):
        load_corpus(huge)


# ---- query files -------------------------------------------------------------------


@pytest.mark.parametrize(
    "rec, where, msg",
    [
        ({"id": "a"}, "record 0 \\(id 'a'\\), field 'question'", "missing field"),
        ({"id": "a", "question": 5}, "field 'question'", "expected a string, got number"),
        ({"id": {"x": 1}, "question": "q"}, "record 0, field 'id'", "expected a string or integer id, got object"),
        ({"_id": True, "question": "q"}, "record 0, field '_id'", "expected a string or integer id, got boolean"),
        ({"question": "q", "answer": {"a": 1}}, "field 'answer'", "expected a string, a number or a list of them, got object"),
        ({"question": "q", "answer_aliases": [True]}, "field 'answer_aliases'", "got boolean"),
        ({"question": "q", "paragraphs": "p"}, "field 'paragraphs'", "expected a list of"),
        ({"question": "q", "paragraphs": [3]}, "field 'paragraphs\\[0\\]'", "expected an object, got number"),
        ({"question": "q", "paragraphs": [{"title": "T"}]}, "field 'paragraphs\\[0\\]'", "needs 'text' or 'paragraph_text'"),
        ({"question": "q", "paragraphs": [{"title": 1, "text": "t"}]}, "field 'paragraphs\\[0\\].title'", "expected a string, got number"),
        ({"question": "q", "paragraphs": [{"text": "t", "is_supporting": "yes"}]}, "field 'paragraphs\\[0\\].is_supporting'", "expected true or false, got string"),
        ({"question": "q", "contexts": [{"text": "t"}]}, "field 'contexts\\[0\\].title'", "missing field"),
        ({"question": "q", "contexts": [[1]]}, "field 'contexts\\[0\\]'", "expected an object, got list"),
        ({"question": "q", "supporting_facts": [[1, 0]]}, "field 'supporting_facts\\[0\\]'", "expected \\[title, sentence_id\\]"),
        ({"question": "q", "supporting_facts": {"T": 0}}, "field 'supporting_facts'", "got object"),
        ({"question": "q", "supporting_facts": [["T", 0]], "context": [["T"]]}, "field 'context\\[0\\]'", "expected \\[title, \\[sentences\\]\\]"),
        ({"question": "q", "supporting_facts": [["T", 0]], "context": [["T", ["a", None]]]}, "field 'context\\[0\\]\\[1\\]\\[1\\]'", "got null"),
    ],
)
def test_query_wrong_types(tmp_path, rec, where, msg):
    with pytest.raises(DataError, match=_pat("q.json", where, msg)):
        load_queries(_write(tmp_path, "q.json", [rec]))


def test_query_file_level_errors_and_outcomes(tmp_path):
    with pytest.raises(DataError, match="expected a JSON list of questions, got object"):
        load_queries(_write(tmp_path, "q.json", {"questions": []}))
    with pytest.raises(DataError, match="holds no questions"):
        load_queries(_write(tmp_path, "q.json", []))
    with pytest.raises(DataError, match=r"record 1 \(id '7'\), field 'id': duplicate question id"):
        load_queries(_write(tmp_path, "q.json", [{"id": 7, "question": "a"}, {"id": "7", "question": "b"}]))
    # No gold passages: kept (recall 0), counted by check_gold_in_corpus / metrics.json.
    [q] = load_queries(_write(tmp_path, "q.json", [{"question": "a", "answer": [1, ["x", None]]}]))
    assert q.id == "0" and q.gold_passages == [] and q.gold_answers == ["1", "x"]
    # is_supporting 0/1 as in converted files.
    [q] = load_queries(_write(tmp_path, "q.json", [{"question": "a", "paragraphs": [
        {"title": "A", "text": "x", "is_supporting": 1}, {"title": "B", "text": "y", "is_supporting": 0}]}]))
    assert q.gold_passages == ["A\nx"]


# ---- OpenIE ------------------------------------------------------------------------


@pytest.mark.parametrize(
    "obj, where, msg",
    [
        ([], "", "expected an object with a 'docs' list .*got list"),
        ({"doc": []}, "", "without 'docs'"),
        ({"docs": {}}, "field 'docs'", "expected a list, got object"),
        ({"docs": ["x"]}, "record docs\\[0\\]", "expected an object, got string"),
        ({"docs": [{"extracted_triples": []}]}, "record docs\\[0\\], field 'passage'", "needs 'passage'"),
        ({"docs": [{"passage": 3}]}, "field 'passage'", "expected a string, got number"),
        ({"docs": [{"title": "T", "text": None}]}, "field 'text'", "got null"),
        ({"docs": [{"passage": "p", "idx": 5}]}, "field 'idx'", "expected a 'chunk-...' id string"),
        ({"docs": [{"passage": "p", "extracted_triples": "a b c"}]}, "field 'extracted_triples'", "got string"),
        ({"docs": [{"passage": "p", "extracted_entities": {"a": 1}}]}, "field 'extracted_entities'", "got object"),
    ],
)
def test_openie_wrong_types(tmp_path, obj, where, msg):
    with pytest.raises(DataError, match=_pat("o.json", where, msg)):
        parse_openie(_write(tmp_path, "o.json", obj))


def test_openie_bad_triples_are_counted_and_non_strings_stringified(tmp_path):
    from hipporag2.data.loaders import Passage

    corpus = Corpus([Passage("T", "x", 0)])
    triples = [["a", "r", "b"], ["a", "r"], "abc", ["a", 1, None], [["x"], "r", {"k": 2}], ["a", "r", "b", "c"]]
    p = _write(tmp_path, "o.json", {"docs": [
        {"passage": "T\nx", "extracted_entities": ["a", 3], "extracted_triples": triples},
        {"passage": "T\nx", "extracted_triples": []},
    ]})
    imp = import_openie(p, corpus)
    assert (imp.triples_not_three, imp.triples_non_string, imp.duplicates) == (3, 2, 1)
    stats = TripleStats()
    kept = clean_triples(imp.by_passage_id[next(iter(imp.by_passage_id))].triples, stats=stats)
    assert (stats.raw, stats.kept, stats.wrong_length, stats.non_string) == (6, 3, 3, 2)
    # str() then normalise, as the reference: 1 -> "1", None -> "none", ['x'] -> "x"
    assert kept[1] == ("a", "1", "none") and kept[2][0] == "x" and kept[2][2] == "k   2"


# ---- DSPy filter program -----------------------------------------------------------


def test_filter_program_validation(tmp_path):
    shipped = Path(__file__).resolve().parent.parent / "hipporag2" / "resources" / "filter_program.json"
    assert isinstance(validate_filter_program(shipped), dict)
    demo = {"question": "q", "fact_before_filter": '{"fact": []}', "fact_after_filter": {"fact": []}}
    good = {"prog": {"system": "sys", "demos": [demo]}}
    assert validate_filter_program(_write(tmp_path, "f.json", good))
    assert validate_filter_program(_write(tmp_path, "f.json", {"signature": {"instructions": "do it"}}))
    # A plain training example (not all three fields) is skipped by the filter, not an error.
    assert validate_filter_program(_write(tmp_path, "f.json", {"prog": {"system": "s", "demos": [{"question": "q"}]}}))
    cases = [
        ([1], "", "expected an object holding a saved DSPy program, got list"),
        ({"metadata": {}}, "", "expected an object with 'prog'"),
        ({"prog": []}, "field 'prog'", "expected an object, got list"),
        ({"prog": {"system": "s", "demos": {}}}, "field 'prog.demos'", "expected a list, got object"),
        ({"prog": {"system": "s", "demos": [dict(demo, question=4)]}}, "field 'prog.demos\\[0\\].question'", "got number"),
        ({"prog": {"system": "s", "demos": [dict(demo, fact_after_filter=3)]}}, "field 'prog.demos\\[0\\].fact_after_filter'", "expected a JSON string of facts"),
        ({"prog": {"system": 7}}, "field 'prog.system'", "expected a string, got number"),
        ({"prog": {"system": " ", "signature": {"instructions": ""}}}, "field 'prog.system'", "neither a system message nor"),
        ({"prog": {"signature": {"instructions": "i", "fields": [1]}}}, "field 'prog.signature.fields\\[0\\]'", "expected an object"),
    ]
    for obj, where, msg in cases:
        with pytest.raises(DataError, match=_pat("f.json", where, msg)):
            validate_filter_program(_write(tmp_path, "f.json", obj))


def test_config_named_inputs_are_checked_before_any_work(tmp_path):
    from hipporag2.config import Config, OpenIEConfig, RetrievalConfig

    cfg = Config(openie=OpenIEConfig(import_path=str(tmp_path / "nope.json")))
    with pytest.raises(DataError, match=r"nope\.json: file not found \(openie\.import_path\)"):
        check_input_paths(cfg)
    bad_prog = _write(tmp_path, "prog.json", {"prog": {"demos": 1}})
    cfg = Config(retrieval=RetrievalConfig(filter="llm", filter_program=str(bad_prog)))
    with pytest.raises(DataError, match=r"prog\.json, field 'prog\.demos'"):
        check_input_paths(cfg)


def test_pipeline_surfaces_data_error(tmp_path):
    """A malformed corpus stops `run()` with the DataError the CLI turns into `error: ...`."""
    from hipporag2.cli import compose
    from hipporag2.pipeline import run

    _write(tmp_path, "x.json", [{"id": "1", "question": "q"}])
    _write(tmp_path, "x_corpus.json", [{"title": "A", "text": "a"}, {"title": "B", "text": 3}])
    cfg = compose(["dataset.name=x", "dataset.file_stem=x", f"data_dir={tmp_path}", "retrieval=bm25",
                   f"run_dir={tmp_path / 'run'}", f"cache_dir={tmp_path / 'cache'}", "progress=false"])
    with pytest.raises(DataError, match=r"x_corpus\.json, record 1, field 'text': expected a string, got number"):
        run(cfg)


# ---- fuzzing -----------------------------------------------------------------------

json_scalars = st.none() | st.booleans() | st.integers(-10**6, 10**6) | st.floats(allow_nan=False) | st.text(max_size=12)
json_values = st.recursive(json_scalars, lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4), max_leaves=20)


def maybe(good):
    """Mostly (9 in 10) the expected type, sometimes any JSON value."""
    return st.integers(0, 9).flatmap(lambda i: good if i else json_values)


def record(required: dict, optional: dict):
    """An object with the expected fields (required ones sometimes missing), each
    mostly of the right type."""
    fields = {k: maybe(v) for k, v in required.items()}
    opt = {k: maybe(v) for k, v in optional.items()}
    return maybe(st.fixed_dictionaries(fields, optional=opt)) | st.fixed_dictionaries({}, optional={**fields, **opt})


text = st.text(max_size=12)
passage_rec = record({"title": text, "text": text}, {"idx": text})
corpus_like = maybe(st.lists(passage_rec, max_size=5)) | st.dictionaries(text, maybe(st.lists(maybe(text), max_size=3)) | text, max_size=4)
paragraph = record({"title": text, "paragraph_text": text}, {"text": text, "is_supporting": st.booleans() | st.sampled_from([0, 1])})
context = record({"title": text, "text": text}, {"is_supporting": st.booleans()})
hotpot_ctx = st.tuples(maybe(text), maybe(st.lists(maybe(text), max_size=3))).map(list)
answer = text | st.integers() | st.lists(maybe(text), max_size=3)
query_rec = record(
    {"question": text},
    {"id": text | st.integers(), "_id": text, "answer": answer, "answer_aliases": st.lists(maybe(text), max_size=3),
     "obj": text, "possible_answers": text.map(lambda t: json.dumps([t])),
     "paragraphs": st.lists(paragraph, max_size=3), "contexts": st.lists(context, max_size=3),
     "supporting_facts": st.lists(st.tuples(maybe(text), st.integers(0, 3)).map(list), max_size=3),
     "context": st.lists(hotpot_ctx, max_size=3)},
)
query_like = maybe(st.lists(query_rec, max_size=4))
triple = maybe(st.lists(maybe(text) | json_scalars, min_size=2, max_size=4))
doc = record({"passage": text}, {"idx": text, "title": text, "text": text, "extracted_entities": st.lists(maybe(text), max_size=3),
                                  "extracted_triples": st.lists(triple, max_size=4)})
openie_like = maybe(st.fixed_dictionaries({"docs": maybe(st.lists(doc, max_size=4))}, optional={"avg_ent_chars": st.floats()}))
demo = record({"question": text, "fact_before_filter": text, "fact_after_filter": text | st.fixed_dictionaries({"fact": st.lists(st.lists(text))})}, {})
predictor = record({}, {"system": text, "demos": st.lists(demo, max_size=3),
                        "signature": record({"instructions": text}, {"fields": st.lists(st.dictionaries(text, text, max_size=2), max_size=3)}),
                        "instructions": text})
program_like = maybe(st.fixed_dictionaries({"prog": predictor}, optional={"metadata": st.dictionaries(text, text, max_size=2)})) | predictor

FUZZ = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])
_TMP = Path(tempfile.mkdtemp(prefix="hipporag2-fuzz-"))
atexit.register(shutil.rmtree, _TMP, True)  # made in every process that collects this file


def _dump(obj) -> Path:
    p = _TMP / f"f{os.getpid()}.json"
    p.write_text(json.dumps(obj), encoding="utf-8")
    return p


def _valid_or_data_error(fn, path):
    try:
        return fn(path)
    except DataError as e:
        assert str(e).startswith(str(path))
        return None


@FUZZ
@given(corpus_like | json_values)
def test_fuzz_corpus(obj):
    c = _valid_or_data_error(load_corpus, _dump(obj))
    if c is not None:
        assert len(c) >= 1 and all(isinstance(p.title, str) and isinstance(p.text, str) for p in c.passages)
        assert len(set(c.strings)) == len(c)


@FUZZ
@given(query_like | json_values)
def test_fuzz_queries(obj):
    qs = _valid_or_data_error(load_queries, _dump(obj))
    if qs is not None:
        for q in qs:
            assert isinstance(q.id, str) and isinstance(q.question, str)
            assert all(isinstance(a, str) for a in q.gold_answers)
            assert all(isinstance(g, str) for g in q.gold_passages)


@FUZZ
@given(openie_like)
def test_fuzz_openie(obj):
    exs = _valid_or_data_error(parse_openie, _dump(obj))
    if exs is not None:
        for ex in exs:
            assert isinstance(ex.passage, str) and isinstance(ex.triples, list)
            assert all(isinstance(t, list) for t in ex.triples)
            clean_triples(ex.triples)  # the graph stage accepts whatever was kept
            ex.idx  # hashable passage string


@FUZZ
@given(program_like)
def test_fuzz_filter_program(obj):
    _valid_or_data_error(validate_filter_program, _dump(obj))


@settings(max_examples=150, deadline=None)
@given(st.binary(max_size=40) | st.text(max_size=30).map(lambda s: s.encode("utf-8", "surrogatepass")))
def test_fuzz_bytes(data):
    p = _TMP / f"b{os.getpid()}.json"
    p.write_bytes(data)
    for fn in (read_json, load_corpus, load_queries, parse_openie):
        _valid_or_data_error(fn, p)


def test_openie_strings_checked_with_their_field_named(tmp_path, monkeypatch):
    """OpenIE strings pass or fail as check_text decides (ASCII ones checked without
    naming the field first): the size limit in bytes, lone surrogates, the record named."""
    def doc(triples, ents=()):
        return {"docs": [{"passage": "T\nx", "extracted_entities": list(ents), "extracted_triples": triples}]}

    monkeypatch.setenv("HIPPORAG2_MAX_FIELD_BYTES", "10")
    ok = _write(tmp_path, "ok.json", doc([["a" * 10, "é" * 5, "b"]], ["é" * 5, "x" * 10]))
    assert parse_openie(ok)[0].triples == [["a" * 10, "é" * 5, "b"]]
    cases = [(doc([["a" * 11, "p", "o"]]), r"record docs\[0\], field 'extracted_triples\[0\]\[0\]': string of 11 characters"),
             (doc([["s", "p", "é" * 5 + "x"]]), r"field 'extracted_triples\[0\]\[2\]': string of 11 bytes"),
             (doc([], ["ok", "y" * 11]), r"field 'extracted_entities\[1\]': string of 11 characters")]
    for i, (obj, msg) in enumerate(cases):
        with pytest.raises(DataError, match=msg):
            parse_openie(_write(tmp_path, f"bad{i}.json", obj))
    bad = _raw(tmp_path, "sur.json", b'{"docs": [{"passage": "T\\nx", "extracted_triples": [["s", "p", "o \\ud800"]]}]}')
    with pytest.raises(DataError, match=r"field 'extracted_triples\[0\]\[2\]': invalid Unicode"):
        parse_openie(bad)
