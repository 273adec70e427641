"""What `make demo` relies on, checked without running a model: the shipped corpus'
bridge questions, the curated OpenIE file, the llm=smollm2_cpu preset and the
reader's JSON answer format."""
import json
from pathlib import Path

import pytest

from hipporag2.cli import compose
from hipporag2.data.loaders import load_corpus, load_queries
from hipporag2.openie.interchange import import_openie
from hipporag2.qa.prompts import ANSWER_SCHEMA, reader_messages
from hipporag2.qa.reader import extract_json_answer

REPO = Path(__file__).resolve().parent.parent
DEMO = REPO / "hipporag2" / "resources" / "demo"


def test_every_demo_question_needs_a_bridge_passage_it_does_not_name():
    corpus = load_corpus(DEMO / "demo_corpus.json")
    titles = {p.string: p.title for p in corpus.passages}
    for q in load_queries(DEMO / "demo.json"):
        gold_titles = [titles[s] for s in q.gold_passages]
        assert len(gold_titles) >= 2, q.id
        unnamed = [t for t in gold_titles if t.lower() not in q.question.lower()]
        assert unnamed, f"{q.id}: every gold passage's title is in the question"


def test_curated_openie_covers_the_corpus_and_says_what_it_is():
    corpus = load_corpus(DEMO / "demo_corpus.json")
    imp = import_openie(DEMO / "demo_openie_curated.json", corpus)
    assert not imp.missing and imp.unmatched == 0 and imp.triples_not_three == 0
    assert all(ex.triples for ex in imp.by_passage_id.values())
    about = json.loads((DEMO / "demo_openie_curated.json").read_text())["about"]
    assert "Hand-written" in about and "NOT produced by any model" in about


def test_smollm2_preset_carries_the_demo_settings(tmp_path):
    cfg = compose(["llm=smollm2_cpu", "qa=reader", f"run_dir={tmp_path}"])
    assert cfg.llm.constrained_decoding and cfg.llm.batch_size == 32 and cfg.llm.cpu_threads is None
    assert cfg.llm.max_new_tokens == 64
    assert (cfg.openie.ner_max_new_tokens, cfg.openie.triples_max_new_tokens) == (48, 128)
    assert cfg.qa.answer_format == "json" and cfg.qa.enabled
    r = cfg.retrieval  # the filter a 135M model can follow, read leniently (constrained replies are bare JSON)
    assert (r.filter_program, r.filter_parse, r.filter_max_new_tokens) == ("own", "lenient", 64)
    plain = compose([f"run_dir={tmp_path}"])
    assert plain.qa.answer_format == "marker" and plain.openie.ner_max_new_tokens is None


def test_unknown_answer_format_is_refused(tmp_path):
    from hipporag2.config import ConfigError

    with pytest.raises(ConfigError, match="answer_format"):
        compose(["qa=reader", "qa.answer_format=jsn", f"run_dir={tmp_path}"])


@pytest.mark.parametrize("reply, expected", [
    ('{"answer": "Brackmoor"}', "Brackmoor"),
    ('{"answer": " River Tessaly "}', "River Tessaly"),
    ('{"answer": "Brack', "Brack"),  # cut at the token limit inside the string
    ('{"answer": "a \\"b\\" c"}', 'a "b" c'),
    ("It is Kelvarre.\nAnswer: Kelvarre", "Kelvarre"),  # not JSON: the marker rule
])
def test_json_answers_are_extracted(reply, expected):
    assert extract_json_answer(reply) == (expected, True)


def test_json_reader_prompt_matches_its_schema():
    schema = json.loads(ANSWER_SCHEMA)
    msgs = reader_messages([("T", "text")], "Q?", "json")
    example = json.loads(msgs[2][1])
    assert set(example) == set(schema["required"]) == {"answer"}
    assert '{"answer": "..."}' in msgs[0][1]
