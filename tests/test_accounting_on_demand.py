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


# One small query: ε 4, T 100, q 0.1 (four slabs of a few step counts: seconds).
SLAB_QUERY = "import sys; from dpscaling.accounting.on_demand import OnDemandSigma; " \
             "print(repr(float(OnDemandSigma(1e-6, 'poisson', cache=sys.argv[1])(4.0, 100.0, 0.1))))"


def test_two_processes_building_one_slab_both_succeed_and_compute_it_once(tmp_path) -> None:
    """Two processes asking one fresh cache for the same slabs at once: the second waits for the first's lock and
    reads what it built; both answer, with the same σ, and no temporary or second copy is left behind."""
    import subprocess
    import sys

    started = [subprocess.Popen([sys.executable, "-c", SLAB_QUERY, str(tmp_path)], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True) for _ in range(2)]
    finished = [process.communicate(timeout=300) for process in started]
    assert [process.returncode for process in started] == [0, 0], [err for _, err in finished]
    sigmas = {float(out) for out, _ in finished}
    assert len(sigmas) == 1
    slabs = sorted(tmp_path.rglob("*.parquet"))
    assert slabs and not [path for path in tmp_path.rglob(".*tmp-*")]
    assert sigmas.pop() == pytest.approx(calibrate_poisson(4.0, 0.1, 100, 1e-6), rel=5e-3)


def test_a_slab_recorded_under_other_settings_is_rebuilt(tmp_path) -> None:
    """A slab whose recorded key differs from the one it is asked for (here: written by code with another
    discretisation, its σ halved) is not served: it is rebuilt, and the cache then holds the right key."""
    import json

    import pyarrow.parquet as pq

    from dpscaling.accounting.on_demand import SLAB_KEY_METADATA, read_slab, slab_key
    from dpscaling.accounting.table import read_frame, save_table

    sigma = OnDemandSigma(1e-6, "poisson", cache=tmp_path)
    right = float(sigma(4.0, 100.0, 0.1))
    path = min(tmp_path.rglob("*.parquet"))
    frame, spec = read_frame(path)
    key = json.loads(pq.read_schema(path).metadata[SLAB_KEY_METADATA])
    assert read_slab(path, key) is not None and key == json.loads(json.dumps(slab_key(spec, key["sampling_probability"])))
    planted = {**key, "grid": {**key["grid"], "discretisation_fraction": 3e-3}}
    save_table(frame.assign(sigma=frame["sigma"] / 2), path, spec,
               metadata={SLAB_KEY_METADATA: json.dumps(planted).encode()})
    assert read_slab(path, key) is None  # the recorded settings are not the key's: refused
    assert float(OnDemandSigma(1e-6, "poisson", cache=tmp_path)(4.0, 100.0, 0.1)) == right
    assert read_slab(path, key) is not None  # rebuilt under its own key


def test_a_slab_s_key_covers_the_code_and_libraries_that_compute_it() -> None:
    """Every module of the slab's computation is in its key's code digest, so a changed constant gets new slabs."""
    import importlib

    from dpscaling.accounting import on_demand

    spec = TableSpec(epsilon_min=1.0, epsilon_max=8.0, steps_min=10, steps_max=100, q_min_log2=-4)
    key = on_demand.slab_key(spec, 0.25)
    assert {"code_sha256", "dp-accounting", "numpy", "scipy"} <= key.keys() and key["sampling_probability"] == 0.25
    used = {name.rsplit(".", 1)[-1] for name in ("dpscaling.accounting.sweep", "dpscaling.accounting.pld",
                                                  "dpscaling.accounting.user_level", "dpscaling.accounting.table")}
    assert used <= set(on_demand.SLAB_CODE)
    for name in on_demand.SLAB_CODE:
        importlib.import_module(f"dpscaling.accounting.{name}")
