"""OpenIE replies read as the reference reads them (`openie.parse=reference`), checked
against the reference's own code: `OpenIE.ner` and `OpenIE.triple_extraction` of the
installed wheel (hipporag/information_extraction/openie_openai.py), run on a bare
object whose LLM is a stand-in written here that returns the reply under test with the
finish reason under test ("length" = cut at the token limit). Nothing of the
reference is copied; a failing comparison names the input and the first difference.
"""
from __future__ import annotations

import json
import string
from typing import Any, List, Tuple

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.reference_oracle import load, quiet

from hipporag2.openie.parse import LENIENT_READER
from hipporag2.openie.parse_reference import READER, close_cut_reply, reference_entities, reference_triples
from hipporag2.registry import OPENIE_PARSERS


class _ReplyLLM:
    """Stands in for the reference's LLM client: answers every request with one reply."""

    def __init__(self, reply: str, cut: bool):
        self.reply, self.cut = reply, cut

    def infer(self, messages):
        return self.reply, {"finish_reason": "length" if self.cut else "stop"}, False


class _NoPrompts:
    def render(self, name, **kwargs):
        return []


@pytest.fixture(scope="module")
def ref():
    mods = load("information_extraction.openie_openai", "utils.llm_utils")
    openie_cls = mods["information_extraction.openie_openai"].OpenIE

    def run(step: str, reply: str, cut: bool) -> list:
        obj = openie_cls.__new__(openie_cls)  # no __init__: it would build an OpenAI client
        obj.prompt_template_manager = _NoPrompts()
        obj.llm_model = _ReplyLLM(reply, cut)
        with quiet():
            if step == "ner":
                return obj.ner(chunk_key="c", passage="p").unique_entities
            return obj.triple_extraction(chunk_key="c", passage="p", named_entities=[]).triples

    run.fix = mods["utils.llm_utils"].fix_broken_generated_json
    return run


def _first_difference(a: Any, b: Any) -> str:
    if isinstance(a, list) and isinstance(b, list):
        for i, (x, y) in enumerate(zip(a, b)):
            if x != y or type(x) is not type(y):
                return f"item {i}: ours {x!r}, reference {y!r}"
        return f"length: ours {len(a)}, reference {len(b)}"
    return f"ours {a!r}, reference {b!r}"


def _check(ref, step: str, name: str, reply: str, cut: bool) -> list:
    ours = (reference_entities if step == "ner" else reference_triples)(reply, cut).value
    theirs = ref(step, reply, cut)
    same = ours == theirs and [type(x) for x in ours] == [type(x) for x in theirs]
    assert same, f"{step} reply {name!r} (cut={cut}) {reply!r}: {_first_difference(ours, theirs)}"
    return ours


NER_REPLIES: List[Tuple[str, str, bool]] = [
    ("well formed", '{"named_entities": ["Alan Turing", "Bletchley Park"]}', False),
    ("repeats", '{"named_entities": ["A", "B", "A", "b"]}', False),
    ("code fence", '```json\n{"named_entities": ["A", "B"]}\n```', False),
    ("sentence around", 'Here you go: {"named_entities": ["A"]} Hope it helps.', False),
    ("extra keys after", '{"named_entities": ["A"], "note": "x", "n": 3}', False),
    ("extra keys before", '{"note": [1, 2], "named_entities": ["A"]}', False),
    ("nested in another object", '{"result": {"named_entities": ["A", "B"]}}', False),
    ("two objects", '{"named_entities": ["first"]} {"named_entities": ["second"]}', False),
    ("empty list", '{"named_entities": []}', False),
    ("empty reply", "", False),
    ("empty object", "{}", False),
    ("bare list", '["A", "B"]', False),
    ("single quotes (key not matched)", "{'named_entities': ['A']}", False),
    ("Python literal values", '{"named_entities": [\'A\', "B", True, None, 3]}', False),
    ("JSON null", '{"named_entities": ["A", null]}', False),
    ("JSON true", '{"named_entities": [true]}', False),
    ("numbers", '{"named_entities": [1, 2.5, -3, 1]}', False),
    ("non-string nested list (unhashable)", '{"named_entities": [["A"], "B"]}', False),
    ("tuple element", '{"named_entities": [("A", "B"), "C"]}', False),
    ("bracket inside a string", '{"named_entities": ["a]b", "c"]}', False),
    ("brace inside a string (no match)", '{"named_entities": ["a}b"]}', False),
    ("JSON escapes", '{"named_entities": ["caf\\u00e9", "a\\/b", "tab\\tx", "q\\"uote"]}', False),
    ("raw newline in list", '{"named_entities": [\n  "A",\n  "B"\n]}', False),
    ("space before colon", '{"named_entities"  :  ["A"]}', False),
    ("duplicate key", '{"named_entities": ["A"], "named_entities": ["B"]}', False),
    ("duplicate key, string value", '{"named_entities": ["A"], "named_entities": "xy"}', False),
    ("key only inside a string", '{"k": "\\"named_entities\\": [1]"}', False),
    ("truncated mid-item, cut", '{"named_entities": ["A", "B", "Ca', True),
    ("truncated after an item, cut", '{"named_entities": ["A", "B",', True),
    ("truncated after the key, cut", '{"named_entities": [', True),
    ("truncated in the key, cut", '{"named_ent', True),
    ("truncated, not flagged as cut", '{"named_entities": ["A", "B", "Ca', False),
    ("valid JSON but flagged cut", '{"named_entities": ["A", "B"]}', True),
    ("cut with a comma in a string", '{"named_entities": ["A, B", "C', True),
    ("cut inside a fence", '```json\n{"named_entities": ["A", "B", "C', True),
    ("deeply nested", '{"named_entities": ' + "[" * 3000 + "]" * 3000 + "}", False),
    ("deeply nested and cut", '{"named_entities": ["A", ' + "[" * 3000, True),
    ("U+2028 in a string", '{"named_entities": ["a\u2028b"]}', False),
    ("set literal element (unhashable)", '{"named_entities": [{1}]}', False),
]

TRIPLE_REPLIES: List[Tuple[str, str, bool]] = [
    ("well formed", '{"triples": [["A", "born in", "B"], ["B", "is in", "C"]]}', False),
    ("repeats", '{"triples": [["A", "r", "B"], ["A", "r", "B"], ["a", "r", "B"]]}', False),
    ("2 and 4 elements", '{"triples": [["A", "r"], ["A", "r", "B", "x"], ["A", "r", "B"]]}', False),
    ("non-string elements", '{"triples": [["A", 1, 2.5], [true, null, "B"], ["A", None, True]]}', False),
    ("Python literals", '{"triples": [["A", None, True], ("x", "y", "z")]}', False),
    ("numbers become strings, then repeat", '{"triples": [["1", "r", "2"], [1, "r", 2]]}', False),
    ("a string of length 3 as a triple", '{"triples": ["abc", "ab", ["A", "r", "B"]]}', False),
    ("nested list element", '{"triples": [["A", ["r", "s"], "B"]]}', False),
    ("a number as a triple (no length)", '{"triples": [5, ["A", "r", "B"]]}', False),
    ("dict as a triple", '{"triples": [{"s": 1, "p": 2, "o": 3}]}', False),
    ("code fence", '```json\n{"triples": [["A", "r", "B"]]}\n```', False),
    ("extra keys", '{"triples": [["A", "r", "B"]], "confidence": 0.9}', False),
    ("empty", '{"triples": []}', False),
    ("empty reply", "", False),
    ("bare list", '[["A", "r", "B"]]', False),
    ("bracket in a string", '{"triples": [["A]", "r", "B"]]}', False),
    ("truncated mid-triple, cut", '{"triples": [["A", "r", "B"], ["C", "s", "D"], ["E", "t', True),
    ("truncated after a triple, cut", '{"triples": [["A", "r", "B"], ["C", "s", "D"]', True),
    ("truncated inside the first triple, cut", '{"triples": [["A", "r", "B', True),
    ("truncated, not flagged as cut", '{"triples": [["A", "r", "B"], ["C", "s', False),
    ("valid but flagged cut", '{"triples": [["A", "r", "B"]]}', True),
    ("two objects", '{"triples": [["A", "r", "B"]]}\n{"triples": [["C", "s", "D"]]}', False),
    ("JSON escapes", '{"triples": [["caf\\u00e9", "a\\/b", "x\\ny"]]}', False),
    ("single quotes", "{'triples': [['A', 'r', 'B']]}", False),
    ("unicode", '{"triples": [["Łódź", "is in", "Polska"]]}', False),
]

# Where Python's eval (the reference) and ast.literal_eval (ours) read differently: an
# expression that is not a literal. The reference computes it; we read nothing.
EXPRESSIONS: List[Tuple[str, str, str]] = [
    ("string concatenation", "ner", '{"named_entities": ["a" + "b"]}'),
    ("repetition", "ner", '{"named_entities": ["ab" * 2]}'),
    ("subscript", "ner", '{"named_entities": [["A"]][0]}'),
    ("arithmetic", "triples", '{"triples": [["A", "r", 1 + 1]]}'),
]


@pytest.mark.parametrize("name,reply,cut", NER_REPLIES, ids=[c[0] for c in NER_REPLIES])
def test_ner_replies_read_as_the_reference_reads_them(ref, name, reply, cut):
    _check(ref, "ner", name, reply, cut)


@pytest.mark.parametrize("name,reply,cut", TRIPLE_REPLIES, ids=[c[0] for c in TRIPLE_REPLIES])
def test_triple_replies_read_as_the_reference_reads_them(ref, name, reply, cut):
    _check(ref, "triples", name, reply, cut)


def test_the_corpus_covers_the_shapes_that_matter(ref):
    """The corpus is not vacuous: it has replies the reference reads into something,
    replies it reads into nothing, repaired cuts, and non-string elements kept."""
    ner = {name: _check(ref, "ner", name, reply, cut) for name, reply, cut in NER_REPLIES}
    tri = {name: _check(ref, "triples", name, reply, cut) for name, reply, cut in TRIPLE_REPLIES}
    assert ner["repeats"] == ["A", "B", "b"]
    assert ner["truncated mid-item, cut"] == ["A", "B"]
    assert ner["truncated, not flagged as cut"] == []
    assert ner["numbers"] == [1, 2.5, -3]
    assert ner["JSON null"] == [] and ner["bare list"] == [] and ner["single quotes (key not matched)"] == []
    assert ner["nested in another object"] == ["A", "B"] and ner["two objects"] == ["first"]
    assert tri["non-string elements"] == []  # JSON true/null are unknown names to Python
    assert tri["Python literals"] == [["A", "None", "True"], ["x", "y", "z"]]
    assert tri["truncated mid-triple, cut"] == [["A", "r", "B"], ["C", "s", "D"]]
    assert tri["a string of length 3 as a triple"] == [["a", "b", "c"], ["A", "r", "B"]]


@pytest.mark.parametrize("name,step,reply", EXPRESSIONS, ids=[c[0] for c in EXPRESSIONS])
def test_where_eval_and_literal_eval_differ(ref, name, step, reply):
    """The documented difference (hipporag2/openie/parse_reference.py): a matched object
    that is an expression, not a literal. The reference's eval computes it; ours reads
    nothing and says so."""
    theirs = ref(step, reply, False)
    ours = (reference_entities if step == "ner" else reference_triples)(reply, False)
    assert theirs, f"{name}: the reference read nothing from {reply!r}, so this is no longer a difference"
    assert ours.value == [] and not ours.ok and ours.reason == "unreadable"


@pytest.mark.parametrize("text", [
    '{"a": [1, 2', '{"a": [1, 2]', '[[1, 2], [3', '{"a": "x, y', '{"a": "q\\"', "no brackets, here",
    '{"a": [1]}', "", "{", '{"a": ["]", "}"', '{"a": [1, 2]]]',
])
def test_closing_a_cut_reply_as_the_reference_does(ref, text):
    assert close_cut_reply(text) == ref.fix(text), f"close_cut_reply({text!r})"


# --- hypothesis: generated replies of every shape --------------------------------------
# No parentheses anywhere in generated text: the reference evaluates matched text with
# eval, and without parentheses no generated text can call anything.
_SAFE = "".join(c for c in string.printable if c not in "()\x0b\x0c") + "éŁ\u2028"
_item = st.one_of(
    st.text(alphabet=_SAFE, max_size=12).map(json.dumps),  # JSON string, any content
    st.text(alphabet=string.ascii_letters + " ", max_size=8).map(repr),  # Python string
    st.integers(-50, 50).map(str),
    st.sampled_from(["null", "true", "None", "True", "1.5", '""', "[]", '["x"]']),
)
_triple = st.lists(_item, min_size=0, max_size=4).map(lambda xs: "[" + ", ".join(xs) + "]")


@st.composite
def _reply(draw, key: str, element):
    items = draw(st.lists(element, max_size=6))
    body = "{" + draw(st.sampled_from(["", '"note": 1, '])) + json.dumps(key) + draw(st.sampled_from([": ", ":", " : "]))
    body += "[" + draw(st.sampled_from([", ", ",", ",\n "])).join(items) + "]"
    body += draw(st.sampled_from(["", ', "x": "y"'])) + "}"
    wrap = draw(st.sampled_from(["{}", "```json\n{}\n```", "Answer: {} done", "{}\n{}"]))
    text = wrap.replace("{}", body, 1).replace("{}", body, 1) if wrap == "{}\n{}" else wrap.replace("{}", body)
    cut = draw(st.booleans())
    if cut and text:
        text = text[: draw(st.integers(0, len(text)))]
    noise = draw(st.text(alphabet="[]{},\" abc", max_size=6))
    return text + (noise if draw(st.booleans()) else ""), cut


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_reply("named_entities", _item))
def test_generated_ner_replies(ref, case):
    reply, cut = case
    _check(ref, "ner", "generated", reply, cut)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(_reply("triples", _triple))
def test_generated_triple_replies(ref, case):
    reply, cut = case
    _check(ref, "triples", "generated", reply, cut)


def test_openie_parse_choices_are_registered():
    assert OPENIE_PARSERS.load("reference") is READER
    assert OPENIE_PARSERS.load("lenient") is LENIENT_READER
    # the two readers really differ where the brief says they do
    reply = '```json\n{"named_entities": ["A", "B", "C'  # fenced and cut
    assert READER.entities(reply, True).value == ["A", "B"]
    assert LENIENT_READER.entities(reply, True).value == ["A", "B"]
    assert READER.entities("{'named_entities': ['A']}", False).value == []
    assert LENIENT_READER.entities("{'named_entities': ['A']}", False).value == ["A"]


def test_a_reply_that_used_its_whole_limit_is_read_as_cut(ref):
    """The reference closes a reply only when its client says finish_reason "length";
    ours decides from the reply's output token count against the request's limit."""
    from hipporag2.llm.base import ChatResponse
    from hipporag2.openie.extract import reply_is_cut

    reply = '{"named_entities": ["A", "B", "Ca'
    full = ChatResponse(reply, input_tokens=10, output_tokens=12, cached=False)
    short = ChatResponse(reply, input_tokens=10, output_tokens=11, cached=False)
    assert reply_is_cut(full, 12) and not reply_is_cut(short, 12) and not reply_is_cut(full, None)
    assert READER.entities(full.text, reply_is_cut(full, 12)).value == ref("ner", reply, True) == ["A", "B"]
    assert READER.entities(short.text, reply_is_cut(short, 12)).value == ref("ner", reply, False) == []
