"""The workflow stays snakefmt-formatted and `snakemake --lint` clean."""

from __future__ import annotations

import re
import subprocess
import sys

from conftest import REPO, run_snakemake


def test_snakefmt_clean() -> None:
    result = subprocess.run(
        [sys.executable, "-m", "snakefmt", "--check", "Snakefile", "workflow"],
        cwd=REPO,
        capture_output=True,
        text=True,
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_snakemake_lint_clean(tmp_path) -> None:
    result = run_snakemake("--lint", cwd=tmp_path, check=False)
    output = result.stdout + result.stderr
    assert result.returncode == 0, output
    assert "good condition" in output


def test_named_targets_exist(tmp_path) -> None:
    result = run_snakemake("--list-rules", cwd=tmp_path)
    rules = set(result.stdout.split())
    assert {"all", "data", "train", "accounting", "fit", "figures", "tables", "report"} <= rules
    assert {"ablation_batch", "lr_curves", "throughput", "nonprivate"} <= rules  # docs/appendix-experiments.md


# A path written out after the run's results directory: `{RESULTS}/` then a name, not a `{` (`{layout.X}`).
RESULTS_LITERAL = re.compile(r"RESULTS\}/[^{\s\"']")


def results_literals(text: str) -> list[str]:
    """The lines of a rule file that write a results path out instead of taking it from dpscaling.workflow.layout."""
    return [line.strip() for line in text.splitlines() if RESULTS_LITERAL.search(line)]


def test_the_rules_take_every_results_path_from_the_layout() -> None:
    """dpscaling.workflow.layout owns the results directory: the rules write `{RESULTS}/{layout.X}`, never a literal path."""
    files = [REPO / "Snakefile", *sorted((REPO / "workflow" / "rules").glob("*.smk"))]
    literal = [f"{path.relative_to(REPO)}: {line}" for path in files
               for line in results_literals(path.read_text(encoding="utf-8"))]
    assert not literal, "\n".join(literal)
