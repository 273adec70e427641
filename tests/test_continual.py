"""Continual indexing (Figure 3 protocol): segments added one by one embed only what is
new, and indexing every segment equals indexing the whole corpus at once.

Uses the real MiniLM encoder on a hand-made corpus with an OpenIE import file."""
import json

import numpy as np
import pytest

from hipporag2.cli import compose
from hipporag2.config import ConfigError, GraphConfig
from hipporag2.continual import passage_segments, query_segments
from hipporag2.data.loaders import load_corpus, load_queries
from hipporag2.embed.store import text_key
from hipporag2.graph.build import clean_passage, content_of
from hipporag2.pipeline import run
from hipporag2.text import fact_string

# 8 passages -> 4 segments of 2. Entities recur across segments, so later segments
# bring some new phrases and reuse others.
PASSAGES = [
    ("Velmora", "Velmora is a harbour city on the Amber Coast. Its mayor is Ilsa Brandt.", [["Velmora", "located on", "Amber Coast"], ["Ilsa Brandt", "mayor of", "Velmora"]]),
    ("Ilsa Brandt", "Ilsa Brandt was born in Tarnholm and studied law in Quessen.", [["Ilsa Brandt", "born in", "Tarnholm"], ["Ilsa Brandt", "studied law in", "Quessen"]]),
    ("Tarnholm", "Tarnholm is a mountain village famous for the Copper Bell festival.", [["Tarnholm", "famous for", "Copper Bell festival"], ["Tarnholm", "is a", "mountain village"]]),
    ("Copper Bell festival", "The Copper Bell festival was founded by the monk Oswin Farr.", [["Copper Bell festival", "founded by", "Oswin Farr"], ["Oswin Farr", "is a", "monk"]]),
    ("Quessen", "Quessen is the capital of the Duchy of Marrow and hosts the Royal Library.", [["Quessen", "capital of", "Duchy of Marrow"], ["Quessen", "hosts", "Royal Library"]]),
    ("Royal Library", "The Royal Library of Quessen was designed by the architect Pell Oduya.", [["Royal Library", "designed by", "Pell Oduya"], ["Royal Library", "located in", "Quessen"]]),
    ("Pell Oduya", "Pell Oduya, an architect, also designed the lighthouse of Velmora.", [["Pell Oduya", "designed", "lighthouse of Velmora"], ["Pell Oduya", "is an", "architect"]]),
    ("Amber Coast", "The Amber Coast stretches from Velmora to the Salt Marshes.", [["Amber Coast", "stretches to", "Salt Marshes"], ["Amber Coast", "includes", "Velmora"]]),
]

QUESTIONS = [
    ("q1", "Who is the mayor of the harbour city on the Amber Coast?", [0]),
    ("q2", "Who founded the festival of the village where Ilsa Brandt was born?", [1, 2, 3]),
    ("q3", "Which duchy has its capital where the Royal Library is?", [4, 5]),
    ("q4", "What else did the architect of the Royal Library design?", [5, 6]),
    ("q5", "Where does the coast of Velmora stretch to?", [7]),
]


@pytest.fixture(autouse=True)
def one_encoder(monkeypatch):
    """Load MiniLM once for all runs of a test (each run would load it again); one
    torch thread, which is faster for these tiny batches on a busy machine."""
    import torch

    import hipporag2.embed.store as store

    threads = torch.get_num_threads()
    torch.set_num_threads(1)

    loaded = {}
    real = store.build_encoder

    def build(cfg):
        if cfg.name not in loaded:
            loaded[cfg.name] = real(cfg)
        return loaded[cfg.name]

    monkeypatch.setattr(store, "build_encoder", build)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="module")
def data_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("continual_data")
    (d / "tiny_corpus.json").write_text(json.dumps([{"title": t, "text": x} for t, x, _ in PASSAGES]))
    queries = []
    for qid, question, gold in QUESTIONS:
        paras = [{"title": PASSAGES[i][0], "paragraph_text": PASSAGES[i][1], "is_supporting": i in gold} for i in range(len(PASSAGES))]
        queries.append({"id": qid, "question": question, "answer": "x", "paragraphs": paras})
    (d / "tiny.json").write_text(json.dumps(queries))
    docs = [
        {"passage": f"{t}\n{x}", "extracted_entities": [], "extracted_triples": triples}
        for t, x, triples in PASSAGES
    ]
    (d / "openie.json").write_text(json.dumps({"docs": docs, "avg_ent_chars": 0.0, "avg_ent_words": 0.0}))
    return d


def _run(data_dir, cache_dir, run_dir, *overrides):
    cfg = compose(
        [
            "dataset=demo",
            "dataset.name=tiny",
            "dataset.file_stem=tiny",
            f"data_dir={data_dir}",
            f"openie.import_path={data_dir / 'openie.json'}",
            "embedding=minilm",
            "retrieval=hipporag2_no_filter",
            "retrieval.retrieval_top_k=8",
            f"cache_dir={cache_dir}",
            f"run_dir={run_dir}",
            "progress=false",
            *overrides,
        ]
    )
    return run(cfg)


def _expected_keys(data_dir, k, n=4):
    """Every text a run on segments 1..k embeds (MiniLM takes no instruction)."""
    corpus = load_corpus(data_dir / "tiny_corpus.json")
    queries = load_queries(data_dir / "tiny.json")
    seg = passage_segments(len(corpus), n)
    passages = [p for p, s in zip(corpus.strings, seg) if s < k]
    triples = [PASSAGES[i][2] for i, s in enumerate(seg) if s < k]
    content = content_of(passages, [clean_passage(t, GraphConfig()) for t in triples])
    qs = [q.question for q, s in zip(queries, query_segments(queries, corpus, n)) if s < k]
    texts = passages + content.phrases + [fact_string(f) for f in content.facts] + qs
    return {text_key(t) for t in texts}


def test_segments_are_contiguous_and_questions_follow_their_last_gold(data_dir):
    assert passage_segments(8, 4) == [0, 0, 1, 1, 2, 2, 3, 3]
    assert passage_segments(7, 3) == [0, 0, 0, 1, 1, 2, 2]
    corpus = load_corpus(data_dir / "tiny_corpus.json")
    queries = load_queries(data_dir / "tiny.json")
    assert query_segments(queries, corpus, 4) == [0, 1, 2, 3, 3]


@pytest.mark.slow
def test_adding_segments_embeds_only_new_texts_and_equals_indexing_at_once(data_dir, tmp_path):
    inc_cache = tmp_path / "cache_incremental"
    seen = set()
    metrics = {}
    for k in (1, 2, 3, 4):
        m = _run(data_dir, inc_cache, tmp_path / f"k{k}", "dataset.corpus_segments=4", f"dataset.segments_indexed={k}")
        keys = _expected_keys(data_dir, k)
        new = keys - seen
        assert m["embedded_this_run"] == len(new), f"segment {k}: embedded {m['embedded_this_run']}, new texts {len(new)}"
        seen |= keys
        metrics[k] = m
    # Only the questions of indexed segments are evaluated.
    assert [metrics[k]["n_queries"] for k in (1, 2, 3, 4)] == [1, 2, 3, 5]
    assert metrics[4]["embedded_this_run"] < len(seen)  # earlier segments were not re-embedded
    stats_k2 = json.loads((tmp_path / "k2" / "graph_stats.json").read_text())
    assert stats_k2["passage_nodes"] == 4

    full = _run(data_dir, tmp_path / "cache_fresh", tmp_path / "full")
    assert full["embedded_this_run"] == len(seen)
    assert full["index_key"] == metrics[4]["index_key"]
    assert json.loads((tmp_path / "k4" / "graph_stats.json").read_text()) == json.loads((tmp_path / "full" / "graph_stats.json").read_text())
    e_inc = np.load(inc_cache / "index" / metrics[4]["index_key"] / "edges.npz")
    e_full = np.load(tmp_path / "cache_fresh" / "index" / full["index_key"] / "edges.npz")
    for name in ("source", "target", "kind"):
        assert np.array_equal(e_inc[name], e_full[name])
    assert np.allclose(e_inc["weight"], e_full["weight"], atol=1e-5)
    rows_inc = [json.loads(line) for line in (tmp_path / "k4" / "retrieval.jsonl").read_text().splitlines()]
    rows_full = [json.loads(line) for line in (tmp_path / "full" / "retrieval.jsonl").read_text().splitlines()]
    assert [r["id"] for r in rows_inc] == [r["id"] for r in rows_full]
    for a, b in zip(rows_inc, rows_full):
        assert [x["corpus_idx"] for x in a["ranked"]] == [x["corpus_idx"] for x in b["ranked"]]
        assert np.allclose([x["score"] for x in a["ranked"]], [x["score"] for x in b["ranked"]], atol=1e-6)
    for key in ("recall@1", "recall@2", "recall@5"):
        assert metrics[4][key] == full[key]


def test_segment_settings_are_checked(data_dir, tmp_path):
    with pytest.raises(ConfigError, match="segments_indexed"):
        _run(data_dir, tmp_path / "c", tmp_path / "r", "dataset.corpus_segments=4", "dataset.segments_indexed=5")
    with pytest.raises(ConfigError, match="segment_queries"):
        _run(data_dir, tmp_path / "c", tmp_path / "r", "dataset.corpus_segments=2", "dataset.segment_queries=some")
