"""A process that retrieves with the batched solver from a saved index (its PPR
preparation saved too) never imports scipy (170-250 ms of import, `retrieve/csr.py`),
through the library and the CLI, for HippoRAG 2, its variant without passage nodes and
HippoRAG 1 (legacy v1 scoring), and its rankings and scores are exactly those of the
path that handed scipy matrices to the solver (reproduced here in-process: the
retriever's resets as scipy CSR matrices, every product through scipy's imported
`_sparsetools`)."""
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import scipy.sparse as sp
from scipy.sparse import _sparsetools

from hipporag2 import HippoRAG
from hipporag2.cli import compose
from hipporag2.openie.interchange import Extraction, write_openie
from hipporag2.pipeline import run
from hipporag2.retrieve import csr, graph_retriever, ppr_numpy
from tests.small_world import DOCS, TRIPLES, build_world

REPO = Path(__file__).resolve().parents[1]
DEMO = REPO / "hipporag2" / "resources" / "demo"
PASSAGES = [f"{t}\n{x}" for t, x in DOCS]
QUESTIONS = ["Which river runs through the capital of Velmora?", "Who directed the film scored by Mira Holt?",
             "Where was the director of The Glass Harbour born?", "What crosses the River Tessaly?"]
# each variant's retrieval overrides after the common ones
VARIANTS = {
    "hipporag2": ["retrieval=hipporag2", "retrieval.filter=none"],
    "no_passage_nodes": ["retrieval=hipporag2", "retrieval.filter=none", "retrieval.passage_nodes=false"],
    "hipporag1_legacy": ["retrieval=hipporag1_query_to_node", "retrieval.v1_scoring=legacy"],
}


def scipy_modules(modules) -> list:
    return sorted(k for k in modules if k == "scipy" or k.startswith("scipy."))


def today_path(monkeypatch) -> None:
    """The retriever as it was before `csr`: scipy CSR resets, scipy's imported loops."""
    plain = graph_retriever.reset_rows
    monkeypatch.setattr(graph_retriever, "reset_rows", lambda *a: plain(*a).to_scipy())
    monkeypatch.setattr(csr, "sparsetools", lambda: _sparsetools)
    monkeypatch.setattr(ppr_numpy, "_csr_matvecs", _sparsetools.csr_matvecs)


def rows(results) -> list:
    return [[r.passage_indices, r.doc_scores, r.fallback] for r in results]


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    root = tmp_path_factory.mktemp("no_scipy")
    write_openie(root / "openie.json", [Extraction(p, [], t) for p, t in zip(PASSAGES, TRIPLES)])
    common = ["embedding=minilm", f"openie.import_path={root / 'openie.json'}", f"cache_dir={root / 'cache'}",
              "progress=false", "graph.synonymy_edge_sim_threshold=0.5"]
    HippoRAG(root / "rag", common + VARIANTS["hipporag2"]).index(PASSAGES)
    return root, common


def test_library_retrieval_imports_no_scipy_and_gives_todays_results(world, monkeypatch):
    root, common = world
    want = {}
    with monkeypatch.context() as m:
        today_path(m)
        for name, extra in VARIANTS.items():
            # the first retrieval saves the PPR preparation (scipy) and the query embeddings
            rag = HippoRAG(root / "rag", common + extra + ["retrieval.ppr_solver=batched"])
            want[name] = rows(rag.retrieve(QUESTIONS, 7))
    assert list((root / "rag").rglob("ppr/*/manifest.json")), "no saved PPR preparation"
    code = """
import json, sys
from hipporag2 import HippoRAG
save_dir, common, variants, questions = json.loads(sys.argv[1])
got = {}
for name, extra in variants.items():
    rag = HippoRAG(save_dir, common + extra + ["retrieval.ppr_solver=batched"])
    got[name] = [[r.passage_indices, r.doc_scores, r.fallback] for r in rag.retrieve(questions, 7)]
print(json.dumps({"got": got, "modules": sorted(sys.modules)}))
"""
    arg = json.dumps([str(root / "rag"), common, VARIANTS, QUESTIONS])
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    done = subprocess.run([sys.executable, "-c", code, arg], capture_output=True, text=True, env=env, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    out = json.loads(done.stdout.strip().splitlines()[-1])
    assert "hipporag2.retrieve.ppr_numpy" in out["modules"]  # the batched solver ran, on numpy
    assert scipy_modules(out["modules"]) == []
    assert "sentence_transformers" not in out["modules"]  # query embeddings came from the cache
    for name in VARIANTS:
        assert out["got"][name] == json.loads(json.dumps(want[name])), name  # same floats, same order
    # the variants rank differently: each one's own path ran
    assert want["hipporag2"] != want["no_passage_nodes"] != want["hipporag1_legacy"]


def test_cli_run_imports_no_scipy_and_writes_todays_rankings(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    overrides = ["dataset=demo", f"data_dir={DEMO}", f"openie.import_path={DEMO / 'demo_openie_curated.json'}",
                 "embedding=minilm", f"cache_dir={cache}", "progress=false", "retrieval=hipporag2",
                 "retrieval.filter=none", "retrieval.ppr_solver=batched"]
    with monkeypatch.context() as m:
        today_path(m)
        run(compose(overrides + [f"run_dir={tmp_path / 'today'}"]))  # builds the index, prepares its PPR
    wrapper = """
import json, runpy, sys
out, sys.argv = sys.argv[1], ["hipporag2.cli", *sys.argv[2:]]
try:
    runpy.run_module("hipporag2.cli", run_name="__main__", alter_sys=True)
except SystemExit as e:
    if e.code:
        raise
with open(out, "w") as f:
    json.dump(sorted(sys.modules), f)
"""
    out = tmp_path / "modules.json"
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    done = subprocess.run([sys.executable, "-c", wrapper, str(out), *overrides, f"run_dir={tmp_path / 'now'}"],
                          capture_output=True, text=True, env=env, cwd=REPO)
    assert done.returncode == 0, done.stderr[-3000:]
    modules = json.loads(out.read_text())
    assert "hipporag2.retrieve.ppr_numpy" in modules and scipy_modules(modules) == []
    today = (tmp_path / "today" / "retrieval.jsonl").read_bytes()
    assert today and (tmp_path / "now" / "retrieval.jsonl").read_bytes() == today


def test_the_retrievers_matrices_are_scipys(tmp_path):
    """passage x phrase membership and the legacy v1 chain, built without scipy: the same
    arrays as scipy's COO -> CSR made them before, so the same products."""
    _, _, index = build_world(tmp_path)
    pp_rows = [i for i, ps in enumerate(index.phrase_passages) for _ in ps]
    pp_cols = [p for ps in index.phrase_passages for p in ps]
    want_pp = sp.csr_matrix((np.ones(len(pp_rows)), (pp_cols, pp_rows)), shape=(index.n_passages, index.n_phrases))
    got_pp = graph_retriever.GraphRetriever.passage_phrase.fget(SimpleNamespace(index=index, _passage_phrase=None))
    d2f, f2p = graph_retriever.legacy_fact_chain(index)
    rows_ = [p for p, fs in enumerate(index.passage_facts) for _ in fs]
    cols_ = [f for fs in index.passage_facts for f in fs]
    want_d2f = sp.csr_matrix((np.ones(len(rows_)), (rows_, cols_)), shape=(index.n_passages, len(index.facts)))
    for got, want in ((got_pp, want_pp), (d2f, want_d2f)):
        assert isinstance(got, csr.CsrMatrix) and got.nnz
        for name in ("indptr", "indices", "data"):
            np.testing.assert_array_equal(getattr(got, name), getattr(want, name))
    ppr = np.random.default_rng(0).random(index.n_phrases)
    np.testing.assert_array_equal(got_pp @ ppr, want_pp @ ppr)
    np.testing.assert_array_equal(graph_retriever.legacy_passage_scores(d2f, f2p, ppr),
                                  graph_retriever.legacy_passage_scores(d2f.to_scipy(), f2p.to_scipy(), ppr))
