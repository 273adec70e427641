"""One-shot reader prompt (SPEC §5), of the source `llm.prompts` names (`ReaderPrompt`).

`reference`: the authors' `rag_qa_{dataset}` template from the installed reference
wheel, the MuSiQue one (`rag_qa_musique`) where the wheel has none for the dataset (as
the reference falls back); its user turn is built as the reference builds it: each
retrieved passage string (`title\ntext`) after `Wikipedia Title: ` and followed by a
blank line, then `Question: `, the question and the cue `\nThought: `. The answer is
read after the first `Answer:` (`qa.answer_marker=reference`, hipporag2/qa/reader.py).

`own` (below): our wording; the example is invented. The structure is the reference's: system, one worked example (user turn, assistant
turn), then the question; a user turn is the `qa_top_k` retrieved passages, best
first, each introduced by a label line with its title and followed by a blank line,
then `Question: ...` and, on the next line, a cue after which the reply begins. The
model reasons briefly and ends with `Answer: ...` (which marker counts: `qa.answer_marker`,
hipporag2/qa/reader.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, Optional, Sequence, Tuple, Union

from hipporag2.llm.reference_templates import ChatTemplate, ReferenceTemplates

PROMPT_VERSION = "hr2-qa-2"

Messages = Tuple[Tuple[str, str], ...]

SYSTEM = (
    "You answer questions from the passages you are given. Your reply starts after "
    "'Reasoning: ': connect the facts the question needs in one or two short sentences, "
    "and then write a final "
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


CUE = "Reasoning: "


def format_passages(passages: Sequence[Tuple[str, str]]) -> str:
    return "".join(f"Passage: {title}\n{text}\n\n" for title, text in passages)


def user_message(passages: Sequence[Tuple[str, str]], question: str) -> str:
    return f"{format_passages(passages)}Question: {question}\n{CUE}"


def reader_messages(passages: Sequence[Tuple[str, str]], question: str, answer_format: str = "marker") -> Messages:
    if answer_format == "json":
        return (
            ("system", SYSTEM_JSON),
            ("user", user_message_json(EXAMPLE_PASSAGES, EXAMPLE_QUESTION)),
            ("assistant", EXAMPLE_ANSWER_JSON),
            ("user", user_message_json(passages, question)),
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


def user_message_json(passages: Sequence[Tuple[str, str]], question: str) -> str:
    """Passages and question, no reasoning cue: the JSON reply starts at once."""
    return "\n\n".join(f"Passage: {title}\n{text}" for title, text in passages) + f"\n\nQuestion: {question}"
ANSWER_SCHEMA = (
    '{"type": "object", "properties": {"answer": {"type": "string", "minLength": 1, "maxLength": 60}}, '
    '"required": ["answer"]}'
)


# --- the prompt source of a run (`llm.prompts`) ----------------------------------------

# A retrieved passage: its string (`title\ntext`, the reference's document) or (title, text).
Context = Union[str, Tuple[str, str]]

FALLBACK_DATASET = "musique"


def _as_string(passage: Context) -> str:
    return passage if isinstance(passage, str) else f"{passage[0]}\n{passage[1]}"


def _as_pair(passage: Context) -> Tuple[str, str]:
    if not isinstance(passage, str):
        return tuple(passage)  # type: ignore[return-value]
    title, sep, text = passage.partition("\n")
    return (title, text) if sep else ("", passage)


def reference_user_message(passages: Sequence[Context], question: str) -> str:
    """The reader's user turn as the reference's `HippoRAG.qa` builds it."""
    return "".join(f"Wikipedia Title: {_as_string(p)}\n\n" for p in passages) + "Question: " + question + "\nThought: "


@dataclass(frozen=True)
class ReaderPrompt:
    """The reader's messages of one prompt source (`reference`: one template)."""

    source: str = "own"
    template: Optional[ChatTemplate] = None
    # The template the dataset asked for (`rag_qa_{dataset}`); `template` is the
    # MuSiQue one when the wheel has none of that name.
    requested: str = ""

    def messages(self, passages: Sequence[Context], question: str, answer_format: str = "marker") -> Messages:
        if self.template is None:
            return reader_messages([_as_pair(p) for p in passages], question, answer_format)
        return self.template.render(prompt_user=reference_user_message(passages, question))

    def describe(self) -> Dict[str, Any]:
        """What metrics.json records about the reader's prompt."""
        if self.template is None:
            return {"source": self.source, "version": PROMPT_VERSION}
        return {"source": self.source, "template": self.template.name, "requested": self.requested,
                "templates": {self.template.name: self.template.sha256}}


def reader_prompt(source: str, dataset: Any) -> ReaderPrompt:
    """The reader prompt `llm.prompts` names for `dataset` (the reference's
    `global_config.dataset`: our `dataset.name`)."""
    from hipporag2.registry import PROMPT_SOURCES

    PROMPT_SOURCES.check(source)
    if source != "reference":
        return ReaderPrompt(source)
    templates = ReferenceTemplates.installed()
    requested = f"rag_qa_{dataset}"
    name = requested if templates.has(requested) else f"rag_qa_{FALLBACK_DATASET}"
    return ReaderPrompt(source, templates.get(name), requested)
