"""HippoRAG 1 (`retrieval.method=hipporag1`) as the legacy v1 code scores it
(`retrieval.v1_scoring=legacy`, the default), against an oracle written here.

No v1 release of the reference exists on PyPI (`hipporag` has only 2.0.0a2-a4), so the
oracle is our own code, written from the legacy source's semantics
(OSU-NLP-Group/HippoRAG, branch `legacy`, src/hipporag.py `rank_docs`,
`link_node_by_dpr`, `query_ner`; src/create_graph.py): facts are the corpus's triples
with the id of their last occurrence, `docs_to_facts[(doc, fact)] = 1`,
`facts_to_phrases[(fact, phrase)] = 1`, passage score = docs_to_facts . (facts_to_phrases
. ppr) then (x - min) / (max - min) (NaN when all equal), ranked by
`argsort(kind="mergesort")[::-1]`; each query entity normalised like a phrase and linked
to its `argmax` phrase; seeds 1 / (passages of the phrase); no entity -> every passage
1 / N. The oracle runs its own igraph PPR on a graph of the phrases only, as the legacy
builds it.
"""
from __future__ import annotations

import json
import re
from typing import Dict, List, Sequence

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hipporag2.config import GraphConfig, RetrievalConfig
from hipporag2.graph.build import CONTEXT, build_edges, clean_passage, content_of
from hipporag2.graph.store import Index
from hipporag2.retrieve.graph_retriever import (
    GraphRetriever,
    legacy_fact_chain,
    legacy_passage_scores,
    legacy_query_entities,
)
from hipporag2.retrieve.scoring import rank_desc


# ---- the oracle ------------------------------------------------------------------------

def _legacy_phrase(p: str) -> str:
    return re.sub("[^A-Za-z0-9 ]", " ", p.lower()).strip()


def oracle_doc_scores(chunk_triples: Sequence[Sequence[Sequence[str]]], phrase_id: Dict[str, int],
                      ppr: np.ndarray) -> np.ndarray:
    """The legacy chain, with its dicts: fact ids from a dict over all triples (a
    repeated triple keeps its last position), 0/1 entries, sums in float64."""
    lose_facts = [tuple(t) for triples in chunk_triples for t in triples]
    fact_id = {f: i for i, f in enumerate(lose_facts)}
    docs_to_facts, facts_to_phrases = {}, {}
    for d, triples in enumerate(chunk_triples):
        for t in triples:
            f = fact_id[tuple(t)]
            docs_to_facts[(d, f)] = 1
            for ph in (t[0], t[2]):
                facts_to_phrases[(f, phrase_id[ph])] = 1
    fact_prob = np.zeros(len(lose_facts))
    for (f, p), v in facts_to_phrases.items():
        fact_prob[f] += v * ppr[p]
    doc = np.zeros(len(chunk_triples))
    for (d, f), v in docs_to_facts.items():
        doc[d] += v * fact_prob[f]
    with np.errstate(invalid="ignore", divide="ignore"):
        return (doc - doc.min()) / (doc.max() - doc.min())


def oracle_order(scores: np.ndarray) -> List[int]:
    return np.argsort(scores, kind="mergesort")[::-1].tolist()


def oracle_phrase_ppr(index: Index, reset: np.ndarray, damping: float) -> np.ndarray:
    """igraph PPR over the phrase vertices only (the legacy graph has no passage nodes)."""
    import igraph as ig

    e = index.edges
    keep = e.kind != CONTEXT
    g = ig.Graph(index.n_phrases, list(zip(e.source[keep].tolist(), e.target[keep].tolist())))
    g.es["weight"] = e.weight[keep].tolist()
    return np.array(g.personalized_pagerank(vertices=range(index.n_phrases), damping=damping, directed=False,
                                            weights="weight", reset=reset.tolist(), implementation="prpack"))


def oracle_rank(index: Index, chunk_triples, entities: Sequence[str], phrase_emb_of, damping: float):
    """The legacy ranking of one query (entities as the NER returned them)."""
    ents = [_legacy_phrase(e) for e in entities]
    n = index.n_passages
    if not ents:
        scores = np.ones(n) / n
        return oracle_order(scores), scores
    sims = phrase_emb_of(ents) @ np.asarray(index.phrase_emb).T
    reset = np.zeros(index.n_phrases)
    n_docs = [len(p) for p in index.phrase_passages]
    for row in sims:
        j = int(np.argmax(row))
        reset[j] = 1.0 if n_docs[j] == 0 else 1.0 / n_docs[j]
    ppr = oracle_phrase_ppr(index, reset, damping)
    scores = oracle_doc_scores(chunk_triples, index.phrase_index, ppr)
    return oracle_order(scores), scores


# ---- hand-made graphs ------------------------------------------------------------------

def _content_index(passages, triples, emb=None):
    cfg = GraphConfig(synonym_edges=False)
    content = content_of(passages, [clean_passage(t, cfg) for t in triples])
    edges, stats = build_edges(content, None, cfg)
    if emb is None:
        z = np.zeros((0, 4), np.float32)
        pe, fe, ce = z, z, z
    else:
        pe, ce = emb(passages), emb(content.phrases)
        fe = emb([str(f) for f in content.facts]) if content.facts else np.zeros((0, pe.shape[1]), np.float32)
    index = Index(passages, [p.split("\n")[0] for p in passages], list(range(len(passages))), content.phrases,
                  content.facts, content.phrase_passages, edges, stats.as_dict(), pe, ce, fe,
                  passage_facts=content.passage_facts)
    return content, index


def _ours(index: Index, ppr: np.ndarray) -> np.ndarray:
    return legacy_passage_scores(*legacy_fact_chain(index), ppr)


PASSAGES = ["P0\n", "P1\n", "P2\n", "P3\n", "P4\n"]
TRIPLES = [
    [["Alice", "born in", "Paris"], ["Alice", "lives in", "Paris"], ["Alice", "born in", "Paris"]],
    [["Paris", "capital of", "France"], ["Alice!", "born in", "Paris"]],  # normalises onto P0's fact
    [["Bob", "is", "Bob"], ["Bob", "knows", "Alice"]],  # a self-loop fact counts its phrase once
    [["France", "borders", "Spain"]],
    [],
]


def test_fact_chain_on_a_hand_made_corpus():
    content, index = _content_index(PASSAGES, TRIPLES)
    ppr = np.array([2, 3, 5, 7, 11, 13], dtype=float)[: index.n_phrases] / 64
    ours = _ours(index, ppr)
    theirs = oracle_doc_scores(content.chunk_triples, index.phrase_index, ppr)
    assert np.allclose(ours, theirs, atol=1e-15, rtol=0), f"ours {ours}, legacy {theirs}"
    assert rank_desc(ours, len(ours)).tolist() == oracle_order(theirs)
    # the chain differs from the phrase x passage sum: P0 counts alice and paris twice
    # (two distinct facts), P1 counts paris twice as well
    pi = index.phrase_index
    raw0 = 2 * (ppr[pi["alice"]] + ppr[pi["paris"]])
    spec = GraphRetriever.__new__(GraphRetriever)
    spec.index, spec._passage_phrase = index, None
    spec_scores = spec.passage_phrase @ ppr
    assert spec_scores[0] == ppr[pi["alice"]] + ppr[pi["paris"]]
    lo, hi = ours.min(), ours.max()
    assert lo == 0.0 and hi == 1.0
    raw = legacy_fact_chain(index)[0] @ (legacy_fact_chain(index)[1] @ ppr)
    assert raw[0] == raw0


def test_ties_and_the_all_equal_case_give_the_legacy_order():
    content, index = _content_index(["A\n", "B\n", "C\n", "D\n"],
                                    [[["x", "r", "y"]], [["x", "r", "y"]], [["z", "r", "w"]], [["z", "s", "w"]]])
    ppr = np.full(index.n_phrases, 0.25)  # every passage ties
    ours = _ours(index, ppr)
    theirs = oracle_doc_scores(content.chunk_triples, index.phrase_index, ppr)
    assert np.isnan(theirs).all() and (ours == 1.0).all()  # the legacy divides 0 by 0; we give ones
    assert rank_desc(ours, 4).tolist() == oracle_order(theirs) == [3, 2, 1, 0]
    pi = index.phrase_index
    ppr = np.zeros(index.n_phrases)
    ppr[pi["x"]] = ppr[pi["z"]] = 0.5  # A == B, C == D: ties go to the higher index
    ours = _ours(index, ppr)
    theirs = oracle_doc_scores(content.chunk_triples, index.phrase_index, ppr)
    assert rank_desc(ours, 4).tolist() == oracle_order(theirs) == [3, 2, 1, 0]


_word = st.sampled_from(["a", "b", "c", "d", "e", "A!", "b.", " c"])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.tuples(_word, st.sampled_from(["r", "s"]), _word), max_size=4), min_size=1, max_size=6),
       st.data())
def test_fact_chain_matches_the_oracle_on_generated_corpora(triples, data):
    passages = [f"P{i}\n" for i in range(len(triples))]
    content, index = _content_index(passages, [[list(t) for t in ts] for ts in triples])
    if index.n_phrases == 0:
        return
    # dyadic weights: every sum is exact, so ties are exact on both sides
    ppr = np.array(data.draw(st.lists(st.integers(0, 8), min_size=index.n_phrases, max_size=index.n_phrases)),
                   dtype=float) / 16
    ours = _ours(index, ppr)
    theirs = oracle_doc_scores(content.chunk_triples, index.phrase_index, ppr)
    if np.isnan(theirs).all():
        assert (ours == 1.0).all()
    else:
        assert np.array_equal(ours, theirs), f"triples {triples} ppr {ppr}: ours {ours}, legacy {theirs}"
    assert rank_desc(ours, len(ours)).tolist() == oracle_order(theirs), f"triples {triples} ppr {ppr}"


def test_query_entities_are_normalised_like_phrases():
    assert legacy_query_entities(["Oskar Threnody!", "U.S.", "  !!  "]) == ["oskar threnody", "u s", ""]
    assert legacy_query_entities(["A", 3]) == []  # the legacy's normalisation fails on a non-string: no entity


def test_an_index_without_passage_facts_refuses_legacy_scoring():
    _, index = _content_index(PASSAGES, TRIPLES)
    index.passage_facts = None
    with pytest.raises(ValueError, match="passage -> fact"):
        GraphRetriever(index, None, RetrievalConfig(method="hipporag1", linking="query_to_node", passage_nodes=False))


# ---- the retriever end to end, with MiniLM -----------------------------------------------

WORLD = [
    "Oskar Threnody\nOskar Threnody directed The Glass Harbour and was born in Brackmoor.",
    "Brackmoor\nBrackmoor is a town on the river Tessaly.",
    "Ivo Marrick\nIvo Marrick directed The Glass Orchard.",
    "April 20 1947\nOn April 20 1947 a treaty was signed.",
    "Tessaly\nThe Tessaly flows into the northern sea.",
]
WORLD_TRIPLES = [
    [["Oskar Threnody", "directed", "The Glass Harbour"], ["Oskar Threnody", "born in", "Brackmoor"],
     ["The Glass Harbour", "directed by", "Oskar Threnody"]],
    [["Brackmoor", "is on", "river Tessaly"], ["Brackmoor", "is a", "town"]],
    [["Ivo Marrick", "directed", "The Glass Orchard"]],
    [["April 20  1947", "date of", "treaty"], ["April 20 1947", "signing of", "treaty"]],
    [["river Tessaly", "flows into", "northern sea"]],
]
# Entities as a query NER would return them, given as data (the LLM is not under test).
ENTITIES = {
    "Where was the director of The Glass Harbour born?": ["The Glass Harbour!"],
    "What happened on April 20, 1947?": ["April 20, 1947"],
    "What flows into the sea?": [],
    "Who directed the orchard film and where is Brackmoor?": ["Ivo Marrick", "BRACKMOOR", "Ivo Marrick"],
}


@pytest.fixture(scope="module")
def minilm(tmp_path_factory):
    pytest.importorskip("sentence_transformers")
    from hipporag2.cli import compose
    from hipporag2.embed.store import open_store

    cfg = compose(["embedding=minilm", f"cache_dir={tmp_path_factory.mktemp('minilm')}", "run_dir=unused"])
    store = open_store(cfg.cache_dir, cfg.embedding)
    return lambda texts, instruction=None: store.embed(list(texts), instruction=instruction, progress=False), store


def _queries(questions):
    from hipporag2.data.loaders import Query

    return [Query(id=f"q{i}", question=q) for i, q in enumerate(questions)]


def _retriever(index, store, scoring, linking="ner_to_node"):
    cfg = RetrievalConfig(name="hipporag1", method="hipporag1", linking=linking, filter="none", passage_nodes=False,
                          v1_scoring=scoring, retrieval_top_k=index.n_passages)
    seen = []

    def entities(questions):  # the NER's answers, as data
        seen.extend(questions)
        return [list(ENTITIES[q]) for q in questions]

    return GraphRetriever(index, store, cfg, query_ner=entities if linking == "ner_to_node" else None, progress=False)


def test_retriever_ranks_as_the_legacy_on_a_hand_made_world(minilm):
    emb, store = minilm
    content, index = _content_index(WORLD, WORLD_TRIPLES, emb)
    # the two date phrases embed identically (MiniLM ignores the doubled space): a linking tie
    a, b = index.phrase_index["april 20  1947"], index.phrase_index["april 20 1947"]
    assert a < b and np.array_equal(index.phrase_emb[a], index.phrase_emb[b])
    questions = list(ENTITIES)
    results = _retriever(index, store, "legacy").retrieve(_queries(questions))
    for q, res in zip(questions, results):
        order, scores = oracle_rank(index, content.chunk_triples, ENTITIES[q], emb, 0.5)
        finite = np.where(np.isnan(scores), -1, scores)
        for pos, (mine, theirs) in enumerate(zip(res.ranked, order)):
            assert mine == theirs or abs(finite[mine] - finite[theirs]) < 1e-9, (
                f"{q!r}: rank {pos}: ours passage {mine}, legacy {theirs} (ours {res.ranked}, legacy {order})")
        if not ENTITIES[q]:
            assert res.ranked == list(range(len(WORLD)))[::-1]
            assert res.fallback and res.fallback_ranking == "uniform"
        else:
            assert not res.fallback
            assert res.query_entities == [_legacy_phrase(e) for e in ENTITIES[q]]
    # the tie goes to the lower phrase index, as np.argmax gives it
    assert results[1].linked_phrases == ["april 20  1947"]


def test_spec_scoring_is_the_documented_alternative(minilm):
    emb, store = minilm
    content, index = _content_index(WORLD, WORLD_TRIPLES, emb)
    questions = list(ENTITIES)
    legacy = _retriever(index, store, "legacy").retrieve(_queries(questions))
    spec = _retriever(index, store, "spec").retrieve(_queries(questions))
    # no entity: dense fallback instead of the uniform order
    assert spec[2].fallback and spec[2].fallback_ranking == "dense"
    assert spec[2].ranked != legacy[2].ranked
    # entities as returned, ties to the higher phrase index
    assert spec[0].query_entities == ["The Glass Harbour!"]
    assert spec[1].linked_phrases == ["april 20 1947"]
    # scores: min-max of the fact chain vs the raw phrase mass
    assert max(legacy[0].scores) == 1.0 and max(spec[0].scores) < 1.0


# ---- the shared MuSiQue set -------------------------------------------------------------

@pytest.mark.shared_data
def test_legacy_scoring_on_the_shared_set_matches_the_oracle(shared_data, musique_cache):
    """All 100 questions, query-to-node linking (no LLM here for query NER): our
    retriever's top-200 equals the oracle's chain over the legacy's phrase-only PPR,
    up to exact-float near-ties (< 1e-9 apart in the oracle's scores)."""
    from hipporag2.cli import compose
    from hipporag2.embed.store import open_store
    from hipporag2.pipeline import Timings, get_index, load_dataset
    from tests.conftest import MUSIQUE_OPENIE

    cfg = compose(["dataset=musique_train", f"data_dir={shared_data}", f"openie.import_path={MUSIQUE_OPENIE}",
                   "embedding=minilm", f"cache_dir={musique_cache}", "run_dir=unused", "progress=false",
                   "retrieval=hipporag1_query_to_node"])
    corpus, queries = load_dataset(cfg)
    store = open_store(cfg.cache_dir, cfg.embedding)
    index = get_index(cfg, corpus, store, None, {}, Timings())
    assert index.passage_facts is not None and sum(map(len, index.passage_facts)) > 0
    # each passage's triples straight from the OpenIE file (cleaned as the index cleans
    # them), not from the index's passage -> fact table under test
    by_passage = {d["passage"]: d["extracted_triples"] for d in json.loads(MUSIQUE_OPENIE.read_text())["docs"]}
    chunk_triples = content_of(index.passages, [clean_passage(by_passage.get(p, []), cfg.graph) for p in index.passages]).chunk_triples
    retriever = GraphRetriever(index, store, cfg.retrieval, progress=False)
    results = retriever.retrieve(queries)
    differ_from_spec = 0
    for q, res in zip(queries, results):
        seeds = res.seed_phrases
        reset = np.zeros(index.n_phrases)
        for phrase, w in seeds:
            reset[index.phrase_index[phrase]] = w
        ppr = oracle_phrase_ppr(index, reset, cfg.retrieval.damping)
        scores = oracle_doc_scores(chunk_triples, index.phrase_index, ppr)
        order = oracle_order(scores)[: len(res.ranked)]
        for pos, (mine, theirs) in enumerate(zip(res.ranked, order)):
            assert mine == theirs or abs(scores[mine] - scores[theirs]) < 1e-9, (
                f"{q.id}: rank {pos}: ours passage {mine}, legacy {theirs} ({scores[mine]!r} vs {scores[theirs]!r})")
        assert np.allclose(res.scores, scores[res.ranked], atol=1e-9, rtol=0), q.id
        spec_scores = retriever.passage_phrase @ ppr
        differ_from_spec += rank_desc(spec_scores, 5).tolist() != res.ranked[:5]
    # the switch is not cosmetic on real data
    assert differ_from_spec > 0
