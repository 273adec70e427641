"""The GraphRAG side of `retrieval=graphrag`: a plain script run by the Python of the
GraphRAG environment (`make setup-graphrag`), never imported by hipporag2.

GraphRAG pins litellm, pandas and pydantic exactly and patches asyncio on import, so
it runs in a process of its own; this script is the whole of that process. It calls
GraphRAG's public Python API (`graphrag.api`, `load_config`, its table reader) and
prints one JSON object on its last stdout line; everything it is told comes from the
command line and the settings.yaml that hipporag2 wrote into the project root.

    python graphrag_driver.py info
    python graphrag_driver.py index ROOT
    python graphrag_driver.py query ROOT QUESTIONS.jsonl OUT.jsonl --community-level 2 --response-type "short phrase"

Offline: tiktoken reads the encodings bundled in litellm's wheel (TIKTOKEN_CACHE_DIR is
pointed there before anything imports tiktoken) and litellm uses its bundled cost map
(LITELLM_LOCAL_MODEL_COST_MAP); a missing encoding is one line on stderr and exit 3.
"""
from __future__ import annotations

import argparse
import hashlib
import importlib.util
import json
import os
import resource
import sys
import time
from pathlib import Path

ENCODING_URLS = {
    "cl100k_base": "https://openaipublic.blob.core.windows.net/encodings/cl100k_base.tiktoken",
    "o200k_base": "https://openaipublic.blob.core.windows.net/encodings/o200k_base.tiktoken",
}
# The tables GraphRAG's standard indexing writes (counted in the index summary).
TABLES = ("documents", "text_units", "entities", "relationships", "communities", "community_reports")


def fail(msg: str, code: int = 3) -> None:
    print(f"graphrag driver: {msg}", file=sys.stderr, flush=True)
    sys.exit(code)


def bundled_tiktoken_dir() -> Path:
    """litellm's wheel ships tiktoken's cache files (named by the SHA-1 of each
    encoding's URL, as tiktoken names them)."""
    spec = importlib.util.find_spec("litellm")
    if spec is None or not spec.submodule_search_locations:
        fail("litellm is not installed in this environment (make setup-graphrag)")
    return Path(list(spec.submodule_search_locations)[0]) / "litellm_core_utils" / "tokenizers"


def go_offline() -> None:
    folder = Path(os.environ.get("TIKTOKEN_CACHE_DIR") or bundled_tiktoken_dir())
    missing = [name for name, url in ENCODING_URLS.items()
               if not (folder / hashlib.sha1(url.encode()).hexdigest()).is_file()]
    if missing:
        fail(f"tiktoken encodings {missing} are not in {folder} (TIKTOKEN_CACHE_DIR); they would be downloaded")
    os.environ["TIKTOKEN_CACHE_DIR"] = str(folder)
    os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


def peak_rss_mb() -> float:
    """This process's peak resident memory. /proc's VmHWM first: after fork and exec,
    getrusage's maxrss still carries the parent's peak (Linux keeps it across exec)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return round(int(line.split()[1]) / 1024.0, 1)
    except OSError:
        pass
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1)


def emit(obj: dict) -> None:
    print(json.dumps(obj), flush=True)


def _first_line(template: str) -> str:
    """A line of a prompt template that carries no placeholder: hipporag2 asks its
    endpoint to constrain the replies to requests that contain it."""
    for line in template.splitlines():
        line = line.strip()
        if len(line) > 40 and "{" not in line and "}" not in line:
            return line
    raise ValueError("no marker line in the template")


def cmd_info(_args) -> None:
    from importlib.metadata import version

    from graphrag.index.operations.extract_graph import graph_extractor as ge
    from graphrag.index.operations.summarize_communities.community_reports_extractor import CommunityReportResponse
    from graphrag.prompts.index.community_report import COMMUNITY_REPORT_PROMPT
    from graphrag.prompts.index.extract_graph import GRAPH_EXTRACTION_PROMPT

    emit({
        "graphrag": version("graphrag"), "litellm": version("litellm"), "pandas": version("pandas"),
        "tiktoken_cache_dir": os.environ["TIKTOKEN_CACHE_DIR"],
        "extract_graph_marker": _first_line(GRAPH_EXTRACTION_PROMPT),
        "tuple_delimiter": ge.TUPLE_DELIMITER, "record_delimiter": ge.RECORD_DELIMITER,
        "completion_delimiter": ge.COMPLETION_DELIMITER,
        "community_report_marker": _first_line(COMMUNITY_REPORT_PROMPT),
        "community_report_schema": CommunityReportResponse.model_json_schema(),
    })


def _reader(config):
    from graphrag.data_model.data_reader import DataReader
    from graphrag_storage import create_storage
    from graphrag_storage.tables.table_provider_factory import create_table_provider

    provider = create_table_provider(config.table_provider, storage=create_storage(config.output_storage))
    return provider, DataReader(provider)


def cmd_index(args) -> None:
    import asyncio

    import graphrag.api as api
    from graphrag.config.load_config import load_config

    config = load_config(root_dir=Path(args.root))
    t0 = time.perf_counter()
    outputs = asyncio.run(api.build_index(config=config))
    seconds = time.perf_counter() - t0
    errors = [f"{o.workflow}: {o.error!r}" for o in outputs if o.error is not None]
    provider, reader = _reader(config)
    counts = {}
    for name in TABLES:
        if asyncio.run(provider.has(name)):
            counts[name] = int(len(asyncio.run(getattr(reader, name)())))
        else:
            counts[name] = 0
    emit({"ok": not errors, "errors": errors, "workflows": [o.workflow for o in outputs], "counts": counts,
          "seconds": round(seconds, 3), "peak_rss_mb": peak_rss_mb()})
    if errors:
        sys.exit(1)


def _records(frame) -> list:
    """A context table of GraphRAG's local search as [{column: value}] (ids as strings)."""
    if frame is None or not hasattr(frame, "to_dict"):
        return []
    return [{k: (str(v) if k == "id" else v) for k, v in row.items() if k in ("id", "in_context")}
            for row in frame.to_dict(orient="records")]


def cmd_query(args) -> None:
    import asyncio

    import graphrag.api as api
    from graphrag.config.load_config import load_config

    config = load_config(root_dir=Path(args.root))
    provider, reader = _reader(config)
    tables = {name: asyncio.run(getattr(reader, name)())
              for name in ("entities", "communities", "community_reports", "text_units", "relationships")}
    covariates = asyncio.run(reader.covariates()) if asyncio.run(provider.has("covariates")) else None
    # a text unit's short id (what the search context cites) -> its id and document id
    units = tables["text_units"]
    short = {str(h): (str(i), str(d)) for h, i, d in zip(units["human_readable_id"], units["id"], units["document_id"])}
    questions = [json.loads(line) for line in Path(args.questions).read_text(encoding="utf-8").splitlines() if line.strip()]
    t_all = time.perf_counter()
    with open(args.out, "w", encoding="utf-8") as out:
        for q in questions:
            t0 = time.perf_counter()
            response, context = asyncio.run(api.local_search(
                config=config, entities=tables["entities"], communities=tables["communities"],
                community_reports=tables["community_reports"], text_units=tables["text_units"],
                relationships=tables["relationships"], covariates=covariates,
                community_level=args.community_level, response_type=args.response_type, query=q["question"]))
            context = context if isinstance(context, dict) else {}
            sources = [r for r in _records(context.get("sources")) if r.get("in_context", True)]
            row = {
                "id": q["id"], "response": response if isinstance(response, str) else json.dumps(response),
                # the text units it read, in the order of its context (best first)
                "sources": [{"short_id": s["id"], "text_unit": short.get(s["id"], (None, None))[0],
                             "document": short.get(s["id"], (None, None))[1]} for s in sources],
                "context_records": {k: len(_records(v)) for k, v in context.items()},
                "seconds": round(time.perf_counter() - t0, 4),
            }
            out.write(json.dumps(row) + "\n")
            out.flush()
    emit({"ok": True, "n": len(questions), "seconds": round(time.perf_counter() - t_all, 3), "peak_rss_mb": peak_rss_mb()})


def main(argv=None) -> None:
    p = argparse.ArgumentParser(prog="graphrag_driver")
    sub = p.add_subparsers(dest="cmd", required=True)
    sub.add_parser("info")
    i = sub.add_parser("index")
    i.add_argument("root")
    q = sub.add_parser("query")
    q.add_argument("root")
    q.add_argument("questions")
    q.add_argument("out")
    q.add_argument("--community-level", type=int, default=2)
    q.add_argument("--response-type", default="short phrase")
    args = p.parse_args(argv)
    go_offline()
    {"info": cmd_info, "index": cmd_index, "query": cmd_query}[args.cmd](args)


if __name__ == "__main__":
    main()
