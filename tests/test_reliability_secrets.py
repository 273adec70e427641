"""Secrets: keys come only from the environment and never reach logs or saved files."""
from __future__ import annotations

import io
import json
import logging
from pathlib import Path

import pytest

from hipporag2.files.redact import (
    RedactingFilter,
    install_log_redaction,
    redact,
    redact_hydra_dir,
    redact_obj,
    url_has_credentials,
)

ENV_KEY = "envsecret-4f9a2b7c1d"
SK = "sk-proj-AbCdEf0123456789xyz"


@pytest.fixture
def key_env(monkeypatch):
    monkeypatch.setenv("OPENAI_API_KEY", ENV_KEY)
    monkeypatch.setenv("MY_SERVICE_TOKEN", "tok-77889900aa")
    monkeypatch.setenv("HIPPORAG2_CUSTOM_KEYVAR", "custom-secret-value")


@pytest.mark.parametrize(
    "text, secret",
    [
        (f"key is {ENV_KEY}", ENV_KEY),
        ("token tok-77889900aa here", "tok-77889900aa"),
        (f"found {SK} in text", SK),
        ("hf token hf_abcdefghijklmnopqrstuv", "hf_abcdefghijklmnopqrstuv"),
        ("Authorization: Bearer abc.def-ghi_123", "abc.def-ghi_123"),
        ("https://alice:pa55word@llm.example.com/v1", "pa55word"),
        ("https://onlytoken@llm.example.com/v1", "onlytoken"),
        ("http://h:8000/v1?api_key=qwerty123&model=x", "qwerty123"),
        ("http://h/v1?model=x&token=zzz999", "zzz999"),
    ],
)
def test_redact(key_env, text, secret):
    out = redact(text)
    assert secret not in out and "***" in out


def test_redact_keeps_ordinary_text(key_env):
    for s in ["http://127.0.0.1:8000/v1", "recall@5=74.7", "user@example.com wrote", "skill-based", "?model=gpt"]:
        assert redact(s) == s
    assert not url_has_credentials("http://localhost:8000/v1")
    assert url_has_credentials("https://u:p@host/v1")


def test_registered_key_env_var(monkeypatch):
    monkeypatch.setenv("WEIRDLY_NAMED", "value-of-weird-var")
    assert redact("value-of-weird-var") == "value-of-weird-var"
    h = logging.StreamHandler(io.StringIO())
    logging.getLogger().addHandler(h)
    try:
        install_log_redaction("WEIRDLY_NAMED")
        assert redact("value-of-weird-var") == "***"
    finally:
        logging.getLogger().removeHandler(h)


def test_log_filter_masks_messages_args_and_tracebacks(key_env):
    buf = io.StringIO()
    handler = logging.StreamHandler(buf)
    handler.setFormatter(logging.Formatter("%(name)s %(message)s"))
    root = logging.getLogger()
    root.addHandler(handler)
    try:
        assert install_log_redaction() >= 1
        assert install_log_redaction() == 0  # idempotent
        child = logging.getLogger("hipporag2.llm.some_backend")  # propagates to root's handler
        child.warning("calling %s with key %s", "https://bob:hunter22@host/v1", ENV_KEY)
        try:
            raise RuntimeError(f"server said: bad key {SK}")
        except RuntimeError:
            child.exception("request failed")
    finally:
        root.removeHandler(handler)
    out = buf.getvalue()
    assert "calling https://***@host/v1 with key ***" in out
    assert "request failed" in out and "RuntimeError: server said: bad key ***" in out
    for secret in (ENV_KEY, SK, "hunter22"):
        assert secret not in out


def test_filter_survives_bad_format_args():
    rec = logging.LogRecord("x", logging.INFO, __file__, 1, "%d items", ("not a number",), None)
    assert RedactingFilter().filter(rec) is True


def test_redact_obj_and_hydra_files(key_env, tmp_path):
    obj = {"models": {"llm_base_url": "https://u:pw1234567@h/v1"}, "list": [SK, 3, None], SK: 1}
    clean = redact_obj(obj)
    assert json.dumps(clean).count("***") == 3 and SK not in json.dumps(clean) and clean["list"][1:] == [3, None]
    hydra = tmp_path / ".hydra"
    hydra.mkdir()
    (hydra / "config.yaml").write_text(f"llm:\n  base_url: https://u:{ENV_KEY}@h/v1\n  api_key_env: OPENAI_API_KEY\n")
    (hydra / "overrides.yaml").write_text(f"- llm.base_url=http://h/v1?api_key={SK}\n")
    (hydra / "hydra.yaml").write_text("nothing: secret\n")
    changed = redact_hydra_dir(tmp_path)
    assert sorted(Path(c).name for c in changed) == ["config.yaml", "overrides.yaml"]
    text = "".join(f.read_text() for f in hydra.glob("*.yaml"))
    assert ENV_KEY not in text and SK not in text and "api_key_env: OPENAI_API_KEY" in text


def test_run_redacts_metrics_log_and_saved_config(key_env, tmp_path, caplog):
    """A whole run (BM25, no model) with credentials in llm.base_url and the key in the env."""
    from hipporag2.cli import compose
    from hipporag2.pipeline import run

    data = tmp_path / "data"
    data.mkdir()
    (data / "s_corpus.json").write_text(json.dumps([{"title": "A", "text": "alpha beta"}, {"title": "B", "text": "gamma"}]))
    (data / "s.json").write_text(json.dumps([{"id": "1", "question": "alpha?", "paragraphs": [{"title": "A", "text": "alpha beta"}]}]))
    url = f"https://user:{ENV_KEY}@llm.example.com/v1?api_key={SK}"
    run_dir = tmp_path / "run"
    (run_dir / ".hydra").mkdir(parents=True)
    (run_dir / ".hydra" / "config.yaml").write_text(f"llm:\n  base_url: {url}\n")  # as Hydra would save it
    cfg = compose(["dataset.name=s", "dataset.file_stem=s", f"data_dir={data}", "retrieval=bm25", "llm=openai_compatible",
                   "llm.model=some-model", f"llm.base_url='{url}'", f"run_dir={run_dir}", f"cache_dir={tmp_path / 'c'}", "progress=false"])
    buf = io.StringIO()
    handler = logging.StreamHandler(buf)
    logging.getLogger().addHandler(handler)
    try:
        with caplog.at_level(logging.INFO):
            metrics = run(cfg)
            logging.getLogger("hipporag2").info("configured url %s", cfg.llm.base_url)
    finally:
        logging.getLogger().removeHandler(handler)
    saved = (run_dir / "metrics.json").read_text() + (run_dir / ".hydra" / "config.yaml").read_text() + buf.getvalue()
    for secret in (ENV_KEY, SK):
        assert secret not in saved and secret not in json.dumps(metrics.to_json())
    assert metrics["provenance"]["models"]["llm_base_url"] == "https://***@llm.example.com/v1?api_key=***"
    assert "llm.base_url carries credentials" in buf.getvalue()
    assert "configured url https://***@llm.example.com/v1?api_key=***" in buf.getvalue()
