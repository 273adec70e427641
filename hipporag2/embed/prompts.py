"""The text an encoder is given for a query or a passage: one definition for every path.

An instruction-following encoder (NV-Embed-v2, GTE-Qwen2, GritLM) embeds a query with
a task instruction in front of it and a passage, phrase or fact with its own marker
or nothing. The formats are data, in each preset (`embedding.query_format`,
`embedding.passage_format`); this module is the only code that turns them into a
prefix. The in-process encoders, the encoder worker of another environment and the
embeddings server client all call `prefix`, and the embedding cache keys each text
with it, so a model served behind `/v1/embeddings` receives exactly the texts the
same model receives locally (`sent_texts`).

Where the prefix goes differs by model, not by path: sentence-transformers models
read it glued to the text; NV-Embed-v2's and GritLM's own `encode` take it as an
`instruction` argument and leave its tokens out of the pooling, which a generic
embeddings server cannot do (it pools over every token it is sent).
"""
from __future__ import annotations

from typing import List, Optional, Sequence


def prefix(cfg, instruction: Optional[str]) -> str:
    """The text put before each input: the query format with the instruction filled in
    for a query (when the encoder takes instructions), else the passage format."""
    if instruction and cfg.query_format:
        return cfg.query_format.format(instruction=instruction)
    return cfg.passage_format


def sent_texts(cfg, texts: Sequence[str], instruction: Optional[str]) -> List[str]:
    """The exact strings a server (or a sentence-transformers model) is given."""
    p = prefix(cfg, instruction)
    return [p + t for t in texts]
