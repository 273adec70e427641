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
