"""`retrieval.method=lightrag`: LightRAG's index of the run's corpus, cached by content,
and a retriever that asks LightRAG each question.

LightRAG runs in its own environment (`lightrag_env`), as a subprocess
(`lightrag_driver.py`) whose LLM and embedding calls reach this process's LLM and
encoder through a `LoopbackEndpoint`. So its calls go through the run's response cache
and token accounting: an interrupted indexing, rerun, pays only for the calls it had
not finished (LightRAG's working folder is kept per cache key and the driver resumes
it); a rerun of a finished one makes no LLM call at all.

Per question, LightRAG's raw answer is restated by our reader (the reader's context is
that answer alone: Appendix G.2, docs/quirks.md), and the chunks it used give a passage
ranking (each chunk is of one passage: every passage is inserted as its own document).
"""
from __future__ import annotations

import json
import logging
import subprocess
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from filelock import FileLock

from hipporag2.files import atomicio
from hipporag2.baselines import lightrag_env
from hipporag2.baselines.common import StoreEncoder, indexing_bill, table12
from hipporag2.baselines.endpoint import GrammarRule, LoopbackEndpoint
from hipporag2.baselines.lightrag_grammar import extraction_grammar
from hipporag2.results import QueryResult
from hipporag2.files.stagekeys import corpus_digest, digest

log = logging.getLogger("hipporag2.lightrag")

INDEX_STAGE = "lightrag_index"
QUERY_STAGE = "lightrag_query"
# Bump when what the driver inserts or how it configures LightRAG changes.
INDEX_VERSION = 1
# The title the reader sees above LightRAG's raw answer (its only context).
ANSWER_TITLE = "LightRAG's answer"
# Settings read only when answering (not part of the index key).
_QUERY_ONLY = ("mode", "response_type", "top_k", "chunk_top_k", "max_entity_tokens", "max_relation_tokens",
               "max_total_tokens", "cosine_threshold", "kg_chunk_pick_method", "answer_max_new_tokens",
               "keyword_max_items")
# Settings that change nothing LightRAG computes.
_HOW_ONLY = ("env", "tiktoken_cache_dir", "llm_max_async", "max_parallel_insert", "embedding_max_async",
             "embedding_batch_num", "llm_timeout_s")


def doc_id(i: int) -> str:
    """LightRAG's document id (and file path) of passage `i`."""
    return f"p{i}"


def passage_of(doc: Optional[str]) -> Optional[int]:
    if not doc or not doc.startswith("p") or not doc[1:].isdigit():
        return None
    return int(doc[1:])


def index_key(cfg, passages: Sequence[str], store, lightrag_version: str) -> str:
    """What changes LightRAG's index: corpus, encoder, LLM and its decoding, indexing settings."""
    lr = {k: v for k, v in asdict(cfg.lightrag).items() if k not in _QUERY_ONLY and k not in _HOW_ONLY}
    llm = cfg.llm
    if not llm.constrained_decoding:  # the grammar bounds are read only under constrained decoding
        lr.pop("grammar_max_records")
        lr.pop("grammar_text_chars")
    return digest({
        "v": INDEX_VERSION, "lightrag": lightrag_version, "corpus": corpus_digest(passages), "encoder": store.dir.name,
        "settings": lr,
        "llm": [llm.backend, llm.model, llm.temperature, llm.seed, llm.max_new_tokens, llm.constrained_decoding],
    })


def settings_of(lr, stage: str) -> Dict[str, Any]:
    """The driver's `settings` (everything of `lightrag.*` it reads)."""
    s = asdict(lr)
    s["max_new_tokens"] = lr.max_new_tokens if stage == INDEX_STAGE else lr.answer_max_new_tokens
    return s


def rules_of(cfg, described: Dict[str, Any]) -> List[GrammarRule]:
    """Extraction requests (their text holds LightRAG's record marker) decoded under its
    record grammar; only read by the endpoint under constrained decoding."""
    if not cfg.llm.constrained_decoding:
        return []
    return [GrammarRule(str(described["extraction_marker"]),
                        extraction_grammar(described, cfg.lightrag.grammar_max_records, cfg.lightrag.grammar_text_chars))]


def run_driver(cfg, mode: str, job: Dict[str, Any], folder: Path) -> None:
    """Run the driver on `job` (written to `folder`), its log in `folder/driver_MODE.log`;
    a failure is one line naming the log."""
    folder.mkdir(parents=True, exist_ok=True)
    job_path = folder / f"job_{mode}.json"
    atomicio.write_json(job_path, job)
    log_path = folder / f"driver_{mode}.log"
    with open(log_path, "ab") as err:
        proc = subprocess.run([str(lightrag_env.env_python(cfg.lightrag)), str(lightrag_env.DRIVER), mode, str(job_path)],
                              stdin=subprocess.DEVNULL, stdout=err, stderr=err, cwd=str(folder),
                              env=lightrag_env.driver_env(cfg.lightrag))
    if proc.returncode != 0:
        tail = [x for x in log_path.read_text(encoding="utf-8", errors="replace").splitlines() if x.strip()][-1:]
        raise RuntimeError(f"LightRAG {mode} failed (exit {proc.returncode}): {tail[0][-300:] if tail else 'no output'}; "
                           f"log: {log_path}")


def _load(folder: Path) -> Optional[Dict[str, Any]]:
    path = folder / "index.json"
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def get_index(cfg, passages: Sequence[str], store, lazy_llm, described: Dict[str, Any]) -> Dict[str, Any]:
    """The index's stats (its folder under `cache_dir/lightrag/KEY/`), built when absent
    or unfinished (under a lock, so two runs build it once)."""
    folder = Path(cfg.cache_dir) / "lightrag" / index_key(cfg, passages, store, str(described["lightrag"]))
    stats = _load(folder)
    if stats is not None:
        log.info("LightRAG index cache hit %s: %d entities, %d relations, %d chunks", folder, stats["entities"],
                 stats["relations"], stats["chunks"])
        return dict(stats, folder=str(folder), cached=True)
    folder.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder) + ".lock"):
        stats = _load(folder)
        if stats is not None:
            return dict(stats, folder=str(folder), cached=True)
        llm = lazy_llm.get()
        before, sent_before = llm.usage().get(INDEX_STAGE, {}), llm.requests_sent
        t0 = time.perf_counter()
        with LoopbackEndpoint(llm, StoreEncoder(store, "embed (LightRAG)"), stage=INDEX_STAGE, rules=rules_of(cfg, described)) as ep:
            job = {"working_dir": str(folder / "working"), "out": str(folder / "index.partial.json"),
                   "endpoint": {"url": ep.url, "llm_model": ep.llm_model, "embed_model": ep.embed_model},
                   "settings": settings_of(cfg.lightrag, INDEX_STAGE),
                   "passages": [{"id": doc_id(i), "text": p} for i, p in enumerate(passages)]}
            run_driver(cfg, "index", job, folder)
        stats = json.loads((folder / "index.partial.json").read_text(encoding="utf-8"))
        n_failed = int(stats.get("docs", {}).get("failed", 0))
        if n_failed or stats["chunks"] == 0:
            from hipporag2.gates import GateError

            first = (stats.get("failed") or [{}])[0]
            raise GateError(f"stage {INDEX_STAGE}: {n_failed} of {len(passages)} passages failed in LightRAG "
                            f"(first: {first.get('id')}: {first.get('error')}); the finished LLM calls are in the "
                            f"LLM cache and LightRAG's folder {folder / 'working'} is kept: rerun to resume")
        stats.update(indexing_bill(before, llm.usage().get(INDEX_STAGE, {})))
        # A folder resumed with documents already finished asked only for the rest: its
        # tokens are not a whole build's (Table 12 wants one: build in a fresh cache).
        stats["bill_complete"] = int(stats.get("processed_before", 0)) == 0
        stats.update({"build_s": round(time.perf_counter() - t0, 3), "llm_calls_sent": llm.requests_sent - sent_before,
                      "lightrag": described["lightrag"], "tiktoken_encoding": described.get("tiktoken_encoding")})
        atomicio.write_json(folder / "index.json", stats)  # written last: the folder is complete
        log.info("LightRAG index %s: %d entities, %d relations, %d chunks", folder, stats["entities"], stats["relations"],
                 stats["chunks"])
        return dict(stats, folder=str(folder), cached=False)


class LightRAGRetriever:
    """Each question answered by LightRAG; the result carries its raw answer (the
    reader's only context), the chunks it used and the passages they come from."""

    def __init__(self, index: Dict[str, Any], n_passages: int, store, cfg, described: Dict[str, Any], lazy_llm,
                 index_s: float):
        self.index, self.n_passages, self.store = index, n_passages, store
        self.run_cfg, self.cfg, self.lr = cfg, cfg.retrieval, cfg.lightrag
        self.described, self.lazy_llm, self.index_s = described, lazy_llm, index_s
        self.folder = Path(index["folder"])
        self.driver_peak_rss_mb = 0.0
        self.blocks = 0

    def retrieve(self, queries) -> List[QueryResult]:
        llm = self.lazy_llm.get()
        run_dir = Path(self.run_cfg.run_dir) / "lightrag"
        out = run_dir / f"answers_{self.blocks:04d}.jsonl"
        self.blocks += 1
        with LoopbackEndpoint(llm, StoreEncoder(self.store, "embed (LightRAG)"), stage=QUERY_STAGE) as ep:
            job = {"working_dir": str(self.folder / "working"), "out": str(out),
                   "endpoint": {"url": ep.url, "llm_model": ep.llm_model, "embed_model": ep.embed_model},
                   "settings": settings_of(self.lr, QUERY_STAGE),
                   "questions": [{"id": q.id, "question": q.question} for q in queries]}
            run_driver(self.run_cfg, "query", job, run_dir)
        rows = [json.loads(x) for x in out.read_text(encoding="utf-8").splitlines() if x.strip()]
        summary = next((r for r in rows if r.get("_summary")), {})
        self.driver_peak_rss_mb = max(self.driver_peak_rss_mb, float(summary.get("peak_rss_mb", 0.0)))
        answers = {r["id"]: r for r in rows if not r.get("_summary")}
        results = []
        for q in queries:
            r = answers[q.id]
            ranked: List[int] = []
            for c in r["chunks"]:
                p = passage_of(c.get("doc"))
                if p is not None and p < self.n_passages and p not in ranked:
                    ranked.append(p)
            extra = {
                "lightrag_answer": r["answer"],
                "lightrag_status": r["status"],
                "lightrag_chunks": [c["chunk_id"] for c in r["chunks"]],
                "lightrag_entities": len(r["entities"]),
                "lightrag_relations": len(r["relations"]),
                "lightrag_keywords": r.get("keywords", {}),
            }
            # The order in which LightRAG's context lists the chunks, as scores.
            results.append(QueryResult(q.id, ranked, [1.0 / (k + 1) for k in range(len(ranked))], extra=extra,
                                       reader_context=[(ANSWER_TITLE, r["answer"])]))
        return results

    def run_report(self, queries, results, corpus, recall_k, timings) -> Dict[str, Any]:
        """metrics.json's LightRAG part: version and settings, the index, what the
        questions got, and the Table 12 counters."""
        ix, n = self.index, max(len(queries), 1)
        query_s = timings.seconds.get("retrieval", 0.0) + timings.seconds.get("qa", 0.0)
        t12 = table12(ix.get("llm_input_tokens"), ix.get("llm_output_tokens"), ix.get("build_s", self.index_s), query_s / n)
        t12["driver_peak_rss_mb"] = self.driver_peak_rss_mb  # the LightRAG process of the queries (the LLM is in ours)
        t12["indexing_bill_complete"] = bool(ix.get("bill_complete", True))
        return {
            "lightrag": {
                "version": ix.get("lightrag", self.described.get("lightrag")),
                "settings": asdict(self.lr),
                "tiktoken_encoding": ix.get("tiktoken_encoding"),
                "index": {k: ix.get(k) for k in ("entities", "relations", "chunks", "docs", "cached", "llm_calls",
                                                 "resumed_docs", "processed_before", "folder")},
                "index_llm_calls_sent": ix.get("llm_calls_sent", 0) if not ix.get("cached") else 0,
                "answered": sum(1 for r in results if r.extra.get("lightrag_answer")),
                "no_context": sum(1 for r in results if r.extra.get("lightrag_status") != "success"),
                "mean_chunks": round(sum(len(r.extra.get("lightrag_chunks", [])) for r in results) / n, 2),
            },
            "table12": t12,
        }


def lightrag_retriever(parts):
    """Registry builder (`retrieval.method=lightrag`)."""
    from hipporag2.config import ConfigError

    if parts.store is None:
        raise ConfigError("retrieval.method=lightrag needs an encoder (embedding=...)")
    described = lightrag_env.check_environment(parts.cfg.lightrag)
    t0 = time.perf_counter()
    index = get_index(parts.cfg, list(parts.passages), parts.store, parts.llm, described)
    return LightRAGRetriever(index, len(parts.passages), parts.store, parts.cfg, described, parts.llm,
                             time.perf_counter() - t0)
