"""`retrieval.method=graphrag`: Microsoft GraphRAG over the run's corpus, with the run's
LLM and encoder, and its local search as the retriever.

GraphRAG runs in its own environment (`graphrag.env`, `make setup-graphrag`) as a
subprocess (`graphrag_driver.py`); it reaches our LLM and encoder through a loopback
OpenAI-compatible endpoint (`hipporag2.baselines.endpoint`), so its calls go through
the run's backend, response cache and token accounting. The project folder (GraphRAG's
root: settings.yaml, input/, output/, logs/) is one per (corpus, encoder, LLM,
indexing settings, GraphRAG version) under `cache_dir/graphrag/<key>/`; `index.json`,
written last, says it is complete. An interrupted indexing resumes cheaply: every
answered call is in our LLM cache (GraphRAG's own cache is off, so that every call is
accounted by ours).

Per question GraphRAG's raw answer and the text units its context read (mapped back
to our passages) are saved in retrieval.jsonl; the passages are the run's ranking, and
the raw answer is what the reader restates (the paper's Appendix G.2; docs/quirks.md).
"""
from __future__ import annotations

import json
import logging
import os
import subprocess
import tempfile
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from filelock import FileLock

from hipporag2.baselines.common import StoreEncoder, indexing_bill, table12
from hipporag2.files import atomicio
from hipporag2.runtime import envs
from hipporag2.errors import ConfigError
from hipporag2.results import QueryResult
from hipporag2.files.stagekeys import corpus_digest, digest

log = logging.getLogger("hipporag2.graphrag")

DRIVER = Path(__file__).resolve().with_name("graphrag_driver.py")
INDEX_STAGE = "graphrag_index"
QUERY_STAGE = "graphrag_query"
# Bump when the generated settings or the input layout change: the index key includes it.
LAYOUT_VERSION = 1
# Names the settings use for the loopback endpoint; the values come from the subprocess
# environment, so settings.yaml is the same file on every run of one index.
ENV_LLM_BASE, ENV_EMBED_BASE, ENV_KEY = "HIPPORAG2_GRAPHRAG_LLM_BASE", "HIPPORAG2_GRAPHRAG_EMBED_BASE", "GRAPHRAG_API_KEY"
# Settings that change only the search, not the index.
QUERY_ONLY = ("env", "query_mode", "response_type", "top_k_entities", "top_k_relationships", "max_context_tokens",
              "community_level", "concurrent_requests", "timeout_s")
PASSAGE_ID = "p{:07d}"
READER_TITLE = "GraphRAG's answer"


# ---- the environment --------------------------------------------------------------------


def env_python(gcfg) -> Path:
    """The GraphRAG environment's Python, or one ConfigError line saying how to make it."""
    py = envs.env_python(gcfg)
    if not py.is_file():
        raise ConfigError(f"retrieval.method=graphrag needs the GraphRAG environment graphrag.env={gcfg.env}: "
                          f"{py} not found (make setup-graphrag)")
    return py


def subprocess_env(extra: Optional[Dict[str, str]] = None) -> Dict[str, str]:
    """The driver's environment: offline (no hub, bundled cost map; the driver points
    tiktoken at the encodings in litellm's wheel), loopback not proxied."""
    env = dict(os.environ)
    for k in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"):
        env.pop(k, None)  # the GraphRAG environment sees none of ours
    env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "LITELLM_LOCAL_MODEL_COST_MAP": "True",
                "NO_PROXY": "127.0.0.1,localhost", "no_proxy": "127.0.0.1,localhost", ENV_KEY: "hipporag2-loopback"})
    env.update(extra or {})
    return env


def run_driver(gcfg, args: Sequence[str], extra_env: Optional[Dict[str, str]] = None,
               timeout: Optional[float] = None) -> Dict[str, Any]:
    """Run the driver; its last stdout line is its JSON result. A failure is one
    RuntimeError naming the command and the end of its stderr."""
    py = env_python(gcfg)
    cmd = [str(py), str(DRIVER), *args]
    try:
        proc = subprocess.run(cmd, env=subprocess_env(extra_env), capture_output=True, text=True,
                              timeout=timeout or gcfg.timeout_s)
    except subprocess.TimeoutExpired as e:
        raise RuntimeError(f"GraphRAG {args[0]} ran past graphrag.timeout_s={gcfg.timeout_s}") from e
    lines = [x for x in proc.stdout.splitlines() if x.startswith("{")]
    if proc.returncode != 0 or not lines:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-15:]
        raise RuntimeError(f"GraphRAG {args[0]} failed (exit {proc.returncode}): " + "\n".join(tail))
    return json.loads(lines[-1])


def env_info(gcfg) -> Dict[str, Any]:
    """GraphRAG's version, its grammar marker and delimiters (read from its installed
    prompt and parser at run time); a version other than `graphrag.version` stops here."""
    try:
        info = run_driver(gcfg, ["info"], timeout=600)
    except RuntimeError as e:
        raise ConfigError(f"graphrag.env={gcfg.env}: the GraphRAG environment does not work: {e}") from e
    if info["graphrag"] != gcfg.version:
        raise ConfigError(f"graphrag.env={gcfg.env} has graphrag {info['graphrag']}, the settings are written for "
                          f"graphrag.version={gcfg.version} (make setup-graphrag pins it)")
    return info


# ---- settings and the index -------------------------------------------------------------


def settings(gcfg, dim: int) -> Dict[str, Any]:
    """GraphRAG's settings.yaml for `gcfg` (Table 14 and GraphRAG's defaults) with our
    endpoint's address left to the environment (${...}), and vectors of `dim`."""
    def model(name: str, base_env: str) -> Dict[str, Any]:
        return {"type": "litellm", "model_provider": "openai", "model": name, "auth_method": "api_key",
                "api_key": "${" + ENV_KEY + "}", "api_base": "${" + base_env + "}",
                "retry": {"type": "exponential_backoff", "max_retries": 3}}

    return {
        "completion_models": {"default_completion_model": model("hipporag2-llm", ENV_LLM_BASE)},
        "embedding_models": {"default_embedding_model": model("hipporag2-embed", ENV_EMBED_BASE)},
        "concurrent_requests": gcfg.concurrent_requests,
        "input": {"type": "json", "id_column": "id", "title_column": "title", "text_column": "text"},
        "input_storage": {"base_dir": "input"},
        "chunking": {"type": "tokens", "size": gcfg.chunk_size, "overlap": gcfg.chunk_overlap,
                     "encoding_model": gcfg.encoding_model},
        "output_storage": {"base_dir": "output"},
        # GraphRAG's own response cache is off: every call reaches our endpoint, whose
        # LLM cache resumes an interrupted build and accounts each call's tokens
        # (Table 12 is a fresh build's bill even when the cache answered)
        "cache": {"type": "none"},
        "reporting": {"type": "file", "base_dir": "logs"},
        "vector_store": {"type": "lancedb", "db_uri": "output/lancedb", "vector_size": int(dim)},
        "extract_graph": {"entity_types": list(gcfg.entity_types), "max_gleanings": gcfg.max_gleanings},
        "summarize_descriptions": {"max_length": gcfg.summarize_max_length},
        "extract_claims": {"enabled": False},
        "cluster_graph": {"max_cluster_size": gcfg.max_cluster_size},
        "community_reports": {"max_length": gcfg.community_report_max_length,
                              "max_input_length": gcfg.community_report_max_input_length},
        "local_search": {"top_k_entities": gcfg.top_k_entities, "top_k_relationships": gcfg.top_k_relationships,
                         "max_context_tokens": gcfg.max_context_tokens},
    }


def index_settings(gcfg) -> Dict[str, Any]:
    g = asdict(gcfg)
    for k in QUERY_ONLY:
        g.pop(k, None)
    return g


def index_key(cfg, passages: Sequence[str], store) -> str:
    """What changes GraphRAG's index: corpus, encoder, LLM and its decoding, indexing
    settings (with the GraphRAG version) and our input layout."""
    llm = cfg.llm
    return digest({
        "v": LAYOUT_VERSION, "corpus": corpus_digest(passages), "encoder": store.dir.name,
        "graphrag": index_settings(cfg.graphrag),
        "llm": [llm.backend, llm.model, llm.temperature, llm.seed, getattr(llm, "constrained_decoding", None)],
    })


def passage_documents(passages: Sequence[str]) -> List[Dict[str, str]]:
    """GraphRAG's input documents: one per passage, its id naming the passage's index."""
    return [{"id": PASSAGE_ID.format(i), "title": p.partition("\n")[0] if "\n" in p else PASSAGE_ID.format(i), "text": p}
            for i, p in enumerate(passages)]


def passage_of(document_id: Optional[str]) -> Optional[int]:
    if not document_id or not document_id.startswith("p"):
        return None
    try:
        return int(document_id[1:])
    except ValueError:
        return None


def extraction_grammar(info: Dict[str, Any], entity_types: Sequence[str], max_records: int = 2) -> str:
    """A small bounded grammar of GraphRAG's extraction format (its delimiters read from
    its parser at run time): two to `max_records` entities of the configured types, then
    one to `max_records` relationships, then the completion marker (a small model left
    free stops after one entity, and GraphRAG needs relationships). Only used where the
    run constrains decoding (a 135M CPU model cannot write the format unaided); never
    for the paper runs."""
    def lit(s: str) -> str:
        return json.dumps(s)

    td, rd, cd = lit(info["tuple_delimiter"]), lit(info["record_delimiter"]), lit(info["completion_delimiter"])
    types = " | ".join(lit(t.upper()) for t in entity_types)
    return "\n".join([
        f"root ::= entity ({rd} entity){{1,{max_records - 1}}} ({rd} relation){{1,{max_records}}} {cd}",
        f'entity ::= "(" {lit(chr(34) + "entity" + chr(34))} {td} name {td} etype {td} desc ")"',
        f'relation ::= "(" {lit(chr(34) + "relationship" + chr(34))} {td} name {td} name {td} desc {td} [1-9] ")"',
        f"etype ::= {types}",
        'name ::= [A-Z] [A-Z0-9 .\'-]{0,24}',
        'desc ::= [A-Za-z0-9] [A-Za-z0-9 ,.\'-]{0,48}',
    ])


def bounded_json_grammar(schema: Dict[str, Any], max_chars: int = 60, max_items: int = 2) -> str:
    """An EBNF grammar of the JSON objects `schema` describes (objects with all their
    properties in order, strings, numbers, arrays of 1..`max_items`), every string at
    most `max_chars` characters: GraphRAG's community-report schema sets no lengths, and
    a small model fills an unbounded string until its token limit cuts the JSON."""
    defs = schema.get("$defs", {})
    rules: Dict[str, str] = {}

    def rule_for(node: Dict[str, Any], name: str) -> str:
        if "$ref" in node:
            ref = node["$ref"].rsplit("/", 1)[-1]
            return rule_for(defs[ref], ref.lower())
        kind = node.get("type")
        if kind == "string":
            return "str"
        if kind in ("number", "integer"):
            return "num"
        if kind == "array":
            item = rule_for(node.get("items", {"type": "string"}), name + "-item")
            rules[name] = f'"[" {item} ("," {item}){{0,{max_items - 1}}} "]"'
            return name
        if kind == "object":
            parts = []
            for i, (key, sub) in enumerate(node.get("properties", {}).items()):
                parts.append(("\",\" " if i else "") + json.dumps(json.dumps(key) + ":") + " " + rule_for(sub, f"{name}-{key}".replace("_", "-")))
            rules[name] = '"{" ' + " ".join(parts) + ' "}"'
            return name
        raise ValueError(f"no grammar for JSON schema type {kind!r}")

    rule_for(schema, "root")
    lines = [f"{k} ::= {v}" for k, v in rules.items()]
    lines.append(r'str ::= "\"" [A-Za-z0-9 ,.()-]{0,%d} "\""' % max_chars)
    lines.append('num ::= [0-9] ("." [0-9])?')
    return "\n".join(lines)


def _endpoint(llm, store, stage: str, gcfg, rules):
    from hipporag2.baselines.endpoint import LoopbackEndpoint

    return LoopbackEndpoint(llm, StoreEncoder(store, f"embed ({stage})"), stage=stage, rules=rules,
                            max_new_tokens=gcfg.max_new_tokens)


def _rules(cfg, info):
    if not getattr(cfg.llm, "constrained_decoding", False):
        return []
    from hipporag2.baselines.endpoint import GrammarRule

    return [GrammarRule(info["extract_graph_marker"], extraction_grammar(info, cfg.graphrag.entity_types)),
            GrammarRule(info["community_report_marker"], bounded_json_grammar(info["community_report_schema"]))]


def _endpoint_env(ep) -> Dict[str, str]:
    return {ENV_LLM_BASE: ep.url, ENV_EMBED_BASE: ep.url}


def _load(folder: Path) -> Optional[Dict[str, Any]]:
    path = folder / "index.json"
    if not path.is_file():
        return None
    return json.loads(path.read_text(encoding="utf-8"))


def get_index(cfg, passages: Sequence[str], store, lazy_llm, info) -> tuple:
    """(root folder, its index.json) of the cached index, or of one built now under a
    lock (two runs build it once)."""
    import yaml

    folder = Path(cfg.cache_dir) / "graphrag" / index_key(cfg, passages, store)
    done = _load(folder)
    if done is not None:
        log.info("GraphRAG index cache hit %s: %s", folder, done["counts"])
        return folder, dict(done, cached=True)
    folder.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder) + ".lock"):
        done = _load(folder)
        if done is not None:
            return folder, dict(done, cached=True)
        gcfg = cfg.graphrag
        dim = int(store.embed(["GraphRAG vector size"], desc="embed (GraphRAG vector size)", progress=False).shape[1])
        (folder / "input").mkdir(parents=True, exist_ok=True)
        atomicio.write_json(folder / "input" / "passages.json", passage_documents(passages))
        atomicio.write_text(folder / "settings.yaml", yaml.safe_dump(settings(gcfg, dim), sort_keys=False))
        llm = lazy_llm.get()
        before = llm.usage().get(INDEX_STAGE, {})
        sent_before = llm.requests_sent
        t0 = time.perf_counter()
        with _endpoint(llm, store, INDEX_STAGE, gcfg, _rules(cfg, info)) as ep:
            out = run_driver(gcfg, ["index", str(folder)], extra_env=_endpoint_env(ep))
        bill = indexing_bill(before, llm.usage().get(INDEX_STAGE, {}))
        counts = out["counts"]
        empty = [k for k in ("entities", "relationships", "communities", "text_units") if not counts.get(k)]
        if empty:
            raise RuntimeError(f"GraphRAG indexing of {folder} produced no {', '.join(empty)} ({counts}); "
                               "see its logs/ folder. A model that cannot write GraphRAG's extraction format needs "
                               "llm.constrained_decoding=true (docs/quirks.md)")
        done = {
            "graphrag": info["graphrag"], "settings": settings(gcfg, dim), "counts": counts,
            "build_s": round(time.perf_counter() - t0, 3), "driver_s": out["seconds"], "index_peak_rss_mb": out["peak_rss_mb"],
            **bill,  # what a build from nothing costs: tokens of calls answered by the model or the cache
            # what this build paid (a resumed build: only the calls it lacked)
            "llm_calls_sent": llm.requests_sent - sent_before,
        }
        atomicio.write_json(folder / "index.json", done)  # written last: the folder is complete
        log.info("GraphRAG index %s: %s in %.1f s", folder, counts, done["build_s"])
        return folder, dict(done, cached=False)


# ---- local search -----------------------------------------------------------------------


def ranking_of(sources: Sequence[Dict[str, Any]], top_k: int) -> List[int]:
    """Our passages in the order GraphRAG's context read their text units (each once)."""
    ranked: List[int] = []
    for s in sources:
        p = passage_of(s.get("document"))
        if p is not None and p not in ranked:
            ranked.append(p)
    return ranked[:top_k]


class GraphRAGRetriever:
    """GraphRAG local search per question; the reader restates its raw answer
    (`details["reader_context"]`)."""

    def __init__(self, root: Path, index: Dict[str, Any], info: Dict[str, Any], store, cfg, lazy_llm, index_s: float):
        # `cfg.retrieval` may be replaced by the library (retrieval_top_k); GraphRAG's own
        # settings are the run's `graphrag` section
        self.root, self.index, self.info, self.store, self.cfg = root, index, info, store, cfg.retrieval
        self.gcfg, self.llm_cfg, self.lazy_llm, self.index_s = cfg.graphrag, cfg.llm, lazy_llm, index_s
        self.query_peak_rss_mb = 0.0
        self.query_driver_s = 0.0

    def retrieve(self, queries) -> List[QueryResult]:
        g = self.gcfg
        llm = self.lazy_llm.get()
        with tempfile.TemporaryDirectory(prefix="graphrag-queries-") as tmp:
            qfile, ofile = Path(tmp) / "questions.jsonl", Path(tmp) / "answers.jsonl"
            qfile.write_text("".join(json.dumps({"id": q.id, "question": q.question}) + "\n" for q in queries), encoding="utf-8")
            with _endpoint(llm, self.store, QUERY_STAGE, g, []) as ep:
                out = run_driver(g, ["query", str(self.root), str(qfile), str(ofile), "--community-level",
                                     str(g.community_level), "--response-type", g.response_type], extra_env=_endpoint_env(ep))
            rows = {r["id"]: r for r in map(json.loads, ofile.read_text(encoding="utf-8").splitlines())}
        self.query_peak_rss_mb = max(self.query_peak_rss_mb, float(out["peak_rss_mb"]))
        self.query_driver_s += float(out["seconds"])
        results = []
        for q in queries:
            row = rows.get(q.id)
            if row is None:
                raise RuntimeError(f"GraphRAG answered no row for question {q.id!r}")
            ranked = ranking_of(row["sources"], self.cfg.retrieval_top_k)
            extra = {
                "graphrag_response": row["response"],
                "graphrag_sources": row["sources"],
                "graphrag_context_records": row["context_records"],
                "graphrag_seconds": row["seconds"],
            }
            # G.2: the reader restates GraphRAG's raw answer
            results.append(QueryResult(q.id, ranked, [1.0 / (r + 1) for r in range(len(ranked))], extra=extra,
                                       reader_context=[(READER_TITLE, row["response"])]))
        return results

    def run_report(self, queries, results, corpus, recall_k, timings) -> Dict[str, Any]:
        """metrics.json's GraphRAG part: version, settings, what was indexed, and the
        Table 12 counters (peak memory: the query subprocess's)."""

        ix = self.index
        n = max(len(queries), 1)
        query_s = timings.seconds.get("retrieval", 0.0) + timings.seconds.get("qa", 0.0)
        t12 = table12(ix.get("llm_input_tokens"), ix.get("llm_output_tokens"), ix.get("build_s", self.index_s), query_s / n)
        t12["peak_rss_mb"] = self.query_peak_rss_mb or None
        t12["peak_rss_of"] = "GraphRAG query subprocess"
        settings_ = {k: v for k, v in ix["settings"].items() if k not in ("completion_models", "embedding_models")}
        return {
            "graphrag": {
                "version": ix["graphrag"], "litellm": self.info.get("litellm"), "settings": settings_,
                "query": {k: getattr(self.gcfg, k) for k in QUERY_ONLY if k not in ("env", "timeout_s", "concurrent_requests")},
                "index": ix["counts"], "cached": ix.get("cached", False), "llm_calls": ix.get("llm_calls"),
                "llm_calls_sent": 0 if ix.get("cached") else ix.get("llm_calls_sent", 0),
                "answered": sum(1 for r in results if r.extra.get("graphrag_response")),
                "with_sources": sum(1 for r in results if r.ranked),
            },
            "table12": t12,
        }


def graphrag_retriever(parts):
    """Registry builder (`retrieval.method=graphrag`)."""
    if parts.store is None:
        raise ConfigError("retrieval.method=graphrag needs an encoder (embedding=...)")
    gcfg = parts.cfg.graphrag
    env_python(gcfg)  # a missing environment: one line before any work
    info = env_info(gcfg)
    t0 = time.perf_counter()
    root, index = get_index(parts.cfg, list(parts.passages), parts.store, parts.llm, info)
    return GraphRAGRetriever(root, index, info, parts.store, parts.cfg, parts.llm, time.perf_counter() - t0)

