"""σ on demand (dpscaling.accounting.on_demand) against direct calibration at a δ no table was built for, its
cache, and the narrow-ε slab it relies on."""

from __future__ import annotations

import numpy as np
import pytest

from dpscaling.accounting import sweep
from dpscaling.accounting.calibration import calibrate_poisson
from dpscaling.accounting.pricing import paper_sigma
from dpscaling.accounting.on_demand import OnDemandSigma
from dpscaling.accounting.table_spec import TableSpec


def test_on_demand_sigma_matches_direct_calibration_and_is_cached(tmp_path) -> None:
    messages: list[str] = []
    sigma = OnDemandSigma(1e-6, "min", cache=tmp_path, progress=messages.append)
    rng = np.random.default_rng(3)
    steps = np.round(np.exp(rng.uniform(np.log(60), np.log(1500), 6)))
    rates = np.exp(rng.uniform(np.log(2.0**-9), np.log(2.0**-3), 6))
    found = sigma(4.0, steps, rates)
    assert len(messages) == 1 and "δ = 1e-06" in messages[0]
    for value, t, q in zip(found, steps, rates):
        assert value == pytest.approx(paper_sigma("dpsgd", "min", 4.0, 1e-6, float(q), int(t))[0], rel=5e-3)
    again = OnDemandSigma(1e-6, "min", cache=tmp_path, progress=messages.append)
    np.testing.assert_array_equal(again(4.0, steps, rates), found)
    assert len(messages) == 1  # every slab came from the cache
    assert np.isnan(sigma(4.0, np.array([100.0]), np.array([1.5]))[0])  # q > 1 has no σ


def test_a_narrow_epsilon_range_is_inverted_as_exactly_as_a_wide_one() -> None:
    """A walk that crosses [ε_min, ε_max] in two steps used to invert ε(σ) through three points, 3% low in the
    knee of small q; intervals are now halved until a spline fits."""
    q, steps, delta = 2.0**-13, 2048, 1e-6
    spec = TableSpec(epsilon_min=2.0, epsilon_max=8.0, epsilon_per_octave=4, steps_min=1024, steps_max=4096,
                     q_min_log2=-16, delta=delta)
    slab = sweep.poisson_slab(spec, q).sigma
    row, column = int(np.argmin(np.abs(spec.epsilons() - 4.0))), list(spec.steps()).index(steps)
    assert slab[row, column] == pytest.approx(calibrate_poisson(4.0, q, steps, delta), rel=1e-3)
