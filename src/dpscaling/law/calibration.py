"""Calibrated 90% intervals on the law's answers: split-conformal on its held-out errors.

Not in the paper: an extension. Documented in docs/fit.md, "Calibrated intervals".

The bootstrap interval (:mod:`dpscaling.law.bootstrap`) carries seed noise only: the law's own error (the
power-law extrapolation in T, the interpolation between model sizes and σ̄ columns) is not in it.
:mod:`dpscaling.law.validation` measures that error on held-out sets; this module turns it into an
interval and measures how often each interval covers held-out measurements.

**Measured loss.** The law's quantity: a target's measured loss is the trailing mean over the mode's rolling
window of its curve's logged measurements (paper mode's ``fit.rolling_window``; one measurement in
reference-compatible mode, which does not smooth), what ``private_model`` calls an answer's achieved loss.
The single logged measurement carries per-step batch noise no answer is judged by.

**Score.** A held-out point's score is |measured − predicted| / s in nats, the prediction being the
held-out fit's (the law fitted without that set). The scale s is ``interval_scale``'s (config
``fit.validation.interval_scale``):

- ``distance`` (default): s = 1 + the point's distance from the points the held-out fit saw
  (:mod:`dpscaling.law.distance`: nearest measured model size and σ̄ column in grid gaps, T beyond the
  horizon in doublings). The law's error grows away from its measured points, and every held-out set
  measures it about one gap away (a held-out refit bridges a gap twice as wide as the full law's), while
  answers lie closer: normalized, the sets' scores are comparable, and an answer's half-width q · s is
  narrow near measured points and wide far from them. s at an answer is from the full law's measured
  points (stored in calibration.json).
- ``constant``: s = 1, the half-width q everywhere.

**Calibration pool.** Every held-out set: the horizon set (the extrapolation in T every answer beyond
the trained horizon relies on), each interior model (the law's own interpolation in log M), each
interior σ̄ column, and the largest- and smallest-model sets. The last two continue the interpolant
beyond the model range, where queries never go; they are pooled anyway, because a held-out refit
interpolates across gaps twice as wide as the full law's, and on the default grid the interior sets
alone under-cover the σ̄ = 2^-10 column (leave-one-set-out 0.5–0.6): its interpolation error, where the
gradient's sampling noise rivals the DP noise, is as large as the model-size extrapolation errors.

**Region.** Only held-out points at T ≥ ``iterations_from_fraction`` of the horizon (default 1/4) are
scored: the first steps after the warm-up are fitted through the rolling mean's lag and err by up to
0.8 nats on the default grid, while the law's answers (private_model's plans: T = 290–1940 of a
400-step horizon) lie later. ``iterations_from`` in calibration.json states the region; ``dpscaling
query`` says when its answer's T is below it.

**Half-width.** K pooled sets, set k with n_k answered points. Every score weighs 1/n_k, so each set
weighs 1: a set's points share one fit and their errors are strongly correlated, so the set, not the
point, is the exchangeable unit. q is the smallest score r with Σ_k F_k(r) / (K + 1) ≥ level, F_k(r) the
share of set k's scores ≤ r: the weighted quantile with the finite-sample (K + 1) correction on the
number of sets (:func:`conformal_quantile`). The interval at a point x is prediction ± q · s(x)
(:func:`calibrated_interval`; q in nats at a measured point under ``distance``).

**Validity.** Suppose the K pooled sets and a new one (the "set" a query's error comes from) are
exchangeable. q* = inf{r: Σ_{k ≤ K+1} F_k(r) / (K + 1) ≥ level} is symmetric in the K + 1 sets, so
E[F_{K+1}(q*)] = E[Σ_k F_k(q*)] / (K + 1) ≥ level; q ≥ q* because F_{K+1} ≥ 0, so E[F_{K+1}(q)] ≥ level:
in expectation over sets, at least ``level`` of a new set's points fall inside prediction ± q · s. That
needs K / (K + 1) ≥ level, i.e. K ≥ 9 sets at 90%. With fewer sets no finite q carries the requested
level; q is then the largest pooled score, whose guarantee is K / (K + 1), and ``guaranteed_level``
says so (the default grid pools 7 sets: 7/8).

**Exchangeability is checked, not assumed**, by leave-one-set-out: each pooled set is scored against
the q calibrated on the *other* pooled sets only (its "calibrated coverage"). If the sets were
exchangeable, the mean of these coverages would be at least the level K − 1 sets guarantee;
``leave_one_set_out`` in calibration.json gives the mean, that level and whether it holds. A set the
others under-cover (the horizon set erring more than the σ̄ columns, say) shows there by name. The held-out
sets all lie about one gap from the points their fits saw, so the check cannot test how the error
shrinks nearer a measured point, which the scale assumes: the answers trained by ``private_model`` can.

**What each interval covers.** prediction ± q · s is a prediction interval for a measured loss: the scores
hold the law's error and the held-out measurement's own seed noise. The seed-only interval is the spread
of the fit under seed noise; it holds neither, so its coverage of held-out measurements can fall short
of 90% even for an exact law. The coverage table gives each interval's mean half-width beside its
coverage: a wide interval covers easily.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from dpscaling.core.errors import UserError
from dpscaling.core.io import atomic_path
from dpscaling.law.columns import CROSS_ENTROPY, ITERATIONS, LEARNING_RATE, MODEL, MODEL_SIZE, NOISE_BATCH_RATIO
from dpscaling.law.distance import DistanceScale
from dpscaling.law.settings import LawSettings, mode_name
from dpscaling.law.smoothing import rolling_mean
from dpscaling.law.validation import DISTANCE, HELD_OUT, KIND, MODE, PREDICTED, SEED_HIGH, SEED_LOW

METHOD = "split-conformal on held-out sets, each set weighted equally, (K+1)-corrected"
DISTANCE_METHOD = ("normalized split-conformal: |measured - predicted| / (1 + distance from the measured points), "
                   "on held-out sets, each set weighted equally, (K+1)-corrected")
LEVEL = 0.9
# fit.validation.interval_scale: how the half-width varies with the point (module docstring, "Score").
DISTANCE_SCALE, CONSTANT_SCALE = "distance", "constant"
INTERVAL_SCALES = (DISTANCE_SCALE, CONSTANT_SCALE)
# Held-out points scored: T >= this fraction of the horizon (the steps right after the warm-up are not the
# law's answers, and its rolling mean lags there).
ITERATIONS_FROM_FRACTION = 0.25
# 2 adds the distance scale and the measured loss's window; files of version 1 (constant q) still load.
FORMAT_VERSION = 2
READABLE_FORMAT_VERSIONS = (1, 2)
LABEL = "coverage"
# No percent sign: the caption goes into LaTeX unescaped.
CAPTION = ("How often the law's 90-percent intervals hold measurements it was not fitted on, per held-out set and "
           "mode, with each interval's mean half-width in nats: the seed-only bootstrap interval of the held-out "
           "fit, and the calibrated interval, prediction ± q·s (split-conformal q calibrated on the other held-out "
           "sets only; s = 1 + the point's distance from the points the held-out fit saw, or 1 with a constant "
           "interval). Shares of the answered points at T from a quarter of the horizon on, each measured loss the "
           "trailing mean over the mode's rolling window; seed-only columns are empty without repeated seeds.")
SET, POINTS, ANSWERED = "held-out set", "points", "answered"
SEED_COVERAGE, SEED_WIDTH = "seed-only coverage", "seed-only mean half-width (nats)"
CALIBRATED_COVERAGE, CALIBRATED_WIDTH = "calibrated coverage", "calibrated mean half-width (nats)"
HALF_WIDTH, IN_POOL = "q (nats)", "calibration pool"
# Columns that name one curve of a held-out set's targets (those present are used).
CURVE = (MODEL, MODEL_SIZE, NOISE_BATCH_RATIO, LEARNING_RATE)


def conformal_quantile(scores: Sequence[ArrayLike], level: float = LEVEL) -> float:
    """The smallest score r with Σ_k F_k(r) / (K + 1) ≥ ``level`` over the K sets of ``scores`` (NaNs and
    empty sets dropped); F_k(r) is the share of set k's scores ≤ r. ``inf`` when no score reaches it
    (K / (K + 1) < level, or no set)."""
    if not 0 <= level < 1:
        raise UserError(f"conformal level must be in [0, 1), got {level:g}")
    sets = [values[np.isfinite(values)] for values in (np.asarray(s, float).ravel() for s in scores)]
    sets = [values for values in sets if values.size]
    if not sets:
        return math.inf
    values = np.concatenate(sets)
    weights = np.concatenate([np.full(values.size, 1.0 / values.size) for values in sets])
    order = np.argsort(values, kind="stable")
    reached = np.nonzero(np.cumsum(weights[order]) / (len(sets) + 1) >= level - 1e-12)[0]
    return float(values[order][reached[0]]) if reached.size else math.inf


def guaranteed_level(sets: int, level: float = LEVEL) -> float:
    """The level ``sets`` calibration sets can guarantee: ``level``, or K / (K + 1) when that is lower."""
    return min(level, sets / (sets + 1))


def half_width_and_level(scores: Sequence[ArrayLike], level: float = LEVEL) -> tuple[float, float]:
    """(q, the level it guarantees) from the calibration sets' ``scores``; q is NaN without any set."""
    count = sum(bool(np.isfinite(np.asarray(s, float)).any()) for s in scores)
    if not count:
        return math.nan, 0.0
    attained = guaranteed_level(count, level)
    return conformal_quantile(scores, attained), attained


def interval_scale(name: str, results: pd.DataFrame) -> DistanceScale | None:
    """The scale ``fit.validation.interval_scale`` names for the law fitted on ``results``: a
    :class:`DistanceScale` for ``distance``, None (s = 1) for ``constant``."""
    if name not in INTERVAL_SCALES:
        raise UserError(f"fit.validation.interval_scale: {name!r} is not one of {', '.join(INTERVAL_SCALES)}")
    return DistanceScale.of(results) if name == DISTANCE_SCALE else None


@dataclass(frozen=True)
class Calibration:
    """One mode's calibrated q, the scale s the half-width q · s varies by (None: constant), the sets it was
    calibrated on and its leave-one-set-out check."""
    mode: str
    reference_compatible: bool
    half_width: float  # q, nats: the half-width at a measured point (everywhere without a scale)
    sets: tuple[str, ...]
    guaranteed_level: float
    leave_one_set_out_coverage: float
    leave_one_set_out_level: float
    level: float = LEVEL
    method: str = METHOD
    iterations_from: float = 0.0
    scale: DistanceScale | None = None
    window: int = 1  # the measured loss scored: the trailing mean of this many logged measurements
    leave_one_set_out_half_width: float = math.nan  # mean over the pooled sets of their mean half-width
    source: str = field(default="", compare=False)

    def half_width_at(self, model_size: ArrayLike, iterations: ArrayLike, noise_batch_ratio: ArrayLike) -> Any:
        """The half-width q · s at each point (nats); scalars stay scalars."""
        if self.scale is None:
            scale = np.ones(np.broadcast(*(np.asarray(v, float) for v in (model_size, iterations,
                                                                            noise_batch_ratio))).shape)
        else:
            scale = self.scale.scale(model_size, iterations, noise_batch_ratio)
        width = self.half_width * scale
        return float(width) if np.ndim(width) == 0 else width

    def extrapolation_charge_at(self, model_size: ArrayLike, iterations: ArrayLike,
                                noise_batch_ratio: ArrayLike) -> Any:
        """q · the point's distance outside the law's measured range (nats): how much of the half-width
        q · s the extrapolation adds; None for a constant calibration, whose width does not grow with it."""
        if self.scale is None:
            return None
        charge = self.half_width * self.scale.extrapolation(model_size, iterations, noise_batch_ratio)
        return float(charge) if np.ndim(charge) == 0 else charge

    def to_json(self) -> dict[str, Any]:
        finite = lambda v: float(v) if math.isfinite(v) else None  # noqa: E731 (JSON has no NaN)
        coverage = finite(self.leave_one_set_out_coverage)
        return {
            "mode": self.mode, "reference_compatible": self.reference_compatible, "method": self.method,
            "level": self.level, "guaranteed_level": self.guaranteed_level, "half_width": finite(self.half_width),
            "interval_scale": CONSTANT_SCALE if self.scale is None else self.scale.to_json(),
            "measured_window": self.window,
            "calibration_sets": list(self.sets), "count": len(self.sets), "iterations_from": self.iterations_from,
            "leave_one_set_out": {"mean_coverage": coverage, "guaranteed_level": self.leave_one_set_out_level,
                                  "holds": None if coverage is None else coverage >= self.leave_one_set_out_level,
                                  "mean_half_width": finite(self.leave_one_set_out_half_width)},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], source: str = "") -> Calibration:
        """A mode's entry of calibration.json, of any readable format version (version 1: constant q)."""
        number = lambda v: math.nan if v is None else float(v)  # noqa: E731
        check = data.get("leave_one_set_out", {})
        scale = data.get("interval_scale", CONSTANT_SCALE)
        if scale != CONSTANT_SCALE and not (isinstance(scale, Mapping) and scale.get("kind") == DISTANCE_SCALE):
            raise ValueError(f"interval_scale {scale!r} is not one of {', '.join(INTERVAL_SCALES)}")
        return cls(str(data["mode"]), bool(data["reference_compatible"]), number(data["half_width"]),
                   tuple(data["calibration_sets"]), float(data["guaranteed_level"]),
                   number(check.get("mean_coverage")), float(check.get("guaranteed_level", math.nan)),
                   level=float(data["level"]), method=str(data["method"]),
                   iterations_from=float(data.get("iterations_from", 0.0)),
                   scale=None if scale == CONSTANT_SCALE else DistanceScale.from_json(scale),
                   window=int(data.get("measured_window", 1)),
                   leave_one_set_out_half_width=number(check.get("mean_half_width")), source=source)


def calibrated_interval(predicted: ArrayLike, calibration: Calibration | float, model_size: ArrayLike | None = None,
                        iterations: ArrayLike | None = None,
                        noise_batch_ratio: ArrayLike | None = None) -> tuple[Any, Any]:
    """prediction ± the calibrated half-width at the point (M, T, σ̄) the prediction is for: q · s, q alone
    for a constant calibration or a bare q (nats). Scalars stay scalars."""
    value = np.asarray(predicted, float)
    if isinstance(calibration, Calibration):
        point = (model_size, iterations, noise_batch_ratio)
        if calibration.scale is not None and any(v is None for v in point):
            raise UserError("calibrated interval: this calibration's half-width grows with the distance from the "
                            "law's measured points; give the answer's model_size, iterations and noise_batch_ratio")
        width = (calibration.half_width if calibration.scale is None
                 else np.asarray(calibration.half_width_at(*point), float))
    else:
        width = float(calibration)
    low, high = value - width, value + width
    return (float(low), float(high)) if np.ndim(low) == 0 else (low, high)


def measured_as_law(points: pd.DataFrame, modes: Mapping[str, LawSettings]) -> pd.Series:
    """Each target's measured loss as the law's quantity: the trailing mean over its mode's rolling window of
    its curve's measurements (module docstring, "Measured loss"), aligned with ``points``."""
    curve = [HELD_OUT, MODE, *(column for column in CURVE if column in points)]
    smoothed = pd.Series(np.nan, index=points.index, dtype=float)
    for key, group in points.sort_values(ITERATIONS).groupby(curve, sort=False, dropna=False):
        series = group.set_index(ITERATIONS)[CROSS_ENTROPY]
        if series.index.has_duplicates:
            raise UserError(f"coverage: held-out set {key[0]!r} has several targets at one T on one curve "
                            f"(columns naming a curve: {', '.join(curve)})")
        window = modes[key[1]].rolling_window
        smoothed[group.index] = rolling_mean(series.to_frame(), window).iloc[:, 0].to_numpy()
    return smoothed


def _share(inside: np.ndarray) -> float:
    return float(inside.mean()) if inside.size else math.nan


def _mean(values: np.ndarray) -> float:
    values = values[np.isfinite(values)]
    return float(values.mean()) if values.size else math.nan


def coverage(points: pd.DataFrame, modes: Mapping[str, LawSettings], level: float = LEVEL,
             iterations_from_fraction: float = ITERATIONS_FROM_FRACTION,
             scale: DistanceScale | None = None) -> tuple[pd.DataFrame, dict[str, Calibration]]:
    """Per held-out set × mode (``points`` from :func:`dpscaling.law.validation.validate`, scored where T ≥
    ``iterations_from_fraction`` of their horizon against the measured loss as the law's quantity):
    points, answered points, seed-only and calibrated coverage each with its mean half-width, the q used
    and whether the set is pooled; and each mode's :class:`Calibration` (q from the whole pool).

    With ``scale`` (the full law's :class:`DistanceScale`) the scores are normalized by 1 + the points'
    ``Distance`` column (the distance from the points their held-out fit saw); without it s = 1.
    """
    unknown = sorted(set(points[MODE]) - set(modes))
    if unknown:
        raise UserError(f"coverage: mode {unknown[0]!r} has no settings (given: {sorted(modes)})")
    if scale is not None and DISTANCE not in points:
        raise UserError(f"coverage: a distance-scaled interval needs the points' {DISTANCE!r} column "
                        "(dpscaling.law.validation.validate writes it)")
    iterations_from = float(iterations_from_fraction * points[ITERATIONS].max()) if len(points) else 0.0
    measured = measured_as_law(points, modes)
    scored = points.assign(_measured=measured)[points[ITERATIONS] >= iterations_from]
    s = 1.0 + scored[DISTANCE].to_numpy(float) if scale is not None else np.ones(len(scored))
    nan = np.full(len(scored), np.nan)
    scored = scored.assign(_scale=s, _score=np.abs(scored["_measured"] - scored[PREDICTED]).to_numpy(float) / s,
                           _low=scored[SEED_LOW].to_numpy(float) if SEED_LOW in scored else nan,
                           _high=scored[SEED_HIGH].to_numpy(float) if SEED_HIGH in scored else nan)
    rows, calibrations = [], {}
    for mode in dict.fromkeys(scored[MODE]):
        groups = {name: group for name, group in scored[scored[MODE] == mode].groupby(HELD_OUT, sort=False)}
        answered = {name: group.dropna(subset=["_score"]) for name, group in groups.items()}
        pool = [name for name, group in answered.items() if len(group)]
        q_pool, attained = half_width_and_level([answered[name]["_score"].to_numpy() for name in pool], level)
        checks, widths = [], []
        for name, group in groups.items():
            pooled = name in pool
            others = [answered[other]["_score"].to_numpy() for other in pool if other != name]
            q = half_width_and_level(others, level)[0] if pooled else q_pool
            scores = answered[name]["_score"].to_numpy()
            calibrated = _share(scores <= q) if math.isfinite(q) else math.nan
            calibrated_width = _mean(q * answered[name]["_scale"].to_numpy()) if math.isfinite(q) else math.nan
            if pooled and not math.isnan(calibrated):
                checks.append(calibrated)
                widths.append(calibrated_width)
            interval = group.dropna(subset=["_low", "_high", "_measured"])
            seed_only = _share(((interval["_measured"] >= interval["_low"])
                                & (interval["_measured"] <= interval["_high"])).to_numpy())
            rows.append({SET: name, KIND.lower(): group[KIND].iloc[0], MODE.lower(): mode, POINTS: len(group),
                         ANSWERED: len(answered[name]), SEED_COVERAGE: seed_only,
                         SEED_WIDTH: _mean(((interval["_high"] - interval["_low"]) / 2).to_numpy(float)),
                         CALIBRATED_COVERAGE: calibrated, CALIBRATED_WIDTH: calibrated_width, HALF_WIDTH: q,
                         IN_POOL: pooled})
        calibrations[mode] = Calibration(
            mode, bool(modes[mode].reference_compatible), q_pool, tuple(pool), attained,
            float(np.mean(checks)) if checks else math.nan, guaranteed_level(max(len(pool) - 1, 0), level), level,
            method=METHOD if scale is None else DISTANCE_METHOD, iterations_from=iterations_from, scale=scale,
            window=int(modes[mode].rolling_window or 1),
            leave_one_set_out_half_width=float(np.mean(widths)) if widths else math.nan)
    return pd.DataFrame(rows), calibrations


def write_calibration(calibrations: Mapping[str, Calibration], path: str | os.PathLike[str]) -> None:
    """``validate/calibration.json``: every mode's calibration, keyed by mode name."""
    methods = list(dict.fromkeys(calibration.method for calibration in calibrations.values())) or [METHOD]
    document = {"format_version": FORMAT_VERSION, "method": "; ".join(methods),
                "modes": {name: calibration.to_json() for name, calibration in calibrations.items()}}
    with atomic_path(path) as tmp:
        Path(tmp).write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")


def load_calibration(path: str | os.PathLike[str], settings: LawSettings) -> Calibration:
    """The calibration in ``path`` measured in the mode of ``settings`` (paper or reference-compatible); files
    of every format version in :data:`READABLE_FORMAT_VERSIONS` load.

    Raises UserError when the file is unreadable or holds no calibration of that mode.
    """
    mode = mode_name(settings.reference_compatible)
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
        version = document.get("format_version", 1)
        if version not in READABLE_FORMAT_VERSIONS:
            raise ValueError(f"format_version {version!r} is not one of "
                             f"{', '.join(map(str, READABLE_FORMAT_VERSIONS))}")
        entries = [Calibration.from_json(entry, str(path)) for entry in document["modes"].values()]
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        raise UserError(f"--calibration {path}: not a calibration file written by `snakemake validate` "
                        f"({type(error).__name__}: {error})") from None
    matching = [entry for entry in entries if entry.reference_compatible == settings.reference_compatible]
    if not matching:
        found = ", ".join(entry.mode for entry in entries) or "none"
        raise UserError(f"the calibration in {path} was not measured in this law's {mode} mode (it has: {found}); "
                        "rerun `snakemake validate` or pass the matching --calibration FILE")
    return matching[0]
