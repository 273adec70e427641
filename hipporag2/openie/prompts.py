"""One-shot OpenIE prompts (SPEC §6): NER, then triples conditioned on the NER list;
and the query NER of HippoRAG v1 linking. Two sources (`llm.prompts`, `OpenIEPrompts`):

- `reference`: the authors' templates `ner`, `triple_extraction` and `ner_query`, read
  from the installed reference wheel (hipporag2/llm/reference_templates.py) and filled
  as the reference fills them: NER with the passage string (`title\ntext`), triples with
  the passage and `json.dumps({"named_entities": entities})` (default separators, ASCII
  escapes; the entities as the NER reply was read, repeats dropped, elements kept as
  written), query NER with the question. The templates' sha256 enter the OpenIE cache
  key and metrics.json.
- `own`: the wording and the worked example (an invented observatory) below, answers
  as JSON objects `{"named_entities": [...]}` and `{"triples": [[s, p, o], ...]}`.
  Changing any of its text changes what the model is asked, so `PROMPT_VERSION` must
  be bumped with it: it is part of the OpenIE cache key, and a stale extraction file is
  never reused for a different prompt.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Dict, Optional, Sequence, Tuple

from hipporag2.llm.reference_templates import ReferenceTemplates

PROMPT_VERSION = "hr2-openie-1"

Messages = Tuple[Tuple[str, str], ...]


def _compact(obj) -> str:
    return json.dumps(obj, ensure_ascii=False)


# --- the worked example (invented; not from any dataset) ------------------------------

EXAMPLE_PASSAGE = (
    "Harrowgate Observatory\n"
    "Harrowgate Observatory is an astronomical observatory on Mount Pellan, above the "
    "village of Cray Minster. It was founded in 1893 by the astronomer Lucinda Varrow "
    "and is run today by the University of Easthaven. Its largest instrument, the "
    "Corrin Refractor, was built by the Dunmore Optical Works."
)

EXAMPLE_ENTITIES = [
    "Harrowgate Observatory",
    "Mount Pellan",
    "Cray Minster",
    "1893",
    "Lucinda Varrow",
    "University of Easthaven",
    "Corrin Refractor",
    "Dunmore Optical Works",
]

EXAMPLE_TRIPLES = [
    ["Harrowgate Observatory", "is", "astronomical observatory"],
    ["Harrowgate Observatory", "located on", "Mount Pellan"],
    ["Mount Pellan", "rises above", "Cray Minster"],
    ["Harrowgate Observatory", "founded in", "1893"],
    ["Harrowgate Observatory", "founded by", "Lucinda Varrow"],
    ["Lucinda Varrow", "occupation", "astronomer"],
    ["Harrowgate Observatory", "run by", "University of Easthaven"],
    ["Harrowgate Observatory", "largest instrument", "Corrin Refractor"],
    ["Corrin Refractor", "built by", "Dunmore Optical Works"],
]

# --- NER ------------------------------------------------------------------------------

NER_SYSTEM = (
    "You find the named entities in a paragraph: people, places, organisations, works, "
    "events, dates, numbers and other specific names that the paragraph mentions. "
    "Copy each entity as it is written, list each one once, and add nothing that is not "
    'in the paragraph. Reply with one JSON object only: {"named_entities": [...]}.'
)


def _passage_block(passage: str) -> str:
    return f"Paragraph:\n\"\"\"\n{passage}\n\"\"\""


def ner_messages(passage: str) -> Messages:
    return (
        ("system", NER_SYSTEM),
        ("user", _passage_block(EXAMPLE_PASSAGE)),
        ("assistant", _compact({"named_entities": EXAMPLE_ENTITIES})),
        ("user", _passage_block(passage)),
    )


# --- triples --------------------------------------------------------------------------

TRIPLE_SYSTEM = (
    "You turn a paragraph into a small knowledge graph. Write down every fact the "
    "paragraph states as a [subject, relation, object] triple. Subjects and objects "
    "should be the given named entities wherever possible; write each person, place "
    "or thing by its full name instead of a pronoun, and keep relations short. "
    'Reply with one JSON object only: {"triples": [[subject, relation, object], ...]}.'
)


def _triple_user(passage: str, entities: Sequence[str]) -> str:
    return _passage_block(passage) + "\n\nNamed entities: " + _compact({"named_entities": list(entities)})


def triple_messages(passage: str, entities: Sequence[str]) -> Messages:
    return (
        ("system", TRIPLE_SYSTEM),
        ("user", _triple_user(EXAMPLE_PASSAGE, EXAMPLE_ENTITIES)),
        ("assistant", _compact({"triples": EXAMPLE_TRIPLES})),
        ("user", _triple_user(passage, entities)),
    )


# --- query NER (HippoRAG v1 linking, SPEC §4) -----------------------------------------

QUERY_NER_SYSTEM = (
    "You find the named entities in a question: the specific people, places, "
    "organisations, works, dates and other names it asks about. Copy them as written. "
    'Reply with one JSON object only: {"named_entities": [...]}.'
)

EXAMPLE_QUESTION = "Which university runs the observatory that Lucinda Varrow founded on Mount Pellan?"
EXAMPLE_QUESTION_ENTITIES = ["Lucinda Varrow", "Mount Pellan"]


def query_ner_messages(question: str) -> Messages:
    return (
        ("system", QUERY_NER_SYSTEM),
        ("user", f"Question: {EXAMPLE_QUESTION}"),
        ("assistant", _compact({"named_entities": EXAMPLE_QUESTION_ENTITIES})),
        ("user", f"Question: {question}"),
    )


# --- the prompt source of a run (`llm.prompts`) ----------------------------------------

NER_TEMPLATE = "ner"
TRIPLE_TEMPLATE = "triple_extraction"
QUERY_NER_TEMPLATE = "ner_query"


def reference_entity_json(entities: Sequence[Any]) -> str:
    """The NER result as the reference's triple prompt carries it. Elements that JSON
    cannot hold (a set or bytes read from a reply) make the reference's request fail;
    here they are left out, and the rest is sent."""
    try:
        return json.dumps({"named_entities": list(entities)})
    except (TypeError, ValueError):
        return json.dumps({"named_entities": [e for e in entities if isinstance(e, (str, int, float, bool)) or e is None]})


@dataclass(frozen=True)
class OpenIEPrompts:
    """The NER, triple and query-NER messages of one prompt source."""

    source: str = "own"
    templates: Optional[ReferenceTemplates] = None

    def ner(self, passage: str) -> Messages:
        if self.templates is None:
            return ner_messages(passage)
        return self.templates.render(NER_TEMPLATE, passage=passage)

    def triples(self, passage: str, entities: Sequence[Any]) -> Messages:
        if self.templates is None:
            return triple_messages(passage, [e for e in entities if isinstance(e, str)])
        return self.templates.render(TRIPLE_TEMPLATE, passage=passage, named_entity_json=reference_entity_json(entities))

    def query_ner(self, question: str) -> Messages:
        if self.templates is None:
            return query_ner_messages(question)
        return self.templates.render(QUERY_NER_TEMPLATE, query=question)

    def describe(self, *names: str) -> Dict[str, Any]:
        """What metrics.json records: the source, and each named template's sha256
        (reference) or our PROMPT_VERSION (own)."""
        if self.templates is None:
            return {"source": self.source, "version": PROMPT_VERSION}
        return {"source": self.source, "templates": self.templates.hashes(names)}

    def extraction_key_part(self) -> Any:
        """The OpenIE cache key's prompt entry (own: PROMPT_VERSION, as older keys have it)."""
        if self.templates is None:
            return PROMPT_VERSION
        return self.describe(NER_TEMPLATE, TRIPLE_TEMPLATE)


def openie_prompts(source: str) -> OpenIEPrompts:
    """The prompts `llm.prompts` names (hipporag2.registry.PROMPT_SOURCES)."""
    from hipporag2.registry import PROMPT_SOURCES

    PROMPT_SOURCES.check(source)
    if source == "reference":
        return OpenIEPrompts("reference", ReferenceTemplates.installed())
    return OpenIEPrompts(source)


# --- JSON schemas for constrained decoding (used only when llm.constrained_decoding) ---
# Tight bounds keep a small model's answers short and well formed: at most
# MAX_ENTITIES entities and MAX_TRIPLES triples, each triple exactly three non-empty
# strings, no string longer than MAX_STRING characters. A backend that ignores a
# keyword (e.g. maxLength) still gets valid JSON of the same shape.
MAX_ENTITIES = 10
MAX_TRIPLES = 8
MAX_STRING = 48

_STRING = {"type": "string", "minLength": 1, "maxLength": MAX_STRING}

NER_SCHEMA = json.dumps(
    {
        "type": "object",
        "properties": {"named_entities": {"type": "array", "items": _STRING, "maxItems": MAX_ENTITIES}},
        "required": ["named_entities"],
        "additionalProperties": False,
    },
    sort_keys=True,
)

TRIPLE_SCHEMA = json.dumps(
    {
        "type": "object",
        "properties": {
            "triples": {
                "type": "array",
                "items": {"type": "array", "items": _STRING, "minItems": 3, "maxItems": 3},
                "maxItems": MAX_TRIPLES,
            }
        },
        "required": ["triples"],
        "additionalProperties": False,
    },
    sort_keys=True,
)
