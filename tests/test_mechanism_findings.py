"""The mechanism findings' claims on constructed comparison tables (dpscaling.findings.mechanisms): each can
hold and each can fail."""

from __future__ import annotations

import numpy as np
import pandas as pd

from dpscaling.law.columns import BATCH_SIZE, COMPUTE, CROSS_ENTROPY, DATA_BUDGET, ITERATIONS, MODEL_SIZE, PRIVACY_BUDGET
from dpscaling.findings.comparison import EXTRAPOLATED, GAIN, column
from dpscaling.findings.mechanisms import (
    BASELINE, EPOCHS, MECHANISM, at_least_matches, grows_with_epsilon, how_the_optimum_moves, shrinks_with_epochs)


def table(gains: dict[tuple[float, float], float], epochs: dict[tuple[float, float], float]) -> pd.DataFrame:
    """Rows at N = 1000 for (ε, C) keys; DP-SGD's loss 5.0, BandMF's 5.0 − gain; BandMF's M*, B* twice DP-SGD's."""
    rows = []
    for (epsilon, compute), gain in gains.items():
        row = {MECHANISM: "bandmf-b4", PRIVACY_BUDGET: epsilon, DATA_BUDGET: 1000.0, COMPUTE: compute}
        for name, factor in ((BASELINE, 1.0), (MECHANISM, 2.0)):
            row |= {column(CROSS_ENTROPY, name): 5.0 - (gain if name == MECHANISM else 0.0),
                    column(MODEL_SIZE, name): 1e5 * factor, column(BATCH_SIZE, name): 32 * factor,
                    column(ITERATIONS, name): 100.0, column(EPOCHS, name): epochs[(epsilon, compute)],
                    column(EXTRAPOLATED, name): False}
        rows.append(row | {GAIN: gain})
    return pd.DataFrame(rows)


KEYS = [(epsilon, compute) for epsilon in (1.0, 4.0, 16.0) for compute in (1e11, 1e12)]


def test_the_literatures_picture_holds_where_the_gains_say_so():
    gains = {(e, c): 0.01 * np.log2(e) + 0.02 + (0.01 if c == 1e11 else 0.0) for e, c in KEYS}
    epochs = {(e, c): 0.5 if c == 1e11 else 2.0 for e, c in KEYS}
    found = table(gains, epochs)
    assert at_least_matches(found).holds and grows_with_epsilon(found).holds
    assert shrinks_with_epochs(found).holds
    moves = how_the_optimum_moves(found)
    assert moves.holds and "M* 2" in moves.measured and "B* 2" in moves.measured and "T* 1" in moves.measured


def test_each_claim_fails_when_the_gains_contradict_it():
    gains = {(e, c): -0.05 * np.log2(e) + (0.0 if c == 1e11 else 0.03) for e, c in KEYS}
    epochs = {(e, c): 0.5 if c == 1e11 else 2.0 for e, c in KEYS}
    found = table(gains, epochs)
    assert not at_least_matches(found).holds
    assert not grows_with_epsilon(found).holds
    assert not shrinks_with_epochs(found).holds  # more epochs, more gain here
    never = table({key: -0.1 for key in KEYS}, epochs)
    assert not how_the_optimum_moves(never).holds and "wins nowhere" in how_the_optimum_moves(never).measured
    empty = found.assign(**{column(CROSS_ENTROPY, MECHANISM): np.nan})
    assert not at_least_matches(empty).holds and "no (eps, N, C)" in at_least_matches(empty).measured
