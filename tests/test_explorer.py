"""The explorer page (docs/explorer.md): its numbers against ``dpscaling query``, in a real headless browser.

The browser is Debian's ``chromium`` driven by Playwright (``.ci/run`` and ``make test`` install it when
they can: root and apt). Without it the browser tests are skipped with the reason, except under CI=true,
where that fails. ``DPSCALING_SCREENSHOT=PATH`` also writes the page's screenshot there (the README's
image: ``DPSCALING_SCREENSHOT=docs/images/explorer.png``, with ``DPSCALING_SCREENSHOT_PAGE`` naming the
page to shoot, by default this test's own)."""

from __future__ import annotations

import base64
import gzip
import json
import math
import contextlib
import io
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from dpscaling.cli import main as cli_main
from dpscaling.core.errors import UserError
from dpscaling.report.explorer import default_grid, write_explorer
from dpscaling.report.explorer.sweep import RELATIVE_TOLERANCE, compute_axis, node_record
from dpscaling.law.loading import load_law
from law_bundle_data import write_run, write_run_bundle, write_two_length_bundle

EPSILONS, DATA = (2.0, 8.0, 32.0), (1e4, 1e5)
# Eight budgets a factor 2 apart, 2^41 … 2^48 FLOPs: answered inside and beyond the validated range.
COMPUTE_RANGE = (2.0**41, 2.0**48)
CLI = [sys.executable, "-m", "dpscaling.cli"]
pytestmark = pytest.mark.slow(minutes=1)  # orders this module among the long ones (tests/conftest.py)


@pytest.fixture(scope="module")
def explorer(tmp_path_factory):
    root = tmp_path_factory.mktemp("explorer")
    run = write_run(root / "run")
    bundle = root / "bundle"
    write_run_bundle(run, bundle)
    law = load_law(bundle)
    grid = default_grid(law, epsilons=EPSILONS, data=DATA, compute_range=COMPUTE_RANGE)
    summary = write_explorer(law, bundle, root / "explorer.html", grid, workers=1)
    return {"bundle": bundle, "page": root / "explorer.html", "grid": grid, "summary": summary,
            "document": _document(root / "explorer.html")}


@pytest.fixture(scope="module")
def two_lengths(tmp_path_factory):
    """A law across S = 128 and 256: the page adds the length and the privacy unit to its grid."""
    root = tmp_path_factory.mktemp("explorer-lengths")
    bundle = root / "bundle"
    write_two_length_bundle(write_run(root / "run"), bundle)
    law = load_law(bundle)
    grid = default_grid(law, epsilons=[8.0], data=[1e5], compute_range=(2.0**42, 2.0**45))
    write_explorer(law, bundle, root / "explorer.html", grid, workers=1)
    return {"bundle": bundle, "page": root / "explorer.html", "grid": grid}


def _document(page: Path) -> dict:
    html = page.read_text(encoding="utf-8")
    payload = re.search(r'<script id="explorer-data" type="application/octet-stream">(.*?)</script>', html, re.S)
    return json.loads(gzip.decompress(base64.b64decode(payload.group(1))))


def _index(grid, epsilon: int, data: int, compute: int) -> int:
    return (epsilon * len(grid.data) + data) * len(grid.computes) + compute


# ---------------------------------------------------------------------------------------------- no browser

def test_the_compute_axis_lies_on_the_saturation_lattice_and_bad_settings_name_the_field() -> None:
    assert compute_axis(3e11, 5e12) == tuple(2.0 ** k for k in range(38, 44))  # 2^38 ≤ 3e11, 2^43 ≥ 5e12
    assert compute_axis(2.0**40, 2.0**41, 2) == (2.0**40, 2.0**40.5, 2.0**41)
    with pytest.raises(UserError, match="compute range"):
        compute_axis(1e12, 1e11)
    with pytest.raises(UserError, match="compute_steps_per_octave"):
        compute_axis(1e11, 1e12, 0)


def test_the_page_is_self_contained_and_its_numbers_are_a_fresh_law_s_answers(explorer) -> None:
    html = explorer["page"].read_text(encoding="utf-8")
    assert "default-src 'none'" in html  # the browser itself forbids any request
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    assert "Leon Sorokin" in html  # uPlot's licence travels with it
    footer = html[html.index("Charts: uPlot"):]
    assert "</details>)" not in footer and "</details>." not in footer  # nothing dangles after the licence
    size = explorer["summary"]["bytes"]
    assert size == len(html.encode()) and size < 200_000
    document, grid = explorer["document"], explorer["grid"]
    assert len(document["nodes"]) == grid.size == 48
    assert "ε covers only the private run's own noisy steps" in document["law"]["summary"]  # what an answer's ε covers
    kinds = {("none" in n, bool(n.get("refusal"))) for n in document["nodes"]}
    assert (False, False) in kinds and (False, True) in kinds  # answers inside and beyond the validated range
    # A law that has answered nothing before (no remembered saturation scans) gives the same records.
    fresh = load_law(explorer["bundle"])
    rng = np.random.default_rng(0)
    for e, d, c in zip(rng.integers(0, 3, 4), rng.integers(0, 2, 4), rng.integers(0, 8, 4)):
        node = document["nodes"][_index(grid, e, d, c)]
        try:
            answer = fresh.query(compute=grid.computes[c], epsilon=grid.epsilons[e], users=grid.data[d],
                                 allow_extrapolation=True)
        except UserError as error:
            assert node == {"none": str(error)}
            continue
        expected = node_record(answer)
        for key in ("M", "B", "T", "flags", "refusal", "shape", "near"):
            assert node[key] == expected[key], key
        assert math.isclose(node["loss"], answer.predicted_loss, rel_tol=RELATIVE_TOLERANCE)
        assert node["ci"] == expected["ci"]


# ---------------------------------------------------------------------------------------------- the browser

def _chromium() -> str:
    binary = shutil.which("chromium") or shutil.which("chromium-browser")
    reason = None
    if binary is None:
        reason = "Debian's chromium is not installed (apt-get install chromium; .ci/run installs it)"
    else:
        try:
            import playwright  # noqa: F401
        except ImportError:
            reason = "playwright is not installed (pip install -e '.[test]')"
    if reason:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but the browser tests cannot run: {reason}")
        pytest.skip(reason)
    return binary


@pytest.fixture(scope="module")
def browser():
    binary = _chromium()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as driver:
        launched = driver.chromium.launch(executable_path=binary, args=["--no-sandbox"])
        yield launched
        launched.close()


def _open(browser, page_path: Path):
    """The page loaded, with every console message, page error and request it made."""
    page = browser.new_page(viewport={"width": 1280, "height": 1000})
    seen = {"console": [], "errors": [], "requests": []}
    page.on("console", lambda message: seen["console"].append((message.type, message.text)))
    page.on("pageerror", lambda error: seen["errors"].append(str(error)))
    page.on("request", lambda request: seen["requests"].append(request.url))
    page.goto(page_path.as_uri())
    page.wait_for_selector("body[data-ready=true]", timeout=30_000)
    return page, seen


def _move(page, axis: str, index: int) -> None:
    control = page.locator(f"#{axis}")
    if control.evaluate("element => element.tagName") == "SELECT":
        control.select_option(str(index))
    else:
        control.fill(str(index))  # the range input, as a person drags it


def _shown(page) -> dict:
    value = lambda selector: page.locator(selector).get_attribute("data-value")  # noqa: E731
    return {"M": value("#answer-M"), "B": value("#answer-B"), "T": value("#answer-T"),
            "loss": value("#answer-loss"), "loss_text": page.inner_text("#answer-loss"),
            "command": page.inner_text("#command"), "refusal": page.locator("#refusal").is_visible(),
            "none": page.locator("#none").is_visible(), "flags": page.inner_text("#flags"),
            "vs": {row.get_attribute("data-rule"): row.inner_text().split("\t")
                   for row in page.locator("#vs tr[data-rule]").all()}}


def test_the_page_loads_headless_without_errors_or_requests_and_every_control_moves_the_answer(
        explorer, browser, tmp_path) -> None:
    page, seen = _open(browser, explorer["page"])
    before = _shown(page)
    assert not before["none"] and before["M"] is not None
    for axis, index in (("epsilon", 0), ("data", 1), ("compute", 1)):
        old = _shown(page)
        start = int(page.locator(f"#{axis}").input_value())
        _move(page, axis, index if index != start else (start + 1) % len(explorer["grid"].to_json()[axis]))
        new = _shown(page)
        assert new["command"] != old["command"], axis
        assert (new["M"], new["B"], new["T"], new["loss"]) != (old["M"], old["B"], old["T"], old["loss"]), axis
    # A typed value snaps to the nearest grid point and says so.
    page.locator("#compute-value").fill("4e12")  # nearest in log: 2^42 ≈ 4.4e12
    page.locator("#compute-value").press("Enter")
    assert "nearest grid point" in page.inner_text("#snapped")
    assert page.locator("#compute").input_value() == str(explorer["grid"].computes.index(2.0**42))
    page.screenshot(path=str(tmp_path / "explorer.png"), full_page=True)
    assert (tmp_path / "explorer.png").stat().st_size > 20_000
    assert seen["errors"] == [] and [m for m in seen["console"] if m[0] in ("error", "warning")] == []
    assert seen["requests"] == [explorer["page"].as_uri()]


def test_at_random_budgets_the_page_shows_what_dpscaling_query_answers(explorer, browser) -> None:
    grid, document = explorer["grid"], explorer["document"]
    answered = [(e, d, c) for e in range(3) for d in range(2) for c in range(8)
                if "none" not in document["nodes"][_index(grid, e, d, c)]]
    rng = np.random.default_rng(1)
    points = [answered[i] for i in rng.choice(len(answered), 10, replace=False)]
    page, seen = _open(browser, explorer["page"])
    for e, d, c in points:
        for axis, index in (("epsilon", e), ("data", d), ("compute", c)):
            _move(page, axis, index)
        agreed = _cli_agrees(page)
        shown, command, cli = agreed["shown"], agreed["command"], agreed["cli"]
        assert cli["query"]["compute"] == grid.computes[c] and cli["query"]["epsilon"] == grid.epsilons[e]
        assert shown["loss_text"] == f"{cli['predicted_loss']:.4f}"
        for flag in cli["flags"]:
            assert flag["code"] in shown["flags"]
        # the margin over each rule of thumb: the page's is the CLI's, with its verdict
        margins = cli["margins_over_rules_of_thumb"]
        assert sorted(shown["vs"]) == sorted(margin["rule"] for margin in margins) == [
            "chinchilla", "dp_expert", "middle"]
        for margin in margins:
            cells = shown["vs"][margin["rule"]]
            assert cells[3] == margin["verdict"]
            if margin["margin"] is not None:
                assert math.isclose(float(cells[1]), margin["margin"], rel_tol=1e-2, abs_tol=1e-3)
        # Beyond the validated range the page warns, and the command it shows carries the flag that answers.
        assert shown["refusal"] == ("--allow-extrapolation" in command) == bool(
            cli.get("refused_without_allow_extrapolation"))
    assert seen["errors"] == []


def _cli_agrees(page) -> dict:
    """The page's answer against its own command run by ``dpscaling query``."""
    shown = _shown(page)
    command = shown["command"].split()
    assert command[0] == "dpscaling" and command[-1] == "--json"
    # In process (the CLI's own main, without a fresh interpreter per budget); the refusal test below
    # runs the command as a subprocess.
    stdout, stderr = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
        returncode = cli_main(command[1:])
    assert returncode == 0, stderr.getvalue()
    cli = json.loads(stdout.getvalue())
    assert (int(shown["M"]), int(shown["B"]), int(shown["T"])) == (
        cli["model_size"], cli["batch_size"], cli["iterations"])
    assert math.isclose(float(shown["loss"]), cli["predicted_loss"], rel_tol=RELATIVE_TOLERANCE)
    return {"command": command, "cli": cli, "shown": shown}


def test_a_law_across_lengths_adds_the_length_and_the_privacy_unit(two_lengths, browser) -> None:
    grid = two_lengths["grid"]
    assert grid.seq_lens == (None, 128, 256) and grid.privacy_units == ("user", "sequence")
    document = _document(two_lengths["page"])
    assert len(document["nodes"]) == 2 * 3 * 4
    page, seen = _open(browser, two_lengths["page"])
    _move(page, "compute", 2)
    best = _cli_agrees(page)
    assert "--seq-len" not in best["command"] and "--users" in best["command"]
    _move(page, "privacy_unit", 1)
    _move(page, "seq_len", 2)
    fixed = _cli_agrees(page)
    # One sequence per unit: the tokens of N sequences at the law's S = 128, divided by S = 256 here.
    assert fixed["command"][fixed["command"].index("--tokens") + 1] == str(int(1e5 * 128))
    assert fixed["cli"]["seq_len"] == 256 and fixed["cli"]["query"]["data_budget_units"] == 1e5 * 128 / 256
    assert "sequences of S = 256" in page.inner_text("#answer-units")
    assert seen["errors"] == []


def test_a_budget_beyond_the_validated_range_shows_its_warning_and_the_cli_refuses_it(explorer, browser) -> None:
    grid, document = explorer["grid"], explorer["document"]
    e, d, c = next((e, d, c) for e in range(3) for d in range(2) for c in range(8)
                   if document["nodes"][_index(grid, e, d, c)].get("refusal"))
    page, _ = _open(browser, explorer["page"])
    for axis, index in (("epsilon", e), ("data", d), ("compute", c)):
        _move(page, axis, index)
    assert page.locator("#refusal").is_visible()
    warning = page.inner_text("#refusal")
    # The policy refuses on the law's optimum T (the runnable answer's own T may be inside the range).
    assert "refuses this budget without --allow-extrapolation" in warning and "validated up to" in warning
    command = page.inner_text("#command").split()
    command.remove("--allow-extrapolation")
    refused = subprocess.run([*CLI, *command[1:]], capture_output=True, text=True, timeout=300)
    assert refused.returncode == 2 and "Refused" in refused.stderr


def test_the_screenshot(explorer, browser, tmp_path) -> None:
    """The README's image, written where DPSCALING_SCREENSHOT says (and always into tmp_path)."""
    target = os.environ.get("DPSCALING_SCREENSHOT")
    page_path = Path(os.environ.get("DPSCALING_SCREENSHOT_PAGE") or explorer["page"]).resolve()
    page, seen = _open(browser, page_path)
    shot = Path(target) if target else tmp_path / "explorer.png"
    shot.parent.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 20_000
    assert seen["errors"] == [] and seen["requests"] == [page_path.as_uri()]
