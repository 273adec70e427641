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
    ("retrieval.fusion=rff", "retrieval.fusion"),
])
def test_unknown_choice_fails_at_compose_naming_key_and_choices(override, key):
    with pytest.raises(ConfigError) as e:
        compose([override])
    msg = str(e.value)
    assert f"{key}=" in msg and "is not one of" in msg


def test_fusion_is_built_through_its_family_and_needs_a_graph_method():
    from hipporag2.retrieve.fused_retriever import no_fusion, rrf_fusion

    assert registry.FUSIONS.load("none") is no_fusion and registry.FUSIONS.load("rrf") is rrf_fusion
    with pytest.raises(ConfigError, match="retrieval.fusion=rrf .*retrieval.method=dense has none"):
        compose(["retrieval=dense", "retrieval.fusion=rrf"])


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


def test_every_implementation_fits_its_family_interface():
    """Each family with an interface loads every choice through it (vLLM-free families;
    LLM backends import their engines lazily): a builder with the wrong parameters or a
    parser without `select` fails here, not in a run."""
    checked = 0
    for reg in registry.FAMILIES.values():
        if reg.interface is None:
            continue
        for choice in reg:
            reg.load(choice.name)  # raises TypeError naming what does not fit
            checked += 1
    assert checked >= 20


def test_an_implementation_outside_the_interface_is_refused():
    reg = registry.Registry("demo", "", "a family for this test", interface=registry.Interface(params=("cfg", "llm")))
    with pytest.raises(ValueError, match="needs an implementation"):
        reg.register("bare")
    reg.register("wrong", "hipporag2.retrieve.filter_llm:build_filter")  # (cfg, llm) fits
    reg.register("worse", "hipporag2.retrieve.base:NoFilter")  # a class taking nothing
    assert reg.load("wrong")
    with pytest.raises(TypeError, match="does not fit the family"):
        reg.load("worse")
    parsers = registry.Registry("demo2", "", "x", interface=registry.Interface(attrs=("select",)))
    parsers.register("text", "hipporag2.qa.reader:extract_answer")
    with pytest.raises(TypeError, match="has no 'select'"):
        parsers.load("text")


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
