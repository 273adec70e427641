"""Fixtures shared by the whole suite.

The shared MuSiQue set is the expensive part of the suite: MiniLM embeds its ~35k
passages, phrases and facts, and every graph build runs a synonym KNN over 16k
phrases. So, per test session:

- `musique_cache`: ONE cache folder (embeddings, indexes) for every test on the set;
  point your runs' `cache_dir` at it and nothing is embedded or built twice.
- `musique_hipporag2_run`: ONE CLI run of HippoRAG 2 without filter on the whole set
  (`musique_overrides(..., *HIPPORAG2_NO_FILTER)`); its
  run_dir (graph_stats.json, retrieval.jsonl, metrics.json) and RunReport. A test
  wanting the same run reads this one; a test wanting another retrieval setting runs
  `musique_run(...)` against `musique_cache`, which loads the saved index.
- `musique_api`: ONE `HippoRAG` (library API) that has indexed all shared passages
  with the same settings. Read-only by convention: retrieve from it, compare with it;
  index/delete on your own `HippoRAG` (same cache, so only the graph is rebuilt).
"""
import json
import os
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SHARED_DATA = Path(os.environ.get("HIPPORAG2_SHARED_DATA", REPO.parent / "shared" / "data"))
MUSIQUE_OPENIE = SHARED_DATA / "openie" / "musique_train_openie_gpt-3.5-turbo-1106.json"

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")


@pytest.fixture(scope="session")
def shared_data() -> Path:
    needed = [SHARED_DATA / "musique_train.json", SHARED_DATA / "musique_train_corpus.json", MUSIQUE_OPENIE]
    missing = [str(p) for p in needed if not p.is_file()]
    if missing:
        pytest.skip(f"shared MuSiQue data not found ({', '.join(missing)}); set HIPPORAG2_SHARED_DATA or place ../shared/data beside the repo")
    return SHARED_DATA


@pytest.fixture(scope="session")
def musique_cache(tmp_path_factory, shared_data):
    """One cache (embeddings, indexes) for every test on the shared MuSiQue set, so
    MiniLM embeds its passages, phrases and facts once per test session.
    HIPPORAG2_TEST_MUSIQUE_CACHE names a folder to keep between sessions (development)."""
    keep = os.environ.get("HIPPORAG2_TEST_MUSIQUE_CACHE")
    if keep:
        Path(keep).mkdir(parents=True, exist_ok=True)
        return Path(keep)
    return tmp_path_factory.mktemp("musique_cache")


# What every shared-set run says (MiniLM, the shared GPT-3.5 OpenIE file, the shared
# cache); the retrieval method is the caller's.
HIPPORAG2_NO_FILTER = ("retrieval=hipporag2", "retrieval.filter=none")


def musique_api_overrides(cache_dir):
    """`HippoRAG(save_dir, overrides)` for the shared set: HippoRAG 2 without filter."""
    return ["embedding=minilm", *HIPPORAG2_NO_FILTER, f"openie.import_path={MUSIQUE_OPENIE}",
            f"cache_dir={cache_dir}", "progress=false"]


def musique_overrides(shared_data, cache_dir, run_dir, *extra):
    """CLI overrides of a run on the shared set; `extra` names the method
    (e.g. "retrieval=dense", or HIPPORAG2_NO_FILTER) and anything else."""
    return ["dataset=musique_train", f"data_dir={shared_data}", f"openie.import_path={MUSIQUE_OPENIE}",
            "embedding=minilm", f"cache_dir={cache_dir}", f"run_dir={run_dir}", "progress=false", *extra]


def musique_run(shared_data, cache_dir, run_dir, *extra):
    """`hipporag2.pipeline.run` on the shared set (see musique_overrides): a RunReport."""
    from hipporag2.cli import compose
    from hipporag2.pipeline import run

    return run(compose(musique_overrides(shared_data, cache_dir, run_dir, *extra)))


@pytest.fixture(scope="session")
def musique_hipporag2_run(shared_data, musique_cache, tmp_path_factory):
    """(run_dir, RunReport) of THE HippoRAG 2 run without filter on the whole shared set."""
    run_dir = tmp_path_factory.mktemp("musique_hipporag2_run")
    return run_dir, musique_run(shared_data, musique_cache, run_dir, *HIPPORAG2_NO_FILTER)


def musique_docs(shared_data):
    """The shared corpus as API documents ("title\\ntext"), duplicates dropped."""
    corpus = json.loads((shared_data / "musique_train_corpus.json").read_text())
    return list(dict.fromkeys(c["title"] + "\n" + c["text"] for c in corpus))


@pytest.fixture(scope="session")
def musique_api(shared_data, musique_cache, tmp_path_factory):
    """A `HippoRAG` that has indexed every shared passage (read-only for tests)."""
    from hipporag2 import HippoRAG

    docs = musique_docs(shared_data)
    rag = HippoRAG(tmp_path_factory.mktemp("musique_api"), musique_api_overrides(musique_cache))
    assert rag.index(docs) == len(docs)
    return rag
