"""Issue 27 on the shared MuSiQue set, reusing the session's HippoRAG 2 run and cache:
the graph without relation edges (a graph rebuild, no new embedding) and RRF fusion
(the same index). Skipped without ../shared/data."""
import json

import pytest

from tests.conftest import HIPPORAG2_NO_FILTER, musique_run

pytestmark = pytest.mark.shared_data


def test_relation_edges_off_keeps_every_other_edge_and_reuses_embeddings(musique_hipporag2_run, shared_data,
                                                                       musique_cache, tmp_path):
    full_dir, _ = musique_hipporag2_run
    full = json.loads((full_dir / "graph_stats.json").read_text())
    report = musique_run(shared_data, musique_cache, tmp_path, *HIPPORAG2_NO_FILTER, "graph.relation_edges=false")
    stats = json.loads((tmp_path / "graph_stats.json").read_text())
    assert stats["relation_edges"] == 0 and full["relation_edges"] > 0
    for k in ("phrase_nodes", "passage_nodes", "facts", "context_edges", "synonym_edges"):
        assert stats[k] == full[k], k
    assert report.embedded_this_run == 0  # same phrases and facts: only the graph is new
    assert report.extra["index_key"] != json.loads((full_dir / "metrics.json").read_text())["index_key"]


def test_rrf_fuses_ppr_dense_and_bm25_on_the_same_index(musique_hipporag2_run, shared_data, musique_cache, tmp_path):
    ppr_dir, ppr = musique_hipporag2_run
    report = musique_run(shared_data, musique_cache, tmp_path, *HIPPORAG2_NO_FILTER, "retrieval.fusion=rrf")
    assert report.extra["index_key"] == ppr.extra["index_key"] and report.embedded_this_run == 0
    rows = [json.loads(x) for x in (tmp_path / "retrieval.jsonl").read_text().splitlines()]
    ppr_rows = [json.loads(x) for x in (ppr_dir / "retrieval.jsonl").read_text().splitlines()]
    for row in rows:
        want = ["dense", "bm25"] if row["fallback"] else ["ppr", "dense", "bm25"]
        assert row["fusion"]["channels"] == want
        scores = [r["score"] for r in row["ranked"]]
        assert scores == sorted(scores, reverse=True) and max(scores) <= 3 / 61
    assert any([r["title"] for r in a["ranked"][:5]] != [r["title"] for r in b["ranked"][:5]]
               for a, b in zip(rows, ppr_rows))
