"""Every benchmark still imports what it uses: each script's imports, those inside its functions included,
resolve against the package as it is now (a renamed function once broke `design_study.py probe` silently)."""

from __future__ import annotations

import ast
import importlib
import importlib.util
from pathlib import Path

import pytest

from conftest import REPO

BENCHMARKS = sorted((REPO / "benchmarks").glob("*.py"))


def imported_names(path: Path) -> list[tuple[str, str | None]]:
    """(module, name) of every ``import module`` and ``from module import name`` in ``path``, at any depth."""
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [(alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found += [(node.module, alias.name) for alias in node.names]
    return found


def test_there_are_benchmarks() -> None:
    assert len(BENCHMARKS) >= 5


@pytest.mark.parametrize("path", BENCHMARKS, ids=lambda path: path.name)
def test_every_import_of_a_benchmark_resolves(path: Path) -> None:
    missing = []
    for module_name, name in imported_names(path):
        if not module_name.startswith("dpscaling"):
            continue  # third-party imports are the environment's, checked by importing the script below
        module = importlib.import_module(module_name)
        if name is not None and not hasattr(module, name):
            try:
                importlib.import_module(f"{module_name}.{name}")
            except ModuleNotFoundError:
                missing.append(f"from {module_name} import {name}")
    assert missing == [], f"{path.name}: {missing}"


@pytest.mark.parametrize("path", BENCHMARKS, ids=lambda path: path.name)
def test_every_benchmark_module_loads(path: Path) -> None:
    spec = importlib.util.spec_from_file_location(f"benchmark_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # module level only: each script's work runs under `if __name__ == "__main__"`
    assert hasattr(module, "main") or hasattr(module, "__doc__")
