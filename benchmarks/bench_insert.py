"""Inserting 1% more passages into a MuSiQue-sized index vs rebuilding it from scratch,
both through the library (`HippoRAG.index`), each in a process of its own.

    python -m benchmarks.bench_insert [--scale 1.0] [--insert-fraction 0.01] [--out results/perf/insert.md]

The index is synthetic but sized like the paper's MuSiQue graph (benchmarks/
synthetic_graph.py's counts: 11,656 passages, 85,288 phrase nodes; ~1M synonym edges
from clustered 384-d phrase embeddings, as in bench_knn). Each passage has ~10
triples plus one that places each phrase in some passage, ~200k triples in all (more
than the paper's 141k relation edges, which makes the per-triple work of both sides
heavier, not lighter). 1% more passages arrive, carrying 1% new phrases besides
known ones.

Both sides are what a user runs, `HippoRAG(save_dir, overrides).index(docs)` with
imported OpenIE (`openie.import_path`) and MiniLM's embedding cache filled beforehand
with the synthetic vectors (so neither side pays LLM or encoder work, the part an
insert cannot save; cache look-ups are paid by both):

* rebuild: a new save_dir indexes all passages (OpenIE file of all passages);
* insert: the save_dir of the first 99% is reopened (timed apart: "open") and given
  all passages with the OpenIE file of the new ones; `index` skips the known ones.

Timed: the `index` call, i.e. OpenIE import, content, embedding rows, synonym KNN,
edges and writing the save_dir (index, synonym pairs, OpenIE). Not included on
either side: the batched PPR solver's one-off preparation, made on the first
`retrieve` after a change (`retrieve/ppr_store.py`). Each side runs in a fresh child
process (peak RSS is that process's; CPU time counts all its threads). The two
save_dirs are then loaded and compared: every edge, weight and type, graph stats,
node lists, node specificity, embedding rows and synonym pairs.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from benchmarks.bench_knn import synthetic_embeddings
from benchmarks.synthetic_graph import N_PASSAGES, N_PHRASES
from hipporag2.openie.interchange import Extraction
from hipporag2.text import fact_string, passage_id

TRIPLES_PER_PASSAGE = 10
DIM = 384


class TableStore:
    """Embeddings by text from a precomputed table: the cache-hit side of the
    embedding store, so that encoder work is excluded (tests/test_incremental_index.py)."""

    def __init__(self, table, dim):
        self.table, self.dim = table, dim

    def embed(self, texts, instruction=None, desc="", progress=False):
        if not texts:
            return np.zeros((0, self.dim), np.float32)
        return np.stack([self.table[t] for t in texts])


class TableEncoder:
    """Stands in for the encoder while the embedding cache is filled: it is never
    called during the measurement (every text is a cache hit by then)."""

    def __init__(self, table):
        self.table = table

    def encode(self, texts, instruction=None):
        return np.stack([self.table[t] for t in texts])


def make_corpus(scale: float, insert_fraction: float, seed: int = 0):
    rng = np.random.default_rng(seed)
    n_pass = int(N_PASSAGES * scale)
    n_new_pass = max(1, int(round(n_pass * insert_fraction)))
    n_phr = int(N_PHRASES * scale)
    n_new_phr = max(1, int(round(n_phr * insert_fraction)))
    # random names, so the new phrases fall all over the text-sorted vertex order
    names = [f"{rng.integers(0, 16**12):012x} e" for _ in range(n_phr + n_new_phr)]
    emb = synthetic_embeddings(n_phr + n_new_phr, DIM, seed)
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


def overrides(work: Path, openie: str):
    return ["embedding=minilm", "retrieval=hipporag2", "retrieval.filter=none", f"openie.import_path={work / openie}",
            f"cache_dir={work / 'cache'}", f"run_dir={work / 'runs'}", "progress=false"]


def prepare(work: Path, scale: float, fraction: float) -> dict:
    """Synthetic corpus, its OpenIE files, MiniLM's embedding cache filled with its vectors."""
    from hipporag2.cli import compose
    from hipporag2.embed.encoders import Encoder
    from hipporag2.embed.store import EmbeddingStore
    from hipporag2.openie.interchange import write_openie

    base, new, extractions, table = make_corpus(scale, fraction)
    zero = np.zeros(DIM, np.float32)
    for ex in extractions.values():  # passages and facts get vectors too (zeros: retrieval is not measured)
        table.setdefault(ex.passage, zero)
        for s, p, o in ex.triples:
            table.setdefault(fact_string((s, p, o)), zero)
    write_openie(work / "openie_base.json", [extractions[passage_id(p)] for p in base])
    write_openie(work / "openie_all.json", [extractions[passage_id(p)] for p in base + new])
    write_openie(work / "openie_new.json", [extractions[passage_id(p)] for p in new])
    cfg = compose(overrides(work, "openie_all.json"))
    store = EmbeddingStore(work / "cache" / "embeddings", Encoder(cfg.embedding).fingerprint, lambda: TableEncoder(table),
                           query_format=cfg.embedding.query_format)
    store.embed(list(table), progress=False)
    (work / "docs.json").write_text(json.dumps({"base": base, "new": new}))
    return {"passages": len(base), "new_passages": len(new)}


def child(side: str, work: Path) -> dict:
    """One side, in this (fresh) process; prints its measurements as JSON."""
    from hipporag2 import HippoRAG

    docs = json.loads((work / "docs.json").read_text())
    everything = docs["base"] + docs["new"]
    out: dict = {}
    w, c = time.perf_counter(), time.process_time()
    if side == "base":
        rag = HippoRAG(work / "insert", overrides(work, "openie_base.json"))
        rag.index(docs["base"])
    elif side == "rebuild":
        rag = HippoRAG(work / "rebuild", overrides(work, "openie_all.json"))
        rag.index(everything)
    else:
        rag = HippoRAG(work / "insert", overrides(work, "openie_new.json"))
        out["open"] = [time.perf_counter() - w, time.process_time() - c]
        w, c = time.perf_counter(), time.process_time()
        rag.index(everything)
        u = rag.last_update
        out["update"] = {"searched_rows": u.searched_rows, "full_rows": u.full_rows, "merged_rows": u.merged_rows,
                         "new_columns": u.new_columns}
    out["index"] = [time.perf_counter() - w, time.process_time() - c]
    out["stages"] = {k: [t.wall_s, t.cpu_s] for k, t in rag.last_timings.items()}
    out["stats"] = rag.graph_stats
    out["rss_mb"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    rag.close()
    return out


def run_child(side: str, work: Path) -> dict:
    env = dict(os.environ, OMP_WAIT_POLICY="passive", HF_HUB_OFFLINE="1")  # no spin-waiting on a shared machine
    proc = subprocess.run([sys.executable, "-m", "benchmarks.bench_insert", "--child", side, "--work", str(work)],
                          env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"the {side} side failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def identical(work: Path) -> bool:
    from hipporag2.graph.store import load_index

    a, b = load_index(work / "rebuild" / "index"), load_index(work / "insert" / "index")
    same = all(np.array_equal(getattr(a.edges, f), getattr(b.edges, f)) for f in ("source", "target", "weight", "kind"))
    same &= a.stats == b.stats and a.passages == b.passages and a.phrases == b.phrases and a.facts == b.facts
    same &= a.phrase_passages == b.phrase_passages
    same &= all(np.array_equal(getattr(a, f), getattr(b, f)) for f in ("passage_emb", "phrase_emb", "fact_emb"))
    sa, sb = np.load(work / "rebuild" / "synonyms.npz"), np.load(work / "insert" / "synonyms.npz")
    return bool(same and all(np.array_equal(sa[k], sb[k]) for k in ("query", "neighbour", "score")))


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scale", type=float, default=1.0)
    ap.add_argument("--insert-fraction", type=float, default=0.01)
    ap.add_argument("--out", default=None)
    ap.add_argument("--work", default=None, help="folder for the save_dirs and cache (default: a temp folder, removed)")
    ap.add_argument("--child", choices=("base", "rebuild", "insert"), help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        print(json.dumps(child(args.child, Path(args.work))))
        return 0
    work = Path(args.work) if args.work else Path(tempfile.mkdtemp(prefix="bench_insert_"))
    work.mkdir(parents=True, exist_ok=True)
    load0 = os.getloadavg()[0]
    t = time.perf_counter()
    sizes = prepare(work, args.scale, args.insert_fraction)
    gen_s = time.perf_counter() - t
    base = run_child("base", work)
    loads = [os.getloadavg()[0]]
    rebuild = run_child("rebuild", work)
    loads.append(os.getloadavg()[0])
    insert = run_child("insert", work)
    loads.append(os.getloadavg()[0])
    same = identical(work)
    if not args.work:
        shutil.rmtree(work, ignore_errors=True)

    st, bst, up = rebuild["stats"], base["stats"], insert["update"]
    (rw, rc), (iw, ic), (ow, oc) = rebuild["index"], insert["index"], insert["open"]
    cmd = " ".join(["python -m benchmarks.bench_insert"] + (argv if argv is not None else sys.argv[1:]))
    lines = [
        f"command: {cmd}",
        f"machine: {platform.processor() or platform.machine()}, cpu_count={os.cpu_count()}, load average (1 min) "
        f"{load0:.1f} at start, {', '.join(f'{x:.1f}' for x in loads)} after base / rebuild / insert; "
        f"python {platform.python_version()}, numpy {np.__version__}",
        "",
        f"index before: {sizes['passages']:,} passages, {bst['phrase_nodes']:,} phrases, "
        f"{bst['synonym_edges']:,} synonym edges (built through the API in {base['index'][0]:.1f} s wall, "
        f"{base['index'][1]:.1f} s CPU)",
        f"inserted: {sizes['new_passages']:,} passages ({100 * sizes['new_passages'] / sizes['passages']:.1f}%), "
        f"{st['phrase_nodes'] - bst['phrase_nodes']:,} new phrases; after: {st['phrase_nodes']:,} phrases, "
        f"{st['relation_edges']:,} relation / {st['context_edges']:,} context / {st['synonym_edges']:,} synonym edges",
        f"insert's synonym KNN: {up['searched_rows']:,} rows against all phrases (nothing else); "
        f"{up['merged_rows']:,} old lists merged with the new phrases' pairs turned around",
        "",
        "| | wall s | CPU s (all threads) | peak RSS MB |",
        "| --- | --- | --- | --- |",
        f"| rebuild from scratch (`HippoRAG(new dir).index(all)`) | {rw:.1f} | {rc:.1f} | {rebuild['rss_mb']:.0f} |",
        f"| insert (`HippoRAG(dir of 99%).index(all)`) | {iw:.2f} | {ic:.2f} | {insert['rss_mb']:.0f} |",
        f"| **ratio rebuild / insert** | **{rw / iw:.1f}x** | **{rc / ic:.1f}x** | |",
        f"| reopening the save_dir first (`HippoRAG(dir)`, checksums verified) | {ow:.2f} | {oc:.2f} | |",
        f"| ratio rebuild / (open + insert) | {rw / (ow + iw):.1f}x | {rc / (oc + ic):.1f}x | |",
        "",
        "Stages (wall s / CPU s; `HippoRAG.last_timings`):",
        "",
        "| stage | rebuild | insert |",
        "| --- | --- | --- |",
    ]
    for name in rebuild["stages"]:
        r, i = rebuild["stages"][name], insert["stages"].get(name, [0.0, 0.0])
        lines.append(f"| {name} | {r[0]:.2f} / {r[1]:.2f} | {i[0]:.2f} / {i[1]:.2f} |")
    lines += [
        "",
        f"identical save_dirs (every edge, weight, type; graph stats; nodes; specificity; embedding rows; synonym pairs): {same}",
        f"not included: the PPR solver's one-off preparation (made on the first retrieve after a change, on either side); "
        f"synthetic data and embedding cache {gen_s:.1f} s",
    ]
    text = "\n".join(lines)
    print(text)
    if args.out:
        with open(args.out, "w", encoding="utf-8") as f:
            f.write(text + "\n")
    return 0 if same else 1


if __name__ == "__main__":
    sys.exit(main())
