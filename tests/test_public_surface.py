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
