"""The chat messages of one filter request, as the reference implementation sends them:
the program's system message; each demo as a user turn (question and candidates under
DSPy's field headers) and an assistant turn (its kept facts); then the question as a
user turn, with the candidates as `json.dumps({"fact": [[s, p, o], ...]})`.

The protocol text around the values belongs to DSPy's chat format, so it is not written
here: `ChatTemplate.from_dspy` has DSPy's own `ChatAdapter` format both turns around
sentinel values at run time and keeps the text around them (less the newline that
ends DSPy's assistant turn and not the reference's).
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import List, Optional, Sequence, Tuple

from hipporag2.retrieve.filter_program import INPUT_FIELDS, OUTPUT_FIELD, FilterProgram, ProgramError

# Sentinels that no formatter rewrites: private-use characters, no edge whitespace.
_SENTINEL = {name: f"\ue000{i}\ue001" for i, name in enumerate((*INPUT_FIELDS, OUTPUT_FIELD))}


@dataclass(frozen=True)
class ChatTemplate:
    """The protocol text around the values of a user and an assistant turn."""

    user_parts: Tuple[str, str, str]  # before the question, between the inputs, after the facts
    assistant_parts: Tuple[str, str]  # before the kept facts, after them
    source: str  # where the text came from, e.g. "dspy 3.4.1 ChatAdapter"

    def user(self, question: str, facts: str) -> str:
        a, b, c = self.user_parts
        return f"{a}{question}{b}{facts}{c}"

    def assistant(self, facts: str) -> str:
        a, b = self.assistant_parts
        return f"{a}{facts}{b}"

    @classmethod
    def from_dspy(cls) -> "ChatTemplate":
        try:
            import dspy
        except ImportError:
            raise ProgramError(
                "the LLM filter renders DSPy's chat format, and DSPy is not installed: "
                "pip install 'hipporag2[dspy]' (make setup does)"
            ) from None
        adapter = dspy.ChatAdapter()
        sig = filter_signature()
        user = adapter.format_user_message_content(
            sig, {k: _SENTINEL[k] for k in INPUT_FIELDS}, main_request=True
        )
        assistant = adapter.format_assistant_message_content(sig, {OUTPUT_FIELD: _SENTINEL[OUTPUT_FIELD]})
        source = f"dspy {dspy.__version__} ChatAdapter"
        user_parts = _split(user, [_SENTINEL[k] for k in INPUT_FIELDS], source)
        a, b = _split(assistant, [_SENTINEL[OUTPUT_FIELD]], source)
        return cls(user_parts=tuple(user_parts), assistant_parts=(a, b.removesuffix("\n")), source=source)


def _split(text: str, sentinels: Sequence[str], source: str) -> List[str]:
    parts, rest = [], text
    for s in sentinels:
        if rest.count(s) != 1:
            raise ProgramError(f"{source}: unexpected chat format (a field value is not copied once): {text!r}")
        before, rest = rest.split(s)
        parts.append(before)
    return parts + [rest]


def filter_signature():
    """The filter as the reference declares it to DSPy: two string inputs and an output
    of type `Fact` (a pydantic model of `{"fact": [[s, p, o], ...]}`).

    The output type matters for its name, which DSPy prints in the per-turn reminder.
    The reference sends that reminder with every program it loads (its own program
    was tuned with this signature), so ours does too, whatever type a program's
    system message declares.
    """
    import dspy

    from hipporag2.retrieve.filter_parse import Fact

    fields = {
        "question": (str, dspy.InputField()),
        "fact_before_filter": (str, dspy.InputField()),
        OUTPUT_FIELD: (Fact, dspy.OutputField()),
    }
    return dspy.make_signature(fields, "Keep the candidate facts that help answer the question.", signature_name="FactFilter")


def facts_json(facts: Sequence[Sequence[str]]) -> str:
    """Candidates as the reference writes them: `json.dumps({"fact": [[s, p, o], ...]})`."""
    return json.dumps({"fact": [list(f) for f in facts]})


def build_messages(program: FilterProgram, question: str, candidates: Sequence[Sequence[str]],
                   template: Optional[ChatTemplate] = None) -> Tuple[Tuple[str, str], ...]:
    """The request's messages; the template is DSPy's chat format unless given."""
    template = template or ChatTemplate.from_dspy()
    msgs: List[Tuple[str, str]] = [("system", program.system)]
    for demo in program.demos:
        msgs.append(("user", template.user(demo["question"], demo["fact_before_filter"])))
        msgs.append(("assistant", template.assistant(demo["fact_after_filter"])))
    msgs.append(("user", template.user(question, facts_json(candidates))))
    return tuple(msgs)
