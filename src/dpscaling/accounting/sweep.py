"""σ for a whole (ε × T) slab at one sampling probability, from few PLD builds.

The structure exploited (issue 4 "Speed"): for fixed q, ε(σ, T) is monotone in
σ and smooth in log–log. So instead of a root search per grid point, walk σ over
a geometric lattice σ_j = 2^(j/r); each single-step PLD (built once per σ_j,
cached across T) is composed T-fold by one FFT exponentiation in dp-accounting
and gives ε(σ_j, T) at δ. For each T, a cubic spline of log σ against log ε
through the lattice points is then evaluated at every grid ε at once. The walk
for each T starts from the warm start and extends only until the lattice
brackets [ε_min, ε_max], so every composition is used.

Where a lattice σ cannot be accounted for (single-step PLD over the memory cap:
the tiny-q / many-steps / small-ε corner), the walk stops there and grid points
left outside the bracketed range are reported as refused, never extrapolated.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
from scipy import interpolate

from dpscaling.accounting import calibration, composition, gaussian, pld, rdp
from dpscaling.accounting.table_spec import TableSpec
from dpscaling.accounting.validation import AccountingRefused

# σ below this is not meaningful for any tabulated ε (≈ 1e-3 at ε = 1e6, T = 100).
_SIGMA_FLOOR = 2.0**-14
_SIGMA_CEILING = 2.0**30
# Lattice points beyond each end of the ε range, so the spline is not extrapolating
# its end slope from one side.
_EXTRA_POINTS = 1
# Single-step PLDs kept between T values (each ≤ max_points bins, two directions).
_CACHE_BYTES = 1_500_000_000


@dataclass
class SlabResult:
    sigma: np.ndarray          # shape (n_epsilon, n_steps); NaN where refused
    compositions: int          # PLD compositions performed
    builds: int                # single-step PLDs built


class _PldCurve:
    """ε(σ_j, T) on the lattice σ_j = 2^(j/r), with an LRU cache of single-step PLDs.

    Discretisation follows the same rule as direct calibration: a fraction of
    the smaller of one step's loss spread and μ/√T, μ the GDP-equivalent of the
    resulting (ε, δ). μ is only known after composing, so a σ is first built at
    the spread-based interval and rebuilt finer when the result asks for it.
    Intervals are rounded down to powers of two so rebuilt PLDs are shared
    across T.
    """

    def __init__(self, q: float, spec: TableSpec):
        self.q, self.spec = q, spec
        self.cache: OrderedDict[tuple[int, int], object] = OrderedDict()
        self.cached_bytes = 0
        self.compositions = self.builds = self.refinements = 0

    def sigma(self, j: int) -> float:
        return 2.0 ** (j / self.spec.sigma_per_octave)

    @staticmethod
    def _bytes(built: object) -> int:
        if isinstance(built, AccountingRefused):
            return 0
        return 8 * sum(part.probs.size for part in composition.directions(built))

    def _single_step(self, j: int, level: int | None):
        sigma = self.sigma(j)
        if level is None:
            try:
                interval = pld.choose_discretisation(
                    sigma, self.q, fraction=self.spec.discretisation_fraction,
                    max_points=self.spec.max_points).interval
            except AccountingRefused as refusal:
                return refusal
            level = math.floor(math.log2(interval))
        key = (j, level)
        if key in self.cache:
            self.cache.move_to_end(key)
            return self.cache[key]
        try:
            built = pld.poisson_gaussian_pld(sigma, self.q, 2.0**level)
            self.builds += 1
        except (ValueError, OverflowError, MemoryError) as failure:
            built = AccountingRefused(f"PLD build failed at sigma={sigma:g}: {failure}")
        self.cache[key] = built
        self.cached_bytes += self._bytes(built)
        while self.cached_bytes > _CACHE_BYTES and len(self.cache) > 1:
            _, old = self.cache.popitem(last=False)
            self.cached_bytes -= self._bytes(old)
        return built

    def _epsilon(self, single, steps: int) -> float | None:
        if isinstance(single, AccountingRefused):
            return None
        self.compositions += 1
        try:
            return pld.composed_epsilon(single, steps, self.spec.delta)
        except AccountingRefused:
            return None

    def __call__(self, j: int, steps: int) -> float | None:
        """ε at δ, or None if this σ is refused."""
        single = self._single_step(j, None)
        epsilon = self._epsilon(single, steps)
        if epsilon is None or not 0 < epsilon < math.inf:
            return epsilon
        used = composition.directions(single)[0].step
        wanted = self.spec.discretisation_fraction * gaussian.gdp_mu(epsilon, self.spec.delta) / math.sqrt(steps)
        # (Accepting up to 2× coarser saved only 6% of compositions at q = 2^-4.)
        if used <= wanted:
            return epsilon
        self.refinements += 1
        if wanted < pld.MIN_DISCRETISATION:
            return None
        return self._epsilon(self._single_step(j, math.floor(math.log2(wanted))), steps)


class _RdpCurve(_PldCurve):
    def __call__(self, j: int, steps: int) -> float | None:
        self.compositions += 1
        return rdp.poisson_epsilon_rdp(self.sigma(j), self.q, steps, self.spec.delta)


def _walk(curve: Callable[[int, int], float | None], start: int, steps: int,
          epsilon_min: float, epsilon_max: float, sigma_per_octave: int) -> dict[int, float]:
    """Lattice points around `start` until ε_min and ε_max are both bracketed (or refused)."""
    points: dict[int, float] = {}
    floor = math.floor(math.log2(_SIGMA_FLOOR) * sigma_per_octave)
    ceiling = math.ceil(math.log2(_SIGMA_CEILING) * sigma_per_octave)
    for direction, beyond in ((+1, lambda e: e < epsilon_min), (-1, lambda e: e > epsilon_max)):
        j, extra = start if direction > 0 else start - 1, 0
        while floor <= j <= ceiling:
            epsilon = curve(j, steps)
            if epsilon is None:
                # A refused warm start (tiny q: the PLD at moderate σ is too fine to
                # build) must not hide the feasible smaller σ of larger ε.
                if direction < 0 and not points:
                    j += direction
                    continue
                break
            points[j] = epsilon
            if epsilon == 0 or math.isinf(epsilon):
                break
            if beyond(epsilon):
                extra += 1
                if extra > _EXTRA_POINTS:
                    break
            j += direction
    return points


def _invert(points: dict[int, float], epsilons: np.ndarray, sigma_per_octave: int) -> np.ndarray:
    """log σ as a cubic spline of log ε through the lattice points; NaN outside them."""
    usable = sorted((math.log(e), j / sigma_per_octave * math.log(2))
                    for j, e in points.items() if 0 < e < math.inf)
    # ε must fall strictly as σ rises; drop points where discretisation noise breaks this.
    x, y = [], []
    for log_e, log_s in usable:
        if not x or (log_e > x[-1] and log_s < y[-1]):
            x.append(log_e)
            y.append(log_s)
    result = np.full(len(epsilons), np.nan)
    if len(x) < 2:
        return result
    log_eps = np.log(epsilons)
    inside = (log_eps >= x[0]) & (log_eps <= x[-1])
    if len(x) >= 4:
        result[inside] = np.exp(interpolate.CubicSpline(x, y)(log_eps[inside]))
    else:
        result[inside] = np.exp(np.interp(log_eps[inside], x, y))
    return result


def poisson_slab(spec: TableSpec, q: float) -> SlabResult:
    """Poisson σ for every (ε, T) of ``spec`` at sampling probability ``q``."""
    epsilons, steps_grid = spec.epsilons(), spec.steps()
    sigma = np.full((len(epsilons), len(steps_grid)), np.nan)
    if q == 1.0:  # no subsampling: exactly the Gaussian closed form
        for i, epsilon in enumerate(epsilons):
            sigma[i] = np.sqrt(steps_grid) * gaussian.analytic_gaussian_sigma(float(epsilon), spec.delta)
        return SlabResult(sigma, 0, 0)
    curve = (_RdpCurve if spec.accountant == "rdp" else _PldCurve)(q, spec)
    middle_epsilon = math.sqrt(spec.epsilon_min * spec.epsilon_max)
    for k, steps in enumerate(steps_grid):
        steps = int(steps)
        warm = calibration.poisson_warm_start(middle_epsilon, spec.delta, q, steps)
        start = round(math.log2(warm) * spec.sigma_per_octave)
        points = _walk(curve, start, steps, spec.epsilon_min, spec.epsilon_max, spec.sigma_per_octave)
        sigma[:, k] = _invert(points, epsilons, spec.sigma_per_octave)
    return SlabResult(sigma, curve.compositions, curve.builds)
