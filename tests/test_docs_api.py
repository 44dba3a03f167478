"""docs/api.md's examples run, in order, against a law bundle at the path they name."""

from __future__ import annotations

import os
import re
import shutil

import pytest

from conftest import REPO
from law_bundle_data import write_mechanism_run, write_run, write_run_bundle

BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)


def test_every_example_of_the_api_page_runs(tmp_path, capsys) -> None:
    blocks = BLOCK.findall((REPO / "docs" / "api.md").read_text(encoding="utf-8"))
    assert len(blocks) >= 5
    bundle = write_run_bundle(write_run(tmp_path / "run"), tmp_path / "bundle").root
    workdir = tmp_path / "user"
    shutil.copytree(bundle, workdir / "results" / "default" / "law" / "bundle")
    write_mechanism_run(workdir / "results" / "mechanisms")
    namespace: dict = {}
    cwd = os.getcwd()
    os.chdir(workdir)
    try:
        for index, block in enumerate(blocks):
            try:
                exec(compile(block, f"docs/api.md block {index + 1}", "exec"), namespace)
            except Exception as error:  # noqa: BLE001 - any failure names its block
                pytest.fail(f"docs/api.md block {index + 1} fails: {type(error).__name__}: {error}\n{block}")
    finally:
        os.chdir(cwd)
    printed = capsys.readouterr().out
    assert "nats" in printed and "iterations_beyond_validated" in printed
    assert namespace["extrapolated"].optimum["Iterations"] > 2 * 2000  # refused: beyond the validated 2×
    assert namespace["block"]["private_model"]["budgets"][0]["configuration"]["batch_size"] == namespace["run"].batch_size
    assert len(namespace["evaluated"]) == 2
    # The synthetic laws' constant half-widths cannot price an extrapolation: the default rule falls back to the
    # point prediction (tests/test_pricing.py covers the rules that choose otherwise).
    assert namespace["choice"].mechanism == namespace["choice"].point_choice == "bandmf-b4"
    assert namespace["only"].runnable.mechanism == "bandmf-b4"
