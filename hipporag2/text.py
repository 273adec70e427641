"""Identity and normalisation of strings, shared by every stage (SPEC §2)."""
from __future__ import annotations

import hashlib
import re

_NON_ALNUM_SPACE = re.compile(r"[^A-Za-z0-9 ]")
_NON_ALNUM = re.compile(r"[^A-Za-z0-9]")


def md5_id(text: str, prefix: str) -> str:
    return prefix + hashlib.md5(text.encode("utf-8")).hexdigest()


def passage_id(passage: str) -> str:
    return md5_id(passage, "chunk-")


def phrase_id(phrase: str) -> str:
    return md5_id(phrase, "entity-")


def normalise_phrase(text: str) -> str:
    """Lowercase, every char outside [A-Za-z0-9 ] becomes a space, strip the ends.

    Inner runs of spaces are kept on purpose (reference behaviour, SPEC §2).
    """
    return _NON_ALNUM_SPACE.sub(" ", str(text).lower()).strip()


def alnum_len(text: str) -> int:
    return len(_NON_ALNUM.sub("", text))


def fact_string(fact: tuple) -> str:
    """How a fact is embedded: the Python tuple repr of its three strings."""
    return repr(tuple(fact))
