"""SPEC §1 formats: query files, corpora, OpenIE interchange (old and new)."""
import json

import pytest

from hipporag2.data.errors import DataError
from hipporag2.data.loaders import check_gold_in_corpus, load_corpus, load_queries
from hipporag2.openie.interchange import Extraction, import_openie, parse_openie, write_openie
from hipporag2.text import passage_id


def _write(tmp_path, name, obj):
    p = tmp_path / name
    p.write_text(json.dumps(obj))
    return p


def test_musique_style_paragraphs_gold_and_answers(tmp_path):
    q = _write(tmp_path, "q.json", [{
        "id": "q1", "question": "Who?", "answer": "Ann", "answer_aliases": ["Annie", "Ann"],
        "paragraphs": [
            {"title": "A", "paragraph_text": "a text", "is_supporting": True},
            {"title": "B", "paragraph_text": "b text", "is_supporting": False},
            {"title": "C", "text": "c text"},
        ],
    }])
    [query] = load_queries(q)
    assert query.gold_answers == ["Ann", "Annie"]
    assert query.gold_passages == ["A\na text", "C\nc text"]


def test_hotpotqa_supporting_facts_joiner_and_2wiki(tmp_path):
    rec = {"_id": "h1", "question": "Q", "answer": ["x"],
           "supporting_facts": [["T1", 0], ["T1", 1]],
           "context": [["T1", ["One.", " Two."]], ["T2", ["Other."]]]}
    q = _write(tmp_path, "q.json", [rec])
    assert load_queries(q, sentence_joiner="")[0].gold_passages == ["T1\nOne. Two."]
    assert load_queries(q, sentence_joiner=" ")[0].gold_passages == ["T1\nOne.  Two."]
    assert load_queries(q)[0].id == "h1"


def test_contexts_style_and_popqa_answers(tmp_path):
    q = _write(tmp_path, "q.json", [{
        "id": 7, "question": "Q", "obj": "Paris", "possible_answers": "[\"Paris\", \"City of Light\"]",
        "contexts": [{"title": "P", "text": "t", "is_supporting": True}, {"title": "N", "text": "n", "is_supporting": False}],
    }])
    [query] = load_queries(q)
    assert query.id == "7" and query.gold_passages == ["P\nt"]
    # As the reference reads it (dataset.decode_json_answers=false): the encoded list is one string.
    assert query.gold_answers == ["Paris", '["Paris", "City of Light"]']
    assert load_queries(q, decode_json_answers=True)[0].gold_answers == ["Paris", "City of Light"]


def test_corpus_list_dict_and_duplicates(tmp_path):
    c = load_corpus(_write(tmp_path, "c.json", [{"title": "A", "text": "x"}, {"title": "A", "text": "x"}, {"title": "B", "text": "y"}]))
    assert c.strings == ["A\nx", "B\ny"] and c.duplicates == 1
    assert [p.corpus_idx for p in c.passages] == [0, 2]
    raw = load_corpus(_write(tmp_path, "r.json", {"T": ["a", "b"]}), sentence_joiner="")
    assert raw.strings == ["T\nab"]


def test_errors_name_file_record_and_field(tmp_path):
    with pytest.raises(DataError, match=r"c\.json, record 1, field 'text'"):
        load_corpus(_write(tmp_path, "c.json", [{"title": "A", "text": "x"}, {"title": "B"}]))
    with pytest.raises(DataError, match="corpus is empty"):
        load_corpus(_write(tmp_path, "e.json", []))
    with pytest.raises(DataError, match="duplicate question id"):
        load_queries(_write(tmp_path, "q.json", [{"id": "a", "question": "x"}, {"id": "a", "question": "y"}]))
    bad = tmp_path / "bad.json"
    bad.write_bytes(b"[\xff]")
    with pytest.raises(DataError, match="not valid UTF-8"):
        load_corpus(bad)
    with pytest.raises(DataError, match="file not found"):
        load_corpus(tmp_path / "nope.json")


def test_gold_coverage_counts_missing_gold(tmp_path):
    corpus = load_corpus(_write(tmp_path, "c.json", [{"title": "A", "text": "x"}]))
    queries = load_queries(_write(tmp_path, "q.json", [
        {"id": "1", "question": "q", "paragraphs": [{"title": "A", "text": "x"}, {"title": "Z", "text": "z"}]},
        {"id": "2", "question": "q"},
    ]))
    cov = check_gold_in_corpus(queries, corpus)
    assert (cov.n_gold, cov.n_missing, cov.queries_with_missing, cov.queries_without_gold) == (2, 1, ["1"], ["2"])


def test_openie_old_format_matched_by_passage_and_new_format_round_trip(tmp_path):
    corpus = load_corpus(_write(tmp_path, "c.json", [{"title": "A", "text": "x"}, {"title": "B", "text": "y"}]))
    old = _write(tmp_path, "old.json", {"docs": [
        {"title": "A", "text": "x", "extracted_entities": ["a"], "extracted_triples": [["a", "r", "b"]]},
        {"passage": "Q\nq", "extracted_entities": [], "extracted_triples": []},
    ], "avg_ent_chars": float("nan"), "avg_ent_words": 1.0})
    imp = import_openie(old, corpus)
    assert list(imp.by_passage_id) == [passage_id("A\nx")]
    assert imp.missing == ["B\ny"] and imp.unmatched == 1
    new = tmp_path / "new.json"
    write_openie(new, [Extraction("A\nx", ["a"], [["a", "r", "b"]])])
    data = json.loads(new.read_text())
    assert data["docs"][0]["idx"] == passage_id("A\nx") and data["avg_ent_chars"] == 1.0
    assert parse_openie(new)[0].triples == [["a", "r", "b"]]
