"""hipporag2-sweep: every grid point equals a normal prpack retrieval with that point's settings."""
from dataclasses import replace

import numpy as np
import pytest

from hipporag2.config import ConfigError, RetrievalConfig
from hipporag2.data.loaders import Query
from hipporag2.retrieve.graph_retriever import GraphRetriever
from hipporag2.retrieve.ppr.batched import BatchedSolver
from hipporag2.sweep import check_sweepable, parse_floats, solve_grid
from tests.small_world import build_world

QUERIES = [
    Query("q1", "Where was the director of The Glass Harbour born?", ["Brackmoor"], []),
    Query("q2", "Which river flows through the capital of Velmora?", ["Port Ellery"], []),
    Query("q3", "Who wrote the music for the film by Oskar Threnody?", ["Mira Holt"], []),
    Query("q4", "What crosses the River Tessaly?", ["Tessaly Bridge"], []),
    Query("q5", "Which town in Velmora has mines?", ["Brackmoor"], []),
]
DAMPINGS = [0.3, 0.5, 0.85]
WEIGHTS = [0.0, 0.01, 0.05, 0.5]


class KeepFirstTwoOfOddQueries:
    """Drops all facts of every second query, so some queries fall back to dense."""

    name = "test"

    def select(self, questions, candidates):
        return [[0, 1] if i % 2 else [] for i in range(len(candidates))]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    return build_world(tmp_path_factory.mktemp("cache"))


@pytest.mark.parametrize("fact_filter", [None, KeepFirstTwoOfOddQueries()], ids=["all-linked", "some-fallback"])
def test_every_grid_point_equals_a_prpack_retrieve(setup, fact_filter):
    corpus, store, index = setup
    base = RetrievalConfig(retrieval_top_k=7, ppr_solver="prpack", query_batch_size=2)  # several blocks
    retriever = GraphRetriever(index, store, base, fact_filter=fact_filter, progress=False)
    grid = solve_grid(retriever, BatchedSolver(index.graph()), QUERIES, DAMPINGS, WEIGHTS)
    assert set(grid) == {(d, w) for d in DAMPINGS for w in WEIGHTS}
    fallbacks = 0
    for (d, w), got in grid.items():
        cfg = replace(base, damping=d, passage_node_weight=w)
        want = GraphRetriever(index, store, cfg, fact_filter=fact_filter, progress=False).retrieve(QUERIES)
        assert [r.query_id for r in got] == [r.query_id for r in want]
        for g, e in zip(got, want):
            assert g.ranked == e.ranked, (d, w, g.query_id)
            assert np.abs(np.array(g.scores) - np.array(e.scores)).sum() < 1e-8, (d, w, g.query_id)
            assert replace(g, scores=e.scores) == e  # seeds, facts, fallback
            fallbacks += e.fallback
    if fact_filter is not None:
        assert fallbacks > 0  # the fallback path was exercised


def test_passage_seed_top_k_is_swept_too(setup):
    corpus, store, index = setup
    base = RetrievalConfig(retrieval_top_k=7, passage_seed_top_k=3)
    retriever = GraphRetriever(index, store, base, progress=False)
    grid = solve_grid(retriever, BatchedSolver(index.graph()), QUERIES, [0.5], [0.05, 0.3])
    for (d, w), got in grid.items():
        want = GraphRetriever(index, store, replace(base, damping=d, passage_node_weight=w), progress=False).retrieve(QUERIES)
        for g, e in zip(got, want):
            assert g.ranked == e.ranked
            assert np.abs(np.array(g.scores) - np.array(e.scores)).sum() < 1e-8


def test_only_hipporag2_with_passage_nodes():
    check_sweepable(RetrievalConfig())
    for bad in (RetrievalConfig(method="hipporag1"), RetrievalConfig(passage_nodes=False), RetrievalConfig(method="dense")):
        with pytest.raises(ConfigError, match="passage nodes"):
            check_sweepable(bad)
    assert parse_floats("0.3,0.5", "--damping") == [0.3, 0.5]
    with pytest.raises(ConfigError):
        parse_floats("0.3,x", "--damping")
