"""The library API on the shared MuSiQue set: the CLI's rankings, exact insert and
delete, reopening, start-up errors, and dense retrieval on raw HotpotQA-format data."""
import json

import numpy as np
import pytest

from hipporag2 import ConfigError, HippoRAG
from hipporag2.cli import compose
from hipporag2.data.loaders import load_queries
from hipporag2.pipeline import run
from tests.conftest import musique_api_overrides as _overrides
from tests.conftest import musique_docs

pytestmark = pytest.mark.shared_data

SPLIT = 1500  # first step of the two-step insert: 1,500 of the 1,890 passages


def _edges(rag):
    e = rag.edges
    return [np.asarray(getattr(e, f)) for f in ("source", "target", "weight", "kind")]


def _same_graph(a, b):
    return a.graph_stats == b.graph_stats and all(np.array_equal(x, y) for x, y in zip(_edges(a), _edges(b)))


def _topk(results):
    return [(r.docs, r.doc_scores, r.fallback) for r in results]


# prpack's PPR differs from one call to the next by ~1e-14 (measured: the same index
# queried twice), so scores are compared to that tolerance and rankings up to ties
# within it.
TOL = 1e-10


def _tie_groups(docs, scores):
    groups, current = [], [docs[0]]
    for d, prev, s in zip(docs[1:], scores, scores[1:]):
        if prev - s > TOL:
            groups.append(set(current))
            current = []
        current.append(d)
    return groups, set(current)


def assert_same_rankings(a, b):
    """a, b: lists of (docs, scores[, ...]) per query, equal up to ties within TOL."""
    assert len(a) == len(b)
    for (da, sa, *ra), (db, sb, *rb) in zip(a, b):
        np.testing.assert_allclose(sa, sb, rtol=0, atol=TOL)
        assert ra == rb and len(da) == len(db)
        (ga, last_a), (gb, last_b) = _tie_groups(da, sa), _tie_groups(db, sa)
        assert ga == gb and len(last_a) == len(last_b)  # the last group may be cut at k


@pytest.fixture(scope="module")
def data(shared_data):
    queries = load_queries(shared_data / "musique_train.json")
    return musique_docs(shared_data), queries


@pytest.fixture(scope="module")
def scratch(musique_api):
    """Every shared passage indexed at once through the API (the session's one)."""
    return musique_api


def test_index_and_retrieve_equal_the_cli_run(data, scratch, musique_hipporag2_run):
    docs, queries = data
    run_dir, metrics = musique_hipporag2_run  # the CLI run with the same settings
    rows = [json.loads(line) for line in (run_dir / "retrieval.jsonl").read_text().splitlines()]
    results = scratch.retrieve([q.question for q in queries], num_to_retrieve=200)
    cli = [([docs[p["corpus_idx"]] for p in row["ranked"]], [p["score"] for p in row["ranked"]]) for row in rows]
    assert_same_rankings(cli, [(r.docs, r.doc_scores) for r in results])
    recall5 = 100 * np.mean([len(set(q.gold_passages) & set(r.docs[:5])) / len(q.gold_passages) for q, r in zip(queries, results)])
    assert round(recall5, 1) == metrics["recall@5"]
    assert scratch.graph_stats == json.loads((run_dir / "graph_stats.json").read_text())
    r = results[0]
    assert len(r.kept_facts) == 5 and r.seed_phrases and r.fallback is False and r.question == queries[0].question


def test_two_step_insert_and_delete_are_identical_to_from_scratch(data, scratch, musique_cache, tmp_path):
    docs, queries = data
    questions = [q.question for q in queries]
    rag = HippoRAG(tmp_path / "steps", _overrides(musique_cache))
    rag.index(docs[:SPLIT])
    first_stats, first_edges, first_top = rag.graph_stats, _edges(rag), _topk(rag.retrieve(questions, num_to_retrieve=10))
    assert rag.index(docs) == len(docs) - SPLIT  # the first 1,500 are skipped
    assert rag.last_update is not None and not rag.last_update.recomputed_all
    assert rag.last_update.full_rows < 0.3 * rag.graph_stats["phrase_nodes"]  # only new phrases searched in full
    assert _same_graph(rag, scratch)
    assert_same_rankings(_topk(rag.retrieve(questions, num_to_retrieve=10)), _topk(scratch.retrieve(questions, num_to_retrieve=10)))
    # delete: identical to the index that never had them
    assert rag.delete(docs[SPLIT:] + ["not indexed\nat all"]) == len(docs) - SPLIT
    assert rag.graph_stats == first_stats
    assert all(np.array_equal(x, y) for x, y in zip(_edges(rag), first_edges))
    assert_same_rankings(_topk(rag.retrieve(questions, num_to_retrieve=10)), first_top)


def test_reopen_loads_without_indexing(data, scratch, musique_cache):
    docs, queries = data
    again = HippoRAG(scratch.save_dir, _overrides(musique_cache))
    assert again.passages == scratch.passages and _same_graph(again, scratch)
    assert again.index(docs[:10]) == 0  # already indexed: nothing runs
    assert again.store().encoded == 0  # nothing re-embedded (queries were cached by the first run)
    qs = [q.question for q in queries[:20]]
    assert_same_rankings(_topk(again.retrieve(qs, num_to_retrieve=5)), _topk(scratch.retrieve(qs, num_to_retrieve=5)))
    # another damping only changes retrieval; the saved index is used as it is
    other = HippoRAG(scratch.save_dir, _overrides(musique_cache) + ["retrieval.damping=0.7"])
    assert _same_graph(other, scratch)
    # settings that would build another graph are refused, not silently rebuilt
    with pytest.raises(ConfigError, match="graph.synonymy_edge_sim_threshold"):
        HippoRAG(scratch.save_dir, _overrides(musique_cache) + ["graph.synonymy_edge_sim_threshold=0.9"])


@pytest.mark.parametrize("bad, match", [
    ("retrieval.ppr_solver=batchd", r"retrieval\.ppr_solver='batchd' is not one of"),
    ("retrieval.damping=1.5", r"retrieval\.damping=1\.5"),
    ("openie.import_path=/nonexistent/openie.json", "openie.import_path"),
])
def test_bad_override_fails_before_any_work(bad, match, tmp_path, musique_cache):
    save_dir = tmp_path / "idx"
    with pytest.raises(Exception, match=match):
        HippoRAG(save_dir, _overrides(musique_cache) + [bad])
    assert not save_dir.exists()


def _hotpotqa_raw(shared_data, tmp_path):
    """The shared MuSiQue questions written in raw HotpotQA format (context as
    [title, [sentences]], supporting_facts by title), with the corpus as a raw
    title -> sentences mapping."""
    records = json.loads((shared_data / "musique_train.json").read_text())
    out, corpus = [], {}
    for r in records:
        ctx = [[p["title"], [p["paragraph_text"]]] for p in r["paragraphs"]]
        sup = [[p["title"], 0] for p in r["paragraphs"] if p["is_supporting"]]
        out.append({"_id": r["id"], "question": r["question"], "answer": r["answer"], "context": ctx, "supporting_facts": sup})
        for title, sents in ctx:
            corpus.setdefault(title, sents)
    (tmp_path / "hp.json").write_text(json.dumps(out))
    (tmp_path / "hp_corpus.json").write_text(json.dumps(corpus))
    return tmp_path / "hp.json"


def test_dense_on_raw_hotpotqa_format_through_the_api(shared_data, musique_cache, tmp_path):
    qfile = _hotpotqa_raw(shared_data, tmp_path)
    queries = load_queries(qfile, sentence_joiner="")
    corpus = json.loads((tmp_path / "hp_corpus.json").read_text())
    docs = [t + "\n" + "".join(s) for t, s in corpus.items()]
    rag = HippoRAG(tmp_path / "dense", ["embedding=minilm", "retrieval=dense", f"cache_dir={musique_cache}", "progress=false"])
    rag.index(docs)
    assert not (tmp_path / "dense" / "openie.json").exists()  # dense needs no OpenIE and no LLM
    results = rag.retrieve([q.question for q in queries], num_to_retrieve=5)
    assert all(r.fallback is None and r.kept_facts is None and len(r.docs) == 5 for r in results)
    cfg = compose(["dataset=hotpotqa", "dataset.file_stem=hp", f"data_dir={tmp_path}", "embedding=minilm", "retrieval=dense",
                   f"cache_dir={musique_cache}", f"run_dir={tmp_path / 'cli'}", "progress=false"])
    metrics = run(cfg)
    recall5 = 100 * np.mean([len(set(q.gold_passages) & set(r.docs)) / len(q.gold_passages) for q, r in zip(queries, results)])
    assert round(recall5, 1) == metrics["recall@5"] > 0
    # bm25 needs no encoder either: the same save_dir layout, no embeddings
    bm25 = HippoRAG(tmp_path / "bm25", ["retrieval=bm25", f"cache_dir={tmp_path / 'nocache'}", "progress=false"])
    bm25.index(docs)
    top = bm25.retrieve([queries[0].question], num_to_retrieve=3)[0]
    assert len(top.docs) == 3 and top.doc_scores == sorted(top.doc_scores, reverse=True)
    assert not (tmp_path / "nocache" / "embeddings").exists() or not any((tmp_path / "nocache" / "embeddings").rglob("*.npy"))
