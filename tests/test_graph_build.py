"""SPEC §2 on hand-made inputs: triples, nodes, relation/context/synonym edges and quirks."""
import numpy as np
import pytest

from hipporag2.config import GraphConfig
from hipporag2.graph.build import CONTEXT, RELATION, SYNONYM, build_edges, clean_passage, content_of
from hipporag2.graph.triples import TripleStats, clean_triples
from hipporag2.text import normalise_phrase, passage_id, phrase_id
from tests.test_synonym_knn import synonym_pairs  # (query, neighbour, cosine) tuples of synonym_arrays


def test_normalisation_keeps_inner_spaces_and_can_be_empty():
    assert normalise_phrase("Radio City (India)!") == "radio city  india"
    assert normalise_phrase("  --  ") == ""
    assert normalise_phrase("Émile") == "mile"


def test_ids_are_md5_with_prefix():
    assert passage_id("a\nb") == "chunk-" + __import__("hashlib").md5(b"a\nb").hexdigest()
    assert phrase_id("x").startswith("entity-")


def test_clean_triples_dedup_before_normalisation_is_the_default_quirk():
    raw = [["A", "r", "B"], ["a", "r", "b"], ["A", "r", "B"], ["only", "two"], ["x", "y", "z", "w"]]
    stats = TripleStats()
    out = clean_triples(raw, True, stats)
    assert out == [("a", "r", "b"), ("a", "r", "b")]
    assert (stats.raw, stats.kept, stats.wrong_length, stats.duplicates) == (5, 2, 2, 1)
    assert clean_triples(raw, dedup_before_normalise=False) == [("a", "r", "b")]


def _edges_by_pair(edges):
    out = {}
    for s, t, w, k in zip(edges.source, edges.target, edges.weight, edges.kind):
        out.setdefault((int(s), int(t)), []).append((float(w), int(k)))
    return out


def test_relation_edges_are_doubled_and_counted_context_edges_weight_one():
    passages = ["P0\ntext", "P1\ntext"]
    raw = [[["Alice", "knows", "Bob"], ["alice", "likes", "bob"], ["Bob", "is", "Bob"]], [["Alice", "met", "Carol"]]]
    cfg = GraphConfig(synonym_edges=False)
    content = content_of(passages, [clean_passage(t, cfg) for t in raw])
    assert content.phrases == ["alice", "bob", "carol"]  # sorted by text
    assert content.phrase_passages == [[0, 1], [0], [1]]
    edges, stats = build_edges(content, None, cfg)
    pairs = _edges_by_pair(edges)
    # (alice, bob) counted twice within passage 0, once per ordered pair.
    assert pairs[(0, 1)] == [(2.0, RELATION)] and pairs[(1, 0)] == [(2.0, RELATION)]
    assert pairs[(0, 2)] == [(1.0, RELATION)] and pairs[(2, 0)] == [(1.0, RELATION)]
    assert (1, 1) not in pairs and stats.self_loops_dropped == 1
    # Context edges: passage vertex (3 + p) -> its phrases.
    assert pairs[(3, 0)] == [(1.0, CONTEXT)] and pairs[(3, 1)] == [(1.0, CONTEXT)]
    assert pairs[(4, 0)] == [(1.0, CONTEXT)] and pairs[(4, 2)] == [(1.0, CONTEXT)]
    assert (stats.relation_edges, stats.context_edges, stats.synonym_edges) == (4, 4, 0)
    assert stats.edges_total == 8 and stats.facts == 4


def test_edge_doubling_switch_gives_one_edge_per_pair():
    content = content_of(["P\nt"], [clean_passage(t, GraphConfig()) for t in [[["a", "r", "b"], ["b", "s", "a"]]]])
    edges, stats = build_edges(content, None, GraphConfig(double_edges=False, synonym_edges=False))
    pairs = _edges_by_pair(edges)
    assert pairs[(0, 1)] == [(2.0, RELATION)] and (1, 0) not in pairs
    assert stats.relation_edges == 1


def _unit(v):
    v = np.asarray(v, dtype=np.float32)
    return v / np.linalg.norm(v, axis=1, keepdims=True)


def test_synonym_rules_threshold_self_short_queries_and_mutual_pairs():
    phrases = ["ab", "abc city", "abc town", "far away", ""]
    emb = _unit([[1, 0.0, 0], [1, 0.1, 0], [1, 0.2, 0], [0, 0, 1], [1, 0.05, 0]])
    pairs = synonym_pairs(phrases, emb, threshold=0.8)
    got = {(a, b) for a, b, _ in pairs}
    # "ab" (2 alnum chars) is never a query but is found as a neighbour; the empty
    # phrase is never a neighbour; itself is skipped; the mutual pair appears twice.
    assert (1, 2) in got and (2, 1) in got
    assert (1, 0) in got and (0, 1) not in got
    assert all(b != 4 for _, b in got) and all(a != b for a, b in got)
    assert all(3 not in p for p in got)
    # Best first per query.
    q1 = [s for a, _, s in pairs if a == 1]
    assert q1 == sorted(q1, reverse=True)


def test_synonym_neighbour_cap_and_block_independence():
    rng = np.random.default_rng(0)
    base = rng.normal(size=(1, 8))
    emb = _unit(base + 0.3 * rng.normal(size=(150, 8)))
    phrases = [f"phrase {i}" for i in range(150)]
    pairs = synonym_pairs(phrases, emb, threshold=0.5, max_neighbours=101, block_size=7)
    per_query = np.bincount([a for a, _, _ in pairs], minlength=150)
    assert per_query.max() == 101
    other = synonym_pairs(phrases, emb, threshold=0.5, max_neighbours=101, block_size=1000)
    # BLAS rounding differs with the block shape, so compare scores approximately.
    assert [(a, b) for a, b, _ in pairs] == [(a, b) for a, b, _ in other]
    np.testing.assert_allclose([s for *_, s in pairs], [s for *_, s in other], rtol=1e-6)
    capped = synonym_pairs(phrases, emb, threshold=0.5, top_k=10)
    assert np.bincount([a for a, _, _ in capped]).max() == 9  # top-10 includes itself


def test_synonym_score_replaces_relation_weight_of_the_same_ordered_pair():
    content = content_of(["P\nt"], [clean_passage(t, GraphConfig()) for t in [[["alpha", "r", "alphas"], ["alpha", "r", "beta"]]]])
    emb = _unit([[1, 0], [1, 0.1], [0, 1]])  # alpha ~ alphas
    edges, stats = build_edges(content, emb, GraphConfig())
    pairs = _edges_by_pair(edges)
    assert pairs[(0, 1)][0][1] == SYNONYM and pairs[(0, 1)][0][0] == pytest.approx(float(emb[0] @ emb[1]), rel=1e-6)
    assert pairs[(1, 0)][0][1] == SYNONYM
    assert pairs[(0, 2)] == [(1.0, RELATION)]
    assert stats.relation_pairs_replaced_by_synonym == 2
    assert (stats.relation_edges, stats.synonym_edges) == (2, 2)
    # Switch off: the relation edge stays and the synonym edge is added beside it.
    edges2, stats2 = build_edges(content, emb, GraphConfig(synonym_overwrites_relation=False))
    kinds = sorted(k for w, k in _edges_by_pair(edges2)[(0, 1)])
    assert kinds == [RELATION, SYNONYM] and stats2.relation_pairs_replaced_by_synonym == 0


def test_passage_without_triples_is_an_isolated_vertex():
    content = content_of(["A\nx", "B\ny"], [clean_passage(t, GraphConfig()) for t in [[["a", "r", "b"]], []]])
    edges, stats = build_edges(content, None, GraphConfig(synonym_edges=False))
    assert stats.passages_without_triples == 1 and stats.isolated_vertices == 1
    assert edges.n_vertices == 4


def _edge_map_oracle(content, pairs, cfg):
    """The edge map written out with a dict, as the reference builds it: the array
    version in build_edges must give the same edges in the same order."""
    index = {p: i for i, p in enumerate(content.phrases)}
    n_phr = len(content.phrases)
    edge_map, extra, replaced = {}, [], 0

    def key(a, b):
        return (a, b) if cfg.double_edges or a <= b else (b, a)

    for triples in content.chunk_triples:
        for s, _, o in triples:
            a, b = index[s], index[o]
            for pair in ((a, b), (b, a)) if cfg.double_edges else (key(a, b),):
                edge_map[pair] = (edge_map.get(pair, (0.0, RELATION))[0] + 1.0, RELATION)
    for p_idx, triples in enumerate(content.chunk_triples):
        for phrase in dict.fromkeys(x for t in triples for x in (t[0], t[2])):
            edge_map[(n_phr + p_idx, index[phrase])] = (1.0, CONTEXT)
    for a, b, score in pairs if cfg.synonym_edges else []:
        pair = key(a, b)
        prev = edge_map.get(pair)
        if prev is not None and prev[1] == RELATION and not cfg.synonym_overwrites_relation:
            extra.append((pair[0], pair[1], score))
            continue
        replaced += prev is not None and prev[1] == RELATION
        edge_map[pair] = (score, SYNONYM)
    rows = [(a, b, w, k) for (a, b), (w, k) in edge_map.items() if a != b] + [(a, b, w, SYNONYM) for a, b, w in extra]
    return rows, replaced


@pytest.mark.parametrize("double, overwrite", [(True, True), (True, False), (False, True), (False, False)])
def test_array_edge_map_equals_the_dict_edge_map(double, overwrite):
    rng = np.random.default_rng(3)
    words = [f"w{i}" for i in range(40)] + ["a"]
    raw = [[[words[rng.integers(0, 41)], "r", words[rng.integers(0, 41)]] for _ in range(rng.integers(0, 8))] for _ in range(30)]
    cfg = GraphConfig(double_edges=double, synonym_overwrites_relation=overwrite)
    content = content_of([f"P{i}\nt" for i in range(30)], [clean_passage(t, cfg) for t in raw])
    emb = _unit(rng.normal(size=(1, 6)) + 0.5 * rng.normal(size=(len(content.phrases), 6)))
    pairs = synonym_pairs(content.phrases, emb, threshold=0.6)
    edges, stats = build_edges(content, emb, cfg, synonyms=pairs)
    rows, replaced = _edge_map_oracle(content, pairs, cfg)
    assert list(zip(edges.source.tolist(), edges.target.tolist(), edges.weight.tolist(), edges.kind.tolist())) == rows
    assert stats.relation_pairs_replaced_by_synonym == replaced and len(rows) > 50
