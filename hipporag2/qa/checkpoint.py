"""The QA stage's checkpoint: `qa.partial.jsonl` in the run folder.

Why a file of its own when the LLM response cache already keeps answers: the cache is
written as a backend returns, which for vLLM is once per call, and it may be shared,
pruned or absent (the library without a cache_dir); the checkpoint is the run's own
record of which questions are answered. It holds a header naming the work (a digest
of every request's response-cache key: model, decoding, prompt, passages, question)
and one line per finished chunk of reader calls, each appended with flush and fsync.
A rerun of the same QA work reads the finished chunks back (a line torn by a kill is
cut off, and the read stops at the first call that failed in the LLM) and asks only
the rest; other work (other passages, model or prompt)
discards the file. Replies are kept raw, so how an answer is read from them
(`qa.answer_marker`, `qa.answer_format`) is applied afresh and can change without
asking again.
"""
from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import List, Optional, Sequence

from hipporag2.files import atomicio
from hipporag2.llm.base import ChatResponse
from hipporag2.files.stagekeys import digest

log = logging.getLogger("hipporag2.qa")

QA_PARTIAL = "qa.partial.jsonl"


class QACheckpoint:
    def __init__(self, path: Path, keys: Sequence[str]):
        self.path = Path(path)
        self.keys = list(keys)
        self._log = atomicio.CheckpointLog(self.path, self._header())

    def _header(self) -> dict:
        return {"checkpoint": {"stage": "qa", "n_questions": len(self.keys), "requests": digest(self.keys)}}

    def resume(self) -> List[ChatResponse]:
        """The replies of the finished chunks, in question order (a prefix of the questions)."""
        def accept(obj, start: int):
            rows = obj.get("rows")
            if obj.get("start") != start or not isinstance(rows, list) or \
                    [r.get("key") for r in rows] != self.keys[start : start + len(rows)]:
                return None
            # A failed call is not an answer: the read stops before it, so the rerun asks
            # it again (the answers after it come from the response cache); the next
            # line then starts where this one was cut.
            good = next((n for n, r in enumerate(rows) if r.get("error")), len(rows))
            return [ChatResponse(r["text"], int(r["input_tokens"]), int(r["output_tokens"]), True) for r in rows[:good]]

        existed = self.path.is_file()
        done = atomicio.read_checkpoint_lines(self.path, self._header(), accept)
        if done is None:
            if existed:
                log.info("QA checkpoint %s is of other questions, passages or settings; answering from the start", self.path)
            return []
        if done:
            log.info("QA checkpoint %s: %d of %d questions already answered, resuming", self.path, len(done), len(self.keys))
        return done

    def append(self, start: int, responses: Sequence[ChatResponse]) -> None:
        rows = [{"key": k, "text": r.text, "input_tokens": r.input_tokens, "output_tokens": r.output_tokens, "error": r.error}
                for k, r in zip(self.keys[start : start + len(responses)], responses)]
        self._log.write({"start": start, "rows": rows})

    def close(self) -> None:
        self._log.close()

    def remove(self) -> None:
        self._log.remove()


def remove_checkpoint(run_dir: Optional[Path]) -> None:
    """Once the run's outputs (qa.jsonl, metrics.json) are written, the checkpoint goes."""
    if run_dir is not None:
        QACheckpoint(Path(run_dir) / QA_PARTIAL, []).remove()
