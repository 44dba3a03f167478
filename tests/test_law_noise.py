"""σ from the authors' accounting-table format (paper §3.4; docs/fit.md, 'The authors' analysis code', step 7)."""

from __future__ import annotations

import numpy as np
import pytest

from dpscaling.core.errors import UserError
from dpscaling.law.noise import TableSigma, read_accounting_csv, sigma_from_tables
from dpscaling.law.synthetic import DeterministicGaussianSigma, accounting_table

EPSILONS, ITERATIONS, QS = 2.0 ** np.arange(-2, 5), np.geomspace(100, 128_000, 12), 2.0 ** np.arange(-20, 1)


def test_exact_at_grid_points_and_log_linear_between(tmp_path) -> None:
    gaussian = DeterministicGaussianSigma()
    path = tmp_path / "unamplified.csv"
    accounting_table(gaussian, EPSILONS, ITERATIONS, QS).to_csv(path, header=False, index=False)
    table = read_accounting_csv(path)
    sigma = TableSigma.from_table(table)
    np.testing.assert_allclose(sigma(table["Epsilon"], table["Iterations"], table["Sampling Probability"]),
                               table["Noise Multiplier"], rtol=1e-12)
    # σ ∝ √(qT) when qT ≥ 1 is linear in log T, so log-log interpolation is exact there
    np.testing.assert_allclose(sigma(4.0, 3000.0, 2.0**-3), gaussian(4.0, 3000.0, 2.0**-3), rtol=1e-9)
    assert np.isnan(sigma(2.0**10, 3000.0, 0.5))  # ε outside the table


def test_incomplete_grid_and_mixed_delta_are_refused() -> None:
    table = accounting_table(DeterministicGaussianSigma(), EPSILONS, ITERATIONS, QS)
    with pytest.raises(UserError, match="complete"):
        TableSigma.from_table(table.iloc[1:])
    other = accounting_table(DeterministicGaussianSigma(delta=1e-6), EPSILONS, ITERATIONS, QS)
    with pytest.raises(UserError, match="delta"):
        sigma_from_tables(table, other)


def test_paper_takes_the_lower_sigma_reference_only_the_amplified_table() -> None:
    unamplified = accounting_table(DeterministicGaussianSigma(), EPSILONS, ITERATIONS, QS)
    amplified = unamplified.assign(**{"Noise Multiplier": unamplified["Noise Multiplier"] * 1.5})
    amplified.loc[amplified["Epsilon"] == 1.0, "Noise Multiplier"] /= 3  # amplified lower here only
    paper, delta = sigma_from_tables(amplified, unamplified, "min")
    reference, _ = sigma_from_tables(amplified, unamplified, "amplified")
    assert delta == 1e-8
    both = DeterministicGaussianSigma()(np.array([1.0, 4.0]), 1000.0, 2.0**-5)
    np.testing.assert_allclose(paper([1.0, 4.0], 1000.0, 2.0**-5), [both[0] * 0.5, both[1]], rtol=1e-9)
    np.testing.assert_allclose(reference([1.0, 4.0], 1000.0, 2.0**-5), [both[0] * 0.5, both[1] * 1.5], rtol=1e-9)


def test_refused_cells_of_dpscaling_exports_read_as_nan_near_them(tmp_path) -> None:
    """dpscaling's accounting export writes refused Poisson cells as NaN; they stay unanswered, never invented."""
    table = accounting_table(DeterministicGaussianSigma(), EPSILONS, ITERATIONS, QS)
    refused = (table["Sampling Probability"] == QS[0]) & (table["Iterations"] == ITERATIONS[-1])
    table.loc[refused, "Noise Multiplier"] = np.nan
    path = tmp_path / "amplified.csv"
    table.to_csv(path, header=False, index=False)
    sigma = TableSigma.from_table(read_accounting_csv(path))
    assert np.isnan(sigma(1.0, ITERATIONS[-1], QS[0]))
    assert np.isfinite(sigma(1.0, ITERATIONS[0], QS[-1]))
    path.write_text(path.read_text().replace("\n1", "\nNaN", 1))  # a NaN axis value is still an error
    with pytest.raises(UserError, match="headerless numeric CSV"):
        read_accounting_csv(path)
