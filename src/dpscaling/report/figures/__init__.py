"""Every figure of the paper as data + plot (docs/figures.md). One module per figure; this is the registry.

``FIGURES`` maps a file stem (the paper's label with ':' → '-') to its
:class:`~dpscaling.report.figures.common.FigureSpec`; :func:`render` computes a
figure's data from an :class:`~dpscaling.report.figures.context.AnalysisContext` and
writes PDF, PNG and the CSV behind it. ``FIGURES`` are the ``figures`` target's
(from the main grid's law and curves), with ``LENGTH_FIGURES`` in runs with several sequence lengths (from
the law across them); ``ABLATION_FIGURES`` the ``ablation_batch``
target's, drawn from the ablation's own curves
(:class:`~dpscaling.report.figures.physical_batch.AblationContext`).
"""

from __future__ import annotations

from pathlib import Path

from dpscaling.core.errors import UserError
from dpscaling.report.figures import (
    baselines, compute_allocation, excess_vulnerability, full_grid, nonprivate, parametric, physical_batch,
    private_model, savings, seq_len_tradeoff, smoothing, training_curves, vary_compute, vector_fields)
from dpscaling.report.figures.common import FLOOR, FigureSpec, save_figure, with_floor
from dpscaling.report.figures.context import AnalysisContext
from dpscaling.report.figures.physical_batch import AblationContext
from dpscaling.report.figures.private_model import PrivateModelContext
from dpscaling.report.figures.savings import SavingsContext

_MODULES = (compute_allocation, vary_compute, full_grid, baselines, nonprivate,
            vector_fields, excess_vulnerability, smoothing, training_curves, parametric)
FIGURES: dict[str, FigureSpec] = {spec.name: spec for module in _MODULES for spec in module.FIGURES}
ABLATION_FIGURES: dict[str, FigureSpec] = {spec.name: spec for spec in physical_batch.FIGURES}
# Drawn only by runs with several sequence lengths (training.seq_lens), from the law across them.
LENGTH_FIGURES: dict[str, FigureSpec] = {spec.name: spec for spec in seq_len_tradeoff.FIGURES}


def ablation_figures(family: str) -> dict[str, FigureSpec]:
    """The figures ``ablation_batch`` draws when its model is of ``family``."""
    return {spec.name: spec for spec in physical_batch.FIGURES_BY_FAMILY[family]}

ALL_FIGURES: dict[str, FigureSpec] = {**FIGURES, **ABLATION_FIGURES, **LENGTH_FIGURES}
# Drawn by the private_model report from its own table (dpscaling.report.figures.private_model).
PRIVATE_MODEL_FIGURES: dict[str, FigureSpec] = {spec.name: spec for spec in private_model.FIGURES}
# Drawn by the savings report from its own tables (dpscaling.report.figures.savings).
SAVINGS_FIGURES: dict[str, FigureSpec] = {spec.name: spec for spec in savings.FIGURES}


def figure_spec(name: str) -> FigureSpec:
    known = {**ALL_FIGURES, **PRIVATE_MODEL_FIGURES, **SAVINGS_FIGURES}
    if name not in known:
        raise UserError(f"unknown figure {name!r}; known: {', '.join(sorted(known))}")
    return known[name]


def render(name: str, context: AnalysisContext | AblationContext | PrivateModelContext | SavingsContext,
           stem: str | Path) -> list[Path]:
    """Compute figure ``name``'s data and write ``stem``.pdf/.png/.csv."""
    spec = figure_spec(name)
    data = spec.compute(context)
    figure = spec.draw(data, context)
    return save_figure(figure, with_floor(data, context) if FLOOR in spec.needs else data, stem)
