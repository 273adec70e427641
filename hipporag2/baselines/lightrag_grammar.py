"""A decoding grammar for LightRAG's delimited extraction records, for small models.

LightRAG's default (text-mode) extraction asks for one record per line, its fields
separated by a tuple delimiter, and a completion delimiter at the end; its parser drops
any line that is not such a record. A 135M model does not write that format unaided,
so with `llm.constrained_decoding=true` the loopback endpoint decodes every extraction
request under this grammar (`endpoint.GrammarRule`). The record prefixes, delimiters
and entity types are not written here: they come from the installed LightRAG's own
prompts at run time (`lightrag_driver.py describe`). The grammar is bounded (rows and
characters per field) so that CPU decoding ends quickly.
"""
from __future__ import annotations

import json
from typing import Dict, Sequence


def _lit(text: str) -> str:
    """An EBNF string literal (JSON escaping is valid in xgrammar's dialect)."""
    return json.dumps(text)


def extraction_grammar(fmt: Dict[str, object], max_records: int, text_chars: int) -> str:
    """EBNF (root `root`): 1..max_records entity rows, then 0..max_records relation
    rows, then the completion delimiter. `fmt` is the driver's `describe` output.

    A field holds no newline and none of the characters that start or fill a delimiter
    (`<`, `|`), so no field can end a record early; a name starts with a letter or digit
    (LightRAG drops names that are empty after cleaning), a type is one of LightRAG's."""
    d = _lit(str(fmt["tuple_delimiter"]))
    types: Sequence[str] = list(fmt["entity_types"]) or ["Other"]  # type: ignore[arg-type]
    n, m = int(max_records), int(text_chars)
    return "\n".join([
        f"root ::= entity{{1,{n}}} relation{{0,{n}}} {_lit(str(fmt['completion_delimiter']))}",
        f"entity ::= {_lit(str(fmt['entity_prefix']))} {d} name {d} etype {d} text \"\\n\"",
        f"relation ::= {_lit(str(fmt['relation_prefix']))} {d} name {d} name {d} keywords {d} text \"\\n\"",
        f"name ::= [A-Za-z0-9] [^\\n<|]{{0,{min(m, 60) - 1}}}",
        "etype ::= " + " | ".join(_lit(t) for t in types),
        f"keywords ::= [a-z] [a-z ,]{{0,{min(m, 60) - 1}}}",
        f"text ::= [A-Za-z0-9] [^\\n<|]{{0,{m - 1}}}",
    ]) + "\n"


def sample_records(fmt: Dict[str, object]) -> str:
    """A reply in the grammar's language (two entities, one relation), for checking that
    LightRAG's parser reads what the grammar allows."""
    d, types = str(fmt["tuple_delimiter"]), list(fmt["entity_types"])  # type: ignore[arg-type]
    return (f"{fmt['entity_prefix']}{d}Velmora{d}{types[0]}{d}Velmora is an island kingdom.\n"
            f"{fmt['entity_prefix']}{d}Istrenne{d}{types[-1]}{d}Istrenne is the capital of Velmora.\n"
            f"{fmt['relation_prefix']}{d}Velmora{d}Istrenne{d}capital, kingdom{d}Istrenne is the capital of Velmora.\n"
            f"{fmt['completion_delimiter']}")
