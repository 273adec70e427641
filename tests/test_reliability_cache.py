"""Cache integrity: checksummed embedding shards and index folders, shared cache
directories, atomic writes and the retrieval checkpoint (docs/reliability.md)."""
from __future__ import annotations

import hashlib
import json
import logging
import multiprocessing as mp
from pathlib import Path

import numpy as np
import pytest

from hipporag2.files import atomicio
from hipporag2.embed.store import EmbeddingStore


class HashEncoder:
    """Deterministic stand-in for a neural encoder: a vector from the text's hash."""

    def __init__(self):
        self.calls = 0

    def encode(self, texts, instruction=None):
        self.calls += len(texts)
        rows = [np.frombuffer(hashlib.sha256(t.encode()).digest(), dtype=np.uint8)[:8].astype(np.float32) + 1 for t in texts]
        out = np.stack(rows)
        return out / np.linalg.norm(out, axis=1, keepdims=True)


def make_store(root: Path, enc=None, shard_size=4096) -> EmbeddingStore:
    enc = enc or HashEncoder()
    return EmbeddingStore(root, "fake-fp", lambda: enc, shard_size=shard_size)


# ---- embedding shards ------------------------------------------------------------


def _flip_last_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))


def test_corrupt_embedding_shard_is_detected_removed_and_reencoded(tmp_path, caplog):
    texts = [f"text {i}" for i in range(10)]
    store = make_store(tmp_path, shard_size=4)
    ref = store.embed(texts, progress=False)
    shards = sorted((tmp_path / "fake-fp").glob("shard-*.npy"))
    assert len(shards) == 3
    meta = json.loads(shards[1].with_name("shard-00001.keys.json").read_text())
    assert meta["sha256"] == atomicio.sha256_file(shards[1]) and (meta["rows"], meta["dim"]) == (4, 8)

    _flip_last_byte(shards[1])  # a bit flip inside the vectors: np.load alone would not notice
    enc = HashEncoder()
    with caplog.at_level(logging.WARNING):
        store2 = make_store(tmp_path, enc)
    assert "shard-00001.keys.json failed verification" in caplog.text and "sha256" in caplog.text
    assert store2.corrupt_shards == 1 and not shards[1].exists()
    again = store2.embed(texts, progress=False)
    assert enc.calls == 4 and store2.encoded == 4  # only the lost shard's rows
    np.testing.assert_array_equal(again, ref)
    assert make_store(tmp_path).corrupt_shards == 0


@pytest.mark.parametrize("damage", ["truncate", "garbage_keys", "missing_npy", "legacy_ok"])
def test_other_shard_damage(tmp_path, damage, caplog):
    texts = ["a", "b", "c"]
    ref = make_store(tmp_path).embed(texts, progress=False)
    d = tmp_path / "fake-fp"
    npy, keys = d / "shard-00000.npy", d / "shard-00000.keys.json"
    if damage == "truncate":
        npy.write_bytes(npy.read_bytes()[:-7])
    elif damage == "garbage_keys":
        keys.write_text("{not json")
    elif damage == "missing_npy":
        npy.unlink()
    else:  # first-format keys file (a bare list, no checksum) is still read
        keys.write_text(json.dumps(json.loads(keys.read_text())["keys"]))
    enc = HashEncoder()
    with caplog.at_level(logging.WARNING):
        store = make_store(tmp_path, enc)
    np.testing.assert_array_equal(store.embed(texts, progress=False), ref)
    if damage == "legacy_ok":
        assert enc.calls == 0 and store.corrupt_shards == 0
    else:
        assert enc.calls == 3 and store.corrupt_shards == 1 and "shard-00000" in caplog.text


def _embed_worker(root: str, lo: int, hi: int, q) -> None:
    store = make_store(Path(root), shard_size=3)
    for s in range(lo, hi, 5):  # several small calls: many shard writes interleave
        store.embed([f"t{i}" for i in range(s, min(s + 5, hi))], progress=False)
    q.put(store.encoded)


def test_two_processes_share_one_embedding_cache(tmp_path):
    ctx = mp.get_context("fork")
    q = ctx.Queue()
    procs = [ctx.Process(target=_embed_worker, args=(str(tmp_path), lo, lo + 40, q)) for lo in (0, 20)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(60)
        assert p.exitcode == 0
    store = make_store(tmp_path)
    assert store.corrupt_shards == 0
    names = sorted(p.name for p in (tmp_path / "fake-fp").glob("shard-*.keys.json"))
    assert len(names) == len(set(names)) and not list((tmp_path / "fake-fp").glob("*.tmp-*"))
    enc = HashEncoder()
    got = make_store(tmp_path, enc).embed([f"t{i}" for i in range(60)], progress=False)
    assert enc.calls == 0  # everything both wrote is readable
    np.testing.assert_array_equal(got, HashEncoder().encode([f"t{i}" for i in range(60)]))


# ---- index folder ----------------------------------------------------------------


def _tiny_cfg(tmp_path: Path):
    from hipporag2.cli import compose

    data = tmp_path / "data"
    data.mkdir()
    corpus = [{"title": f"P{i}", "text": f"person {i} lives in city {i % 3}"} for i in range(6)]
    (data / "t_corpus.json").write_text(json.dumps(corpus))
    (data / "t.json").write_text(json.dumps([{"id": "q", "question": "where does person 1 live?"}]))
    docs = [{"passage": f"P{i}\nperson {i} lives in city {i % 3}", "extracted_triples": [[f"person {i}", "lives in", f"city {i % 3}"]]} for i in range(6)]
    (data / "oie.json").write_text(json.dumps({"docs": docs}))
    return compose(["dataset.name=t", "dataset.file_stem=t", f"data_dir={data}", f"openie.import_path={data / 'oie.json'}",
                    "retrieval.filter=none", f"cache_dir={tmp_path / 'cache'}", f"run_dir={tmp_path / 'run'}", "progress=false"])


def test_corrupt_index_is_detected_and_rebuilt(tmp_path, caplog):
    from hipporag2.graph.store import IndexCorrupt, index_exists, load_index
    from hipporag2.pipeline import LazyLLM, Timings, get_index, load_dataset

    cfg = _tiny_cfg(tmp_path)
    corpus, _ = load_dataset(cfg)
    store = make_store(tmp_path / "emb")
    report: dict = {}
    index = get_index(cfg, corpus, store, LazyLLM(cfg), report, Timings())
    path = Path(cfg.cache_dir) / "index" / report["index_key"]
    manifest = json.loads((path / "manifest.json").read_text())
    assert set(manifest["files"]) == {"index.json", "edges.npz", "passage_emb.npy", "phrase_emb.npy", "fact_emb.npy", "graph_stats.json"}

    _flip_last_byte(path / "fact_emb.npy")
    with pytest.raises(IndexCorrupt, match="fact_emb.npy: sha256"):
        load_index(path)
    report2: dict = {}
    with caplog.at_level(logging.WARNING):
        rebuilt = get_index(cfg, corpus, store, LazyLLM(cfg), report2, Timings())
    assert "failed verification (fact_emb.npy" in caplog.text and "rebuilding" in caplog.text
    assert report2["index_corrupt_rebuilt"].startswith("fact_emb.npy")
    np.testing.assert_array_equal(np.asarray(rebuilt.fact_emb), np.asarray(index.fact_emb))
    load_index(path)  # intact again

    # No manifest (a build killed before its last write) = no index: rebuilt silently.
    (path / "manifest.json").unlink()
    assert not index_exists(path)
    caplog.clear()
    get_index(cfg, corpus, store, LazyLLM(cfg), {}, Timings())
    assert index_exists(path) and "failed verification" not in caplog.text


def test_cached_index_loads_with_unread_matrices_deferred(tmp_path, monkeypatch):
    """A cache hit: get_index loads with the phrase embeddings' check deferred (HippoRAG 2
    never reads them); a damaged phrase file is then reported on its first read."""
    from hipporag2 import stages as pipeline  # the stage functions
    from hipporag2.graph.store import IndexCorrupt

    cfg = _tiny_cfg(tmp_path)
    corpus, _ = pipeline.load_dataset(cfg)
    store = make_store(tmp_path / "emb")
    report: dict = {}
    pipeline.get_index(cfg, corpus, store, pipeline.LazyLLM(cfg), report, pipeline.Timings())  # builds it
    path = Path(cfg.cache_dir) / "index" / report["index_key"]
    _flip_last_byte(path / "phrase_emb.npy")
    seen, real = [], pipeline.load_index

    def load(p, **kw):
        seen.append(kw.get("defer"))
        return real(p, **kw)

    monkeypatch.setattr(pipeline, "load_index", load)
    index = pipeline.get_index(cfg, corpus, store, pipeline.LazyLLM(cfg), {}, pipeline.Timings())
    assert seen == [("phrase",)]
    np.asarray(index.fact_emb)  # checked at load
    with pytest.raises(IndexCorrupt, match="phrase_emb.npy: sha256"):
        index.phrase_emb


# ---- atomic writes and the retrieval checkpoint ---------------------------------


def test_atomic_write_keeps_old_file_on_failure(tmp_path):
    p = tmp_path / "m.json"
    atomicio.write_json(p, {"a": 1})
    with pytest.raises(TypeError):
        atomicio.write_json(p, {"a": object()})
    assert json.loads(p.read_text()) == {"a": 1}
    assert not list(tmp_path.glob("*.tmp-*"))
    (tmp_path / "x.json.tmp-999999999").write_text("left by a killed writer")
    (tmp_path / "keep.json").write_text("{}")
    assert atomicio.remove_stale_temps(tmp_path) == 1
    assert sorted(f.name for f in tmp_path.iterdir()) == ["keep.json", "m.json"]


class CountingRetriever:
    def __init__(self):
        self.seen = []

    def retrieve(self, block):
        from hipporag2.results import QueryResult

        self.seen += [q.id for q in block]
        return [QueryResult(q.id, [1, 0], [0.1 * len(q.id) + 1 / 3, 0.0], {"fallback": False, "t": ("a",)}) for q in block]


def test_checkpoint_resume_torn_tail_and_foreign_key(tmp_path):
    from hipporag2.data.loaders import Corpus, Passage, Query
    from hipporag2.files.run_files import RetrievalFile, retrieve_into
    from hipporag2.stages import Timings

    queries = [Query(f"q{i}", f"question {i}") for i in range(7)]
    corpus = Corpus([Passage("t0", "a", 0), Passage("t1", "b", 1)])
    ids = [q.id for q in queries]

    def out(key, qs=queries):
        return RetrievalFile(tmp_path, key, qs, corpus, 3)

    full, done = retrieve_into(CountingRetriever(), queries, out("K"), Timings().stage)
    assert done == 0 and [r.query_id for r in full] == ids
    path = tmp_path / "retrieval.jsonl"
    whole = path.read_bytes()
    lines = whole.split(b"\n")
    assert len(lines) == 7 + 1  # one line per question, trailing newline

    # Killed while writing block 3 (torn line) and after block 2: resume at query 6.
    path.write_bytes(b"\n".join(lines[:6]) + b"\n" + lines[6][:20])
    r = CountingRetriever()
    resumed, done = retrieve_into(r, queries, out("K"), Timings().stage)
    assert done == 6 and r.seen == ["q6"]
    assert path.read_bytes() == whole
    assert [(x.query_id, x.ranked, x.scores) for x in resumed] == [(x.query_id, x.ranked, x.scores) for x in full]

    # Other settings (key) or other queries: the file is started over.
    r = CountingRetriever()
    _, done = retrieve_into(r, queries, out("OTHER"), Timings().stage)
    assert done == 0 and r.seen == ids
    r = CountingRetriever()
    _, done = retrieve_into(r, queries[:5], out("OTHER", queries[:5]), Timings().stage)
    assert done == 0 and r.seen == ids[:5]


# ---- the SQLite LLM response cache ------------------------------------------------


@pytest.mark.parametrize("damage", ["garbage", "torn_page"])
def test_damaged_llm_cache_is_moved_aside_and_restarted(tmp_path, damage, caplog):
    from hipporag2.llm.cache import CachedResponse, ResponseCache

    path = tmp_path / "llm" / "responses.sqlite"
    cache = ResponseCache(path)
    cache.put_many("m", {f"k{i}": CachedResponse("x" * 3000 + str(i), 10, 20) for i in range(200)})
    assert cache.get("k7").text.endswith("7")
    cache._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    cache.close()
    data = bytearray(path.read_bytes())
    if damage == "garbage":
        data = bytearray(b"not a database at all" * 100)
    else:  # scribble over the middle of a b-tree page: SQLite's own checks see it
        mid = len(data) // 2 // 4096 * 4096
        data[mid : mid + 4096] = bytes(range(256)) * 16
    path.write_bytes(bytes(data))

    with caplog.at_level(logging.WARNING, logger="hipporag2.llm.cache"):
        fresh = ResponseCache(path)
    assert "is damaged" in caplog.text and str(path) in caplog.text
    moved = list(path.parent.glob("responses.sqlite.corrupt-*"))
    assert [m.name for m in moved if not m.name.endswith(("-wal", "-shm"))], moved
    assert len(fresh) == 0 and fresh.get("k7") is None  # nothing read from the damaged file
    fresh.put_many("m", {"k7": CachedResponse("again", 1, 1)})
    fresh.close()
    assert ResponseCache(path).get("k7").text == "again"  # the new file is sound


def test_llm_cache_waits_for_another_writer_while_entering_wal(tmp_path):
    """SQLite refuses the switch to WAL at once ("database is locked", no busy handler)
    while another connection writes to a fresh file, as when two workers open one new
    cache together; the cache must wait for it within its busy timeout."""
    import sqlite3
    import threading
    import time

    from hipporag2.llm.cache import CachedResponse, ResponseCache

    path = tmp_path / "responses.sqlite"
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    other.execute("CREATE TABLE started_first(x)")  # a fresh file, still in rollback-journal mode
    other.execute("BEGIN IMMEDIATE")
    threading.Timer(0.3, lambda: other.execute("COMMIT")).start()
    t = time.monotonic()
    cache = ResponseCache(path, busy_timeout_s=10)
    assert time.monotonic() - t >= 0.25  # it waited for the other writer
    cache.put_many("m", {"k": CachedResponse("x", 1, 1)})
    assert cache.get("k") == CachedResponse("x", 1, 1)

    # the wait is bounded by the same timeout
    path2 = tmp_path / "second.sqlite"
    other2 = sqlite3.connect(path2, isolation_level=None)
    other2.execute("CREATE TABLE started_first(x)")
    other2.execute("BEGIN IMMEDIATE")
    with pytest.raises(sqlite3.OperationalError, match="locked"):
        ResponseCache(path2, busy_timeout_s=0.2)
    other2.execute("ROLLBACK")
