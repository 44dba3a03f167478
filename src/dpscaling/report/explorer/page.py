"""The explorer page: one self-contained HTML file (docs/explorer.md).

The sweep's answers (:mod:`dpscaling.report.explorer.sweep`), gzip-compressed and base64-encoded, go into the page
beside its script, its style and the vendored uPlot (``vendor/uplot``, MIT); a Content-Security-Policy
forbids every network request. The page draws, it never computes: each number it shows is a node's.
"""

from __future__ import annotations

import base64
import gzip
import json
import math
import os
import time
from importlib import resources
from pathlib import Path
from typing import Any

from dpscaling.privacy.epsilon_scope import choices_of_provenance, epsilon_scope
from dpscaling.report.explorer.sweep import (
    RELATIVE_TOLERANCE, SIGNIFICANT_DIGITS, ExplorerGrid, nonprivate_curve, sweep)
from dpscaling.core.io import atomic_path
from dpscaling.law.answers import ScalingLaw

PREFERRED_START_EPSILON = 4.0


def _asset(*parts: str) -> str:
    return resources.files("dpscaling.report.explorer").joinpath(*parts).read_text(encoding="utf-8")


def start_node(grid: ExplorerGrid, nodes: list[dict[str, Any]]) -> dict[str, int]:
    """Where the page opens: at the ε nearest 4, the middle data budget among those answered inside the
    validated range, and its largest such budget (the first node otherwise)."""
    epsilon = min(range(len(grid.epsilons)), key=lambda i: abs(math.log(grid.epsilons[i] / PREFERRED_START_EPSILON)))
    count = len(grid.computes)
    answered: dict[int, list[int]] = {}
    for d in range(len(grid.data)):
        base = (epsilon * len(grid.data) + d) * count  # the first unit and length: the grid's first nodes
        good = [c for c in range(count) if "none" not in nodes[base + c] and not nodes[base + c]["refusal"]]
        if good:
            answered[d] = good
    start = {"privacy_unit": 0, "seq_len": 0, "epsilon": epsilon, "data": 0, "compute": 0}
    if answered:
        data = sorted(answered)[len(answered) // 2]
        start.update(data=data, compute=answered[data][-1])
    return start


def page_data(law: ScalingLaw, bundle_argument: str, grid: ExplorerGrid, nodes: list[dict[str, Any]],
              seconds: float) -> dict[str, Any]:
    """Everything the page's script reads."""
    provenance, fitted = law.bundle.provenance, law.bundle.law
    models = ", ".join(f"{name} ({shape['param_count']:,})" for name, shape in (provenance.get("models") or {}).items())
    answered = sum("none" not in node for node in nodes)
    single = grid.seq_lens == (None,)
    return {
        "format": "dpscaling-explorer", "format_version": 1, "axes": grid.to_json(), "nodes": nodes,
        "bundle_argument": bundle_argument, "multiple_lengths": not single, "primary_seq_len": fitted.seq_len,
        "law": {"summary": (f"{provenance.get('family', 'law')} law at S = {fitted.seq_len}, "
                            f"{provenance.get('mode', 'paper')} mode, run {provenance.get('run_name', '?')}; "
                            f"models {models or ', '.join(sorted(set(fitted.grid['Model'])))}; "
                            f"validated to T = {law.ranges.validated_iterations:,.0f}, δ = {law.sigma_source().delta:g}. "
                            + epsilon_scope(choices_of_provenance(provenance))["statement"]),
                "loss_units_short": "nats (predicted)", "loss_units": law.bundle.loss_units},
        "grid_summary": (f"Answers at {grid.size:,} budgets ({answered:,} answered): ε ∈ {{{', '.join(f'{e:g}' for e in grid.epsilons)}}}, "
                         f"{len(grid.data)} data budgets {grid.data[0]:.3g}…{grid.data[-1]:.3g}, {len(grid.computes)} compute "
                         f"budgets {grid.computes[0]:.3g}…{grid.computes[-1]:.3g} FLOPs (a factor "
                         f"{grid.computes[1] / grid.computes[0]:.3g} apart). Each is `dpscaling query`'s answer, computed "
                         f"when this page was written (numbers to {SIGNIFICANT_DIGITS} significant digits); a typed value "
                         "snaps to the nearest grid point, nothing is interpolated. Loss units: " + law.bundle.loss_units),
        "provenance": (f"Written by dpscaling explore from {bundle_argument} (law created {provenance.get('created', '?')}, "
                       f"config sha256 {str(provenance.get('config_sha256', '?'))[:12]}) in {seconds:.0f} s."),
        "loss_note": ("Lines: the runnable answer's predicted loss per budget at this N, the band its calibrated 90% "
                      "interval, thin where `dpscaling query` refuses the budget without --allow-extrapolation; two "
                      f"other ε for comparison; black dashed (at S = {fitted.seq_len}): the law without privacy "
                      "(σ̄ = 0) at the law's physical batch, the best up to each budget: the paper's non-private "
                      "reproduction, which a fixed batch stops from spending large budgets."),
        "nonprivate": {"loss": nonprivate_curve(law, grid.computes)},
        "start": start_node(grid, nodes),
        "tolerance": {"relative": RELATIVE_TOLERANCE, "digits": SIGNIFICANT_DIGITS},
    }


def render(document: dict[str, Any], title: str) -> str:
    """The HTML page around ``document``."""
    payload = base64.b64encode(gzip.compress(json.dumps(document, separators=(",", ":")).encode(), 9, mtime=0))
    vendor = ("vendor", "uplot")
    replacements = {
        "__TITLE__": title, "__UPLOT_CSS__": _asset(*vendor, "uPlot.min.css"), "__CSS__": _asset("assets", "explorer.css"),
        "__UPLOT_LICENSE__": _asset(*vendor, "LICENSE").replace("<", "&lt;"),
        "__UPLOT_JS__": _asset(*vendor, "uPlot.iife.min.js"), "__DATA__": payload.decode("ascii"),
        "__JS__": _asset("assets", "explorer.js")}
    page = _asset("assets", "template.html")
    for key in ("__TITLE__", "__UPLOT_CSS__", "__CSS__", "__UPLOT_LICENSE__", "__DATA__", "__JS__", "__UPLOT_JS__"):
        page = page.replace(key, replacements[key], 1)  # the library last: its text is not scanned
    return page


def write_explorer(law: ScalingLaw, bundle: str | os.PathLike[str], out: str | os.PathLike[str], grid: ExplorerGrid,
                   *, bundle_argument: str | None = None, workers: int = 1) -> dict[str, Any]:
    """Sweep ``grid`` and write the page to ``out`` (atomically); a summary of what was written."""
    started = time.perf_counter()
    nodes = sweep(bundle, grid, workers=workers)
    seconds = time.perf_counter() - started
    argument = bundle_argument or str(bundle)
    document = page_data(law, argument, grid, nodes, seconds)
    html = render(document, f"dpscaling explorer: {Path(argument).as_posix()}")
    with atomic_path(out) as tmp:
        tmp.write_text(html, encoding="utf-8")
    return {"out": str(out), "bytes": len(html.encode()), "nodes": grid.size,
            "answered": sum("none" not in node for node in nodes),
            "refused_without_allow_extrapolation": sum(bool(node.get("refusal")) for node in nodes),
            "seconds": round(seconds, 1), "grid": grid.to_json(), "relative_tolerance": RELATIVE_TOLERANCE}
