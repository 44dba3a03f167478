"""Calibrated 90% intervals on the law's answers: split-conformal on its held-out errors.

Not in the paper: an extension. Documented in docs/fit.md, "Calibrated intervals".

The bootstrap interval (:mod:`dpscaling.law.bootstrap`) carries seed noise only: the law's own error (the
power-law extrapolation in T, the interpolation between model sizes and σ̄ columns) is not in it.
:mod:`dpscaling.law.validation` measures that error on held-out sets; this module turns it into an
interval and measures how often each interval covers held-out measurements.

**Score.** A held-out point's score is |measured − predicted| in nats, the prediction being the held-out
fit's (the law fitted without that set).

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
point, is the exchangeable unit. q is the smallest score s with Σ_k F_k(s) / (K + 1) ≥ level, F_k(s) the
share of set k's scores ≤ s: the weighted quantile with the finite-sample (K + 1) correction on the
number of sets (:func:`conformal_quantile`).

**Validity.** Suppose the K pooled sets and a new one (the "set" a query's error comes from) are
exchangeable. q* = inf{s: Σ_{k ≤ K+1} F_k(s) / (K + 1) ≥ level} is symmetric in the K + 1 sets, so
E[F_{K+1}(q*)] = E[Σ_k F_k(q*)] / (K + 1) ≥ level; q ≥ q* because F_{K+1} ≥ 0, so E[F_{K+1}(q)] ≥ level:
in expectation over sets, at least ``level`` of a new set's points fall inside prediction ± q. That
needs K / (K + 1) ≥ level, i.e. K ≥ 9 sets at 90%. With fewer sets no finite q carries the requested
level; q is then the largest pooled score, whose guarantee is K / (K + 1), and ``guaranteed_level``
says so (the default grid pools 5 sets: 5/6).

**Exchangeability is checked, not assumed**, by leave-one-set-out: each pooled set is scored against
the q calibrated on the *other* pooled sets only (its "calibrated coverage"). If the sets were
exchangeable, the mean of these coverages would be at least the level K − 1 sets guarantee;
``leave_one_set_out`` in calibration.json gives the mean, that level and whether it holds. A set the
others under-cover (the horizon set erring more than the σ̄ columns, say) shows there by name.

**What each interval covers.** prediction ± q is a prediction interval for a measured loss: the scores
hold the law's error and the held-out measurement's own seed noise. The seed-only interval is the spread
of the fit under seed noise; it holds neither, so its coverage of held-out measurements can fall short
of 90% even for an exact law.
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

from dpscaling.errors import UserError
from dpscaling.io import atomic_path
from dpscaling.law.columns import CROSS_ENTROPY, ITERATIONS
from dpscaling.law.settings import LawSettings
from dpscaling.law.validation import HELD_OUT, KIND, MODE, PREDICTED, SEED_HIGH, SEED_LOW

METHOD = "split-conformal on held-out sets, each set weighted equally, (K+1)-corrected"
LEVEL = 0.9
# Held-out points scored: T >= this fraction of the horizon (the steps right after the warm-up are not the
# law's answers, and its rolling mean lags there).
ITERATIONS_FROM_FRACTION = 0.25
DIRECTORY, FILE = "validate", "calibration.json"
FORMAT_VERSION = 1
LABEL = "coverage"
# No percent sign: the caption goes into LaTeX unescaped.
CAPTION = ("How often the law's 90-percent intervals hold measurements it was not fitted on, per held-out set and "
           "mode: the seed-only bootstrap interval of the held-out fit, and prediction ± q (split-conformal half-width "
           "q in nats, calibrated on the other held-out sets only). Shares of the answered points at T from a "
           "quarter of the horizon on; seed-only coverage is empty without repeated seeds.")
SET, POINTS, ANSWERED = "held-out set", "points", "answered"
SEED_COVERAGE, CALIBRATED_COVERAGE, HALF_WIDTH, IN_POOL = (
    "seed-only coverage", "calibrated coverage", "half-width q (nats)", "calibration pool")


def conformal_quantile(scores: Sequence[ArrayLike], level: float = LEVEL) -> float:
    """The smallest score s with Σ_k F_k(s) / (K + 1) ≥ ``level`` over the K sets of ``scores`` (NaNs and
    empty sets dropped); F_k(s) is the share of set k's scores ≤ s. ``inf`` when no score reaches it
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


def half_width(scores: Sequence[ArrayLike], level: float = LEVEL) -> tuple[float, float]:
    """(q, the level it guarantees) from the calibration sets' ``scores``; q is NaN without any set."""
    count = sum(bool(np.isfinite(np.asarray(s, float)).any()) for s in scores)
    if not count:
        return math.nan, 0.0
    attained = guaranteed_level(count, level)
    return conformal_quantile(scores, attained), attained


@dataclass(frozen=True)
class Calibration:
    """One mode's calibrated half-width q, the sets it was calibrated on and its leave-one-set-out check."""
    mode: str
    reference_compatible: bool
    half_width: float
    sets: tuple[str, ...]
    guaranteed_level: float
    leave_one_set_out_coverage: float
    leave_one_set_out_level: float
    level: float = LEVEL
    method: str = METHOD
    iterations_from: float = 0.0
    source: str = field(default="", compare=False)

    def to_json(self) -> dict[str, Any]:
        finite = lambda v: float(v) if math.isfinite(v) else None  # noqa: E731 (JSON has no NaN)
        coverage = finite(self.leave_one_set_out_coverage)
        return {
            "mode": self.mode, "reference_compatible": self.reference_compatible, "method": self.method,
            "level": self.level, "guaranteed_level": self.guaranteed_level, "half_width": finite(self.half_width),
            "calibration_sets": list(self.sets), "count": len(self.sets), "iterations_from": self.iterations_from,
            "leave_one_set_out": {"mean_coverage": coverage, "guaranteed_level": self.leave_one_set_out_level,
                                  "holds": None if coverage is None else coverage >= self.leave_one_set_out_level},
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any], source: str = "") -> Calibration:
        number = lambda v: math.nan if v is None else float(v)  # noqa: E731
        check = data.get("leave_one_set_out", {})
        return cls(str(data["mode"]), bool(data["reference_compatible"]), number(data["half_width"]),
                   tuple(data["calibration_sets"]), float(data["guaranteed_level"]),
                   number(check.get("mean_coverage")), float(check.get("guaranteed_level", math.nan)),
                   float(data["level"]), str(data["method"]), float(data.get("iterations_from", 0.0)), source)


def calibrated_interval(predicted: ArrayLike, calibration: Calibration | float) -> tuple[Any, Any]:
    """prediction ± q (q: the calibration's half-width, nats); scalars stay scalars."""
    q = calibration.half_width if isinstance(calibration, Calibration) else float(calibration)
    value = np.asarray(predicted, float)
    low, high = value - q, value + q
    return (float(low), float(high)) if value.ndim == 0 else (low, high)


def _share(inside: np.ndarray) -> float:
    return float(inside.mean()) if inside.size else math.nan


def coverage(points: pd.DataFrame, modes: Mapping[str, LawSettings], level: float = LEVEL,
             iterations_from_fraction: float = ITERATIONS_FROM_FRACTION) -> tuple[pd.DataFrame, dict[str, Calibration]]:
    """Per held-out set × mode (``points`` from :func:`dpscaling.law.validation.validate`, scored where T ≥
    ``iterations_from_fraction`` of their horizon): points, answered points, seed-only and calibrated
    coverage, the q used and whether the set is pooled; and each mode's :class:`Calibration` (q from the
    whole pool)."""
    iterations_from = float(iterations_from_fraction * points[ITERATIONS].max()) if len(points) else 0.0
    points = points[points[ITERATIONS] >= iterations_from]
    measured, predicted = points[CROSS_ENTROPY].to_numpy(float), points[PREDICTED].to_numpy(float)
    low = points[SEED_LOW].to_numpy(float) if SEED_LOW in points else np.full(len(points), np.nan)
    high = points[SEED_HIGH].to_numpy(float) if SEED_HIGH in points else np.full(len(points), np.nan)
    scored = points.assign(_score=np.abs(measured - predicted), _low=low, _high=high)
    rows, calibrations = [], {}
    for mode in dict.fromkeys(scored[MODE]):
        if mode not in modes:
            raise UserError(f"coverage: mode {mode!r} has no settings (given: {sorted(modes)})")
        groups = {name: group for name, group in scored[scored[MODE] == mode].groupby(HELD_OUT, sort=False)}
        scores = {name: group["_score"].dropna().to_numpy() for name, group in groups.items()}
        pool = [name for name, group in groups.items() if scores[name].size]
        q_pool, attained = half_width([scores[name] for name in pool], level)
        checks = []
        for name, group in groups.items():
            pooled = name in pool
            q = half_width([scores[other] for other in pool if other != name], level)[0] if pooled else q_pool
            inside = scores[name] <= q if math.isfinite(q) else np.zeros(0, bool)
            calibrated = _share(inside)
            if pooled and not math.isnan(calibrated):
                checks.append(calibrated)
            interval = group.dropna(subset=["_low", "_high"])
            seed_only = _share(((interval[CROSS_ENTROPY] >= interval["_low"])
                                & (interval[CROSS_ENTROPY] <= interval["_high"])).to_numpy())
            rows.append({SET: name, KIND.lower(): group[KIND].iloc[0], MODE.lower(): mode, POINTS: len(group),
                         ANSWERED: int(scores[name].size), SEED_COVERAGE: seed_only,
                         CALIBRATED_COVERAGE: calibrated, HALF_WIDTH: q, IN_POOL: pooled})
        calibrations[mode] = Calibration(
            mode, bool(modes[mode].reference_compatible), q_pool, tuple(pool), attained,
            float(np.mean(checks)) if checks else math.nan, guaranteed_level(max(len(pool) - 1, 0), level), level,
            iterations_from=iterations_from)
    return pd.DataFrame(rows), calibrations


def write_calibration(calibrations: Mapping[str, Calibration], path: str | os.PathLike[str]) -> None:
    """``validate/calibration.json``: every mode's calibration, keyed by mode name."""
    document = {"format_version": FORMAT_VERSION, "method": METHOD,
                "modes": {name: calibration.to_json() for name, calibration in calibrations.items()}}
    with atomic_path(path) as tmp:
        Path(tmp).write_text(json.dumps(document, indent=2) + "\n", encoding="utf-8")


def calibration_file(law_directory: str | os.PathLike[str]) -> Path:
    """Where the workflow writes a law's calibration: ``<run>/validate/calibration.json`` for the law
    ``<run>/law/fit``."""
    return Path(law_directory).resolve().parent.parent / DIRECTORY / FILE


def load_calibration(path: str | os.PathLike[str], settings: LawSettings) -> Calibration:
    """The calibration in ``path`` measured in the mode of ``settings`` (paper or reference-compatible).

    Raises UserError when the file is unreadable or holds no calibration of that mode.
    """
    mode = "reference-compatible" if settings.reference_compatible else "paper"
    try:
        document = json.loads(Path(path).read_text(encoding="utf-8"))
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
