"""Rényi-DP accounting: a fast but LOOSE upper bound, offered only as a named option.

RDP overstates ε by 2–500% at ordinary ε and by orders of magnitude at ε ≈ 2^-7
(measured), so σ from it is valid but too large. Never use it as an oracle.
"""

from __future__ import annotations

import dp_accounting


def poisson_epsilon_rdp(sigma: float, q: float, steps: int, delta: float) -> float:
    """Upper bound on ε for T steps of the Poisson-subsampled Gaussian (dp-accounting RDP)."""
    event = dp_accounting.SelfComposedDpEvent(
        dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), steps)
    accountant = dp_accounting.rdp.RdpAccountant()
    accountant.compose(event)
    return float(accountant.get_epsilon(delta))
