"""Lenient parsing of LLM answers (hipporag2.openie.parse): cases seen from real models,
and fuzzing that arbitrary text never raises."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hipporag2.openie.parse import parse_entities, parse_structured, parse_triples


@pytest.mark.parametrize(
    "text, expected, reason",
    [
        ('{"named_entities": ["Brackmoor", "Velmora"]}', ["Brackmoor", "Velmora"], "json"),
        ('```json\n{"named_entities": ["A", "B"]}\n```', ["A", "B"], "json"),
        ('```\n{"named_entities": ["A"]}\n``` Hope this helps!', ["A"], "json"),
        ('Sure! Here they are: {"named_entities": ["A", "B"]} Let me know.', ["A", "B"], "embedded"),
        ("{'named_entities': ['O\\'Hara', \"Saint Ilbra\"]}", ["O'Hara", "Saint Ilbra"], "json"),
        ('["A", "B", "A"]', ["A", "B"], "json"),  # bare list; duplicates dropped
        ('{"Named Entities": ["A"]}', ["A"], "json"),  # key matched loosely
        ('{"entities": ["A", 1893, null, ["x"]]}', ["A", "1893"], "json"),  # non-names dropped
        ('{"named_entities": ["A", "B", "Corv', ["A", "B"], "truncated"),  # cut off mid-item
        ('{"named_entities": ["A", "B"', ["A", "B"], "truncated"),
        ('```json\n{"named_entities": ["A", "B"],', ["A", "B"], "truncated"),  # unclosed fence
    ],
)
def test_entities(text, expected, reason):
    value, ok, why = parse_entities(text)
    assert ok and value == expected and why == reason


@pytest.mark.parametrize(
    "text, expected",
    [
        ('{"triples": [["a", "b", "c"], ["d", "e", "f"]]}', [["a", "b", "c"], ["d", "e", "f"]]),
        # Python-literal style: tuples, single quotes, None/True
        ("{'triples': [('a', 'b', 'c'), ('d', None, True)]}", [["a", "b", "c"], ["d", "None", "True"]]),
        # JSON words inside an otherwise Python-style answer
        ("{'triples': [['a', 'is', true]]} done", [["a", "is", "True"]]),
        # truncated: the complete triples are recovered, the partial one dropped
        ('{"triples": [["a", "b", "c"], ["d", "e"', [["a", "b", "c"]]),
        ('{"triples": [["a", "b", "c"], ["d", "e", "f"], ["g"', [["a", "b", "c"], ["d", "e", "f"]]),
        # wrong-length triples are kept as written (the indexer drops them)
        ('{"triples": [["a", "b"], ["c", "d", "e", "f"], "junk"]}', [["a", "b"], ["c", "d", "e", "f"]]),
        # list not wrapped in an object, numbers as elements
        ('[["Observatory", "founded in", 1893]]', [["Observatory", "founded in", "1893"]]),
        # text before, including brackets that are not JSON
        ('Facts [see below]:\n{"triples": [["x", "y", "z"]]}', [["x", "y", "z"]]),
    ],
)
def test_triples(text, expected):
    value, ok, _ = parse_triples(text)
    assert ok and value == expected


@pytest.mark.parametrize(
    "text, reason",
    [
        ("", "empty"),
        ("   \n", "empty"),
        ("I could not find any entities.", "no_json"),
        ('{"answer": "none", "other": "x"}', "missing_key"),
        ('{"named_entities": "A, B"}', "wrong_type"),
        (None, "not_text"),
        ("__import__('os').system('echo pwned')", "no_json"),  # never evaluated
    ],
)
def test_failures_are_reported_not_raised(text, reason):
    value, ok, why = parse_entities(text)
    assert not ok and value is None and why == reason


def test_empty_lists_are_valid_answers():
    assert parse_triples('{"triples": []}') == ([], True, "json")
    assert parse_entities('{"named_entities": []}') == ([], True, "json")


def test_code_is_never_executed():
    # Function calls are not literals: rejected, not run.
    value, ok, _ = parse_structured("[__import__('os').getcwd()]")
    assert not ok and value is None


def test_deep_nesting_and_huge_input_do_not_raise():
    assert parse_structured("[" * 5000)[1] in (True, False)
    assert parse_structured("{" * 3000 + "}" * 3000)[1] in (True, False)
    value, ok, _ = parse_entities('{"named_entities": ["' + "x" * 300_000 + '"]}')
    assert isinstance(ok, bool)


_alphabet = st.sampled_from(list('{}[]()"\',:\\ \n\tabcxyz019-_.') + ["true", "null", "```", "json", "'''", "Answer:"])


@settings(max_examples=300, deadline=None)
@given(st.text())
def test_fuzz_arbitrary_text_never_raises(text):
    for fn in (parse_structured, parse_entities, parse_triples):
        value, ok, reason = fn(text)
        assert isinstance(ok, bool) and isinstance(reason, str)
        if not ok:
            assert value is None
    # What the list readers return can always be written to a UTF-8 JSON file.
    for fn in (parse_entities, parse_triples):
        value, ok, _ = fn(text)
        if ok:
            json.dumps(value, ensure_ascii=False).encode("utf-8")


def test_lone_surrogates_are_replaced():
    value, ok, _ = parse_entities('{"named_entities": ["a\\ud800b", "\\ud83d\\ude00"]}')
    assert ok and value == ["a\ufffdb", "\U0001F600"]
    json.dumps(value, ensure_ascii=False).encode("utf-8")


@settings(max_examples=300, deadline=None)
@given(st.lists(_alphabet, max_size=60).map("".join))
def test_fuzz_json_like_text_never_raises(text):
    for fn in (parse_structured, parse_entities, parse_triples):
        value, ok, reason = fn(text)
        assert isinstance(ok, bool) and isinstance(reason, str)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.lists(st.text(max_size=12), min_size=3, max_size=3), max_size=6),
    st.integers(min_value=0, max_value=400),
)
def test_fuzz_truncated_answers_keep_only_complete_triples(triples, cut):
    import json

    full = json.dumps({"triples": triples})
    value, ok, _ = parse_triples(full)
    assert ok and value == triples
    value, ok, _ = parse_triples(full[: min(cut, len(full))])
    if ok:
        # Whatever is recovered is a prefix of the real triples, each complete.
        assert value == triples[: len(value)]
