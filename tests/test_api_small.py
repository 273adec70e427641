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
    got, want = rag.retrieve(QUESTIONS, 4), small.retrieve(QUESTIONS, 4)
    # prpack varies by ~1e-14 from call to call; the graphs themselves are equal (above)
    np.testing.assert_allclose([r.doc_scores for r in got], [r.doc_scores for r in want], rtol=0, atol=1e-10)


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
    from hipporag2.cli import compose

    typed = HippoRAG(scratch.save_dir, config=compose(overrides + [f"run_dir={root / 'run'}"]))
    assert _same(typed, scratch)
    with pytest.raises(ConfigError, match="either overrides or config"):
        HippoRAG(scratch.save_dir, overrides, config=typed.cfg)
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


def test_rag_qa_with_a_real_local_model(world, tmp_path):
    """rag_qa on retrieved results with SmolLM2-135M (CPU): answers for every query,
    EM/F1 against the gold answers and recall against gold passages."""
    root, overrides, scratch = world
    rag = HippoRAG(scratch.save_dir, overrides + ["llm=smollm2_cpu", "llm.max_new_tokens=24", "qa.qa_top_k=2"])
    results = rag.retrieve(QUESTIONS[:2], num_to_retrieve=3)
    gold_docs = [[PASSAGES[0], PASSAGES[1]], [PASSAGES[3], PASSAGES[6]]]
    report = rag.rag_qa(results, gold_answers=[["River Tessaly"], "Oskar Threnody"], gold_docs=gold_docs)
    assert [r.question for r in report.results] == QUESTIONS[:2]
    assert all(isinstance(a, str) for a in report.answers) and report.llm_failures == 0
    assert 0.0 <= report.em <= report.f1 <= 100.0
    assert report.results[1].gold_answers == ["Oskar Threnody"]
    expected = 100 * np.mean([len(set(g) & set(r.docs[:2])) / 2 for g, r in zip(gold_docs, results)])
    assert report.recall["recall@2"] == round(expected, 1)
    with pytest.raises(ConfigError, match="needs an LLM"):
        scratch.rag_qa(QUESTIONS[:1])  # llm=none


def _open_paths(under):
    """Files of this process under a folder: open descriptors and memory maps."""
    import os
    from pathlib import Path

    under = str(Path(under).resolve())
    fds = []
    for fd in os.listdir("/proc/self/fd"):
        try:
            fds.append(os.readlink(f"/proc/self/fd/{fd}"))
        except OSError:
            pass
    with open("/proc/self/maps") as f:
        maps = [line.split(None, 5)[-1].strip() for line in f if len(line.split(None, 5)) == 6]
    return sorted({p for p in fds + maps if p.startswith(under)})


def test_close_releases_the_llm_and_the_files(world, tmp_path):
    """`with HippoRAG(...)` on a real local model (SmolLM2-135M, transformers): inside,
    the LLM's response cache and the reopened index's files are open; after the block none of
    this process's descriptors or memory maps points into the save_dir or the cache,
    the object refuses further use, and the save_dir reopens complete."""
    import gc

    root, overrides, scratch = world
    cache = tmp_path / "cache"
    llm_overrides = [o for o in overrides if not o.startswith("cache_dir=")] + [
        f"cache_dir={cache}", "llm=smollm2_cpu", "llm.max_new_tokens=8", "qa.qa_top_k=1"]
    with HippoRAG(tmp_path / "closing", llm_overrides) as first:
        first.index(PASSAGES)
    with HippoRAG(tmp_path / "closing", llm_overrides) as rag:  # reopened: the index files are mapped
        report = rag.rag_qa(QUESTIONS[:1])
        assert len(report.answers) == 1 and report.llm_failures == 0
        rag.retrieve(QUESTIONS[:1])
        assert _open_paths(cache / "llm"), "the LLM's response cache should be open while in use"
        assert _open_paths(tmp_path / "closing"), "the index embeddings should be memory-mapped"
    gc.collect()
    assert rag.closed
    assert _open_paths(cache) == [] and _open_paths(tmp_path / "closing") == []
    for use in (lambda: rag.retrieve(QUESTIONS[:1]), lambda: rag.index(PASSAGES), lambda: rag.rag_qa(QUESTIONS[:1])):
        with pytest.raises(ConfigError, match="is closed"):
            use()
    rag.close()  # idempotent
    again = HippoRAG(tmp_path / "closing", llm_overrides)
    assert _same(again, scratch) and again.index(PASSAGES) == 0
    again.close()


def test_insert_and_delete_after_reopening_write_only_what_changed(world, tmp_path):
    """Each step in a fresh HippoRAG on the save_dir: an insert reads no old OpenIE
    (it extends the saved content), adds one OpenIE file and one segment of embedding
    rows beside the hard-linked old ones, and gives the from-scratch index; a delete
    gives the index that never had the passages."""
    import json
    import os

    root, overrides, scratch = world
    save = tmp_path / "steps"
    HippoRAG(save, overrides).index(PASSAGES[:4])
    first = os.stat(save / "index" / "fact_emb.npy").st_ino
    rag = HippoRAG(save, overrides)
    assert rag.index(PASSAGES) == 3 and _same(rag, scratch)
    assert set(rag.last_timings) >= {"openie", "content", "embedding rows", "synonym KNN", "edges", "save"}
    state = json.loads((save / "hipporag2_index.json").read_text())
    assert state["openie_files"] == ["openie.json", "openie.2.json"]
    assert len(json.loads((save / "openie.2.json").read_text())["docs"]) == 3
    manifest = json.loads((save / "index" / "manifest.json").read_text())
    assert manifest["rows"]["fact"]["segments"] == ["fact_emb.npy", "fact_emb.s1.npy"]
    assert os.stat(save / "index" / "fact_emb.npy").st_ino == first  # linked, not written again
    again = HippoRAG(save, overrides)
    assert _same(again, scratch) and again.passages == PASSAGES
    assert [r.docs for r in again.retrieve(QUESTIONS, 7)] == [r.docs for r in scratch.retrieve(QUESTIONS, 7)]
    small = HippoRAG(tmp_path / "small", overrides)
    small.index(PASSAGES[:4])
    assert again.delete(PASSAGES[4:]) == 3 and _same(again, small)
    assert json.loads((save / "hipporag2_index.json").read_text())["openie_files"] == ["openie.json"]
    assert not (save / "openie.2.json").exists()
    reopened = HippoRAG(save, overrides)
    assert _same(reopened, small) and reopened.index(PASSAGES) == 3 and _same(reopened, scratch)
