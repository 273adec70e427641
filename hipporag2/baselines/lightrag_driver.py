"""LightRAG (the `lightrag-hku` package) driven from its own environment.

Runs under `.venv-lightrag`'s python, by file path, so it imports only the standard
library and LightRAG with its dependencies (numpy is one), never hipporag2: LightRAG
pins pandas and protobuf versions the main environment cannot take. The pipeline
(`hipporag2.baselines.lightrag_index`) writes a job file, starts this script and reads
what it writes; LightRAG's LLM and embedding hooks here call the run's loopback
endpoint (`hipporag2.baselines.endpoint`), so LightRAG is driven by the run's LLM and
encoder, their caches and token accounting.

    python lightrag_driver.py --versions          versions of lightrag, tiktoken, python (JSON)
    python lightrag_driver.py describe            LightRAG's extraction format, read from its prompts
    python lightrag_driver.py index JOB.json      insert the job's passages (resumes an unfinished folder)
    python lightrag_driver.py query JOB.json      answer the job's questions, one JSON line each

Every mode checks first that tiktoken's encoding loads without the network
(TIKTOKEN_CACHE_DIR must hold it), and fails in one line if not.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import resource
import sys
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from importlib import metadata

# LightRAG's own answer cache stays off: every call must reach the endpoint, whose
# response cache makes a rerun free and whose usage counts are Table 12's.
_KEYWORD_FIELDS = ("high_level_keywords", "low_level_keywords")


def _fail(message: str, code: int = 3) -> None:
    print(f"lightrag driver: {message}", file=sys.stderr)
    sys.exit(code)


def versions() -> dict:
    out = {"python": sys.version.split()[0]}
    for dist in ("lightrag-hku", "tiktoken", "numpy", "networkx", "nano-vectordb"):
        try:
            out[dist] = metadata.version(dist)
        except metadata.PackageNotFoundError:
            out[dist] = None
    return out


def check_tokenizer(model_name: str) -> str:
    """Load the tiktoken encoding LightRAG will use, from TIKTOKEN_CACHE_DIR only."""
    try:
        import tiktoken
    except ImportError as exc:
        _fail(f"tiktoken is not installed in {sys.prefix} ({exc}); rebuild with `make setup-lightrag`")
    cache = os.environ.get("TIKTOKEN_CACHE_DIR")
    if not cache or not os.path.isdir(cache):
        _fail(f"TIKTOKEN_CACHE_DIR={cache!r} is not a folder: LightRAG's tokenizer would be downloaded")
    try:
        enc = tiktoken.encoding_for_model(model_name)
        enc.encode("offline check")
    except Exception as exc:  # noqa: BLE001 - any failure here is the same missing file
        _fail(f"tiktoken encoding for {model_name!r} is not loadable offline from TIKTOKEN_CACHE_DIR={cache} "
              f"({type(exc).__name__}: {str(exc)[:200]})")
    return enc.name


def describe() -> dict:
    """The delimited record format LightRAG's default (text) extraction asks for, as its
    installed prompts define it, for the caller's decoding grammar."""
    import re

    from lightrag.prompt import PROMPTS

    tuple_delimiter = PROMPTS["DEFAULT_TUPLE_DELIMITER"]
    completion = PROMPTS["DEFAULT_COMPLETION_DELIMITER"]
    guidance = PROMPTS.get("default_entity_types_guidance", "")
    types = re.findall(r"^- (\w+):", guidance, flags=re.M)
    other = re.search(r"use `(\w+)`", guidance)
    if other and other.group(1) not in types:
        types.append(other.group(1))
    system = PROMPTS["entity_extraction_system_prompt"]
    # The record prefixes the system prompt's format lines use (`entity{tuple_delimiter}`).
    prefixes = re.findall(r"`(\w+)\{tuple_delimiter\}", system)
    entity_prefix = next((p for p in prefixes if p.startswith("entity")), "entity")
    relation_prefix = next((p for p in prefixes if p.startswith("relation")), "relation")
    return {
        "lightrag": versions()["lightrag-hku"],
        "tuple_delimiter": tuple_delimiter,
        "completion_delimiter": completion,
        "entity_prefix": entity_prefix,
        "relation_prefix": relation_prefix,
        "entity_types": types,
        # Text of every extraction request (initial and gleaning: the system prompt
        # carries it) and of no other LightRAG request.
        "extraction_marker": entity_prefix + tuple_delimiter,
        "keyword_fields": list(_KEYWORD_FIELDS),
    }


def parse_check(text: str) -> dict:
    """What LightRAG's own extraction parser makes of `text` (entities, relations)."""
    from lightrag.operate import _process_extraction_result
    from lightrag.prompt import PROMPTS

    nodes, edges = asyncio.run(_process_extraction_result(
        text, "chunk-check", 0, "check", PROMPTS["DEFAULT_TUPLE_DELIMITER"], PROMPTS["DEFAULT_COMPLETION_DELIMITER"]))
    return {"entities": sorted(nodes), "relations": sorted([list(k) for k in edges])}


# ---- the endpoint ------------------------------------------------------------------


class Endpoint:
    """Blocking HTTP calls to the loopback endpoint, run in a thread pool sized for
    LightRAG's concurrency (so the endpoint can batch them)."""

    def __init__(self, job: dict):
        ep = job["endpoint"]
        self.url = ep["url"].rstrip("/")
        self.llm_model, self.embed_model = ep["llm_model"], ep["embed_model"]
        s = job["settings"]
        self.max_new_tokens = s.get("max_new_tokens")
        self.keyword_max_items = int(s.get("keyword_max_items") or 0)
        self.timeout = float(s["llm_timeout_s"])
        self.pool = ThreadPoolExecutor(max_workers=int(s["llm_max_async"]) + int(s["embedding_max_async"]) + 2)
        self.calls = {"chat": 0, "embeddings": 0}

    def _post(self, path: str, body: dict) -> dict:
        req = urllib.request.Request(self.url + path, data=json.dumps(body).encode("utf-8"), method="POST",
                                     headers={"Content-Type": "application/json", "Authorization": "Bearer hipporag2"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode("utf-8", "replace")[:500]
            raise RuntimeError(f"endpoint {path}: HTTP {exc.code}: {detail}") from None

    def keyword_schema(self) -> dict:
        items = {"type": "array", "items": {"type": "string", "minLength": 1, "maxLength": 60}}
        if self.keyword_max_items:
            items["maxItems"] = self.keyword_max_items
        return {"type": "object", "properties": {k: items for k in _KEYWORD_FIELDS}, "required": list(_KEYWORD_FIELDS)}

    async def complete(self, prompt, system_prompt=None, history_messages=None, **kwargs) -> str:
        messages = []
        if system_prompt:
            messages.append({"role": "system", "content": system_prompt})
        messages += list(history_messages or [])
        messages.append({"role": "user", "content": prompt})
        body = {"model": self.llm_model, "messages": messages, "stream": False}
        if self.max_new_tokens:
            body["max_tokens"] = int(self.max_new_tokens)
        fmt = kwargs.get("response_format")
        if isinstance(fmt, dict) and fmt.get("type") == "json_object":
            # LightRAG asks for a JSON object only for query keywords (text-mode
            # extraction): ask for the object its parser reads (the endpoint applies the
            # schema only under constrained decoding).
            body["response_format"] = {"type": "json_schema",
                                       "json_schema": {"name": "keywords", "schema": self.keyword_schema()}}
        self.calls["chat"] += 1
        loop = asyncio.get_running_loop()
        reply = await loop.run_in_executor(self.pool, self._post, "/chat/completions", body)
        return reply["choices"][0]["message"]["content"] or ""

    async def embed(self, texts, **kwargs):
        import numpy as np

        self.calls["embeddings"] += 1
        loop = asyncio.get_running_loop()
        reply = await loop.run_in_executor(self.pool, self._post, "/embeddings",
                                           {"model": self.embed_model, "input": list(texts)})
        rows = sorted(reply["data"], key=lambda d: d["index"])
        return np.asarray([r["embedding"] for r in rows], dtype=np.float32)

    def embedding_dim(self) -> int:
        return len(self._post("/embeddings", {"model": self.embed_model, "input": ["dimension"]})["data"][0]["embedding"])


# ---- LightRAG ------------------------------------------------------------------------


def make_rag(job: dict, endpoint: Endpoint):
    """A LightRAG over the job's working folder with every setting given explicitly
    (LightRAG reads many defaults from environment variables; the caller also starts
    this process with a cleaned environment)."""
    from lightrag import LightRAG
    from lightrag.utils import EmbeddingFunc

    s = job["settings"]

    # Plain functions, not bound methods: LightRAG deep-copies its settings (asdict),
    # and a bound method would copy the endpoint's thread pool with them.
    async def llm_model_func(prompt, system_prompt=None, history_messages=None, **kwargs):
        return await endpoint.complete(prompt, system_prompt, history_messages, **kwargs)

    async def embed(texts, **kwargs):
        return await endpoint.embed(texts, **kwargs)

    embedding = EmbeddingFunc(embedding_dim=endpoint.embedding_dim(), func=embed, max_token_size=None,
                              model_name=endpoint.embed_model)
    return LightRAG(
        working_dir=job["working_dir"],
        llm_model_func=llm_model_func,
        llm_model_name=endpoint.llm_model,
        llm_model_max_async=int(s["llm_max_async"]),
        default_llm_timeout=int(s["llm_timeout_s"]),
        embedding_func=embedding,
        embedding_func_max_async=int(s["embedding_max_async"]),
        embedding_batch_num=int(s["embedding_batch_num"]),
        default_embedding_timeout=int(s["llm_timeout_s"]),
        tiktoken_model_name=s["tiktoken_model"],
        chunk_token_size=int(s["chunk_token_size"]),
        chunk_overlap_token_size=int(s["chunk_overlap_token_size"]),
        entity_extract_max_gleaning=int(s["max_gleaning"]),
        summary_max_tokens=int(s["summary_max_tokens"]),
        # The paper's version capped a summary at the same 500 tokens that trigger it.
        summary_length_recommended=int(s["summary_max_tokens"]),
        force_llm_summary_on_merge=int(s["force_llm_summary_on_merge"]),
        entity_extraction_use_json=False,
        enable_content_headings=False,
        kg_chunk_pick_method=s["kg_chunk_pick_method"],
        top_k=int(s["top_k"]),
        chunk_top_k=int(s["chunk_top_k"]),
        max_entity_tokens=int(s["max_entity_tokens"]),
        max_relation_tokens=int(s["max_relation_tokens"]),
        max_total_tokens=int(s["max_total_tokens"]),
        cosine_better_than_threshold=float(s["cosine_threshold"]),
        enable_llm_cache=False,
        enable_llm_cache_for_entity_extract=False,
        max_parallel_insert=int(s["max_parallel_insert"]),
        addon_params={"language": s["language"]},
    )


def query_param(s: dict):
    from lightrag import QueryParam

    return QueryParam(mode=s["mode"], response_type=s["response_type"], top_k=int(s["top_k"]),
                      chunk_top_k=int(s["chunk_top_k"]), max_entity_tokens=int(s["max_entity_tokens"]),
                      max_relation_tokens=int(s["max_relation_tokens"]), max_total_tokens=int(s["max_total_tokens"]),
                      enable_rerank=False, include_references=False, disable_user_prompt_prefix=True)


async def _stats(rag) -> dict:
    nodes = await rag.chunk_entity_relation_graph.get_all_nodes()
    edges = await rag.chunk_entity_relation_graph.get_all_edges()
    from lightrag.base import DocStatus

    processed = await rag.doc_status.get_docs_by_statuses([DocStatus.PROCESSED])
    chunks = sum(int(getattr(d, "chunks_count", 0) or 0) for d in processed.values())
    counts = await rag.doc_status.get_status_counts()
    return {"entities": len(nodes), "relations": len(edges), "chunks": chunks,
            "docs": {k: v for k, v in counts.items() if v}}


async def _failed_docs(rag, limit: int = 3) -> list:
    from lightrag.base import DocStatus

    failed = await rag.doc_status.get_docs_by_statuses([DocStatus.FAILED])
    return [{"id": k, "error": str(getattr(v, "error_msg", "") or "")[:300]} for k, _ in zip(failed, range(limit))
            for v in [failed[k]]]


def peak_rss_mb() -> float:
    """This process's own peak resident memory: VmHWM (Linux resets it at exec, while
    getrusage's maxrss keeps the parent's peak from before the exec), else maxrss."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return round(int(line.split()[1]) / 1024.0, 1)
    except OSError:
        pass
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1)


def _write_json(path: str, obj: dict) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f)
    os.replace(tmp, path)


async def run_index(job: dict) -> None:
    endpoint = Endpoint(job)
    rag = make_rag(job, endpoint)
    await rag.initialize_storages()
    t0 = time.perf_counter()
    try:
        from lightrag.base import DocStatus

        ids = [p["id"] for p in job["passages"]]
        new = await rag.doc_status.filter_keys(set(ids))  # ids LightRAG has not seen (a resumed folder has some)
        done_before = len(await rag.doc_status.get_docs_by_statuses([DocStatus.PROCESSED]))
        todo = [p for p in job["passages"] if p["id"] in new]
        if todo:
            await rag.apipeline_enqueue_documents([p["text"] for p in todo], ids=[p["id"] for p in todo],
                                                  file_paths=[p["id"] for p in todo])
        # Pending, failed and interrupted documents of this folder are (re)processed.
        await rag.apipeline_process_enqueue_documents()
        stats = await _stats(rag)
        stats.update({"resumed_docs": len(ids) - len(todo), "processed_before": done_before, "index_s": round(time.perf_counter() - t0, 3),
                      "driver_calls": dict(endpoint.calls), "failed": await _failed_docs(rag),
                      "peak_rss_mb": peak_rss_mb()})
    finally:
        await rag.finalize_storages()
    _write_json(job["out"], stats)


async def _answer(rag, text_chunks, question: dict, param) -> dict:
    t0 = time.perf_counter()
    res = await rag.aquery_llm(question["question"], param=param)
    data = res.get("data") or {}
    chunk_ids = [c.get("chunk_id") for c in data.get("chunks", []) if c.get("chunk_id")]
    found = await text_chunks.get_by_ids(chunk_ids) if chunk_ids else []
    docs = [(c or {}).get("full_doc_id") for c in found]
    llm = res.get("llm_response") or {}
    return {
        "id": question["id"],
        "status": res.get("status"),
        "answer": llm.get("content") or "",
        "llm_generated": bool(llm.get("llm_generated", False)),
        "chunks": [{"chunk_id": cid, "doc": doc} for cid, doc in zip(chunk_ids, docs)],
        "entities": [e.get("entity_name") for e in data.get("entities", [])],
        "relations": [[r.get("src_id"), r.get("tgt_id")] for r in data.get("relationships", [])],
        "keywords": (res.get("metadata") or {}).get("keywords", {}),
        "seconds": round(time.perf_counter() - t0, 3),
    }


async def run_query(job: dict) -> None:
    endpoint = Endpoint(job)
    rag = make_rag(job, endpoint)
    await rag.initialize_storages()
    param = query_param(job["settings"])
    try:
        # All questions at once: LightRAG's queue bounds the concurrency, the
        # endpoint batches what arrives together.
        rows = await asyncio.gather(*[_answer(rag, rag.text_chunks, q, param) for q in job["questions"]])
    finally:
        await rag.finalize_storages()
    tmp = f"{job['out']}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
        f.write(json.dumps({"_summary": True, "driver_calls": dict(endpoint.calls),
                            "peak_rss_mb": peak_rss_mb()}) + "\n")
    os.replace(tmp, job["out"])


def main(argv=None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--versions", action="store_true")
    ap.add_argument("mode", nargs="?", choices=["describe", "index", "query", "parse-check"])
    ap.add_argument("job", nargs="?")
    args = ap.parse_args(argv)
    if args.versions:
        print(json.dumps(versions()))
        return
    if args.mode is None:
        ap.error("a mode is required")
    logging.basicConfig(level=logging.WARNING, format="%(asctime)s %(name)s %(levelname)s %(message)s")
    job = {}
    if args.mode in ("index", "query"):
        with open(args.job, encoding="utf-8") as f:
            job = json.load(f)
    model = (job.get("settings") or {}).get("tiktoken_model", "gpt-4o-mini")
    encoding = check_tokenizer(model)
    if args.mode == "describe":
        print(json.dumps(dict(describe(), tiktoken_encoding=encoding)))
    elif args.mode == "parse-check":
        print(json.dumps(parse_check(sys.stdin.read())))
    elif args.mode == "index":
        asyncio.run(run_index(job))
    else:
        asyncio.run(run_query(job))


if __name__ == "__main__":
    main()
