"""Structured configs: a misspelt key or a bad value fails at start-up, naming it."""
import subprocess
import sys

import pytest

from hipporag2.cli import compose
from hipporag2.config import ConfigError


def test_defaults_compose_and_validate():
    cfg = compose([])
    assert cfg.retrieval.damping == 0.5 and cfg.retrieval.passage_node_weight == 0.05
    assert cfg.retrieval.linking_top_k == 5 and cfg.retrieval.retrieval_top_k == 200
    assert cfg.graph.synonymy_edge_sim_threshold == 0.8 and cfg.graph.synonymy_edge_topk == 2047


def test_bad_values_are_named():
    with pytest.raises(ConfigError, match=r"retrieval\.filter='maybe'"):
        compose(["retrieval.filter=maybe"])
    with pytest.raises(ConfigError, match=r"retrieval\.damping=1\.5"):
        compose(["retrieval.damping=1.5"])


def test_misspelt_key_fails_in_the_cli(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "hipporag2.cli", "retrieval.dampng=0.3", f"run_dir={tmp_path}"],
        capture_output=True, text=True, timeout=120,
    )
    assert out.returncode != 0
    assert "dampng" in out.stderr


def test_wrong_type_fails(tmp_path):
    with pytest.raises(Exception, match="damping"):
        compose(["retrieval.damping=high"])
