"""Fresh OpenIE with an LLM (SPEC §6): one-shot NER, then one-shot triple extraction
conditioned on the passage and its NER list.

Resumability. Passages are processed in chunks; each chunk is one batched NER call and
one batched triple call, after which the whole results file is rewritten atomically
(interchange format, SPEC §1). A chunk holds at most `openie.chunk_size` passages and
fewer when the last one took longer than `checkpoint_s` (`next_chunk_size`), so an
interrupt on a slow CPU model loses seconds, not a 64-passage chunk. The file is the checkpoint: on a restart every passage
already in it is skipped and never sent to the LLM again. (The LLM's own response cache
additionally keeps answers of a chunk that was interrupted half-way.)

Failures:
- an answer that cannot be parsed counts as a parse failure (per step) and yields an
  empty list; the passage is still written, because at temperature 0 asking again
  would give the same answer;
- a request the LLM layer reports as failed (`ChatResponse.error`, after its retries) is
  NOT written, so a later run retries it. Such a passage counts as missing from the
  extraction exactly as a passage absent from an imported file does: below
  `openie.min_coverage` the run stops (`gates.LLMFailureGate`, one line: how many, in
  which step, the first error) once every chunk is written, before anything is
  embedded, and the rerun sends only the failed requests (the response cache answers
  the rest). A coverage the setting accepts goes on with an empty extraction for those
  passages and a key marked incomplete, so no index built from the gap is mistaken for
  a complete one.

Prompts: `llm.prompts` (hipporag2/openie/prompts.py `OpenIEPrompts`): the authors'
templates from the installed reference wheel (`reference`) or our own wording (`own`).

File location: `cfg.openie.output_path`, or `{cache_dir}/openie/{key}.json` where `key`
hashes the corpus, the model, the decoding settings and the prompts (`own`: our
`PROMPT_VERSION`; `reference`: the source and the sha256 of the `ner` and
`triple_extraction` templates).
"""
from __future__ import annotations

import json
import logging
import time
from pathlib import Path
from typing import Dict, List, Optional, Sequence, Tuple

from filelock import FileLock

from hipporag2.files import atomicio
from hipporag2.config import Config, ConfigError
from hipporag2.data.loaders import Corpus
from hipporag2.gates import check_openie_failures, coverage
from hipporag2.llm.base import ChatRequest
from hipporag2.openie import prompts
from hipporag2.openie.interchange import Extraction, parse_openie, write_openie
from hipporag2.openie.parse import LENIENT_READER, OpenIEReader
from hipporag2.files.stagekeys import corpus_digest, digest
from hipporag2.text import passage_id

log = logging.getLogger("hipporag2.openie")

# Passages per checkpoint. Large enough for a server or vLLM to batch well, small
# enough that an interruption loses little (and the response cache keeps even that).
DEFAULT_CHUNK_SIZE = 64
EXTRACT_FORMAT = 1


def next_chunk_size(max_size: int, last_size: int, last_seconds: float, checkpoint_s: float) -> int:
    """Passages in the next chunk, so that a chunk (the unit the results file is
    rewritten after) takes about `checkpoint_s` seconds at the pace of the last one,
    and never more than `max_size` (openie.chunk_size): a slow CPU model checkpoints
    every few passages, a fast server keeps large batches."""
    if last_seconds <= 0 or last_size < 1:
        return max_size
    per_passage = last_seconds / last_size
    return max(1, min(max_size, int(checkpoint_s / per_passage)))


def step_limits(llm_cfg, openie_cfg=None) -> Tuple[int, int]:
    """max_new_tokens of the NER and the triple step (openie.*_max_new_tokens, else llm.max_new_tokens)."""
    ner = getattr(openie_cfg, "ner_max_new_tokens", None) or llm_cfg.max_new_tokens
    tri = getattr(openie_cfg, "triples_max_new_tokens", None) or llm_cfg.max_new_tokens
    return int(ner), int(tri)


def extraction_key(corpus_strings: Sequence[str], model_id: str, llm_cfg, openie_cfg=None,
                   prompt_set: Optional[prompts.OpenIEPrompts] = None) -> str:
    """Hash of everything that changes the extraction of this corpus (`prompt_set`:
    the prompts of `llm.prompts`, read here when not given)."""
    if prompt_set is None:
        prompt_set = prompts.openie_prompts(getattr(llm_cfg, "prompts", "own"))
    decoding = {
        "temperature": llm_cfg.temperature,
        "max_new_tokens": llm_cfg.max_new_tokens,
        "seed": llm_cfg.seed,
        "constrained_decoding": llm_cfg.constrained_decoding,
    }
    ner, tri = step_limits(llm_cfg, openie_cfg)
    # Entered only when they differ from the defaults, so older keys stay valid.
    if (ner, tri) != (llm_cfg.max_new_tokens,) * 2:
        decoding["step_max_new_tokens"] = [ner, tri]
    if llm_cfg.constrained_decoding:
        decoding["schemas"] = digest([prompts.NER_SCHEMA, prompts.TRIPLE_SCHEMA])
    parts = {
        "format": EXTRACT_FORMAT,
        "corpus": corpus_digest(corpus_strings),
        "model": model_id,
        "decoding": decoding,
        "prompt": prompt_set.extraction_key_part(),
    }
    # How replies are read; entered only when not `lenient` (what older keys were made with).
    reading = getattr(openie_cfg, "parse", "lenient")
    if reading != "lenient":
        parts["parse"] = reading
    return digest(parts)


def openie_reader(openie_cfg) -> OpenIEReader:
    """The reader `openie.parse` names (registry OPENIE_PARSERS)."""
    from hipporag2.registry import OPENIE_PARSERS

    return OPENIE_PARSERS.load(getattr(openie_cfg, "parse", "reference"))


def default_output_path(cfg: Config, key: str) -> Path:
    return Path(cfg.cache_dir) / "openie" / f"{key}.json"


def _key_file(path: Path) -> Path:
    return path.with_name(path.name + ".key")


def _check_key(path: Path, key: str, explicit: bool) -> None:
    """An explicit output path may hold another model's extraction: refuse to mix."""
    kf = _key_file(path)
    if kf.is_file():
        old = kf.read_text(encoding="utf-8").strip()
        if old != key:
            raise ConfigError(
                f"openie.output_path={str(path)!r} holds an extraction made with other settings "
                f"(key {old}, this run {key}: corpus, model, decoding or prompt differ); "
                "choose another openie.output_path or delete the file to start over"
            )
    elif explicit and path.is_file():
        log.warning("%s has no key file; its entries are reused as the checkpoint of this extraction", path)


def _load_checkpoint(path: Path) -> List[Extraction]:
    if not path.is_file():
        return []
    return parse_openie(path)


def reply_is_cut(resp, limit: Optional[int]) -> bool:
    """Did the reply stop at its token limit? The reference asks its client for the
    finish reason ("length"); our backends report the output token count, and a reply
    that used all `limit` tokens was stopped by the limit (a reply ending exactly at the
    limit on its own is counted as cut too: for valid JSON the closing step changes
    nothing)."""
    return limit is not None and resp.output_tokens >= limit


class _Counts:
    def __init__(self) -> None:
        self.parse_failures = {"ner": 0, "triples": 0}
        self.repaired = 0
        self.llm_failures = {"openie_ner": 0, "openie_triples": 0}  # failed calls (= failed passages) by stage
        self.first_error = ""
        self.reasons: Dict[str, int] = {}

    @property
    def parse_failures_ner(self) -> int:
        return self.parse_failures["ner"]

    @property
    def parse_failures_triples(self) -> int:
        return self.parse_failures["triples"]

    def read(self, step: str, resp, parser, limit: Optional[int] = None) -> Optional[list]:
        """One answer of `step` parsed ([] if unparsable), or None if the request failed;
        every failure, unparsable answer (with its reason) and repaired cut is counted.
        `parser(text, cut)` is one of an `OpenIEReader`'s; the reply counts as cut at
        the token limit (the reference's finish_reason "length") when it used all of
        `limit` output tokens."""
        if resp.error is not None:
            self.llm_failures["openie_" + step] += 1
            self.first_error = self.first_error or resp.error
            return None
        value, ok, reason = parser(resp.text, reply_is_cut(resp, limit))
        if not ok:
            self.parse_failures[step] += 1
            k = f"{step}:{reason}"
            self.reasons[k] = self.reasons.get(k, 0) + 1
            return []
        if reason in ("truncated", "repaired"):
            self.repaired += 1
        return value


def _extract_chunk(llm, passages: Sequence[str], constrained: bool, progress: bool, counts: _Counts,
                   limits: Tuple[Optional[int], Optional[int]] = (None, None),
                   reader: OpenIEReader = LENIENT_READER,
                   prompt_set: prompts.OpenIEPrompts = prompts.OpenIEPrompts()) -> List[Tuple[Extraction, bool]]:
    """(extraction, complete) per passage; complete=False when an LLM request failed.

    `limits`: max_new_tokens of the NER and the triple requests (None: the LLM's default).
    `reader`: how replies are read (`openie.parse`). `prompt_set`: the messages
    (`llm.prompts`). The triple request carries the NER result as read (the reference's
    prompt serialises it whole); entities that are not strings (the reference's reading
    keeps what the reply wrote) are not stored: the interchange format holds strings
    (docs/quirks.md).
    """
    ner_limit, triple_limit = limits
    ner_schema = prompts.NER_SCHEMA if constrained else None
    ner_out = llm.generate(
        [ChatRequest(messages=prompt_set.ner(p), max_new_tokens=ner_limit, json_schema=ner_schema)
         for p in passages],
        stage="openie_ner",
        progress=progress,
    )
    read = [counts.read("ner", resp, reader.entities, ner_limit) for resp in ner_out]
    failed = [value is None for value in read]
    ner_values: List[list] = [list(value) if value else [] for value in read]
    entities: List[List[str]] = [[e for e in value if isinstance(e, str)] for value in ner_values]
    triple_schema = prompts.TRIPLE_SCHEMA if constrained else None
    todo = [i for i in range(len(passages)) if not failed[i]]
    triple_out = llm.generate(
        [ChatRequest(messages=prompt_set.triples(passages[i], ner_values[i]), max_new_tokens=triple_limit,
                     json_schema=triple_schema) for i in todo],
        stage="openie_triples",
        progress=progress,
    )
    triples: List[list] = [[] for _ in passages]
    for i, resp in zip(todo, triple_out):
        value = counts.read("triples", resp, reader.triples, triple_limit)
        failed[i] = value is None
        triples[i] = value or []
    return [
        (Extraction(passage=p, entities=entities[i], triples=triples[i]), not failed[i])
        for i, p in enumerate(passages)
    ]


def extract_corpus(
    cfg: Config,
    corpus: Corpus,
    llm,
    report: Dict,
    *,
    chunk_size: Optional[int] = None,
) -> Tuple[Dict[str, Extraction], str]:
    """Extractions by passage id (every corpus passage), and the key naming them."""
    strings = corpus.strings
    prompt_set = prompts.openie_prompts(cfg.llm.prompts)
    key = extraction_key(strings, llm.model_id, cfg.llm, cfg.openie, prompt_set)
    explicit = bool(cfg.openie.output_path)
    path = Path(cfg.openie.output_path) if explicit else default_output_path(cfg, key)
    chunk_size = int(chunk_size or getattr(cfg.openie, "chunk_size", None) or DEFAULT_CHUNK_SIZE)
    if chunk_size < 1:
        raise ConfigError(f"OpenIE chunk size must be >= 1, got {chunk_size}")
    constrained = bool(cfg.llm.constrained_decoding)
    counts = _Counts()
    atomicio.make_dirs(path.parent)

    # One extractor per file at a time; a second process waits, then finds it done.
    with FileLock(str(path) + ".lock"):
        _check_key(path, key, explicit)
        corpus_ids = [passage_id(s) for s in strings]
        wanted = set(corpus_ids)
        done: Dict[str, Extraction] = {}
        foreign: List[Extraction] = []  # entries of other corpora in a shared file: kept
        for ex in _load_checkpoint(path):
            if ex.idx in wanted:
                done.setdefault(ex.idx, ex)
            else:
                foreign.append(ex)
        todo = [i for i, pid in enumerate(corpus_ids) if pid not in done]
        resumed = len(done)
        if resumed:
            log.info("OpenIE checkpoint %s: %d of %d passages already extracted, %d to go", path, resumed, len(strings), len(todo))
        else:
            log.info("OpenIE: extracting %d passages with %s into %s", len(todo), llm.model_id, path)
        atomicio.write_text(_key_file(path), key + "\n", what="OpenIE key file")

        failed_ids: List[str] = []
        failed_ex: Dict[str, Extraction] = {}
        pos, size = 0, chunk_size
        while pos < len(todo):
            chunk = todo[pos : pos + size]
            t0 = time.monotonic()
            results = _extract_chunk(llm, [strings[i] for i in chunk], constrained, cfg.progress, counts,
                                     step_limits(cfg.llm, cfg.openie), openie_reader(cfg.openie), prompt_set)
            for i, (ex, complete) in zip(chunk, results):
                if complete:
                    done[corpus_ids[i]] = ex
                else:
                    failed_ids.append(corpus_ids[i])
                    failed_ex[corpus_ids[i]] = ex
            ordered = [done[pid] for pid in corpus_ids if pid in done]
            write_openie(path, ordered + foreign)
            log.info("OpenIE: %d/%d passages written to %s", len(done), len(strings), path)
            pos += len(chunk)
            size = next_chunk_size(chunk_size, len(chunk), time.monotonic() - t0, getattr(cfg, "checkpoint_s", 30.0))
            if failed_ids and coverage(len(strings), len(failed_ids)) < cfg.openie.min_coverage:
                break  # the gate below fires whatever the rest gives: leave it to the rerun
        not_asked = len(todo) - pos
        if not todo and not path.is_file():
            write_openie(path, foreign)  # empty corpus: still leave a valid file

    by_id: Dict[str, Extraction] = dict(done)
    for pid in failed_ids:
        by_id[pid] = Extraction(passage=failed_ex[pid].passage)
    n_triples = sum(len(ex.triples) for ex in done.values())
    report.update(
        openie_source=str(path),
        openie_passages=len(strings),
        openie_new_passages=len(todo),
        openie_resumed_passages=resumed,
        openie_parse_failures_ner=counts.parse_failures_ner,
        openie_parse_failures_triples=counts.parse_failures_triples,
        openie_truncation_repairs=counts.repaired,
        openie_llm_failures=len(failed_ids),
        openie_llm_failures_by_stage=dict(counts.llm_failures),
        openie_triples=n_triples,
        openie_passages_without_triples=sum(1 for ex in done.values() if not ex.triples),
        openie_prompts=prompt_set.describe(prompts.NER_TEMPLATE, prompts.TRIPLE_TEMPLATE),
    )
    if counts.parse_failures_ner or counts.parse_failures_triples:
        log.warning(
            "OpenIE: %d NER and %d triple answers could not be parsed (kept as empty lists): %s",
            counts.parse_failures_ner, counts.parse_failures_triples, json.dumps(counts.reasons, sort_keys=True),
        )
    openie_key = "extract-" + key
    if failed_ids:
        report["openie_coverage"] = check_openie_failures(str(path), len(strings), counts.llm_failures,
                                                          counts.first_error, cfg.openie.min_coverage, not_asked)
        log.warning(
            "OpenIE: %d passages failed in the LLM and were not written; rerun to retry them", len(failed_ids)
        )
        openie_key += "-incomplete-" + digest(sorted(failed_ids))
    return by_id, openie_key
