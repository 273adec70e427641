"""Incremental index updates (`graph/update.py`, `graph/build.extend_content`, the
insert path of `indexing.assemble_index`) against from-scratch builds, pair for pair
and bit for bit, on random corpora with many near-duplicate phrases (dense synonym
lists that hit `max_neighbours`), deletions that empty cut lists, and short phrases
that are neighbours but not queries."""
import numpy as np
import pytest

from benchmarks.bench_insert import TableStore
from hipporag2.config import GraphConfig
from hipporag2.graph.build import clean_passage, content_of, extend_content
from hipporag2.graph.synonyms import synonym_arrays
from hipporag2.graph.update import update_synonyms
from hipporag2.indexing import Previous, assemble_index
from hipporag2.openie.interchange import Extraction
from hipporag2.text import fact_string, passage_id


def clustered(n, dim, seed, clusters=6):
    rng = np.random.default_rng(seed)
    centres = rng.normal(size=(clusters, dim))
    x = centres[rng.integers(0, clusters, n)] + 0.35 * rng.normal(size=(n, dim))
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def names(n, rng):
    # some of 2 characters (neighbours, never queries), one empty phrase
    out = {f"{rng.integers(0, 10**9):09d} p" if i % 7 else f"{i % 90:02d}" for i in range(n)}
    return sorted(out | {""})


CFG = GraphConfig(synonymy_edge_sim_threshold=0.6, synonymy_edge_max_neighbours=5, synonymy_edge_topk=12, knn_block_size=7)


def _args(cfg):
    return dict(threshold=cfg.synonymy_edge_sim_threshold, top_k=cfg.synonymy_edge_topk,
                max_neighbours=cfg.synonymy_edge_max_neighbours, block_size=cfg.knn_block_size)


def _equal(a, b):
    return all(np.array_equal(np.asarray(x), np.asarray(y)) for x, y in zip(a, b))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_update_synonyms_equals_a_full_search(seed):
    rng = np.random.default_rng(seed)
    phrases = names(300, rng)
    table = dict(zip(phrases, clustered(len(phrases), 16, seed)))
    old = [p for p in phrases if rng.random() < 0.8]
    old_pairs = synonym_arrays(old, np.stack([table[p] for p in old]), **_args(CFG))
    # insert (new phrases), delete (some old ones), and both at once
    for new in (phrases, [p for p in old if rng.random() < 0.7], [p for p in phrases if rng.random() < 0.85]):
        emb = np.stack([table[p] for p in new])
        got, stats = update_synonyms(old, old_pairs, new, emb, CFG)
        assert not stats.recomputed_all and stats.searched_rows < len(new)
        assert _equal(got, synonym_arrays(new, emb, **_args(CFG)))
    assert (np.bincount(np.asarray(old_pairs[0])) == CFG.synonymy_edge_max_neighbours).any()  # some lists were cut


def _corpus(seed, n_pass=60, n_phr=150):
    rng = np.random.default_rng(seed)
    phrases = names(n_phr, rng)
    table = dict(zip(phrases, clustered(len(phrases), 16, seed)))
    passages = [f"t{i}\ntext {i}" for i in range(n_pass)]
    extractions = {}
    for p in passages:
        k = int(rng.integers(0, 6))  # some passages without triples
        trip = [[phrases[int(a)], "r", phrases[int(b)]] for a, b in rng.integers(0, len(phrases), size=(k, 2))]
        if k and rng.random() < 0.3:
            trip.append(list(trip[0]))  # a duplicate triple
        extractions[passage_id(p)] = Extraction(passage=p, triples=trip)
    zero = np.zeros(16, np.float32)
    for ex in extractions.values():
        table.setdefault(ex.passage, rng.normal(size=16).astype(np.float32))
        for s, r, o in ex.triples:
            table.setdefault(fact_string((s, r, o)), zero)
    return passages, extractions, TableStore(table, 16)


def test_extend_content_equals_content_of():
    passages, extractions, _ = _corpus(3)
    cleaned = [clean_passage(extractions[passage_id(p)].triples, CFG) for p in passages]
    old = content_of(passages[:40], cleaned[:40])
    old.query_mask()
    from hipporag2.graph.build import passage_phrase_pairs

    passage_phrase_pairs(old)
    got, old_to_new = extend_content(old, passages[40:], cleaned[40:])
    want = content_of(passages, cleaned)
    assert got.passages == want.passages and got.phrases == want.phrases and got.facts == want.facts
    assert got.phrase_passages == want.phrase_passages and got.triple_stats == want.triple_stats
    assert got.passage_facts == want.passage_facts
    assert [got.phrases[i] for i in old_to_new] == old.phrases
    assert _equal(passage_phrase_pairs(got), passage_phrase_pairs(want))
    assert np.array_equal(got.query_mask(), want.query_mask())
    assert old.phrase_passages == content_of(passages[:40], cleaned[:40]).phrase_passages  # old left as it was


@pytest.mark.parametrize("steps", [[40, 60], [10, 35, 36, 60]])
def test_inserts_assemble_the_index_of_a_rebuild(steps):
    passages, extractions, store = _corpus(4)

    def assemble(ps, previous=None):
        return assemble_index(ps, ["t"] * len(ps), list(range(len(ps))), extractions, store, CFG,
                              progress=False, previous=previous)

    asm = None
    for n in steps:
        prev = None if asm is None else Previous(asm.index.phrases, asm.synonyms, asm.cleaned, asm.index, asm.content)
        asm = assemble(passages[:n], prev)
        want = assemble(passages[:n]).index
        got = asm.index
        assert got.phrases == want.phrases and got.facts == want.facts and got.phrase_passages == want.phrase_passages
        assert got.stats == want.stats and got.stats["synonym_edges"] > 0 and got.passage_facts == want.passage_facts
        for f in ("source", "target", "weight", "kind"):
            assert np.array_equal(getattr(got.edges, f), getattr(want.edges, f)), f
        for f in ("passage_emb", "phrase_emb", "fact_emb"):
            assert np.array_equal(getattr(got, f), getattr(want, f)), f
