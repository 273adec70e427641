"""`llm.prompts=reference`: our messages against the reference implementation's own
rendering, byte for byte (installed `hipporag==2.0.0a4` wheel, heavy imports replaced by
stand-ins: tests/reference_oracle.py).

The reference renders with its own `PromptTemplateManager`, inside its own `OpenIE.ner`,
`OpenIE.triple_extraction` and `HippoRAG.qa`, run on bare objects whose LLM is a
stand-in written here (it records the messages and returns a reply under test; no
model). Inputs: every passage of the shared MuSiQue set (NER; triples with the entities
the NER reply gives, as the reference reads and serialises them), every question (query
NER; the reader over our top-5 of the shared HippoRAG 2 run, and the answer read from a
corpus of replies). Then one run through `llm=openai_compatible` with no other LLM
setting against a loopback server with canned replies (not an LLM: it answers NER with
the shared extraction), where every request must equal the reference's rendering.
A failing comparison names the input and the first difference.
"""
from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any, Dict, List, Sequence

import pytest

from tests import reference_oracle

reference_oracle.require_reference()

from hipporag2.openie import prompts as openie_prompts  # noqa: E402
from hipporag2.openie.parse_reference import reference_entities  # noqa: E402
from hipporag2.qa import prompts as qa_prompts  # noqa: E402
from hipporag2.qa.reader import extract_answer_reference  # noqa: E402

ROLES = {"system": "system", "user": "user", "assistant": "assistant"}


class RecordingLLM:
    """Stands in for the reference's LLM object only: records every request's messages
    and answers with the reply the test set (no model)."""

    def __init__(self):
        self.reply = ""
        self.sent: List[list] = []

    def infer(self, messages, **kwargs):
        self.sent.append(messages)
        return self.reply, {"finish_reason": "stop"}, False


@pytest.fixture(scope="module")
def ref():
    m = reference_oracle.load("HippoRAG", "utils.misc_utils", "prompts.prompt_template_manager",
                              "information_extraction.openie_openai")
    manager = m["prompts.prompt_template_manager"].PromptTemplateManager(role_mapping=dict(ROLES))
    llm = RecordingLLM()
    openie = object.__new__(m["information_extraction.openie_openai"].OpenIE)  # never its __init__ (an OpenAI client)
    openie.prompt_template_manager, openie.llm_model = manager, llm
    rag = object.__new__(m["HippoRAG"].HippoRAG)
    rag.prompt_template_manager, rag.llm_model = manager, llm
    return SimpleNamespace(manager=manager, llm=llm, openie=openie, rag=rag,
                           QuerySolution=m["utils.misc_utils"].QuerySolution)


def _pairs(messages: Sequence) -> list:
    return [(m["role"], m["content"]) if isinstance(m, dict) else tuple(m) for m in messages]


def first_difference(ours: Sequence, theirs: Sequence) -> str:
    ours, theirs = _pairs(ours), _pairs(theirs)
    for i, ((r1, c1), (r2, c2)) in enumerate(zip(ours, theirs)):
        if r1 != r2:
            return f"message {i}: role ours {r1!r}, reference {r2!r}"
        if c1 != c2:
            at = next((k for k, (a, b) in enumerate(zip(c1, c2)) if a != b), min(len(c1), len(c2)))
            return (f"message {i} ({r1}), character {at}: ours {c1[max(0, at - 30):at + 30]!r}, "
                    f"reference {c2[max(0, at - 30):at + 30]!r}")
    return f"number of messages: ours {len(ours)}, reference {len(theirs)}"


def assert_same(ours, theirs, label: str) -> None:
    assert _pairs(ours) == _pairs(theirs), f"{label}: {first_difference(ours, theirs)}"


# ---- the reference's steps, driven with a recorded reply -----------------------------

def reference_ner(ref, passage: str, reply: str):
    """(messages the reference sends for the passage, the entities it reads from `reply`)."""
    ref.llm.reply, ref.llm.sent = reply, []
    with reference_oracle.quiet():
        out = ref.openie.ner(chunk_key="c", passage=passage)
    return ref.llm.sent[0], out.unique_entities


def reference_triples(ref, passage: str, entities: list):
    ref.llm.reply, ref.llm.sent = '{"triples": []}', []
    with reference_oracle.quiet():
        ref.openie.triple_extraction(chunk_key="c", passage=passage, named_entities=entities)
    return ref.llm.sent[0]


def reference_reader(ref, dataset: Any, questions: Sequence[str], docs: Sequence[Sequence[str]], replies: Sequence[str],
                     top_k: int = 5):
    """(messages per question, answer per question) of the reference's `HippoRAG.qa`."""
    import logging

    replies_left = iter(replies)

    class PerQuestion(RecordingLLM):
        def infer(self, messages, **kwargs):
            self.reply = next(replies_left)
            return super().infer(messages, **kwargs)

    llm = PerQuestion()
    ref.rag.llm_model = llm
    ref.rag.global_config = SimpleNamespace(qa_top_k=top_k, dataset=dataset)
    logging.getLogger("hipporag").disabled = True
    with reference_oracle.quiet():
        solutions, _, _ = ref.rag.qa([ref.QuerySolution(question=q, docs=list(d)) for q, d in zip(questions, docs)])
    return llm.sent, [s.answer for s in solutions]


def ner_reply(entities: list, i: int) -> str:
    """A NER reply in one of a few shapes, so that the entities the triple prompt carries
    include escapes, repeats and a non-string element."""
    shape = i % 5
    if shape == 1:
        return json.dumps({"named_entities": entities}, ensure_ascii=False)
    if shape == 2:
        return json.dumps({"named_entities": entities + entities[:2]})  # repeats
    if shape == 3:
        return "```json\n" + json.dumps({"named_entities": entities + [1963]}) + "\n```"  # a number
    if shape == 4:
        return "Entities: " + json.dumps({"named_entities": entities}, indent=2)
    return json.dumps({"named_entities": entities})


# ---- the shared set ------------------------------------------------------------------

@pytest.fixture(scope="module")
def shared_openie(shared_data):
    from tests.conftest import MUSIQUE_OPENIE

    docs = json.loads(MUSIQUE_OPENIE.read_text(encoding="utf-8"))["docs"]
    return {d["passage"]: d for d in docs}


def test_openie_messages_of_every_shared_passage(ref, shared_data, shared_openie):
    """NER and triple messages of every shared passage equal the reference's; the
    triple prompt carries the entities the reference reads from the same NER reply."""
    from tests.conftest import musique_docs

    ours = openie_prompts.openie_prompts("reference")
    passages = musique_docs(shared_data)
    assert len(passages) > 1000
    non_ascii = 0
    for i, passage in enumerate(passages):
        entities = list(shared_openie[passage]["extracted_entities"])
        reply = ner_reply(entities, i)
        theirs, their_entities = reference_ner(ref, passage, reply)
        assert_same(ours.ner(passage), theirs, f"NER of passage {i} ({passage[:40]!r})")
        read = reference_entities(reply).value
        assert read == their_entities, f"NER reply of passage {i}: ours {read!r}, reference {their_entities!r}"
        assert_same(ours.triples(passage, read), reference_triples(ref, passage, their_entities),
                    f"triples of passage {i} ({passage[:40]!r}, reply shape {i % 5})")
        non_ascii += any(not e.isascii() for e in entities if isinstance(e, str))
    assert non_ascii > 0  # the ASCII escapes of the entity list were exercised


def test_query_ner_messages_of_every_shared_question(ref, shared_data):
    ours = openie_prompts.openie_prompts("reference")
    questions = [q["question"] for q in json.loads((shared_data / "musique_train.json").read_text(encoding="utf-8"))]
    for i, q in enumerate(questions):
        assert_same(ours.query_ner(q), ref.manager.render("ner_query", query=q), f"query NER of question {i} ({q!r})")


# Replies the reader's answer extraction is checked on (one per question, cycled).
REPLIES = [
    "The employer is X. \nAnswer: 1862.",
    "Answer: Paris",
    "Thought: a.\nAnswer: A\nAnswer: B",
    "answer: lowercase marker only",
    "no marker at all ",
    "",
    "Answer:",
    "x Answer:  spaced  \n",
    "Answer: one Answer: two Answer: three",
    "\nAnswer:\nnext line",
    "ANSWER: upper",
    "Answer: ünïcödé — dash",
]


def test_reader_messages_and_answers_over_our_top5(ref, musique_hipporag2_run, shared_data):
    """Every shared question over our top-5: the reader's messages equal the reference's
    `HippoRAG.qa` (dataset `musique_train`, which falls back to the MuSiQue template as
    the reference does), and the answer we read from each reply is the reference's."""
    run_dir, _ = musique_hipporag2_run
    corpus = json.loads((shared_data / "musique_train_corpus.json").read_text(encoding="utf-8"))
    rows = [json.loads(line) for line in (run_dir / "retrieval.jsonl").read_text(encoding="utf-8").splitlines()]
    assert len(rows) == 100
    questions = [r["question"] for r in rows]
    docs = [[corpus[p["corpus_idx"]]["title"] + "\n" + corpus[p["corpus_idx"]]["text"] for p in r["ranked"][:5]]
            for r in rows]
    replies = [REPLIES[i % len(REPLIES)] for i in range(len(rows))]
    theirs, answers = reference_reader(ref, "musique_train", questions, docs, replies)
    prompt = qa_prompts.reader_prompt("reference", "musique_train")
    assert prompt.template.name == "rag_qa_musique" and prompt.requested == "rag_qa_musique_train"
    for i, row in enumerate(rows):
        assert_same(prompt.messages(docs[i], row["question"]), theirs[i], f"reader of question {row['id']}")
        got = extract_answer_reference(replies[i])[0]
        assert got == answers[i], f"answer of reply {replies[i]!r}: ours {got!r}, reference {answers[i]!r}"
    # (title, text) pairs render as the passage strings do.
    pairs = [tuple(d.split("\n", 1)) for d in docs[0]]
    assert prompt.messages(pairs, questions[0]) == prompt.messages(docs[0], questions[0])


def test_reader_template_falls_back_as_the_reference(ref):
    """A dataset with its own template in the wheel uses it; any other uses MuSiQue's."""
    for dataset in ("musique", "hotpotqa", "2wikimultihopqa", None, "demo"):
        prompt = qa_prompts.reader_prompt("reference", dataset)
        theirs, _ = reference_reader(ref, dataset, ["Q?"], [["T\nx $y", "U\nz"]], ["Answer: a"])
        assert_same(prompt.messages(["T\nx $y", "U\nz"], "Q?"), theirs[0], f"reader of dataset {dataset!r}")
        expected = f"rag_qa_{dataset}" if ref.manager.is_template_name_valid(f"rag_qa_{dataset}") else "rag_qa_musique"
        assert prompt.template.name == expected


def test_templates_read_without_the_package_imports():
    """Reading every template runs none of the package's imports (torch, vLLM, openai)."""
    import subprocess
    import sys

    code = ("import sys; from hipporag2.llm.reference_templates import ReferenceTemplates as R; t = R.installed(); "
            "names = sorted(p.stem for p in t.folder.glob('*.py') if p.stem != '__init__'); "
            "[t.get(n) for n in names]; "
            "heavy = [m for m in sys.modules if m.split('.')[0] in ('hipporag', 'torch', 'vllm', 'openai', 'tenacity')]; "
            "print(len(names), heavy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split(None, 1)
    assert int(out[0]) >= 6 and out[1].strip() == "[]", out


def test_every_template_renders_as_the_wheels_manager(ref):
    """Our reading of each template file equals the wheel's own manager's, and the
    sha256 recorded for it changes with its text."""
    from hipporag2.llm.reference_templates import ReferenceTemplates

    ours = ReferenceTemplates.installed()
    values = dict(passage="A\nb $c", named_entity_json='{"named_entities": ["x"]}', query="q?", prompt_user="u\n")
    names = ref.manager.list_template_names()
    assert {"ner", "triple_extraction", "ner_query", "rag_qa_musique"} <= set(names)
    for name in names:
        assert_same(ours.render(name, **values), ref.manager.render(name, **values), f"template {name}")
    assert len({ours.get(n).sha256 for n in names}) == len(names)


# ---- a run through an OpenAI-compatible server ---------------------------------------
# A loopback HTTP endpoint with canned replies, not an LLM: what is tested is the
# requests a run sends with `llm=openai_compatible llm.base_url=...` and no prompt setting.

def test_every_request_of_a_run_is_the_reference_rendering(ref, shared_data, shared_openie, tmp_path):
    import uuid

    from hipporag2 import HippoRAG
    from tests.conftest import musique_docs
    from tests.test_shared_musique import _CannedServer

    questions = json.loads((shared_data / "musique_train.json").read_text(encoding="utf-8"))[:4]
    gold = [p["title"] + "\n" + p["paragraph_text"] for q in questions for p in q["paragraphs"] if p["is_supporting"]]
    docs = list(dict.fromkeys(gold + musique_docs(shared_data)[:4]))[:12]
    ner_system = ref.manager.render("ner", passage="")[0]["content"]
    triple_system = ref.manager.render("triple_extraction", passage="", named_entity_json="")[0]["content"]
    by_last = {d: i for i, d in enumerate(docs)}

    def reply(body: Dict) -> str:
        try:
            return canned(body)
        except Exception as exc:  # noqa: BLE001 - answered, so that the run is not left waiting
            return f"test server error: {exc!r}"

    def canned(body: Dict) -> str:
        system, last = body["messages"][0]["content"], body["messages"][-1]["content"]
        if system == ner_system and last in by_last:
            return ner_reply(list(shared_openie[last]["extracted_entities"]), by_last[last])
        if system == triple_system:
            passage = next(d for d in docs if f"\n{d}\n" in last)
            return json.dumps({"triples": shared_openie[passage]["extracted_triples"]})
        return "Some thought.\nAnswer: x"

    server = _CannedServer(reply)
    try:
        rag = HippoRAG(tmp_path / "save", ["embedding=minilm", "retrieval.filter=none", "llm=openai_compatible",
                                          f"llm.base_url={server.url}", f"llm.model=canned-{uuid.uuid4().hex[:8]}",
                                          "llm.max_retries=0", "llm.timeout_s=60", f"cache_dir={tmp_path / 'cache'}", "progress=false"])
        assert rag.index(docs) == len(docs)
        report = rag.rag_qa([q["question"] for q in questions])
    finally:
        server.close()
    sent = {"ner": [], "triples": [], "qa": []}
    for body, _, _ in server.requests:
        system = body["messages"][0]["content"]
        stage = "ner" if system == ner_system else "triples" if system == triple_system else "qa"
        sent[stage].append(body)
        # The reference's generation settings for every stage over an API: temperature 0,
        # its default limit of 2048 new tokens (sent as max_tokens to a non-OpenAI model), one choice.
        assert body["temperature"] == 0 and body["max_tokens"] == 2048 and body.get("n", 1) == 1, (stage, body)
    assert (len(sent["ner"]), len(sent["triples"]), len(sent["qa"])) == (len(docs), len(docs), len(questions))
    expected_ner = {d: reference_ner(ref, d, ner_reply(list(shared_openie[d]["extracted_entities"]), i))
                    for i, d in enumerate(docs)}
    for body in sent["ner"]:
        d = body["messages"][-1]["content"]
        assert_same(body["messages"], expected_ner[d][0], f"NER request of {d[:40]!r}")
    expected_triples = {json.dumps(reference_triples(ref, d, ents)) for d, (_, ents) in expected_ner.items()}
    for body in sent["triples"]:
        assert json.dumps(body["messages"]) in expected_triples, "a triple request differs from every reference rendering"
    results = report.results
    theirs, _ = reference_reader(ref, "demo", [r.question for r in results], [r.docs for r in results],
                                 ["Answer: x"] * len(results))
    ours = sorted(json.dumps(b["messages"]) for b in sent["qa"])
    assert ours == sorted(json.dumps(m) for m in theirs), "reader requests differ from the reference's"
