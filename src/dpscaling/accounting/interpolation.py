"""Interpolating the σ(ε, T, q) table (paper §3.4 "Using the Fitted Functions").

Log σ is interpolated over (log ε, log T, log q). Two schemes:

* ``linear``: trilinear in log space, the authors' scheme (up to 4.5% off between
  the nodes of their factor-2 grid).
* ``cubic`` (default): 4-point Lagrange per axis, **at fixed σ across T and q**.
  For each of the 4 × 4 neighbouring (T, q) grid columns, the column's ε(σ) is
  inverted (log ε as a cubic in log σ through its 4 nearest nodes); these log ε
  are combined with the T and q Lagrange weights, and σ is the root of that
  combination minus the query's log ε (secant steps). Why fixed σ: for small q,
  ε(σ) has a knee near σ ≈ 1 whose position in ε moves with T and q;
  interpolating at fixed ε across T and q cuts through it (measured up to 2% off on
  a factor-2 q grid, 0.9% on a factor-2 T grid), at fixed σ it does not (≤ 0.15%).
  Exact at grid points. Where a neighbouring column does not reach the query's σ
  (within one node step), stencils moved by one node are tried; if none works (at
  the ends of the ε range) the query falls back to tensor-product cubic
  interpolation at fixed ε — hence the default table starts an octave below the
  smallest ε queried.

Refused (NaN) cells within a stencil make the result NaN, except where their
weight is exactly 0 (so grid points stay exact next to refused cells). One jump
is not interpolable at all and is refused instead: :func:`across_participation_jump`.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import stats

STENCIL_SIZES = {"linear": 2, "cubic": 4}
_QUERY_BLOCK = 4096            # queries per vectorised block (16 columns × n_ε values each)
_SECANT_STEPS = 40
_SECANT_TOLERANCE = 1e-12      # in log σ
# Where the chance that an example takes part in ≥ 2 of the T steps crosses δ
# (q·T ≈ √(2δ): T ≲ 150 and q ≲ 2^-19.4 for δ = 1e-8), the Poisson σ at large ε jumps:
# on one side the accountant pays for one participation (σ ≈ 0.9× the deterministic σ),
# on the other for two. Interpolating across it was measured up to 8% off for
# ε ≥ 64 and < 1e-4 for ε ≤ 16, so queries from this ε up whose stencil straddles
# the jump are refused.
JUMP_EPSILON = 32.0
# More such jumps (k → k + 1 participations, k ≥ 2) sit where the Poisson σ is above the
# deterministic one: measured on the default grid, the Poisson branch alone is up to 9%
# off where ε ≥ 100, q·T < 10 and σ_Poisson ≥ 1.1·σ_deterministic, and ≤ 0.35% elsewhere
# (off the ε_min edge). The Poisson branch refuses those queries; the min rule uses
# σ_deterministic there.
NEAR_STEP_EPSILON = 100.0
NEAR_STEP_PARTICIPATIONS = 10.0
NEAR_STEP_RATIO = 1.1


def lagrange_stencil(axis: np.ndarray, x: np.ndarray, size: int, shift: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Node indices and Lagrange weights, shape (len(x), size), of the ``size`` nodes around
    each x's grid cell (moved by ``shift`` nodes, and inwards at the edges; a cubic stencil
    moved by ±1 still contains the cell). A node's own weight is exactly 1 there."""
    size = min(size, len(axis))
    cell = np.clip(np.searchsorted(axis, x, side="right") - 1, 0, len(axis) - 2)
    start = np.clip(cell - (size // 2 - 1) + shift, 0, len(axis) - size)
    index = start[:, None] + np.arange(size)
    return index, _lagrange_weights(axis[index], x)


def _lagrange_weights(nodes: np.ndarray, x: np.ndarray) -> np.ndarray:
    """Weights (…, size) of the Lagrange polynomial through ``nodes`` (…, size) at x (…)."""
    weights = np.ones_like(nodes)
    size = nodes.shape[-1]
    with np.errstate(divide="ignore", invalid="ignore"):
        for k in range(size):
            for m in range(size):
                if m != k:
                    weights[..., k] *= (x - nodes[..., m]) / (nodes[..., k] - nodes[..., m])
    return weights


def _weighted_sum(weights: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Σ weights·values over the last axis, ignoring values whose weight is exactly 0."""
    return np.where(weights == 0, 0.0, weights * values).sum(axis=-1)


def fixed_epsilon(cube: np.ndarray, axes: tuple[np.ndarray, ...], points: np.ndarray, size: int) -> np.ndarray:
    """Tensor-product Lagrange interpolation of ``cube`` at ``points`` (m × 3, inside the axes)."""
    (i, wi), (j, wj), (k, wk) = (lagrange_stencil(axis, points[:, n], size) for n, axis in enumerate(axes))
    values = cube[i[:, :, None, None], j[:, None, :, None], k[:, None, None, :]]
    weights = wi[:, :, None, None] * wj[:, None, :, None] * wk[:, None, None, :]
    return _weighted_sum(weights.reshape(len(points), -1), values.reshape(len(points), -1))


def _first_not_above(flat: np.ndarray, base: np.ndarray, n: int, y: np.ndarray) -> np.ndarray:
    """Per column (values ``flat[base + 0..n-1]``, decreasing), the index of the first value
    ≤ y (NaN counts as above: refused cells sit at the small-ε, large-σ end)."""
    low = np.zeros(len(base), dtype=np.int64)
    high = np.full(len(base), n, dtype=np.int64)
    for _ in range(int(np.ceil(np.log2(n + 1)))):
        middle = (low + high) // 2
        not_above = flat[base + np.minimum(middle, n - 1)] <= y
        moving = low < high
        high = np.where(moving & not_above, middle, high)
        low = np.where(moving & ~not_above, middle + 1, low)
    return low


def _column_log_epsilon(flat: np.ndarray, base: np.ndarray, log_eps: np.ndarray, y: np.ndarray) -> np.ndarray:
    """log ε at which each column (log σ at ``flat[base + 0..n_ε-1]``, decreasing) takes the
    value y, by cubic inverse interpolation; NaN if the stencil has NaN or y lies beyond a
    column's end by more than its last step (near the knee an extrapolated ε(σ) is meaningless)."""
    n = len(log_eps)
    size = min(4, n)
    first = _first_not_above(flat, base, n, y)
    start = np.clip(first - size // 2, 0, n - size)
    index = start[:, None] + np.arange(size)
    nodes = flat[base[:, None] + index]
    result = (_lagrange_weights(nodes, y) * log_eps[index]).sum(axis=-1)
    top, second, last, before = (flat[base + i] for i in (0, 1, n - 1, n - 2))
    beyond = ((first == 0) & (y - top > top - second)) | ((first == n) & (last - y > before - last))
    return np.where(beyond, np.nan, result)


def _fixed_sigma(cube: np.ndarray, axes: tuple[np.ndarray, ...], points: np.ndarray, start: np.ndarray,
                 shifts: tuple[int, int]) -> np.ndarray:
    """log σ by cubic interpolation at fixed σ with the T and q stencils moved by ``shifts``;
    NaN where a column does not reach the σ or the secant steps do not converge."""
    log_eps = axes[0]
    n = len(log_eps)
    (j, wj), (k, wk) = (lagrange_stencil(axes[a], points[:, a], 4, shift) for a, shift in zip((1, 2), shifts))
    columns = np.ascontiguousarray(np.moveaxis(cube[:, j[:, :, None], k[:, None, :]], 0, -1))
    per_query = columns.shape[1] * columns.shape[2]
    flat = columns.ravel()
    weights = (wj[:, :, None] * wk[:, None, :]).reshape(len(points), per_query)

    def gap(rows: np.ndarray, y: np.ndarray) -> np.ndarray:
        base = ((rows[:, None] * per_query + np.arange(per_query)) * n).ravel()
        log_epsilon = _column_log_epsilon(flat, base, log_eps, np.repeat(y, per_query))
        return _weighted_sum(weights[rows], log_epsilon.reshape(len(rows), per_query)) - points[rows, 0]

    everyone = np.arange(len(points))
    y0, y1 = start.copy(), start + 1e-3
    g0, g1 = gap(everyone, y0), gap(everyone, y1)
    active = everyone[np.isfinite(g0) & np.isfinite(g1)]
    converged = np.zeros(len(points), dtype=bool)
    for _ in range(_SECANT_STEPS):
        if active.size == 0:
            break
        with np.errstate(divide="ignore", invalid="ignore"):
            slope = (g1[active] - g0[active]) / (y1[active] - y0[active])
            step = np.where((g1[active] == 0) | (slope == 0), 0.0, g1[active] / slope)
        y0[active], g0[active] = y1[active], g1[active]
        y1[active] -= step
        g1[active] = gap(active, y1[active])
        done = np.abs(step) <= _SECANT_TOLERANCE
        converged[active[done & np.isfinite(g1[active])]] = True
        active = active[~done & np.isfinite(g1[active])]
    return np.where(converged, y1, np.nan)


# Stencil placements tried in turn (T shift, q shift): centred first; near the knee a
# centred stencil can include a column that never reaches the query's σ in the ε range.
_PLACEMENTS = ((0, 0), (0, 1), (0, -1), (1, 0), (-1, 0), (1, 1), (-1, -1), (1, -1), (-1, 1))


def interpolate(cube: np.ndarray, axes: tuple[np.ndarray, ...], points: np.ndarray, method: str) -> np.ndarray:
    """log σ at ``points`` (m × 3 of log ε, log T, log q, inside the axes) from ``cube`` of log σ."""
    size = STENCIL_SIZES[method]
    result = np.empty(len(points))
    for begin in range(0, len(points), _QUERY_BLOCK):
        block = points[begin:begin + _QUERY_BLOCK]
        fallback = fixed_epsilon(cube, axes, block, size)
        if method == "cubic" and len(axes[0]) >= 4:
            start = np.where(np.isfinite(fallback), fallback, fixed_epsilon(cube, axes, block, 2))
            value = np.full(len(block), np.nan)
            for shifts in _PLACEMENTS:
                todo = np.flatnonzero(np.isnan(value) & np.isfinite(start))
                if todo.size == 0:
                    break
                value[todo] = _fixed_sigma(cube, axes, block[todo], start[todo], shifts)
            fallback = np.where(np.isnan(value), fallback, value)
        result[begin:begin + _QUERY_BLOCK] = fallback
    return result


def across_participation_jump(axes: tuple[np.ndarray, ...], points: np.ndarray, delta: float) -> np.ndarray:
    """Queries (rows of log ε, log T, log q) with ε ≥ JUMP_EPSILON whose cubic T and q
    stencils have nodes on both sides of P(Binomial(T, q) ≥ 2) = δ."""
    (steps_index, _), (q_index, _) = (lagrange_stencil(axes[n], points[:, n], 4) for n in (1, 2))
    steps, qs = np.round(np.exp(axes[1])), np.exp(axes[2])
    below = stats.binom.sf(1, steps[steps_index[:, 0]], qs[q_index[:, 0]]) < delta
    above = stats.binom.sf(1, steps[steps_index[:, -1]], qs[q_index[:, -1]]) > delta
    return (points[:, 0] >= math.log(JUMP_EPSILON)) & below & above


def near_participation_steps(epsilon: np.ndarray, participations: np.ndarray, poisson: np.ndarray,
                             deterministic: np.ndarray) -> np.ndarray:
    """Poisson-branch queries in the regime of near-steps (see NEAR_STEP_RATIO);
    ``participations`` is the expected count q·T."""
    with np.errstate(invalid="ignore"):
        return ((epsilon >= NEAR_STEP_EPSILON) & (participations < NEAR_STEP_PARTICIPATIONS)
                & (poisson >= NEAR_STEP_RATIO * deterministic))
