"""Inserting 1% more passages into a MuSiQue-sized index vs rebuilding it from scratch.

    python -m benchmarks.bench_insert [--scale 1.0] [--insert-fraction 0.01] [--out results/perf/insert.md]

The index is synthetic but sized like the paper's MuSiQue graph (benchmarks/
synthetic_graph.py's counts: 11,656 passages, 85,288 phrase nodes; ~1M synonym edges
from clustered 384-d phrase embeddings, as in bench_knn). Each passage has ~10
triples plus one that places each phrase in some passage, ~200k triples in all (more
than the paper's 141k relation edges, which makes the per-triple work of both sides
heavier, not lighter). 1% more passages arrive, carrying 1% new phrases besides
known ones.

Both sides run `hipporag2.indexing.assemble_index` on the same final passages:
"rebuild" from nothing, "insert" given the previous index's phrases and synonym pairs
(what `HippoRAG.index` does). Embeddings come from an in-memory table on both sides,
so neither pays encoder (or LLM) work: the comparison is the CPU work an insert
saves. The two indexes are checked to be identical (every edge, weight and type).
"""
from __future__ import annotations

import argparse
import os
import platform
import resource
import sys
import time

import numpy as np

from benchmarks.bench_knn import synthetic_embeddings
from benchmarks.synthetic_graph import N_PASSAGES, N_PHRASES
from hipporag2.config import GraphConfig
from hipporag2.indexing import Previous, assemble_index
from hipporag2.openie.interchange import Extraction
from hipporag2.text import fact_string, passage_id

TRIPLES_PER_PASSAGE = 10


class TableStore:
    """Embeddings by text from a precomputed table: the cache-hit side of the
    embedding store, so that encoder work is excluded on both sides."""

    def __init__(self, table, dim):
        self.table, self.dim = table, dim

    def embed(self, texts, instruction=None, desc="", progress=False):
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        return np.stack([self.table[t] for t in texts])


def make_corpus(scale: float, insert_fraction: float, seed: int = 0):
    rng = np.random.default_rng(seed)
    n_pass = int(N_PASSAGES * scale)
    n_new_pass = max(1, int(round(n_pass * insert_fraction)))
    n_phr = int(N_PHRASES * scale)
    n_new_phr = max(1, int(round(n_phr * insert_fraction)))
    # random names, so the new phrases fall all over the text-sorted vertex order
    names = [f"{rng.integers(0, 16**12):012x} e" for _ in range(n_phr + n_new_phr)]
    emb = synthetic_embeddings(n_phr + n_new_phr, 384, seed)
    pop = 1.0 / np.arange(1, n_phr + 1) ** 0.8
    pop /= pop.sum()

    def triples(pool, p):
        k = rng.poisson(TRIPLES_PER_PASSAGE)
        s, o = rng.choice(pool, size=k, p=p), rng.choice(pool, size=k, p=p)
        return [[names[a], "rel", names[b]] for a, b in zip(s, o)]

    base = [f"passage {i}\nsynthetic text {i}" for i in range(n_pass)]
    extractions = {}
    # every base phrase sits in at least one base passage
    order = rng.permutation(n_phr)
    for i, p in enumerate(base):
        trip = triples(np.arange(n_phr), pop)
        extra = order[i::n_pass]
        trip += [[names[a], "is", names[int(rng.integers(0, n_phr))]] for a in extra]
        extractions[passage_id(p)] = Extraction(passage=p, triples=trip)
    new = [f"passage {n_pass + i}\nsynthetic text {n_pass + i}" for i in range(n_new_pass)]
    new_ids = np.arange(n_phr, n_phr + n_new_phr)
    for i, p in enumerate(new):
        trip = triples(np.arange(n_phr), pop)[: TRIPLES_PER_PASSAGE // 2]
        mine = new_ids[i::n_new_pass]
        trip += [[names[a], "is", names[int(rng.integers(0, n_phr))]] for a in mine]
        extractions[passage_id(p)] = Extraction(passage=p, triples=trip)
    table = dict(zip(names, emb))
    return base, new, extractions, table


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--insert-fraction", type=float, default=0.01)
    ap.add_argument("--out", default=None)
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    base, new, extractions, table = make_corpus(args.scale, args.insert_fraction)
    cfg = GraphConfig()

    # Facts and passages get vectors too (zeros; retrieval is not measured here).
    dim = 384
    store = TableStore(table, dim)
    zero = np.zeros(dim, np.float32)
    for ex in extractions.values():
        table.setdefault(ex.passage, zero)
        for s, p, o in ex.triples:
            table.setdefault(fact_string((s, p, o)), zero)
    gen_s = time.perf_counter() - t0

    def assemble(passages, previous=None):
        return assemble_index(passages, ["t"] * len(passages), list(range(len(passages))), extractions, store, cfg,
                              progress=False, previous=previous)

    t = time.perf_counter()
    old = assemble(base)
    base_s = time.perf_counter() - t
    everything = base + new
    t, c = time.perf_counter(), time.process_time()
    rebuilt = assemble(everything)
    rebuild_s, rebuild_cpu = time.perf_counter() - t, time.process_time() - c
    t, c = time.perf_counter(), time.process_time()
    inserted = assemble(everything, Previous(old.index.phrases, old.synonyms, old.cleaned, old.index, old.content))
    insert_s, insert_cpu = time.perf_counter() - t, time.process_time() - c
    a, b = rebuilt.index.edges, inserted.index.edges
    same = all(np.array_equal(getattr(a, f), getattr(b, f)) for f in ("source", "target", "weight", "kind"))
    same = same and rebuilt.index.stats == inserted.index.stats
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    st, up = rebuilt.index.stats, inserted.update

    cmd = " ".join(["python -m benchmarks.bench_insert"] + (argv if argv is not None else sys.argv[1:]))
    lines = [
        f"command: {cmd}",
        f"machine: {platform.processor() or platform.machine()}, cpu_count={os.cpu_count()}, load average "
        f"{os.getloadavg()[0]:.1f}; python {platform.python_version()}, numpy {np.__version__}",
        "",
        f"index before: {len(base):,} passages, {old.index.stats['phrase_nodes']:,} phrases, "
        f"{old.index.stats['synonym_edges']:,} synonym edges (built in {base_s:.1f} s)",
        f"inserted: {len(new):,} passages ({100 * len(new) / len(base):.1f}%), "
        f"{st['phrase_nodes'] - old.index.stats['phrase_nodes']:,} new phrases; after: {st['phrase_nodes']:,} phrases, "
        f"{st['relation_edges']:,} relation / {st['context_edges']:,} context / {st['synonym_edges']:,} synonym edges",
        f"insert searched {up.full_rows:,} rows against all phrases and {up.merged_rows:,} rows against the "
        f"{up.new_columns:,} new ones",
        "",
        "| | wall s | CPU s (all threads) |",
        "| --- | --- | --- |",
        f"| rebuild from scratch (assemble_index) | {rebuild_s:.1f} | {rebuild_cpu:.1f} |",
        f"| insert (assemble_index with the previous index) | {insert_s:.1f} | {insert_cpu:.1f} |",
        f"| **ratio** | **{rebuild_s / insert_s:.1f}x** | **{rebuild_cpu / insert_cpu:.1f}x** |",
        "",
        f"identical index (every edge, weight, type; graph stats): {same}",
        f"peak RSS {peak:.0f} MB; synthetic data generation {gen_s:.1f} s (not counted)",
    ]
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
