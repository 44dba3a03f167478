"""The workflow stays snakefmt-formatted and `snakemake --lint` clean."""

from __future__ import annotations

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


def test_unbuilt_stages_fail_loudly_and_write_nothing(tmp_path) -> None:
    config = REPO / "tests" / "configs" / "smoke.yaml"
    result = run_snakemake("accounting", "--cores", "1", "--configfile", str(config), cwd=tmp_path, check=False)
    assert result.returncode != 0
    assert "not built yet" in result.stdout + result.stderr
    assert not list((tmp_path / "results").rglob("*.parquet"))
