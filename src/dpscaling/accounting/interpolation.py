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
    _, n_j, n_k = cube.shape  # one flat gather: the same values as cube[i, j, k] broadcast, at a third of its cost
    values = np.take(cube, (i[:, :, None, None] * n_j + j[:, None, :, None]) * n_k + k[:, None, None, :])
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


class Columns:
    """What every fixed-σ query reads of the cube, built once per table:

    * its columns with ε last, (n_T, n_q, n_ε) contiguous, read in place;
    * the keys that find where each column crosses a σ with one ``searchsorted`` instead of a bisection per
      column: col·K − log σ, increasing along the whole array when every column is non-increasing after its
      refused (NaN) prefix, NaN keyed below the column's finite values (without that order the bisection
      stands);
    * for every column and cubic stencil, the inverse cubic log ε(log σ) in Newton form (its divided
      differences and first three nodes), so that a query evaluates it with three multiply-adds: the same
      polynomial as the Lagrange form through the same four nodes, to rounding.
    """

    def __init__(self, cube: np.ndarray, log_eps: np.ndarray):
        self.values = np.ascontiguousarray(np.moveaxis(cube, 0, -1))
        columns = self.values.reshape(-1, self.values.shape[-1])
        n = columns.shape[1]
        self.newton = None
        if n >= 4:
            stencil = np.arange(n - 3)[:, None] + np.arange(4)
            y, x = columns[:, stencil], np.broadcast_to(log_eps[stencil], (len(columns), n - 3, 4))
            with np.errstate(divide="ignore", invalid="ignore"):
                first = [(x[..., i + 1] - x[..., i]) / (y[..., i + 1] - y[..., i]) for i in range(3)]
                second = [(first[i + 1] - first[i]) / (y[..., i + 2] - y[..., i]) for i in range(2)]
                third = (second[1] - second[0]) / (y[..., 3] - y[..., 0])
            # one flat array per coefficient: a query gathers each with np.take (3× a row gather's speed)
            self.newton = tuple(np.ascontiguousarray(part).ravel() for part in (
                x[..., 0], first[0], second[0], third, y[..., 0], y[..., 1], y[..., 2]))
        finite = np.isfinite(columns)
        self.bound = float(np.max(np.abs(columns[finite]))) + 1.0 if finite.any() else 1.0
        prefix = np.cumsum(finite, axis=1) == 0  # NaN before the first finite value
        above = np.where(finite, columns, self.bound)  # the prefix above every finite value
        ordered = bool(np.all(finite | prefix)) and bool(np.all(np.diff(above, axis=1) <= 0))
        self.spacing = 2.0 * self.bound + 2.0
        if ordered:
            offsets = np.arange(len(columns))[:, None] * self.spacing
            self.keys = (offsets - np.where(finite, columns, self.bound + 0.5)).ravel()
        else:
            self.keys = None

    def first_not_above(self, column: np.ndarray, y: np.ndarray, guess: np.ndarray | None = None) -> np.ndarray:
        """Per column (its index in the flattened (n_T, n_q) grid), the index of the first value ≤ y (NaN
        counts as above), as :func:`_first_not_above`. ``guess``: an index found for a nearby y (the root
        search's previous step), kept where it still brackets y (two reads instead of a search)."""
        n = self.values.shape[-1]
        base = column * n
        if self.keys is None:
            return _first_not_above(self.values.ravel(), base, n, y)
        if guess is not None:
            flat = self.values.ravel()
            below = np.take(flat, base + np.minimum(guess, n - 1)) <= y  # the guess's value is not above y
            above = ~(np.take(flat, base + np.maximum(guess - 1, 0)) <= y)  # the one before it is
            kept = ((guess == n) | below) & ((guess == 0) | above)
            stale = np.flatnonzero(~kept)
            if stale.size == 0:
                return guess
            found = guess.copy()
            found[stale] = self.first_not_above(column[stale], y[stale])
            return found
        wanted = column * self.spacing - np.clip(y, -self.bound + 0.5, self.bound - 0.5)
        found = np.searchsorted(self.keys, wanted, side="left") - base
        return np.where(np.isnan(y), n, np.clip(found, 0, n))


def _column_log_epsilon(columns: Columns, column: np.ndarray, log_eps: np.ndarray, y: np.ndarray,
                        guess: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """log ε at which each column (log σ along ε, decreasing; ``column`` its index) takes the
    value y, by cubic inverse interpolation; NaN if the stencil has NaN or y lies beyond a
    column's end by more than its last step (near the knee an extrapolated ε(σ) is meaningless).
    Returns (log ε, each column's first node not above y; ``guess``: a nearby y's, see
    :meth:`Columns.first_not_above`)."""
    n = len(log_eps)
    size = min(4, n)
    flat, base = columns.values.ravel(), column * n
    first = columns.first_not_above(column, y, guess)
    start = np.clip(first - size // 2, 0, n - size)
    if columns.newton is not None:  # the Newton form of the same cubic (Columns)
        at = column * (n - 3) + start
        x0, f1, f2, f3, y0, y1, y2 = (np.take(part, at) for part in columns.newton)
        result = ((f3 * (y - y2) + f2) * (y - y1) + f1) * (y - y0) + x0
    else:
        index = start[:, None] + np.arange(size)
        result = (_lagrange_weights(flat[base[:, None] + index], y) * log_eps[index]).sum(axis=-1)
    for end, (edge, inner), outside in ((0, (0, 1), lambda edge, inner, y: y - edge > edge - inner),
                                         (n, (n - 1, n - 2), lambda edge, inner, y: edge - y > inner - edge)):
        at = np.flatnonzero(first == end)  # only a column's ends can be overshot
        if at.size:
            edge_values, inner_values = flat[base[at] + edge], flat[base[at] + inner]
            result[at[outside(edge_values, inner_values, y[at])]] = np.nan
    return result, first


def _fixed_sigma(columns: Columns, axes: tuple[np.ndarray, ...], points: np.ndarray, start: np.ndarray,
                 shifts: tuple[int, int]) -> np.ndarray:
    """log σ by cubic interpolation at fixed σ with the T and q stencils moved by ``shifts``;
    NaN where a column does not reach the σ or the secant steps do not converge. ``columns``: the cube with ε
    last, read in place (a query's 16 columns are never copied out: the table fits a cache). Each step finds
    a column's node around the new σ from the last step's (:meth:`Columns.first_not_above`): the same nodes,
    fewer searches."""
    log_eps = axes[0]
    n_q = columns.values.shape[1]
    (j, wj), (k, wk) = (lagrange_stencil(axes[a], points[:, a], 4, shift) for a, shift in zip((1, 2), shifts))
    per_query = j.shape[1] * k.shape[1]
    column = (j[:, :, None] * n_q + k[:, None, :]).reshape(len(points), per_query)
    weights = (wj[:, :, None] * wk[:, None, :]).reshape(len(points), per_query)
    nodes = np.empty((len(points), per_query), dtype=np.int64)  # each column's node at the last σ tried

    def gap(rows: np.ndarray, y: np.ndarray, guess: bool = True) -> np.ndarray:
        log_epsilon, first = _column_log_epsilon(columns, column[rows].ravel(), log_eps, np.repeat(y, per_query),
                                                 nodes[rows].ravel() if guess else None)
        nodes[rows] = first.reshape(len(rows), per_query)
        return _weighted_sum(weights[rows], log_epsilon.reshape(len(rows), per_query)) - points[rows, 0]

    everyone = np.arange(len(points))
    y0, y1 = start.copy(), start + 1e-3
    g0, g1 = gap(everyone, y0, guess=False), gap(everyone, y1)
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


def interpolate(cube: np.ndarray, axes: tuple[np.ndarray, ...], points: np.ndarray, method: str,
                columns: Columns | None = None) -> np.ndarray:
    """log σ at ``points`` (m × 3 of log ε, log T, log q, inside the axes) from ``cube`` of log σ (``columns``:
    its :class:`Columns`, built once by a caller that asks many times)."""
    size = STENCIL_SIZES[method]
    result = np.empty(len(points))
    if method == "cubic" and columns is None:
        columns = Columns(cube, axes[0])
    for begin in range(0, len(points), _QUERY_BLOCK):
        block = points[begin:begin + _QUERY_BLOCK]
        fallback = fixed_epsilon(cube, axes, block, size)
        if method == "cubic" and len(axes[0]) >= 4:
            start = fallback.copy()
            missing = np.flatnonzero(~np.isfinite(fallback))  # the linear start only where the cubic has none
            if missing.size:
                start[missing] = fixed_epsilon(cube, axes, block[missing], 2)
            value = np.full(len(block), np.nan)
            for shifts in _PLACEMENTS:
                todo = np.flatnonzero(np.isnan(value) & np.isfinite(start))
                if todo.size == 0:
                    break
                value[todo] = _fixed_sigma(columns, axes, block[todo], start[todo], shifts)
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
