"""The law across sequence lengths asked for a length it was not fitted on (not in the paper; ``validate``).

Documented in docs/fit.md, "Sequence length".

Between measured lengths the law blends its neighbours' laws linearly in log S
(:mod:`dpscaling.law.sequence_length`). To measure what that costs, every interior measured length S_i
(neither the shortest nor the longest) is held out: the laws of its neighbours S_{i-1} and S_{i+1}, each
fitted on its own curves only, are blended at S_i and asked for S_i's measured curves — the seed-mean
measurement of the learning rate that ends lowest on each (model, σ̄) curve, from the warm-up on
(:func:`dpscaling.law.validation.curve_targets`), at S_i's own model sizes. A model's size differs across
lengths by its position rows (4% for the CPU grid's smallest decoder between S = 64 and 128), so a target
just outside a neighbour's model range is read off that neighbour's law continued linearly in log M, as
``validate``'s model sets are (:func:`dpscaling.law.validation.predict`).

Two references say what the interpolation in S buys: each neighbour's law used as it is, as if the loss did
not depend on S. Paper and reference-compatible mode side by side.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import pandas as pd

from dpscaling.core.errors import UserError
from dpscaling.law.artifact import fit_law
from dpscaling.law.columns import CROSS_ENTROPY, ITERATIONS
from dpscaling.law.sequence_length import SEQ_LEN
from dpscaling.law.settings import LawSettings
from dpscaling.law.validation import MODE, PREDICTED, curve_targets, predict

LABEL = "validate:seq_len"
CAPTION = ("The law across sequence lengths on a length it was not fitted on: each interior measured length "
           "predicted from its two neighbours' laws blended linearly in log S, against each neighbour's law "
           "used as it is; points scored, how many the law could not answer, mean and max absolute error and mean "
           "signed error (predicted − measured) in nats, per mode.")
SHORTER, LONGER = "Shorter Neighbour", "Longer Neighbour"
PREDICTORS = {PREDICTED: "log-S blend of the neighbours", SHORTER: "shorter neighbour's law as is",
              LONGER: "longer neighbour's law as is"}


def held_out_length_points(results: Mapping[int, pd.DataFrame], modes: Mapping[str, LawSettings], *,
                           physical_batch: int) -> pd.DataFrame:
    """Every interior length × mode: one row per target point of that length with the measured loss, the
    log-S blend's prediction (``Predicted``) and each neighbour's own (``Shorter Neighbour``,
    ``Longer Neighbour``); a neighbour whose fit fails in a mode leaves NaN. ``results``: each measured
    length's tidy curves. Raises UserError with fewer than three lengths (none is interior)."""
    lengths = sorted(int(length) for length in results)
    if len(lengths) < 3:
        raise UserError(f"holding out a sequence length needs three or more measured lengths, got {lengths}")
    warmup = min(settings.warmup_steps for settings in modes.values())
    rows = []
    for lower, held, upper in zip(lengths, lengths[1:], lengths[2:]):
        curves = results[held]
        targets = curve_targets(curves[curves[ITERATIONS] >= warmup])
        weight = float(np.log(held / lower) / np.log(upper / lower))
        for mode, settings in modes.items():
            shorter, longer = (_neighbour_prediction(results[length], length, settings, physical_batch, targets)
                               for length in (lower, upper))
            rows.append(targets.assign(**{
                SEQ_LEN: held, f"{SHORTER} Length": lower, f"{LONGER} Length": upper,
                PREDICTED: (1 - weight) * shorter + weight * longer, SHORTER: shorter, LONGER: longer, MODE: mode}))
    return pd.concat(rows, ignore_index=True)


def _neighbour_prediction(curves: pd.DataFrame, seq_len: int, settings: LawSettings, physical_batch: int,
                          targets: pd.DataFrame) -> np.ndarray:
    try:
        law = fit_law(curves, settings, seq_len=seq_len, physical_batch=physical_batch)
    except UserError:
        return np.full(len(targets), np.nan)
    return predict(law, targets, extrapolate_model_size=True)


def error_table(points: pd.DataFrame) -> pd.DataFrame:
    """Per held-out length × mode × predictor: points, unanswered, mean / max absolute and mean signed error."""
    rows = []
    for (held, mode), group in points.groupby([SEQ_LEN, MODE], sort=False):
        neighbours = f"{int(group[f'{SHORTER} Length'].iloc[0])} and {int(group[f'{LONGER} Length'].iloc[0])}"
        for column, predictor in PREDICTORS.items():
            error = group[column] - group[CROSS_ENTROPY]
            rows.append({"held-out length": int(held), "neighbours": neighbours, "mode": mode,
                         "predictor": predictor, "points": len(group), "unanswered": int(error.isna().sum()),
                         "mean_abs_error": float(error.abs().mean()), "max_abs_error": float(error.abs().max()),
                         "mean_error": float(error.mean())})
    return pd.DataFrame(rows)
