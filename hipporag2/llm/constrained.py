"""Constrained decoding to a JSON schema (or an EBNF grammar) for the transformers backend,
with xgrammar.

xgrammar (the grammar engine vLLM and SGLang use) compiles a JSON schema into a
pushdown automaton over the model's vocabulary and, at every decoding step, fills a
bitmask of the tokens that keep the output a valid prefix. Its C++ matcher costs
microseconds per token, negligible next to a forward pass even for a 135M model.

`JsonSchemaConstraints` belongs to one loaded model: it builds the tokenizer's
vocabulary table once and caches compiled grammars by schema text.
`BatchGrammarProcessor` is a transformers `LogitsProcessor` for ONE `generate` call
whose rows may each carry a different schema, or none (unconstrained rows are left
untouched), so a batch can mix the NER schema, the triple schema and free text.

Once a row's JSON is complete, the grammar allows only the stop tokens, so the row
ends with end-of-turn at the closing brace instead of running on to
`max_new_tokens`. A row cut at `max_new_tokens` is an incomplete JSON prefix; the
lenient parsers downstream repair such answers as they do unconstrained ones.

Compilation uses `any_whitespace=False`: the output is compact JSON with the
separators `", "` and `": "` (what `json.dumps` writes, and what the prompts' worked
examples show), so the model cannot spend its budget on whitespace. Schema keywords
the small model benefits from (`maxItems`, `minItems`, `minLength`, `maxLength`) are
enforced; `additionalProperties` defaults to false (xgrammar's strict mode).
"""
from __future__ import annotations

import json
import logging
import threading
from typing import Any, Dict, List, Optional, Sequence

log = logging.getLogger(__name__)


def available() -> bool:
    """Whether xgrammar can be imported (it is a declared dependency; this guards odd installs)."""
    try:
        import xgrammar  # noqa: F401
    except Exception:  # noqa: BLE001 - any import failure means "not usable"
        return False
    return True


def canonical_schema(schema: str | Dict[str, Any]) -> str:
    """Schema text with sorted keys, so equal schemas share one compiled grammar."""
    obj = json.loads(schema) if isinstance(schema, str) else schema
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


class JsonSchemaConstraints:
    """Compiled JSON-schema grammars for one tokenizer (thread-safe cache)."""

    def __init__(self, tokenizer: Any, vocab_size: int, stop_token_ids: Sequence[int], max_threads: int = 1) -> None:
        import xgrammar as xgr

        self._xgr = xgr
        # vocab_size: the model's logits width, which may exceed len(tokenizer)
        # (padded embedding matrices); ids without a token are never allowed.
        self.tokenizer_info = xgr.TokenizerInfo.from_huggingface(
            tokenizer, vocab_size=int(vocab_size), stop_token_ids=list(stop_token_ids)
        )
        self.vocab_size = int(vocab_size)
        self.stop_token_ids = list(stop_token_ids)
        self._compiler = xgr.GrammarCompiler(self.tokenizer_info, max_threads=max(1, int(max_threads)))
        self._compiled: Dict[str, Any] = {}
        self._lock = threading.Lock()

    def compile(self, schema: str | Dict[str, Any]) -> Any:
        key = canonical_schema(schema)
        with self._lock:
            grammar = self._compiled.get(key)
            if grammar is None:
                grammar = self._compiler.compile_json_schema(key, any_whitespace=False, strict_mode=True)
                self._compiled[key] = grammar
        return grammar

    def compile_grammar(self, ebnf: str) -> Any:
        """An EBNF grammar (root rule `root`), for answers that are not JSON."""
        key = "ebnf:" + ebnf
        with self._lock:
            grammar = self._compiled.get(key)
            if grammar is None:
                grammar = self._compiler.compile_grammar(ebnf)
                self._compiled[key] = grammar
        return grammar

    def processor(self, schemas: Sequence[Optional[str]],
                  grammars: Optional[Sequence[Optional[str]]] = None) -> "BatchGrammarProcessor":
        """A fresh processor for one `generate` call; row i is constrained by `grammars[i]`
        (EBNF) when given, else by `schemas[i]` (None for both: free)."""
        ebnf = list(grammars) if grammars is not None else [None] * len(schemas)
        return BatchGrammarProcessor(
            [self.compile_grammar(g) if g else (self.compile(s) if s else None) for s, g in zip(schemas, ebnf)],
            self.vocab_size)


def _logits_processor_base() -> type:
    from transformers import LogitsProcessor

    return LogitsProcessor


class BatchGrammarProcessor(_logits_processor_base()):  # type: ignore[misc]
    """Per-row grammar masks for one `generate` call (use once, then discard).

    transformers calls the processor before every new token with all ids so far;
    from the second call on, the last column holds the token chosen for each row,
    which the row's matcher consumes before the next mask is filled. Rows without a
    grammar, and rows whose grammar has already accepted a stop token (they are
    finished and only receive padding), are not masked.
    """

    def __init__(self, grammars: List[Any], vocab_size: int) -> None:
        import xgrammar as xgr

        self._xgr = xgr
        self.matchers: List[Any] = [xgr.GrammarMatcher(g) if g is not None else None for g in grammars]
        self.vocab_size = vocab_size
        self.bitmask = xgr.allocate_token_bitmask(len(grammars), vocab_size)
        self._started = False
        # Rows whose matcher refused a token (cannot happen when the mask was applied;
        # kept as a guard so a bug degrades to unconstrained output, not a crash).
        self.rejected: List[int] = []

    def __call__(self, input_ids: Any, scores: Any) -> Any:
        if input_ids.shape[0] != len(self.matchers):
            raise RuntimeError(f"grammar processor built for {len(self.matchers)} rows, got {input_ids.shape[0]}")
        if self._started:
            last = input_ids[:, -1].tolist()
            for i, m in enumerate(self.matchers):
                if m is None or m.is_terminated():
                    continue
                if not m.accept_token(int(last[i])):
                    log.warning("constrained decoding: row %d left its grammar; unconstrained from here", i)
                    self.rejected.append(i)
                    self.matchers[i] = None
        self._started = True
        active = [i for i, m in enumerate(self.matchers) if m is not None and not m.is_terminated()]
        if not active:
            return scores
        for i in active:
            self.matchers[i].fill_next_token_bitmask(self.bitmask, i)
        device = scores.device
        work = scores if device.type in ("cpu", "cuda") else scores.to("cpu")
        width = min(int(work.shape[-1]), self.vocab_size)
        self._xgr.apply_token_bitmask_inplace(work, self.bitmask.to(work.device), vocab_size=width, indices=active)
        if work.shape[-1] > width:
            # Logits wider than the grammar's vocabulary (padded embeddings): never allowed.
            work[active, width:] = float("-inf")
        return work if work is scores else work.to(device)
