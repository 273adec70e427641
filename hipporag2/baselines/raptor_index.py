"""`retrieval.method=raptor`: the RAPTOR tree of the run's corpus, cached by content,
and its collapsed-tree retriever.

The tree is built once per (corpus, encoder, LLM, tree settings) under
`cache_dir/raptor/<key>/`. Summaries go through the run's LLM, whose response cache
keeps each answer as it arrives; UMAP and the mixtures are seeded, so a build that was
interrupted clusters the same way again and finds its finished summaries in that cache
(it pays only for the ones it had not received). The summary prompt is our own wording
(docs/quirks.md).
"""
from __future__ import annotations

import io
import json
import logging
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any, Dict, List, Sequence

import numpy as np
from filelock import FileLock

from hipporag2.files import atomicio
from hipporag2.baselines import raptor
from hipporag2.baselines.common import table12
from hipporag2.baselines.config import RAPTOR_SUMMARY_PASSAGES
from hipporag2.llm.base import ChatRequest
from hipporag2.retrieve import instructions as ins
from hipporag2.results import ContextNode, QueryResult
from hipporag2.files.stagekeys import corpus_digest, digest

log = logging.getLogger("hipporag2.raptor")

STAGE = "raptor_summary"
# Bump when the prompt or the tree recipe changes: the tree cache key includes it.
TREE_VERSION = 2
SUMMARY_SYSTEM = "You condense groups of related texts into one short, factual summary."
SUMMARY_USER = (
    "Texts:\n\n{texts}\n\n"
    "Write one paragraph that summarises these texts. Keep every name, date, place and "
    "number that they mention; add nothing that they do not say."
)


def summary_request(texts: Sequence[str], max_new_tokens: int) -> ChatRequest:
    return ChatRequest(messages=(("system", SUMMARY_SYSTEM), ("user", SUMMARY_USER.format(texts="\n\n".join(texts)))),
                       max_new_tokens=max_new_tokens)


def tree_key(cfg, passages: Sequence[str], store) -> str:
    """What changes the tree: corpus, encoder, LLM and its decoding, tree settings."""
    r = asdict(cfg.raptor)
    for k in ("summary_passages", "context_top_k", "context_tokens"):  # retrieval-time only
        r.pop(k)
    llm = cfg.llm
    return digest({
        "v": TREE_VERSION, "corpus": corpus_digest(passages), "encoder": store.dir.name, "raptor": r,
        "llm": [llm.backend, llm.model, llm.temperature, llm.seed],
    })


def _save(tree: raptor.Tree, folder: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    buf = io.BytesIO()
    np.save(buf, tree.embeddings)
    atomicio.write_bytes(folder / "embeddings.npy", buf.getvalue())
    # written last: its presence says the folder is complete
    atomicio.write_json(folder / "tree.json", {"stats": tree.stats, "nodes": [asdict(n) for n in tree.nodes]})


def _load(folder: Path):
    if not (folder / "tree.json").is_file():
        return None
    obj = json.loads((folder / "tree.json").read_text(encoding="utf-8"))
    emb = np.load(folder / "embeddings.npy")
    nodes = [raptor.Node(**n) for n in obj["nodes"]]
    if len(nodes) != len(emb):
        log.warning("RAPTOR tree %s: %d nodes but %d embeddings; rebuilding", folder, len(nodes), len(emb))
        return None
    return raptor.Tree(nodes, emb, obj["stats"])


def get_tree(cfg, passages: Sequence[str], store, lazy_llm) -> raptor.Tree:
    """The cached tree, or a new one (built under a lock, so two runs build it once)."""
    folder = Path(cfg.cache_dir) / "raptor" / tree_key(cfg, passages, store)
    tree = _load(folder)
    if tree is not None:
        log.info("RAPTOR tree cache hit %s: %s", folder, tree.stats["levels"])
        tree.stats["cached"] = True
        return tree
    folder.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(folder) + ".lock"):
        tree = _load(folder)
        if tree is not None:
            tree.stats["cached"] = True
            return tree
        llm = lazy_llm.get()
        before = llm.usage().get(STAGE, {})
        sent_before = llm.requests_sent

        def embed(texts: List[str]) -> np.ndarray:
            return store.embed(texts, desc="embed RAPTOR nodes", progress=cfg.progress)

        def summarize(groups: List[List[str]]) -> List[str]:
            reqs = [summary_request(g, cfg.raptor.summary_max_new_tokens) for g in groups]
            replies = llm.generate(reqs, stage=STAGE, progress=cfg.progress)
            failed = [r.error for r in replies if r.error is not None]
            if failed:
                # a summary that failed would put an empty node in the tree for good
                from hipporag2.gates import GateError

                raise GateError(f"stage {STAGE}: {len(failed)} of {len(reqs)} RAPTOR summary calls failed (first: {failed[0]}); "
                                "the finished ones are in the LLM cache: rerun to resume")
            return [r.text.strip() for r in replies]

        t0 = time.perf_counter()
        tree = raptor.build_tree(passages, cfg.raptor, embed, summarize,
                                 on_level=lambda lv, n: log.info("RAPTOR level %d: %d summaries", lv, n))
        after = llm.usage().get(STAGE, {})

        def delta(k):
            return int(after.get(k, 0)) - int(before.get(k, 0))

        tree.stats.update({
            "build_s": round(time.perf_counter() - t0, 3),
            # what a build from nothing costs: tokens of calls answered by the model or the cache
            "llm_input_tokens": delta("input_tokens") + delta("cached_input_tokens"),
            "llm_output_tokens": delta("output_tokens") + delta("cached_output_tokens"),
            "llm_calls": delta("requests"),
            # what this build paid (a resumed build: only the summaries it lacked)
            "llm_calls_sent": llm.requests_sent - sent_before,
        })
        _save(tree, folder)
        log.info("RAPTOR tree %s: levels %s, %d nodes", folder, tree.stats["levels"], len(tree.nodes))
        tree.stats["cached"] = False
        return tree


class RaptorRetriever:
    """Collapsed-tree retrieval; also gives each query's reader context (the nodes
    themselves, not passages) in `reader_context`."""

    def __init__(self, tree: raptor.Tree, passages: Sequence[str], store, cfg, index_s: float):
        # `cfg` is the retrieval section, as in every retriever (the library replaces it
        # to change retrieval_top_k); the tree's settings are the run's `raptor` section
        self.tree, self.store, self.cfg, self.rcfg = tree, store, cfg.retrieval, cfg.raptor
        self.progress = cfg.progress
        self.titles = [p.partition("\n")[0] if "\n" in p else "" for p in passages]
        self.index_s = index_s

    def retrieve(self, queries) -> List[QueryResult]:
        rc, top_k = self.rcfg, self.cfg.retrieval_top_k
        q = self.store.embed([x.question for x in queries], instruction=ins.QUERY_TO_PASSAGE,
                             desc="embed queries (RAPTOR)", progress=self.progress)
        out = []
        for query, scores in zip(queries, raptor.score_nodes(self.tree, q)):
            rankings = {m: raptor.passage_ranking(self.tree, scores, m, top_k) for m in RAPTOR_SUMMARY_PASSAGES}
            ranked, sc = rankings[rc.summary_passages]
            ctx = raptor.context_nodes(self.tree, scores, rc.context_top_k, rc.context_tokens)
            nodes = self.tree.nodes
            out.append(QueryResult(
                query.id, ranked, sc,
                raptor_context_nodes=[ContextNode(i, nodes[i].level, round(float(scores[i]), 6)) for i in ctx],
                reader_context=[(self.titles[nodes[i].passages[0]] if nodes[i].level == 0 else f"Summary (level {nodes[i].level})",
                                 nodes[i].text) for i in ctx],
                raptor_ranked={m: rankings[m][0] for m in RAPTOR_SUMMARY_PASSAGES},
            ))
        return out

    def run_report(self, queries, results, corpus, recall_k, timings) -> Dict[str, Any]:
        """metrics.json's RAPTOR part: recall@k under both summary rules, the tree, and
        the Table 12 counters."""
        from hipporag2.evaluate.metrics import mean_recall

        strings = corpus.strings
        golds = [q.gold_passages for q in queries]
        recall = {m: mean_recall(golds, [[strings[i] for i in r.raptor_ranked[m]] for r in results], recall_k)
                  for m in RAPTOR_SUMMARY_PASSAGES}
        st = self.tree.stats
        n = max(len(queries), 1)
        query_s = timings.seconds.get("retrieval", 0.0) + timings.seconds.get("qa", 0.0)
        return {
            "raptor_recall": recall,
            "raptor_summary_passages": self.rcfg.summary_passages,
            "raptor_tree": {"levels": st["levels"], "nodes": st["nodes"], "cached": st.get("cached", False), "llm_calls": st.get("llm_calls"),
                            "llm_calls_sent": st.get("llm_calls_sent", 0) if not st.get("cached") else 0},
            "table12": table12(st.get("llm_input_tokens"), st.get("llm_output_tokens"), st.get("build_s", self.index_s),
                               query_s / n),
        }


def raptor_retriever(parts):
    """Registry builder (`retrieval.method=raptor`)."""
    from hipporag2.config import ConfigError

    import importlib.util

    if parts.store is None:
        raise ConfigError("retrieval.method=raptor needs an encoder (embedding=...)")
    missing = [m for m, pkg in (("umap", "umap-learn"), ("sklearn", "scikit-learn")) if importlib.util.find_spec(m) is None]
    if missing:
        raise ConfigError(f"retrieval.method=raptor needs {' and '.join(missing)}: pip install -e '.[baselines]' (make setup installs it)")
    t0 = time.perf_counter()
    tree = get_tree(parts.cfg, list(parts.passages), parts.store, parts.llm)
    return RaptorRetriever(tree, list(parts.passages), parts.store, parts.cfg, time.perf_counter() - t0)
