"""Figures that plot loss against a budget draw the held-out unigram entropy (docs/data.md)."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd
import pytest
from figure_context import synthetic_context
from matplotlib.lines import Line2D

from dpscaling.report.figures import FIGURES, render
from dpscaling.report.figures.common import FLOOR, UNIGRAM_FLOOR, UNIGRAM_FLOOR_NOTE

LOSS_FIGURES = ("fig-vary_compute_and_privacy", "fig-full_grid", "fig-baseline_compare", "fig-training",
                "fig-smoothing", "fig-nonprivate_reproduction", "fig-excess-vulnerability")
FLOOR_VALUE = 4.321


@pytest.fixture(scope="module")
def data():
    context = synthetic_context()
    return {name: FIGURES[name].compute(context) for name in LOSS_FIGURES}


def _floor_lines(figure, value):
    return [line for ax in figure.axes for line in ax.get_lines() if isinstance(line, Line2D)
            and np.allclose(line.get_ydata(), value) and list(line.get_xdata()) == [0, 1]]


def _texts(figure):
    return [text.get_text() for ax in figure.axes for text in ax.texts]


@pytest.mark.parametrize("name", LOSS_FIGURES)
def test_loss_figures_draw_the_floor_as_a_labelled_line(data, name):
    spec = FIGURES[name]
    assert FLOOR in spec.needs  # so the workflow gives the figure job the data stage's unigram_floor.json
    context = dataclasses.replace(synthetic_context(), unigram_floor=FLOOR_VALUE)
    figure = spec.draw(data[name], context)
    assert _floor_lines(figure, FLOOR_VALUE)
    assert any(f"unigram entropy {FLOOR_VALUE:.2f}" in text for text in _texts(figure))


@pytest.mark.parametrize("name", LOSS_FIGURES)
def test_without_a_floor_the_panel_says_so_and_nothing_is_drawn(data, name):
    context = dataclasses.replace(synthetic_context(), unigram_floor=None, floor_note="no floor: results.csv")
    figure = FIGURES[name].draw(data[name], context)
    assert not _floor_lines(figure, FLOOR_VALUE)
    assert "no unigram floor" in _texts(figure)


def test_the_csv_carries_the_floor_or_why_there_is_none(tmp_path):
    name = "fig-full_grid"
    with_floor = dataclasses.replace(synthetic_context(), unigram_floor=FLOOR_VALUE)
    table = pd.read_csv(render(name, with_floor, tmp_path / "a")[-1])
    assert (table[UNIGRAM_FLOOR] == FLOOR_VALUE).all()
    without = dataclasses.replace(synthetic_context(), unigram_floor=None, floor_note="law from results.csv")
    table = pd.read_csv(render(name, without, tmp_path / "b")[-1])
    assert table[UNIGRAM_FLOOR].isna().all() and (table[UNIGRAM_FLOOR_NOTE] == "law from results.csv").all()
    # figures that do not plot loss keep their CSV as it was
    ratios = pd.read_csv(render("fig-token_model_ratios", with_floor, tmp_path / "c")[-1])
    assert UNIGRAM_FLOOR not in ratios and not math.isnan(FLOOR_VALUE)
