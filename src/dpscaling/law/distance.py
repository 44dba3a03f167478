"""How far a point (M, T, σ̄) lies from the measured points a law was fitted on: the scale of the calibrated
interval (docs/fit.md, "Calibrated intervals").

Not in the paper: an extension. The law is measured on a grid of model sizes and σ̄ columns up to a horizon
H and interpolated (log M, log σ̄) or extrapolated (T > H) between them, so its error is smallest at a
measured point and grows with the distance from one. The distance is measured per axis, in units that
make the axes comparable:

- **log M**: the distance to the nearest measured model size, in units of the median gap between
  neighbouring measured sizes (``model_size_gap``, ln units);
- **log σ̄**: the same for the σ̄ > 0 columns (``noise_batch_ratio_gap``); a non-private point (σ̄ = 0) is
  measured exactly on its own plane, at distance 0 along σ̄;
- **log T**: beyond the horizon only, in doublings of it: log2(T/H) for T > H, 0 inside.

The point's distance is the Euclidean norm of the three, so a held-out interior model or σ̄ column (the
nearest measured neighbour one gap away) and a point at twice the horizon are each at distance about 1.
The gaps are the *full* grid's: a held-out fit, which saw fewer points, measures its distances in the same
units as the law that answers queries (:func:`DistanceScale.distance` takes the fit's own measured points).
An axis with fewer than two measured values has no gap and adds nothing: the law answers only at that value.

The interval's scale is s = 1 + distance (:meth:`DistanceScale.scale`): the error at a measured point is
taken as half that one gap away. :mod:`dpscaling.law.calibration` calibrates |measured − predicted| / s.

The **extrapolation** (:meth:`DistanceScale.extrapolation`) is the part of that distance that lies outside
the measured range: along log M and log σ̄ the distance past the largest or smallest measured value (0
between them), along T the doublings past the horizon. It is what the decision rule
``extrapolation_charged`` charges (:mod:`dpscaling.law.decision`). A σ̄ below the smallest measured σ̄ > 0
is not counted: it lies between that column and the non-private plane σ̄ = 0, which the grid measures.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd
from numpy.typing import ArrayLike

from dpscaling.core.errors import UserError
from dpscaling.law.columns import CROSS_ENTROPY, ITERATIONS, MODEL_SIZE, NOISE_BATCH_RATIO


@dataclass(frozen=True)
class MeasuredPoints:
    """The model sizes, the σ̄ > 0 columns and the horizon H (the largest T) a fit was fitted on."""

    model_sizes: tuple[float, ...]
    noise_batch_ratios: tuple[float, ...]
    horizon: float

    @classmethod
    def of(cls, results: pd.DataFrame) -> MeasuredPoints:
        """The measured points of ``results`` (tidy measurements; rows without a loss do not count)."""
        measured = results.dropna(subset=[CROSS_ENTROPY])
        if measured.empty:
            raise UserError("distance from the measured points: the results hold no measured loss")
        sizes = np.unique(measured[MODEL_SIZE].to_numpy(float))
        ratios = measured[NOISE_BATCH_RATIO].to_numpy(float)
        return cls(tuple(float(v) for v in sizes), tuple(float(v) for v in np.unique(ratios[ratios > 0])),
                   float(measured[ITERATIONS].max()))

    def to_json(self) -> dict[str, Any]:
        return {"model_sizes": list(self.model_sizes), "noise_batch_ratios": list(self.noise_batch_ratios),
                "horizon": self.horizon}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> MeasuredPoints:
        return cls(tuple(float(v) for v in data["model_sizes"]), tuple(float(v) for v in data["noise_batch_ratios"]),
                   float(data["horizon"]))


def median_gap(values: tuple[float, ...]) -> float:
    """The median gap between neighbouring ``values`` in ln units; NaN with fewer than two values."""
    logs = np.log(np.sort(np.asarray(values, float)))
    return float(np.median(np.diff(logs))) if logs.size >= 2 else math.nan


def _nearest(values: np.ndarray, nodes: tuple[float, ...], gap: float) -> np.ndarray:
    """|ln value − ln nearest node| / gap; 0 where the axis has no gap or no node."""
    if not nodes or not math.isfinite(gap) or gap <= 0:
        return np.zeros(values.shape)
    logs = np.log(np.asarray(nodes, float))
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.min(np.abs(np.log(values)[..., None] - logs), axis=-1) / gap


def _outside(values: np.ndarray, nodes: tuple[float, ...], gap: float, below: bool = True) -> np.ndarray:
    """|ln value − ln (value clipped to the nodes' range)| / gap (not below the range unless ``below``); 0
    where the axis has no gap or no node."""
    if not nodes or not math.isfinite(gap) or gap <= 0:
        return np.zeros(values.shape)
    with np.errstate(divide="ignore", invalid="ignore"):
        logs = np.log(values)
        low, high = math.log(min(nodes)), math.log(max(nodes))
        return (np.maximum(logs - high, 0.0) + (np.maximum(low - logs, 0.0) if below else 0.0)) / gap


@dataclass(frozen=True)
class DistanceScale:
    """The distance from a law's measured points (module docstring) and the interval's scale s = 1 + it."""

    measured: MeasuredPoints  # the law's: the points the full fit saw
    model_size_gap: float  # ln units
    noise_batch_ratio_gap: float  # ln units

    @classmethod
    def of(cls, results: pd.DataFrame) -> DistanceScale:
        """The scale of the law fitted on ``results``: its measured points and their gaps."""
        measured = MeasuredPoints.of(results)
        return cls(measured, median_gap(measured.model_sizes), median_gap(measured.noise_batch_ratios))

    def distance(self, model_size: ArrayLike, iterations: ArrayLike, noise_batch_ratio: ArrayLike,
                 measured: MeasuredPoints | None = None) -> np.ndarray:
        """Each point's distance from ``measured`` (default: the law's own measured points), in the law's
        gaps and doublings of the horizon; NaN where an input is NaN."""
        seen = self.measured if measured is None else measured
        m, t, s = np.broadcast_arrays(*(np.asarray(v, float) for v in (model_size, iterations, noise_batch_ratio)))
        along_model = _nearest(m, seen.model_sizes, self.model_size_gap)
        along_noise = np.where(s > 0, _nearest(np.where(s > 0, s, 1.0), seen.noise_batch_ratios,
                                               self.noise_batch_ratio_gap), np.where(s == 0, 0.0, np.nan))
        with np.errstate(divide="ignore", invalid="ignore"):
            beyond_horizon = np.maximum(np.log2(t / seen.horizon), 0.0)
        return np.sqrt(along_model ** 2 + along_noise ** 2 + beyond_horizon ** 2)

    def extrapolation(self, model_size: ArrayLike, iterations: ArrayLike, noise_batch_ratio: ArrayLike) -> np.ndarray:
        """Each point's distance outside the law's measured range (module docstring), in the same units as
        :meth:`distance`: 0 for any point the law interpolates; NaN where an input is NaN."""
        seen = self.measured
        m, t, s = np.broadcast_arrays(*(np.asarray(v, float) for v in (model_size, iterations, noise_batch_ratio)))
        along_model = _outside(m, seen.model_sizes, self.model_size_gap)
        along_noise = np.where(s > 0, _outside(np.where(s > 0, s, 1.0), seen.noise_batch_ratios,
                                               self.noise_batch_ratio_gap, below=False),
                               np.where(s == 0, 0.0, np.nan))
        with np.errstate(divide="ignore", invalid="ignore"):
            beyond_horizon = np.maximum(np.log2(t / seen.horizon), 0.0)
        return np.sqrt(along_model ** 2 + along_noise ** 2 + beyond_horizon ** 2)

    def scale(self, model_size: ArrayLike, iterations: ArrayLike, noise_batch_ratio: ArrayLike) -> np.ndarray:
        """s = 1 + the distance from the law's measured points: the calibrated half-width is q · s."""
        return 1.0 + self.distance(model_size, iterations, noise_batch_ratio)

    def to_json(self) -> dict[str, Any]:
        finite = lambda v: float(v) if math.isfinite(v) else None  # noqa: E731 (JSON has no NaN)
        return {"kind": "distance", "measured": self.measured.to_json(),
                "model_size_gap": finite(self.model_size_gap),
                "noise_batch_ratio_gap": finite(self.noise_batch_ratio_gap)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> DistanceScale:
        gap = lambda v: math.nan if v is None else float(v)  # noqa: E731
        return cls(MeasuredPoints.from_json(data["measured"]), gap(data["model_size_gap"]),
                   gap(data["noise_batch_ratio_gap"]))
