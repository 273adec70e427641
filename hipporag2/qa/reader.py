"""The reader (SPEC §5): answer each question from its top `qa_top_k` retrieved passages.

Batched LLM calls (stage "qa") of at most `qa.chunk_size` questions, sized so that one
takes about `checkpoint_s`; each finished call is appended to the run's
`qa.partial.jsonl` (hipporag2/qa/checkpoint.py), so a rerun after an interrupt or a
kill asks only what was unanswered (and the response cache keeps answers as they
arrive).
Which marker counts (`qa.answer_marker`): `reference` (default) reads the answer as the
reference implementation does, the text between the FIRST `Answer:` (case-sensitive)
and the next one, stripped, or the whole reply (unstripped) when there is none; `last`
takes the text after the LAST `Answer:`, then a case-insensitive `answer:`, else the
stripped reply. Replies without a marker are counted in `qa_no_answer_marker`. EM and token F1 are
the max over the gold answers, ×100 with one decimal. Per-question rows go to
`run_dir/qa.jsonl`. A call that failed in the LLM (after its retries) is no answer:
its row carries the error, and more than `qa.max_failure_rate` of them (default 0)
stop the run once qa.jsonl is written (`gates.check_qa_failures`); the rerun asks only
those again (the checkpoint's read stops at a failed call).
"""
from __future__ import annotations

import logging
import time
from pathlib import Path
from dataclasses import dataclass
from typing import Dict, List, Optional, Sequence, Tuple

from hipporag2.files.atomicio import write_jsonl
from hipporag2.evaluate.metrics import exact_match, token_f1
from hipporag2.llm.base import ChatRequest
from hipporag2.qa import prompts

log = logging.getLogger("hipporag2.qa")

MARKER = "Answer:"


def extract_answer_reference(text: str) -> Tuple[str, bool]:
    """(prediction, marker_found) as the reference reads a reply (module docstring)."""
    parts = (text or "").split(MARKER)
    if len(parts) > 1:
        return parts[1].strip(), True
    return text or "", False


def extract_answer(text: str) -> Tuple[str, bool]:
    """(prediction, marker_found): the text after the last `Answer:` marker."""
    text = text or ""
    pos = text.rfind(MARKER)
    if pos >= 0:
        return text[pos + len(MARKER) :].strip(), True
    pos = text.lower().rfind(MARKER.lower())
    if pos >= 0:
        return text[pos + len(MARKER) :].strip(), True
    return text.strip(), False



def extract_json_answer(text: str, fallback=None) -> Tuple[str, bool]:
    """(prediction, found) from a reply `{"answer": "..."}` (qa.answer_format=json); a
    reply that is not such an object is read by `fallback` (default `extract_answer`)."""
    fallback = fallback or extract_answer
    import json
    import re

    raw = (text or "").strip()
    try:
        obj = json.loads(raw)
    except ValueError:
        m = re.search(r'"answer"\s*:\s*"((?:[^"\\]|\\.)*)', raw)  # a reply cut inside the string
        if m:
            try:
                return json.loads(f'"{m.group(1)}"').strip(), True
            except ValueError:
                return m.group(1).strip(), True
        return fallback(raw)
    if isinstance(obj, dict) and isinstance(obj.get("answer"), str):
        return obj["answer"].strip(), True
    return fallback(raw)


@dataclass
class Answer:
    """One question's reader output."""

    prediction: str
    raw_output: str
    marker_found: bool
    error: Optional[str] = None
    resumed: bool = False  # the reply came from the run's QA checkpoint


# Questions in the first reader call, before the pace is known (then sized by time).
FIRST_CHUNK = 32


def _generate_checkpointed(cfg, llm, requests: List[ChatRequest], checkpoint_dir: Optional[Path]) -> Tuple[List, int]:
    """The replies to `requests`, asked in calls of at most `qa.chunk_size` questions
    that shrink so that one takes about `checkpoint_s` at the measured pace (as OpenIE's
    chunks do); with `checkpoint_dir`, each finished call is appended to its
    `qa.partial.jsonl` and a rerun starts after the last one."""
    from hipporag2.openie.extract import next_chunk_size
    from hipporag2.qa.checkpoint import QA_PARTIAL, QACheckpoint

    max_size = max(1, int(cfg.qa.chunk_size))
    checkpoint_s = float(getattr(cfg, "checkpoint_s", 30.0))
    ckpt = QACheckpoint(Path(checkpoint_dir) / QA_PARTIAL, [llm.key_of(r) for r in requests]) if checkpoint_dir else None
    responses = ckpt.resume() if ckpt is not None else []
    resumed = len(responses)
    pos, size = len(responses), min(max_size, FIRST_CHUNK) if checkpoint_s > 0 else 1
    try:
        while pos < len(requests):
            t0 = time.monotonic()
            got = llm.generate(requests[pos : pos + size], stage="qa", progress=bool(cfg.progress))
            if ckpt is not None:
                ckpt.append(pos, got)
            responses += got
            size = next_chunk_size(max_size, len(got), time.monotonic() - t0, checkpoint_s)
            pos += len(got)
    finally:
        if ckpt is not None:
            ckpt.close()
    return responses, resumed


def answer_questions(cfg, llm, questions: Sequence[str], contexts: Sequence[Sequence[prompts.Context]],
                     checkpoint_dir: Optional[Path] = None, prompt: Optional[prompts.ReaderPrompt] = None) -> List[Answer]:
    """The reader on contexts of passage strings (`title\ntext`) or (title, text) pairs,
    with the prompt of `llm.prompts` (`prompt`: made here when not given), in LLM calls of at most `qa.chunk_size`
    questions sized by `checkpoint_s` (see `_generate_checkpointed`; `checkpoint_dir`
    makes them resumable). With qa.answer_format=json each request carries the
    answer schema (decoded under it where the backend constrains decoding) and the
    reply is read as JSON, falling back to the configured `Answer:` marker rule."""
    from hipporag2.registry import QA_ANSWER_MARKERS

    read_marker = QA_ANSWER_MARKERS.load(cfg.qa.answer_marker)
    fmt = getattr(cfg.qa, "answer_format", "marker")
    schema = prompts.ANSWER_SCHEMA if fmt == "json" else None
    if prompt is None:
        prompt = reader_prompt_of(cfg)
    requests = [ChatRequest(messages=prompt.messages(list(ctx), q, fmt), json_schema=schema)
                for q, ctx in zip(questions, contexts)]
    if fmt == "json":
        def read_answer(text):
            return extract_json_answer(text, read_marker)
    else:
        read_answer = read_marker
    responses, resumed = _generate_checkpointed(cfg, llm, requests, checkpoint_dir)
    out = []
    for i, resp in enumerate(responses):
        if resp.error is not None:
            out.append(Answer("", resp.text, False, resp.error, resumed=i < resumed))
        else:
            prediction, found = read_answer(resp.text)
            out.append(Answer(prediction, resp.text, found, resumed=i < resumed))
    return out


def reader_prompt_of(cfg) -> prompts.ReaderPrompt:
    """The reader prompt of a run: `llm.prompts`, the template of `dataset.name`."""
    return prompts.reader_prompt(getattr(cfg.llm, "prompts", "own"), getattr(cfg.dataset, "name", None))


def run_qa(cfg, llm, queries, corpus, results, run_dir) -> Dict:
    top_k = cfg.qa.qa_top_k
    fmt = getattr(cfg.qa, "answer_format", "marker")
    contexts: List[List[int]] = [list(r.ranked[:top_k]) for r in results]
    prompt = reader_prompt_of(cfg)
    # what each result says the reader reads: its passages' strings (`title\ntext`), or
    # a retriever's own (title, text) context (RAPTOR's tree nodes)
    strings = corpus.strings
    texts = [r.reader_input(top_k, strings) for r in results]
    answers = answer_questions(cfg, llm, [q.question for q in queries], texts, checkpoint_dir=run_dir, prompt=prompt)
    rows, ems, f1s = [], [], []
    no_marker = failures = 0
    for q, ctx, ans in zip(queries, contexts, answers):
        if ans.error is not None:
            failures += 1
        else:
            no_marker += 0 if ans.marker_found else 1
        prediction = ans.prediction
        golds = list(q.gold_answers)
        em = exact_match(prediction, golds) if golds else 0.0
        f1 = token_f1(prediction, golds) if golds else 0.0
        ems.append(em)
        f1s.append(f1)
        row = {
            "id": q.id,
            "question": q.question,
            "gold_answers": golds,
            "prediction": prediction,
            "raw_output": ans.raw_output,
            "passages": [corpus.passages[i].title for i in ctx],
            "corpus_idx": [corpus.passages[i].corpus_idx for i in ctx],
            "em": em,
            "f1": round(f1, 4),
        }
        if ans.error is not None:
            row["error"] = ans.error
        rows.append(row)
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    write_jsonl(run_dir / "qa.jsonl", rows)
    n = len(rows)
    metrics = {
        "qa_em": round(100.0 * sum(ems) / n, 1) if n else 0.0,
        "qa_f1": round(100.0 * sum(f1s) / n, 1) if n else 0.0,
        "qa_n": n,
        "qa_resumed_questions": sum(1 for a in answers if a.resumed),
        "qa_top_k": top_k,
        "qa_no_answer_marker": no_marker,
        "qa_llm_failures": failures,
        "qa_prompts": prompt.describe(),
        "qa_answer_format": fmt,
        "qa_answer_marker": cfg.qa.answer_marker,
    }
    if no_marker or failures:
        log.warning("QA: %d replies without an 'Answer:' marker, %d failed requests", no_marker, failures)
    if failures:
        from hipporag2.gates import check_qa_failures

        first = next(a.error for a in answers if a.error is not None)
        check_qa_failures(failures, n, first, float(getattr(cfg.qa, "max_failure_rate", 0.0)),
                          f"{run_dir / 'qa.jsonl'} and the QA checkpoint")
    return metrics
