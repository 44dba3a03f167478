"""Input checks shared by every accounting entry point.

Each check raises :class:`dpscaling.core.errors.UserError` naming the quantity (the
command line uses the same names for its flags) and the accepted range, so a bad
input never turns into a silent NaN deep inside an accountant.
"""

from __future__ import annotations

import math

from dpscaling.config.schema import default as schema_default
from dpscaling.core.errors import UserError

# Declared once, in the schema (accounting.delta, as the σ table's spec reads it): the command lines and the
# accountants default to the workflow's δ.
DEFAULT_DELTA: float = schema_default("accounting.delta")

# ε above this is numerically meaningless for δ = 1e-8 (σ shrinks below 1e-3 of
# any useful value) and would overflow exp(ε) inside hockey-stick divergences.
MAX_EPSILON = 1e7
# Beyond this many compositions the FFT grids of a PLD exceed a few GB.
MAX_STEPS = 10**8


class AccountingRefused(UserError):
    """A configuration no implemented tight method can account for within memory.

    Raised instead of returning a loose or wrong σ (e.g. the corner of tiny
    sampling probability, many steps and small ε, where the PLD discretisation
    needed for 0.5% accuracy does not fit in memory).
    """


def check_epsilon(epsilon: float, name: str = "epsilon") -> float:
    epsilon = float(epsilon)
    if not (0 < epsilon <= MAX_EPSILON):
        raise UserError(f"{name} must be in (0, {MAX_EPSILON:g}], got {epsilon!r}")
    return epsilon


def check_delta(delta: float, name: str = "delta") -> float:
    delta = float(delta)
    if not (0 < delta < 1):
        raise UserError(f"{name} must be in (0, 1), got {delta!r}")
    return delta


def check_steps(steps: float, name: str = "steps") -> int:
    value = float(steps)
    if not math.isfinite(value) or value != math.floor(value) or not (1 <= value <= MAX_STEPS):
        raise UserError(f"{name} must be an integer in [1, {MAX_STEPS:.0e}], got {steps!r}")
    return int(value)


def check_sampling_probability(q: float, name: str = "sampling probability") -> float:
    q = float(q)
    if not (0 < q <= 1):
        raise UserError(f"{name} (batch/users) must be in (0, 1], got {q!r}")
    return q


def check_sigma(sigma: float, name: str = "sigma") -> float:
    sigma = float(sigma)
    if not (0 < sigma < math.inf):
        raise UserError(f"{name} must be a positive finite number, got {sigma!r}")
    return sigma
