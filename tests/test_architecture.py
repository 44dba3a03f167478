"""The package's shape: subpackages by concept, each naming its part of the method, few plain modules beside
them, no module or function too long to read, no import circles, the library never imports the workflow layer,
parsing the Snakefile imports no JAX, one enum of random streams, and the accounting event imported the way it
works on the jax-privacy versions allowed."""

from __future__ import annotations

import ast
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import dp_accounting
import pytest

from conftest import REPO

PACKAGE = REPO / "src" / "dpscaling"
WORKFLOW_LAYER = "dpscaling.workflow.params"  # rule params: imported by workflow/rules/common.smk only
MAX_PLAIN_MODULES, MAX_MODULE_LINES, MAX_FUNCTION_LINES = 6, 500, 80


def modules() -> dict[str, Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        found[".".join(parts)] = path
    return found


def import_graph() -> dict[str, set[str]]:
    """module → the package's modules it imports, anywhere in its body (function-level imports too:
    a lazy import is still an arrow). ``from pkg import sub`` is an arrow to ``pkg.sub``."""
    known = modules()
    graph: dict[str, set[str]] = defaultdict(set)
    for name, path in known.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    parts = package.split(".")[: len(package.split(".")) - node.level + 1]
                    base = ".".join(parts + ([node.module] if node.module else []))
                subs = [f"{base}.{alias.name}" for alias in node.names if f"{base}.{alias.name}" in known]
                targets = subs if len(subs) == len(node.names) else [base, *subs]
            else:
                continue
            graph[name] |= {target for target in targets if target in known and target != name}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for other in graph.get(node, ()):
            if other not in index:
                visit(other)
                low[node] = min(low[node], low[other])
            elif other in on_stack:
                low[node] = min(low[node], index[other])
        if low[node] == index[node]:
            component = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                component.append(top)
                if top == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(set(graph) | set().union(*graph.values())):
        if node not in index:
            visit(node)
    return found


def test_few_plain_modules_beside_the_subpackages() -> None:
    plain = sorted(path.name for path in PACKAGE.glob("*.py") if path.name != "__init__.py")
    assert len(plain) <= MAX_PLAIN_MODULES, plain


@pytest.mark.parametrize("package", sorted(path.parent.name for path in PACKAGE.glob("*/__init__.py")))
def test_each_subpackage_names_its_part_of_the_method(package: str) -> None:
    docstring = ast.get_docstring(ast.parse((PACKAGE / package / "__init__.py").read_text(encoding="utf-8")))
    assert docstring and len(docstring.split()) >= 8, f"dpscaling.{package}: say what part of the method it holds"


def test_no_module_or_function_is_too_long_to_read() -> None:
    too_long = []
    for name, path in modules().items():
        text = path.read_text(encoding="utf-8")
        if len(text.splitlines()) > MAX_MODULE_LINES:
            too_long.append(f"{name}: {len(text.splitlines())} lines")
        too_long += [f"{name}.{node.name}: {node.end_lineno - node.lineno + 1} lines"
                     for node in ast.walk(ast.parse(text)) if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
                     and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES]
    assert too_long == []


def test_the_walk_sees_a_circle_when_there_is_one() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    graph = import_graph()
    assert "dpscaling.models.shapes" in graph["dpscaling.models.bert"]  # it reads real imports


def test_no_import_circles() -> None:
    assert cycles(import_graph()) == []


def test_the_library_never_imports_the_workflow_layer() -> None:
    importers = sorted(name for name, targets in import_graph().items() if WORKFLOW_LAYER in targets)
    assert importers == []
    rules = {path.name for path in (REPO / "workflow" / "rules").glob("*.smk")
             if WORKFLOW_LAYER in path.read_text(encoding="utf-8")}
    scripts = [path.name for path in (REPO / "workflow" / "scripts").glob("*.py")
               if WORKFLOW_LAYER in path.read_text(encoding="utf-8")]
    assert rules == {"common.smk"} and scripts == []


def test_parsing_the_snakefile_imports_no_jax(tmp_path) -> None:
    """A dry run of every target parses every rule file and evaluates the params and resources of every
    job: none of it may pull in JAX (seconds per parse, and every cluster job parses the Snakefile)."""
    command = [sys.executable, "-X", "importtime", "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"),
               "-n", "--cores", "1", "all", "ablation_batch", "audit", "private_model", "--configfile",
               str(REPO / "tests" / "configs" / "smoke.yaml")]
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    imported = {line.rsplit("|", 1)[-1].strip() for line in result.stderr.splitlines() if line.startswith("import time:")}
    assert "dpscaling.workflow.params" in imported and "snakemake" in imported  # the listing is real
    heavy = sorted(name for name in imported if name.split(".")[0] in ("jax", "jaxlib", "flax", "optax", "jax_privacy"))
    assert heavy == []


def test_random_streams_are_one_enum_of_distinct_ids() -> None:
    from dpscaling.core.streams import Stream

    assert len({int(stream) for stream in Stream}) == len(Stream)
    # No module keeps a stream id of its own (the names the enum replaced).
    for path in PACKAGE.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        assert "_STREAM =" not in text and "_STREAM," not in text, path


def test_the_truncated_poisson_event_is_jax_privacys_on_this_version() -> None:
    from dpscaling.accounting.truncation import truncated_dpsgd_event

    event = truncated_dpsgd_event()(0.9, 50, sampling_prob=0.01, num_examples=1000, truncated_batch_size=20)
    assert event == dp_accounting.SelfComposedDpEvent(
        dp_accounting.TruncatedSubsampledGaussianDpEvent(
            dataset_size=1000, sampling_probability=0.01, truncated_batch_size=20, noise_multiplier=0.9), 50)


def test_jax_privacy_is_pinned_to_what_is_tested() -> None:
    from importlib.metadata import version

    pyproject = (REPO / "pyproject.toml").read_text(encoding="utf-8")
    assert '"jax-privacy>=2.0,<2.1"' in pyproject
    assert version("jax-privacy").startswith("2.0.")


@pytest.mark.parametrize("module", ["dpscaling.config.blocks", "dpscaling.config.checks", "dpscaling.workflow.cluster",
                                    "dpscaling.models.family", "dpscaling.workflow.grid", "dpscaling.workflow.params"])
def test_workflow_facing_modules_import_without_jax(module) -> None:
    code = f"import sys, {module}; print(sorted(m for m in sys.modules if m.split('.')[0] in ('jax', 'flax')))"
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"
