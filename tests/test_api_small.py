"""The library API on the seven-passage world (no shared data needed): exact insert
and delete, reopening, typed results, start-up errors, the reader."""
import numpy as np
import pytest

from hipporag2 import ConfigError, HippoRAG, QueryResult
from hipporag2.openie.interchange import Extraction, write_openie
from tests.small_world import DOCS, TRIPLES

PASSAGES = [f"{t}\n{x}" for t, x in DOCS]
QUESTIONS = ["Which river runs through the capital of Velmora?", "Who directed the film scored by Mira Holt?",
             "Where was the director of The Glass Harbour born?"]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("world")
    write_openie(root / "openie.json", [Extraction(p, [], t) for p, t in zip(PASSAGES, TRIPLES)])
    overrides = ["embedding=minilm", "retrieval=hipporag2", "retrieval.filter=none", f"openie.import_path={root / 'openie.json'}",
                 f"cache_dir={root / 'cache'}", "progress=false", "graph.synonymy_edge_sim_threshold=0.5"]
    scratch = HippoRAG(root / "scratch", overrides)
    scratch.index(PASSAGES)
    return root, overrides, scratch


def _same(a, b):
    fields = ("source", "target", "weight", "kind")
    return a.graph_stats == b.graph_stats and all(np.array_equal(getattr(a.edges, f), getattr(b.edges, f)) for f in fields)


def test_insert_then_delete_equal_from_scratch(world, tmp_path):
    root, overrides, scratch = world
    rag = HippoRAG(tmp_path / "steps", overrides)
    assert rag.index(PASSAGES[:4]) == 4
    small = HippoRAG(tmp_path / "small", overrides)
    small.index(PASSAGES[:4])
    assert rag.index(PASSAGES) == 3 and rag.passages == PASSAGES
    assert scratch.graph_stats["synonym_edges"] > 0 and _same(rag, scratch)
    assert [r.docs for r in rag.retrieve(QUESTIONS, 7)] == [r.docs for r in scratch.retrieve(QUESTIONS, 7)]
    assert rag.delete(PASSAGES[4:]) == 3 and _same(rag, small)
    assert [r.doc_scores for r in rag.retrieve(QUESTIONS, 4)] == [r.doc_scores for r in small.retrieve(QUESTIONS, 4)]


def test_results_are_typed(world):
    _, _, scratch = world
    results = scratch.retrieve(QUESTIONS, num_to_retrieve=3)
    assert all(isinstance(r, QueryResult) for r in results)
    r = results[0]
    assert r.question == QUESTIONS[0] and len(r.docs) == 3 and r.doc_scores == sorted(r.doc_scores, reverse=True)
    assert r.docs[0] in PASSAGES and r.fallback is False
    assert r.kept_facts and all(len(f) == 3 for f, _ in r.kept_facts) and r.seed_phrases


def test_reopen_and_refusals(world):
    root, overrides, scratch = world
    again = HippoRAG(scratch.save_dir, overrides)
    assert _same(again, scratch) and again.index(PASSAGES) == 0
    with pytest.raises(ConfigError, match="embedded by"):
        HippoRAG(scratch.save_dir, overrides + ["embedding.max_length=64"])
    with pytest.raises(ConfigError, match="is not one of"):
        HippoRAG(root / "never", overrides + ["retrieval.ppr_solver=batchd"])
    assert not (root / "never").exists()
    with pytest.raises(ConfigError, match="index\\(docs\\) first|no index yet"):
        HippoRAG(root / "empty", overrides).retrieve(QUESTIONS)
    with pytest.raises(ConfigError, match="one string"):
        HippoRAG(root / "empty", overrides).index(PASSAGES[0])


def test_docs_without_title_and_bm25(tmp_path):
    rag = HippoRAG(tmp_path / "bm25", ["retrieval=bm25", "progress=false"])
    docs = ["Oliver Badman is a politician.", "George Rankin is a politician.", "Cinderella attended the royal ball."]
    rag.index(docs)
    top = rag.retrieve(["Who attended the ball?"], num_to_retrieve=1)[0]
    assert top.docs == [docs[2]] and top.kept_facts is None
