"""The README's Python snippet runs as written, on a checkout beside ../shared/data."""
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.shared_data

SECTION = "## From Python: your own corpus"


def readme_snippet() -> str:
    """The first ```python block of the README's library section."""
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert SECTION in text, f"README.md has no section {SECTION!r}"
    after = text.split(SECTION, 1)[1]
    assert "```python\n" in after.split("\n## ", 1)[0], f"README.md: no python block under {SECTION!r}"
    return after.split("```python\n", 1)[1].split("```", 1)[0]


def test_readme_snippet_runs_as_written(shared_data, musique_cache, tmp_path):
    code = readme_snippet()
    assert "../shared/data" in code  # the snippet reads the data where a clone finds it
    # A clone's layout: the snippet runs from the repository root, ../shared/data beside it.
    clone = tmp_path / "clone"
    clone.mkdir()
    (tmp_path / "shared").mkdir()
    (tmp_path / "shared" / "data").symlink_to(shared_data.resolve(), target_is_directory=True)
    # The snippet's cache is save_dir/cache: seed its embeddings with the session's MiniLM
    # vectors of the shared set (the cache is by text: what it serves is what MiniLM gives).
    (musique_cache / "embeddings").mkdir(parents=True, exist_ok=True)
    cache = clone / "runs" / "my_index" / "cache"
    cache.mkdir(parents=True)
    (cache / "embeddings").symlink_to(musique_cache / "embeddings", target_is_directory=True)
    env = dict(os.environ, PYTHONPATH=str(REPO), HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    proc = subprocess.run([sys.executable, "-c", code], cwd=clone, env=env, capture_output=True, text=True, timeout=3600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    corpus = json.loads((shared_data / "musique_train_corpus.json").read_text(encoding="utf-8"))
    docs = list(dict.fromkeys(c["title"] + "\n" + c["text"] for c in corpus))
    # It printed the top passage's title first, and left the index of docs[:1500] behind.
    first = proc.stdout.splitlines()[0]
    assert first in {d.split("\n", 1)[0] for d in docs}, proc.stdout[:500]
    state = json.loads((clone / "runs" / "my_index" / "hipporag2_index.json").read_text(encoding="utf-8"))
    assert state["passages"] == 1500
    assert len(docs) - 1500 == 390  # the snippet's comment
