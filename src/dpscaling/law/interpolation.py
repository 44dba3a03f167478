"""The fitted function L(M, T, σ̄) (paper §3.3 "Scaling Law Fitting").

Multilinear interpolation (``scipy.interpolate.RegularGridInterpolator``) on
the smoothed + extrapolated grid in (log M, log T, log σ̄) — of cross entropy
(paper) or of log cross entropy (the authors' code) — for σ̄ > 0, and a
separate non-private function over (log M, log T) for σ̄ = 0.
Absent σ̄ cells are first filled linearly in log σ̄ (the paper's grid is
log-spaced, so this is what "in between" means; the code's positional fill is
available for reference compatibility). Queries outside the grid are NaN and
each NaN carries a reason. scipy's interpolant is NaN for every query in a grid
cell with a NaN corner (a failed extrapolation fit), even where that corner's
weight is 0, as at a neighbour's own node; ``ignore_zero_weight_nan`` (not in
the paper) answers those from the corners it weighs.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from dpscaling.core.errors import UserError
from dpscaling.law.columns import CROSS_ENTROPY, ITERATIONS, MODEL, MODEL_SIZE, NOISE_BATCH_RATIO, SOURCE

if TYPE_CHECKING:
    from scipy.interpolate import RegularGridInterpolator

FILLED = "filled"
MISSING_VALUE = "no value in the law's grid here (missing measurement or failed extrapolation)"


def _fill_row_in_log(row: np.ndarray, log_axis: np.ndarray) -> np.ndarray:
    """Linear interpolation on a log axis (σ̄, or M) between the finite cells of one row; never extrapolates."""
    finite = np.isfinite(row)
    if finite.sum() < 2:
        return row
    inside = (log_axis >= log_axis[finite][0]) & (log_axis <= log_axis[finite][-1])
    filled = row.copy()
    filled[inside] = np.interp(log_axis[inside], log_axis[finite], row[finite])
    return filled


CELL = [MODEL, ITERATIONS, NOISE_BATCH_RATIO]


def with_cells(grid: pd.DataFrame, added: pd.DataFrame) -> pd.DataFrame:
    """``grid`` with the rows of ``added`` in place of its rows for the same cells (model, T, σ̄): a NaN row a fill
    or an extrapolation replaces, or a cell that had no row at all; sorted by M, σ̄, T."""
    kept = grid.merge(added[CELL], on=CELL, how="left", indicator=True)
    kept = grid[(kept["_merge"] == "left_only").to_numpy()]
    return pd.concat([kept, added], ignore_index=True).sort_values(
        [MODEL_SIZE, NOISE_BATCH_RATIO, ITERATIONS]).reset_index(drop=True)


def fill_missing_noise_batch_ratios(grid: pd.DataFrame, method: str = "log_nbr") -> pd.DataFrame:
    """Give every model a value at every σ̄ > 0 of the grid where neighbours allow; new cells get Source "filled".

    ``method="log_nbr"`` interpolates in log σ̄ and leaves cells outside a
    row's finite range NaN; ``"positional"`` is pandas' column-position fill
    of the authors' code (equal spacing assumed, trailing gaps held flat).
    """
    private = grid[grid[NOISE_BATCH_RATIO] > 0]
    all_nbr = np.sort(private[NOISE_BATCH_RATIO].unique())
    filled_frames = []
    for (model, size), group in private.groupby([MODEL, MODEL_SIZE], sort=True):
        surface = group.pivot(index=ITERATIONS, columns=NOISE_BATCH_RATIO, values=CROSS_ENTROPY).reindex(
            columns=pd.Index(all_nbr, name=NOISE_BATCH_RATIO))
        if method == "positional":
            new = surface.interpolate(axis=1)
        elif method == "log_nbr":
            values = np.apply_along_axis(_fill_row_in_log, 1, surface.to_numpy(float), np.log(all_nbr))
            new = pd.DataFrame(values, index=surface.index, columns=surface.columns)
        else:
            raise ValueError(f"unknown fill method {method!r}")
        added = new.where(surface.isna()).stack().dropna().rename(CROSS_ENTROPY).reset_index()
        filled_frames.append(added.assign(**{MODEL: model, MODEL_SIZE: size, SOURCE: FILLED}))
    if not filled_frames:
        return grid
    return with_cells(grid, pd.concat(filled_frames, ignore_index=True))


def fill_missing_model_sizes(grid: pd.DataFrame) -> pd.DataFrame:
    """``fit.fill_missing_models`` (not in the paper; for sparse designs, :mod:`dpscaling.design`): a cell (model,
    σ̄, T) no run measured, between two models that have it at that σ̄ and T, linearly in log M as the law's own
    interpolant reads between models; new cells get Source "filled", cells outside the models' range stay NaN."""
    sizes = grid.groupby(MODEL)[MODEL_SIZE].first().sort_values()
    if len(sizes) < 3:
        return grid
    surface = grid.pivot_table(index=[NOISE_BATCH_RATIO, ITERATIONS], columns=MODEL, values=CROSS_ENTROPY,
                               aggfunc="first", dropna=False).reindex(columns=sizes.index)
    log_m = np.log(sizes.to_numpy(float))
    values = np.apply_along_axis(_fill_row_in_log, 1, surface.to_numpy(float), log_m)
    new = pd.DataFrame(values, index=surface.index, columns=surface.columns)
    added = new.where(surface.isna()).stack().dropna().rename(CROSS_ENTROPY).reset_index()
    if added.empty:
        return grid
    return with_cells(grid, added.assign(**{MODEL_SIZE: added[MODEL].map(sizes), SOURCE: FILLED}))


def _axis(values: np.ndarray, name: str) -> np.ndarray:
    axis = np.sort(np.unique(values))
    if len(axis) < 2:
        raise UserError(f"the law needs at least two distinct {name} values to interpolate, got {len(axis)}")
    return axis


@dataclass
class LossFunction:
    """L(M, T, σ̄) by multilinear interpolation; NaN with a reason outside the grid."""
    model_sizes: np.ndarray
    iterations: np.ndarray
    noise_batch_ratios: np.ndarray  # the σ̄ > 0 axis
    private: RegularGridInterpolator
    non_private: RegularGridInterpolator | None
    log_loss: bool
    ignore_zero_weight_nan: bool = False

    @classmethod
    def from_grid(cls, grid: pd.DataFrame, log_loss: bool = False,
                  ignore_zero_weight_nan: bool = False) -> "LossFunction":
        """Build from a long grid (Model Size, Iterations, Noise Batch Ratio, Cross Entropy) with σ̄ = 0 rows."""
        sizes = _axis(grid[MODEL_SIZE].to_numpy(float), "model size")
        iterations = _axis(grid[ITERATIONS].to_numpy(float), "iteration")
        private_rows = grid[grid[NOISE_BATCH_RATIO] > 0]
        nbrs = _axis(private_rows[NOISE_BATCH_RATIO].to_numpy(float), "positive noise-batch ratio")
        transform = np.log if log_loss else (lambda x: x)
        index = pd.MultiIndex.from_product([sizes, iterations, nbrs])
        cube = (private_rows.groupby([MODEL_SIZE, ITERATIONS, NOISE_BATCH_RATIO])[CROSS_ENTROPY].first()
                .reindex(index).to_numpy(float).reshape(len(sizes), len(iterations), len(nbrs)))
        from scipy.interpolate import RegularGridInterpolator  # SciPy on first fit, not when the workflow plans

        private = RegularGridInterpolator((np.log(sizes), np.log(iterations), np.log(nbrs)), transform(cube),
                                          method="linear", bounds_error=False, fill_value=np.nan)
        public_rows = grid[grid[NOISE_BATCH_RATIO] == 0]
        non_private = None
        if len(public_rows):
            plane = (public_rows.groupby([MODEL_SIZE, ITERATIONS])[CROSS_ENTROPY].first()
                     .reindex(pd.MultiIndex.from_product([sizes, iterations]))
                     .to_numpy(float).reshape(len(sizes), len(iterations)))
            non_private = RegularGridInterpolator((np.log(sizes), np.log(iterations)), transform(plane),
                                                  method="linear", bounds_error=False, fill_value=np.nan)
        return cls(sizes, iterations, nbrs, private, non_private, log_loss, ignore_zero_weight_nan)

    def __call__(self, model_size, iterations, noise_batch_ratio) -> np.ndarray:
        # The loss alone: the reasons' string arrays cost more than the interpolation (a bootstrap band calls
        # this once per replicate).
        return self._loss(*self._points(model_size, iterations, noise_batch_ratio))

    def evaluate(self, model_size, iterations, noise_batch_ratio) -> tuple[np.ndarray, np.ndarray]:
        """(loss, reason) arrays; reason is "" where the loss is finite."""
        m, t, s = self._points(model_size, iterations, noise_batch_ratio)
        loss = self._loss(m, t, s)
        return loss, self._reasons(m, t, s, loss)

    @staticmethod
    def _points(model_size, iterations, noise_batch_ratio) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        m, t, s = np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in
                                        (model_size, iterations, noise_batch_ratio)))
        return tuple(np.atleast_1d(v).ravel() for v in (m, t, s))

    def _loss(self, m: np.ndarray, t: np.ndarray, s: np.ndarray) -> np.ndarray:
        loss = np.full(m.shape, np.nan)
        with np.errstate(divide="ignore", invalid="ignore"):
            log_m, log_t, log_s = np.log(m), np.log(t), np.log(s)
        private = s > 0
        if private.any():
            loss[private] = self._interpolate("private", np.column_stack([log_m, log_t, log_s])[private])
        public = s == 0
        if public.any() and self.non_private is not None:
            loss[public] = self._interpolate("non_private", np.column_stack([log_m, log_t])[public])
        if self.log_loss:
            loss = np.exp(loss)
        return loss

    def _interpolate(self, name: str, points: np.ndarray) -> np.ndarray:
        values = getattr(self, name)(points)
        unanswered = np.isnan(values)
        if self.ignore_zero_weight_nan and unanswered.any():
            # Where no corner that carries weight is NaN, the interpolant of the NaN indicator is exactly 0
            # (weights are >= 0 inside the grid), and the one with NaN read as 0 is the weighted corners' value.
            filled, indicator = self._nan_split[name]
            retry = points[unanswered]
            values[unanswered] = np.where(indicator(retry) == 0, filled(retry), np.nan)
        return values

    @cached_property
    def _nan_split(self) -> dict[str, tuple[RegularGridInterpolator, RegularGridInterpolator]]:
        """Per interpolant: the same interpolant with its NaN cells read as 0, and that of its NaN indicator
        (built on the first query that needs them)."""
        from scipy.interpolate import RegularGridInterpolator

        split = {}
        for name in ("private", "non_private"):
            interpolant = getattr(self, name)
            if interpolant is None:
                continue
            nan = np.isnan(interpolant.values)
            split[name] = tuple(RegularGridInterpolator(interpolant.grid, values, method="linear", bounds_error=False,
                                                        fill_value=np.nan)
                                for values in (np.where(nan, 0.0, interpolant.values), nan.astype(float)))
        return split

    def _reasons(self, m: np.ndarray, t: np.ndarray, s: np.ndarray, loss: np.ndarray) -> np.ndarray:
        reasons = np.where(np.isfinite(loss), "", MISSING_VALUE).astype(object)
        checks = [
            (~((s > 0) & (s >= self.noise_batch_ratios[0]) & (s <= self.noise_batch_ratios[-1])) & (s != 0),
             _range_text("noise-batch ratio", self.noise_batch_ratios, "or 0")),
            ((s == 0) & (self.non_private is None), "the law has no noise-free (σ̄ = 0) data"),
            (~((t >= self.iterations[0]) & (t <= self.iterations[-1])), _range_text("iterations", self.iterations)),
            (~((m >= self.model_sizes[0]) & (m <= self.model_sizes[-1])), _range_text("model size", self.model_sizes)),
        ]
        # Later checks win: model size, then iterations, then σ̄ is the order a user fixes things in.
        for outside, text in checks:
            reasons = np.where(outside & ~np.isfinite(loss), text, reasons)
        return reasons


def _range_text(name: str, axis: np.ndarray, extra: str = "") -> str:
    return f"{name} outside the law's range [{axis[0]:.4g}, {axis[-1]:.4g}]{(' ' + extra) if extra else ''}"


def reason_counts(reasons: np.ndarray) -> dict[str, int]:
    """How many NaN results per reason (the report that accompanies every query)."""
    # Counted as Python objects, then named (a sort of ten thousand fixed-width strings cost a query 4 ms).
    counts: dict[str, int] = {}
    for reason, count in Counter(np.asarray(reasons, dtype=object).ravel().tolist()).items():
        counts[str(reason)] = counts.get(str(reason), 0) + count
    return {reason: counts[reason] for reason in sorted(counts) if reason}
