"""ε(δ) of a discretised privacy-loss distribution, vectorised.

dp-accounting's ``get_epsilon_for_delta`` walks the loss grid in a Python loop
from the top; at large ε (10^3–10^6) that loop visits millions of bins. This
computes the same quantity — the smallest ε ≥ 0 with hockey-stick divergence
δ(ε) ≤ δ — with a linear recurrence over the grid (scipy ``lfilter``); tests
compare it against dp-accounting. Where e^{-ε} underflows (ε ≳ 745)
dp-accounting's loop returns the grid point above the root; this returns the
root itself.

For a grid l_i with masses p_i and infinite-loss mass p_∞:
δ(ε) = p_∞ + Σ_{l_j > ε} p_j (1 − e^{ε − l_j}). Between neighbouring grid
points the set {l_j > ε} is fixed, so with S_i = Σ_{j>i} p_j and
R_i = Σ_{j>i} p_j e^{l_i − l_j} (R_i = e^{−Δ}(R_{i+1} + p_{i+1}); every term ≤ 1,
so nothing overflows at ε = 1e6): δ(l_i) = p_∞ + S_i − R_i, and on
[l_i, l_{i+1}) the root is ε = l_i + log((p_∞ + S_i − δ)/R_i).
"""

from __future__ import annotations

import math

import numpy as np
from dp_accounting.pld.privacy_loss_distribution import PrivacyLossDistribution
from scipy import signal

from dpscaling.accounting.composition import DiscreteLosses, directions


def _tail_sums(tail: np.ndarray, step: float) -> tuple[np.ndarray, np.ndarray]:
    """(S_i, R_i) for i over `tail` (losses spaced by `step`)."""
    decay = math.exp(-step)
    reversed_tail = tail[::-1]
    # y[n] = decay·y[n−1] + decay·x[n−1] over the reversed array gives R.
    r = signal.lfilter([0.0, decay], [1.0, -decay], reversed_tail)[::-1]
    s = np.concatenate((np.cumsum(reversed_tail)[::-1][1:], [0.0]))
    return s, r


def losses_epsilon_for_delta(losses: DiscreteLosses, delta: float) -> float:
    if losses.infinity_mass > delta:
        return math.inf
    first = max(0, -losses.lower)  # only losses ≥ 0 matter for ε ≥ 0
    tail = losses.probs[first:]
    if tail.size == 0:
        return 0.0
    start = losses.lower + first
    s, r = _tail_sums(tail, losses.step)
    grid = (start + np.arange(tail.size)) * losses.step
    delta_at = losses.infinity_mass + s - r
    if start > 0:  # grid starts above 0: treat [0, l_0) with all of `tail` above ε
        s0, r0 = s[0] + tail[0], (r[0] + tail[0]) * math.exp(-grid[0])
        if losses.infinity_mass + s0 - r0 <= delta:
            return 0.0
        if delta_at[0] <= delta:
            return float(math.log((losses.infinity_mass + s0 - delta) / r0))
    elif delta_at[0] <= delta:
        return 0.0
    i = int(np.flatnonzero(delta_at > delta)[-1])  # δ(l_i) > δ ≥ δ(l_{i+1})
    if r[i] <= 0:
        return float(grid[i])
    return float(grid[i] + math.log((losses.infinity_mass + s[i] - delta) / r[i]))


def losses_delta_for_epsilon(losses: DiscreteLosses, epsilon: float) -> float:
    """δ(ε) = p_∞ + Σ_{l > ε} p (1 − e^{ε − l}) (dp-accounting's formula, one dot product)."""
    grid = (losses.lower + np.arange(losses.probs.size)) * losses.step
    above = grid > epsilon
    return float(losses.infinity_mass + np.dot(losses.probs[above], -np.expm1(epsilon - grid[above])))


def epsilon_for_delta(pld: PrivacyLossDistribution | list[DiscreteLosses], delta: float) -> float:
    """Smallest ε ≥ 0 with δ(ε) ≤ δ, maximised over both adjacency directions."""
    parts = directions(pld) if isinstance(pld, PrivacyLossDistribution) else pld
    return max(losses_epsilon_for_delta(part, delta) for part in parts)
