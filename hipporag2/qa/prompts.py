"""One-shot reader prompt (SPEC §5). Own wording; the example is invented.

The model is asked to reason briefly and to end with a line `Answer: ...`; the
prediction is the text after the last `Answer:` marker (see `reader.extract_answer`).
"""
from __future__ import annotations

from typing import Sequence, Tuple

PROMPT_VERSION = "hr2-qa-1"

Messages = Tuple[Tuple[str, str], ...]

SYSTEM = (
    "You answer questions from the passages you are given. Read them, connect the facts "
    "the question needs in one or two short sentences of reasoning, and then write a final "
    "line of the form 'Answer: <answer>' where the answer is as short as possible: a name, "
    "a date, a number or a few words, never a full sentence."
)

EXAMPLE_PASSAGES = (
    ("Harrowgate Observatory",
     "Harrowgate Observatory is an astronomical observatory on Mount Pellan, above the village "
     "of Cray Minster. Its largest instrument, the Corrin Refractor, was built by the Dunmore "
     "Optical Works."),
    ("Dunmore Optical Works",
     "The Dunmore Optical Works was a lens and telescope maker based in the port of Saltbridge. "
     "It was founded in 1861 by the glassmaker Isaak Dunmore and closed in 1934."),
    ("Cray Minster",
     "Cray Minster is a village in the Pellan hills, known for its slate quarries and its "
     "twelfth-century church."),
)
EXAMPLE_QUESTION = "In which town was the maker of the Corrin Refractor based?"
EXAMPLE_ANSWER = (
    "The Corrin Refractor was built by the Dunmore Optical Works, and the Dunmore Optical Works "
    "was based in the port of Saltbridge.\nAnswer: Saltbridge"
)


def format_passages(passages: Sequence[Tuple[str, str]]) -> str:
    return "\n\n".join(f"Passage: {title}\n{text}" for title, text in passages)


def user_message(passages: Sequence[Tuple[str, str]], question: str) -> str:
    return f"{format_passages(passages)}\n\nQuestion: {question}"


def reader_messages(passages: Sequence[Tuple[str, str]], question: str, answer_format: str = "marker") -> Messages:
    if answer_format == "json":
        return (
            ("system", SYSTEM_JSON),
            ("user", user_message(EXAMPLE_PASSAGES, EXAMPLE_QUESTION)),
            ("assistant", EXAMPLE_ANSWER_JSON),
            ("user", user_message(passages, question)),
        )
    return (
        ("system", SYSTEM),
        ("user", user_message(EXAMPLE_PASSAGES, EXAMPLE_QUESTION)),
        ("assistant", EXAMPLE_ANSWER),
        ("user", user_message(passages, question)),
    )


# qa.answer_format=json: the reply is one JSON object, decoded under ANSWER_SCHEMA
# where the backend constrains decoding (a small model then cannot ramble past the
# answer, and every reply is scorable).
SYSTEM_JSON = (
    "You answer questions from the passages you are given. Find the facts the question "
    'needs, chaining them across passages, and reply with one JSON object {"answer": "..."} '
    "whose answer is as short as possible: a name, a date, a number or a few words, never a sentence."
)
EXAMPLE_ANSWER_JSON = '{"answer": "Saltbridge"}'
ANSWER_SCHEMA = (
    '{"type": "object", "properties": {"answer": {"type": "string", "minLength": 1, "maxLength": 60}}, '
    '"required": ["answer"]}'
)
