"""One registry per family: validation, config groups, docs and builders read it."""
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from hipporag2 import registry
from hipporag2.cli import compose
from hipporag2.config import ConfigError

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("override, key", [
    ("retrieval.ppr_solver=batchd", "retrieval.ppr_solver"),
    ("retrieval.method=hipporag3", "retrieval.method"),
    ("retrieval.linking=query_to_nodes", "retrieval.linking"),
    ("embedding.backend=sentence_transformer", "embedding.backend"),
    ("llm.backend=vlm", "llm.backend"),
    ("llm.on_failure=ignore", "llm.on_failure"),
    ("dataset.segment_queries=some", "dataset.segment_queries"),
])
def test_unknown_choice_fails_at_compose_naming_key_and_choices(override, key):
    with pytest.raises(ConfigError) as e:
        compose([override])
    msg = str(e.value)
    assert f"{key}=" in msg and "is not one of" in msg


def test_misspelt_solver_gets_a_suggestion():
    with pytest.raises(registry.UnknownChoice) as e:
        registry.PPR_SOLVERS.check("batchd")
    assert e.value.suggestion == "batched" and e.value.key == "retrieval.ppr_solver"
    assert "did you mean 'batched'" in str(e.value)


def test_every_config_group_file_picks_a_registered_choice():
    """configs/<group>/*.yaml set the choice fields; each value must be in its registry."""
    checked = 0
    for reg in registry.config_families():
        group, fieldname = reg.key.split(".", 1)
        folder = REPO / "configs" / group
        if not folder.is_dir():
            continue
        for f in sorted(folder.glob("*.yaml")):
            data = yaml.safe_load(f.read_text()) or {}
            if fieldname in data:
                assert reg.accepts(data[fieldname]), f"{f}: {fieldname}={data[fieldname]!r} not in {reg.names()}"
                checked += 1
    assert checked >= 20


def test_implementations_load_by_name():
    from hipporag2.retrieve.ppr.batched import BatchedSolver
    from hipporag2.retrieve.ppr.prpack import PrpackSolver

    assert registry.PPR_SOLVERS.load("batched") is BatchedSolver
    assert registry.PPR_SOLVERS.load("prpack") is PrpackSolver
    for reg in (registry.ENCODERS, registry.RETRIEVERS, registry.FILTERS):
        for choice in reg:
            assert callable(reg.load(choice.name))
    # LLM backends import their own heavy packages (vllm) lazily; the class must resolve.
    assert registry.LLM_BACKENDS.load("openai").__name__ == "OpenAILLM"


def test_report_tables_are_the_registry():
    from hipporag2.report.tables import KINDS

    assert KINDS == registry.REPORT_TABLES.names()


def test_registry_import_is_light():
    code = "import sys, hipporag2.registry, hipporag2.config; print(sorted(m for m in ('torch', 'numpy', 'igraph', 'transformers') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, cwd=REPO)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def test_choices_doc_is_generated_from_the_registry():
    doc = (REPO / "docs" / "choices.md").read_text()
    assert doc == registry.markdown(), "docs/choices.md is stale: python -m hipporag2.registry > docs/choices.md"
