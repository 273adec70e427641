"""One definition of what an encoder is given (hipporag2/embed/prompts.py), shared by
the in-process encoders, the worker and the embeddings-server client; and how the
client sizes its requests. Pure functions: no model, no server."""
from __future__ import annotations

import pytest

from hipporag2.cli import compose
from hipporag2.embed import prompts
from hipporag2.embed.openai_embed import estimate_tokens, plan_requests

INSTR = "Given a question, retrieve relevant documents that best answer the question."


@pytest.mark.parametrize("preset, query_prefix, passage_prefix", [
    ("nv_embed_v2", f"Instruct: {INSTR}\nQuery: ", ""),
    ("gte_qwen2_7b", f"Instruct: {INSTR}\nQuery: ", ""),
    ("gritlm_7b", f"<|user|>\n{INSTR}\n<|embed|>\n", "<|embed|>\n"),
    ("minilm", "", ""),
])
def test_served_and_local_runs_of_a_preset_send_the_same_texts(preset, query_prefix, passage_prefix):
    local = compose([f"embedding={preset}"]).embedding
    served = compose([f"embedding={preset}", "embedding.backend=openai_compatible",
                      "embedding.base_url=http://127.0.0.1:1/v1"]).embedding
    for cfg in (local, served):
        assert prompts.prefix(cfg, INSTR) == query_prefix
        assert prompts.prefix(cfg, None) == passage_prefix
        assert prompts.sent_texts(cfg, ["q"], INSTR) == [query_prefix + "q"]


def test_the_cache_keys_a_text_with_the_prefix_it_is_encoded_with(tmp_path):
    from hipporag2.embed.store import EmbeddingStore, text_key

    grit = compose(["embedding=gritlm_7b"]).embedding
    store = EmbeddingStore(tmp_path, "fp", lambda: None, query_format=grit.query_format,
                           passage_format=grit.passage_format)
    assert store._prefix(None) == "<|embed|>\n" and store._prefix(INSTR) == prompts.prefix(grit, INSTR)
    assert text_key("t", store._prefix(None)) != text_key("t", "")


def test_requests_are_bounded_by_count_and_tokens():
    texts = ["short"] * 10 + ["x" * 3000] + ["short"] * 5
    plan = plan_requests(texts, batch_size=4, batch_tokens=300, max_length=256, truncated=True)
    assert plan[0] == (0, 4) and [b - a for a, b in plan][:2] == [4, 4]
    assert [i for a, b in plan for i in range(a, b)] == list(range(len(texts)))  # every text once, in order
    for a, b in plan:
        assert b - a <= 4
        assert b - a == 1 or sum(estimate_tokens(t, 256, True) for t in texts[a:b]) <= 300
    # Cut by the server: a long text counts at most max_length; not cut: its full estimate.
    assert estimate_tokens("x" * 3000, 256, True) == 256 and estimate_tokens("x" * 3000, 256, False) > 1000
    alone = plan_requests(["x" * 3000, "y"], batch_size=8, batch_tokens=100, max_length=4096, truncated=False)
    assert alone == [(0, 1), (1, 2)]


def test_openai_compatible_needs_a_url_before_any_work(tmp_path):
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-m", "hipporag2.cli", "dataset=demo", "embedding=openai_compatible",
                           "embedding.model=minilm", "retrieval=dense", f"run_dir={tmp_path / 'run'}",
                           f"cache_dir={tmp_path / 'cache'}"], cwd=tmp_path, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 2
    [line] = [x for x in proc.stderr.splitlines() if x.startswith("error: ")]
    assert "embedding.base_url" in line and not (tmp_path / "run").exists()
