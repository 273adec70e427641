"""The public surface: `hipporag2` exports the library, and nothing outside the
package reaches into its private names."""
import ast
from pathlib import Path

import hipporag2

REPO = Path(__file__).resolve().parent.parent


def test_package_exports_the_api():
    from hipporag2.api import HippoRAG
    from hipporag2.results import QAReport, QueryResult

    assert hipporag2.HippoRAG is HippoRAG and hipporag2.QueryResult is QueryResult and hipporag2.QAReport is QAReport
    assert set(hipporag2.__all__) <= set(dir(hipporag2))


def _private_imports(path: Path):
    tree = ast.parse(path.read_text(encoding="utf-8"))
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("hipporag2"):
            parts = node.module.split(".")
            for alias in node.names:
                if alias.name.startswith("_") or any(p.startswith("_") for p in parts):
                    yield f"{path.relative_to(REPO)}:{node.lineno}: from {node.module} import {alias.name}"
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("hipporag2") and any(p.startswith("_") for p in alias.name.split(".")):
                    yield f"{path.relative_to(REPO)}:{node.lineno}: import {alias.name}"


def test_nothing_outside_the_package_imports_a_private_name():
    found = []
    for folder in ("tests", "scripts", "benchmarks", "examples"):
        for path in sorted((REPO / folder).rglob("*.py")):
            found += list(_private_imports(path))
    assert found == []


def test_clients_of_the_stage_layer_use_only_its_documented_names():
    """hipporag2.pipeline is the one documented layer under the library: its clients
    (CLI, sweep, tune-filter, demo, analysis, benchmarks, examples) import only the
    names its `__all__` lists."""
    import hipporag2.pipeline as pipeline

    used = []
    for folder in ("hipporag2", "scripts", "benchmarks", "examples"):
        for path in sorted((REPO / folder).rglob("*.py")):
            if path.name == "pipeline.py" and path.parent.name == "hipporag2":
                continue
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.ImportFrom) and node.module == "hipporag2.pipeline":
                    used += [(f"{path.relative_to(REPO)}:{node.lineno}", a.name) for a in node.names]
    assert used, "no client of hipporag2.pipeline found"
    assert [u for u in used if u[1] not in pipeline.__all__] == []
    assert all(hasattr(pipeline, name) for name in pipeline.__all__)
