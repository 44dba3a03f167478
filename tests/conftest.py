"""Shared fixtures: the repository root and a runner for the real Snakemake CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = [sys.executable, "-m", "snakemake"]


def run_snakemake(*args: str, cwd: Path = REPO, check: bool = True, timeout: int = 900) -> subprocess.CompletedProcess:
    """Run ``snakemake`` on this repository's Snakefile; return the completed process."""
    command = [*SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"), *args]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
    if check and result.returncode != 0:
        raise AssertionError(
            f"snakemake {' '.join(args)} failed ({result.returncode}):\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
        )
    return result


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO
