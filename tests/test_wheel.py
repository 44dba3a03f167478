"""The library outside its checkout, as a user installs it: the wheel built from this tree, installed (not
editable) into a fresh virtual environment, answers from a copied law bundle in another directory through the
command line and the Python API, the same answer as the checkout's.

The fresh environment takes its dependencies from the test environment's site-packages (a path, not a site
directory, so the checkout's editable install is not loaded): the checkout's ``src/`` is not on its path, and
nothing is downloaded but the build backend (from the package index pip is configured with).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from conftest import REPO
from law_bundle_data import write_run, write_run_bundle

QUERY = ("query", "--law", "law", "--compute", "1e13", "--epsilon", "4", "--users", "1e5", "--json")
API = """
import json, sys
import dpscaling
law = dpscaling.load_law("law")
answer = law.query(compute=1e13, epsilon=4, users=1e5)
print(json.dumps({"module": dpscaling.__file__, "model": answer.runnable.model.name,
                  "batch_size": answer.runnable.batch_size, "iterations": answer.runnable.iterations,
                  "sigma": answer.runnable.sigma, "predicted_loss": answer.predicted_loss,
                  "calibrated_interval": list(answer.calibrated_interval)}))
"""


def _clean_env() -> dict[str, str]:
    """The environment without anything that would put the checkout on the path."""
    return {key: value for key, value in os.environ.items() if key not in ("PYTHONPATH", "PYTHONHOME")}


def _run(argv: list[str], cwd: Path) -> str:
    done = subprocess.run(argv, cwd=cwd, env=_clean_env(), capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, f"{' '.join(argv)} failed:\n{done.stderr}"
    return done.stdout


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> Path:
    """A fresh virtual environment holding the wheel built from this tree (its bin/ directory)."""
    root = tmp_path_factory.mktemp("wheel")
    tree = root / "tree"  # a copy, so that the build's scratch files (build/, *.egg-info) stay out of the checkout
    shutil.copytree(REPO / "src", tree / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    for name in ("pyproject.toml", "README.md"):
        shutil.copy2(REPO / name, tree / name)
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "--wheel-dir", str(root / "dist"), str(tree)],
         cwd=root)
    (wheel,) = (root / "dist").glob("dpscaling-*.whl")
    venv = root / "venv"
    _run([sys.executable, "-m", "venv", "--without-pip", str(venv)], cwd=root)
    python = venv / "bin" / "python"
    _run([sys.executable, "-m", "pip", "--python", str(python), "install", "--no-deps", "--no-index", "--quiet",
          str(wheel)], cwd=root)
    site = Path(_run([str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], cwd=root).strip())
    (site / "test_dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n", encoding="utf-8")
    return venv / "bin"


@pytest.fixture(scope="module")
def elsewhere(tmp_path_factory) -> Path:
    """A directory outside the checkout holding a copy of a law bundle at ``law/``."""
    scratch = tmp_path_factory.mktemp("bundle")
    bundle = write_run_bundle(write_run(scratch / "run"), scratch / "bundle").root
    user = tmp_path_factory.mktemp("user")
    shutil.copytree(bundle, user / "law")
    return user


def test_the_wheel_ships_what_the_library_reads(installed) -> None:
    files = _run([str(installed / "python"), "-c", "import dpscaling, pathlib; root = pathlib.Path(dpscaling.__file__)"
                  ".parent; print('\\n'.join(p.relative_to(root).as_posix() for p in root.rglob('*') if p.is_file()))"],
                 cwd=installed)
    shipped = set(files.split())
    assert {"config/config.schema.yaml", "py.typed", "report/explorer/assets/template.html"} <= shipped


def test_the_installed_wheel_answers_as_the_checkout_does(installed, elsewhere) -> None:
    module = json.loads(_run([str(installed / "python"), "-c", API], cwd=elsewhere))
    assert Path(module.pop("module")).is_relative_to(installed.parent), "the wheel's own copy must answer"
    checkout = json.loads(_run([sys.executable, "-c", API], cwd=elsewhere))
    assert Path(checkout.pop("module")).is_relative_to(REPO / "src")
    assert module == checkout

    wheel_cli = json.loads(_run([str(installed / "dpscaling"), *QUERY], cwd=elsewhere))
    checkout_cli = json.loads(_run([sys.executable, "-m", "dpscaling.cli", *QUERY], cwd=elsewhere))
    assert wheel_cli == checkout_cli
    assert wheel_cli["batch_size"] == module["batch_size"] and wheel_cli["iterations"] == module["iterations"]
    assert wheel_cli["predicted_loss"] == pytest.approx(module["predicted_loss"])
