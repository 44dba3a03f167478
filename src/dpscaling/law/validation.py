"""Held-out validation of the fitted law (paper §3.3, checked as the scaling-law literature checks a law).

Documented in docs/fit.md, `validate`.

The law is refitted without part of the measurements and asked to predict them:

- **horizon**: every curve's first part only (T ≤ ``horizon_fraction`` · H); predict its measured rest.
  This is the extrapolation in T that every compute-optimal answer beyond the trained horizon relies on.
- **largest model / smallest model**: fit without it, predict its curves. An interpolation law does
  not answer outside its model range; here its multilinear interpolant is continued linearly in
  log M from its last segment (what using the law there would amount to), and the report says so.
- **interior model**: fit without one model strictly between the smallest and the largest, predict its
  curves by the law's own interpolation in log M: the model-size error of the queries the law answers
  (they never leave its model range).
- **noise σ̄ = x**: fit without one interior σ̄ column, predict it (interpolation in log σ̄).

Targets are the raw measurements (seeds averaged) of each (model, σ̄) curve at the learning rate
that ends lowest on that curve: one learning rate per curve, so the target is not a pointwise
minimum of noisy values (which would be biased low). Errors are in nats; relative error is
|predicted − measured| / measured. The same held-out sets are scored for every mode (paper and
reference-compatible side by side).

With ``replicates`` > 0, each held-out fit also gets the seed-only 90% interval that ``dpscaling query``
prints (:mod:`dpscaling.law.bootstrap`): ``replicates`` refits of the held-out fit on its curves perturbed
with seed-to-seed residual curves, each predicting the targets as the main prediction does. The residual
curves are those of the *full* results' repeated seeds, not of the held-out fit's measurements: seed noise
is a property of training, not of which measurements the law is fitted on (and a held-out set may have
removed every repeated run, e.g. the smallest model's). :mod:`dpscaling.law.calibration` scores both
intervals.

Each target also gets its distance from the points the held-out fit was fitted on
(:mod:`dpscaling.law.distance`, in the full grid's gaps): the scale of the calibrated interval.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from dpscaling.core.errors import UserError
from dpscaling.law.artifact import Law, fit_law
from dpscaling.law.bootstrap import interval, refit, residual_curves
from dpscaling.law.collect import primary_seed_curves
from dpscaling.law.columns import CROSS_ENTROPY, ITERATIONS, LEARNING_RATE, MODEL, MODEL_SIZE, NOISE_BATCH_RATIO
from dpscaling.law.distance import DistanceScale, MeasuredPoints
from dpscaling.law.settings import LawSettings

if TYPE_CHECKING:
    from scipy.interpolate import RegularGridInterpolator

LABEL = "validation"
CAPTION = ("The law's prediction error on measurements it was not fitted on: per held-out set (the last part of "
           "every curve; the largest and the smallest model, continued linearly in log M; each interior model, "
           "interpolated; each interior noise column), the points scored, how many the law could not answer, "
           "mean and max absolute error in nats and mean relative error, for paper mode and reference-compatible "
           "mode side by side.")
PREDICTED = "Predicted"
HELD_OUT = "Held Out"
MODE = "Mode"
KIND = "Kind"
SEED_LOW, SEED_HIGH = "Seed-only 5%", "Seed-only 95%"
# A target's distance from the points its held-out fit saw (dpscaling.law.distance).
DISTANCE = "Distance"
HORIZON_FRACTION = 0.5
# Kinds of held-out set: what the law is asked to do to predict it.
HORIZON, MODEL_EXTRAPOLATION, INTERIOR_MODEL, NOISE = "horizon", "model extrapolation", "interior model", "noise"


@dataclass(frozen=True)
class HeldOut:
    """One held-out set: its name, the measurements the law is fitted on, the targets it must predict, and its
    kind (HORIZON, MODEL_EXTRAPOLATION, INTERIOR_MODEL or NOISE)."""
    name: str
    fit_on: pd.DataFrame
    targets: pd.DataFrame
    extrapolate_model_size: bool = False
    kind: str = HORIZON


def curve_targets(results: pd.DataFrame) -> pd.DataFrame:
    """Per (model, σ̄, T): the seed-mean measurement of the learning rate that ends lowest on that curve."""
    keys = [MODEL, MODEL_SIZE, NOISE_BATCH_RATIO]
    finite = results.dropna(subset=[CROSS_ENTROPY])
    mean = finite.groupby(keys + [LEARNING_RATE, ITERATIONS], as_index=False)[CROSS_ENTROPY].mean()
    last = mean[mean[ITERATIONS] == mean.groupby(keys + [LEARNING_RATE])[ITERATIONS].transform("max")]
    best = last.loc[last.groupby(keys)[CROSS_ENTROPY].idxmin(), keys + [LEARNING_RATE]]
    return mean.merge(best, on=keys + [LEARNING_RATE])


def held_out_sets(results: pd.DataFrame, warmup_steps: float,
                  horizon_fraction: float = HORIZON_FRACTION) -> list[HeldOut]:
    """The horizon, model-size (largest, smallest, each interior model) and interior-σ̄ held-out sets of
    ``results`` (tidy measurements)."""
    if not 0 < horizon_fraction < 1:
        raise UserError(f"validation horizon fraction must be in (0, 1), got {horizon_fraction:g}")
    targets = curve_targets(results[results[ITERATIONS] >= warmup_steps])
    sets = []
    cut = horizon_fraction * float(results[ITERATIONS].max())
    sets.append(HeldOut(f"horizon (fit T <= {cut:g}, predict the rest)", results[results[ITERATIONS] <= cut],
                        targets[targets[ITERATIONS] > cut], kind=HORIZON))
    sizes = results.groupby(MODEL)[MODEL_SIZE].first().sort_values()
    if len(sizes) >= 3:  # two models must remain to interpolate
        for label, name in (("largest", sizes.index[-1]), ("smallest", sizes.index[0])):
            sets.append(HeldOut(f"{label} model ({name})", results[results[MODEL] != name],
                                targets[targets[MODEL] == name], extrapolate_model_size=True,
                                kind=MODEL_EXTRAPOLATION))
        for name in sizes.index[1:-1]:  # inside the remaining range: the law's own interpolation in log M
            sets.append(HeldOut(f"interior model ({name})", results[results[MODEL] != name],
                                targets[targets[MODEL] == name], kind=INTERIOR_MODEL))
    noisy = np.sort(results.loc[results[NOISE_BATCH_RATIO] > 0, NOISE_BATCH_RATIO].unique())
    for nbr in noisy[1:-1]:  # interior columns only: the law does not extrapolate in σ̄
        sets.append(HeldOut(f"noise sigma-bar 2^{np.log2(nbr):.3g}", results[results[NOISE_BATCH_RATIO] != nbr],
                            targets[targets[NOISE_BATCH_RATIO] == nbr], kind=NOISE))
    return sets


def _extrapolating(interpolator: RegularGridInterpolator) -> RegularGridInterpolator:
    """The same multilinear interpolant, continued linearly beyond its grid."""
    from scipy.interpolate import RegularGridInterpolator  # SciPy on first use, not when the workflow plans

    return RegularGridInterpolator(interpolator.grid, interpolator.values, method="linear", bounds_error=False,
                                   fill_value=None)


def predict(law: Law, targets: pd.DataFrame, extrapolate_model_size: bool = False) -> np.ndarray:
    """The law's loss at the targets' (M, T, σ̄); with ``extrapolate_model_size`` linear beyond its model range."""
    m, t, s = (targets[c].to_numpy(float) for c in (MODEL_SIZE, ITERATIONS, NOISE_BATCH_RATIO))
    if not extrapolate_model_size:
        return law.loss(m, t, s)
    loss = np.full(len(targets), np.nan)
    private, public = s > 0, s == 0
    with np.errstate(divide="ignore"):
        points = np.column_stack([np.log(m), np.log(t), np.log(np.where(private, s, 1.0))])
    # Only M is continued: T and σ̄ outside the law's range stay unanswered.
    inside_t = (t >= law.loss.iterations[0]) & (t <= law.loss.iterations[-1])
    inside_s = public | ((s >= law.loss.noise_batch_ratios[0]) & (s <= law.loss.noise_batch_ratios[-1]))
    if private.any():
        loss[private] = _extrapolating(law.loss.private)(points[private])
    if public.any() and law.loss.non_private is not None:
        loss[public] = _extrapolating(law.loss.non_private)(points[public][:, :2])
    if law.loss.log_loss:
        loss = np.exp(loss)
    return np.where(inside_t & inside_s, loss, np.nan)


def seed_only_interval(held: HeldOut, settings: LawSettings, residuals: list[pd.Series], replicates: int,
                       seed: int = 0, **fit_options) -> tuple[np.ndarray, np.ndarray]:
    """The 5% / 95% quantiles of the targets' predictions over ``replicates`` bootstrap refits of the held-out
    fit (its primary-seed curves perturbed with ``residuals``); a replicate whose fit fails counts as NaN."""
    main, _ = primary_seed_curves(held.fit_on)
    predictions = np.full((max(int(replicates), 1), len(held.targets)), np.nan)
    for replicate in range(int(replicates)):
        try:
            law = refit(main, residuals, settings, seed, replicate, **fit_options)
            predictions[replicate] = predict(law, held.targets, held.extrapolate_model_size)
        except UserError:
            continue
    return interval(predictions)


def validate(results: pd.DataFrame, modes: Mapping[str, LawSettings], *, seq_len: int, physical_batch: int,
             horizon_fraction: float = HORIZON_FRACTION, replicates: int = 0, seed: int = 0) -> pd.DataFrame:
    """Every held-out set × mode: one row per target point with the measured and predicted loss, the set's
    kind, the seed-only 90% interval of the held-out fit (``replicates`` bootstrap refits, resampling seed
    ``seed``; NaN when ``replicates`` is 0 or ``results`` has no repeated seeds) and the target's distance
    from the points the held-out fit saw, in the gaps of ``results``' grid.

    ``modes`` maps a name (e.g. "paper", "reference-compatible") to its settings; a held-out set whose fit
    fails in a mode leaves its predictions NaN there.
    """
    rows = []
    warmup = min(settings.warmup_steps for settings in modes.values())
    # Seed noise is measured on the full results' repeated seeds, whatever a held-out set removes.
    residuals = residual_curves(results) if replicates > 0 else []
    options = dict(seq_len=seq_len, physical_batch=physical_batch)
    scale = DistanceScale.of(results)
    for held in held_out_sets(results, warmup, horizon_fraction):
        distance = scale.distance(*(held.targets[c].to_numpy(float) for c in (MODEL_SIZE, ITERATIONS,
                                                                             NOISE_BATCH_RATIO)),
                                  measured=MeasuredPoints.of(held.fit_on))
        for mode, settings in modes.items():
            try:
                law = fit_law(held.fit_on, settings, **options)
                predicted = predict(law, held.targets, held.extrapolate_model_size)
            except UserError:
                predicted = np.full(len(held.targets), np.nan)
            low = high = np.full(len(held.targets), np.nan)
            if residuals and np.isfinite(predicted).any():
                low, high = seed_only_interval(held, settings, residuals, replicates, seed, **options)
            rows.append(held.targets.assign(**{PREDICTED: predicted, SEED_LOW: low, SEED_HIGH: high,
                                               DISTANCE: distance, HELD_OUT: held.name, KIND: held.kind,
                                               MODE: mode}))
    if not rows:
        raise UserError("validation: no held-out set can be formed from these results")
    return pd.concat(rows, ignore_index=True)


def pooled_error(points: pd.DataFrame, mode: str) -> tuple[float, int]:
    """The mean absolute error (nats) over every answered held-out point of ``mode`` in ``validate``'s output, and
    how many points that is: one number for the law's own held-out error, every set pooled."""
    scored = points[(points[MODE] == mode) & points[PREDICTED].notna()]
    if scored.empty:
        raise UserError(f"validation: no held-out point of mode {mode!r} was answered "
                        f"(modes: {sorted(points[MODE].unique())})")
    return float((scored[PREDICTED] - scored[CROSS_ENTROPY]).abs().mean()), len(scored)


def error_table(points: pd.DataFrame) -> pd.DataFrame:
    """Per held-out set: points, mean and max absolute error (nats) and mean relative error, modes side by side."""
    error = (points[PREDICTED] - points[CROSS_ENTROPY]).abs()
    scored = points.assign(error=error, relative=error / points[CROSS_ENTROPY])
    summary = scored.groupby([HELD_OUT, MODE], sort=False).agg(
        points=(CROSS_ENTROPY, "size"), unanswered=(PREDICTED, lambda v: int(v.isna().sum())),
        mean_abs_error=("error", "mean"), max_abs_error=("error", "max"), mean_relative_error=("relative", "mean"))
    wide = summary.unstack(MODE)
    modes = list(dict.fromkeys(points[MODE]))
    columns = [(stat, mode) for mode in modes for stat in summary.columns]
    wide = wide[columns]
    wide.columns = [f"{stat} ({mode})" for stat, mode in columns]
    table = wide.reset_index().rename(columns={HELD_OUT: "held-out set"})
    order = list(dict.fromkeys(points[HELD_OUT]))
    return table.set_index("held-out set").loc[order].reset_index()
