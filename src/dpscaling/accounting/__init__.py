"""Privacy accounting for DP-SGD scaling laws (docs/accounting.md).

Calibration of the noise multiplier σ on the sum (σ̄ = σ/B is the paper's
noise-batch ratio, §2), for Poisson sampling (tight dp-accounting PLD),
deterministic batching (analytic Gaussian) and the paper's min rule; the
accounting table the analysis interpolates (§3.4); and excess vulnerability
(appendix "Caveats on Privacy Calibration").
"""

from dpscaling.accounting.calibration import (
    Calibration, calibrate, calibrate_poisson, calibrate_sigma, epsilon_spent, poisson_epsilon)
from dpscaling.accounting.gaussian import participations, sigma_deterministic, sigma_every_step
from dpscaling.accounting.table import (
    Chunk, SigmaTable, compute_chunk, load_table, merge_chunks, plan_table, save_table)
from dpscaling.accounting.table_spec import TableSpec
from dpscaling.accounting.validation import DEFAULT_DELTA, AccountingRefused
from dpscaling.accounting.vulnerability import calibrated_advantage, mia_advantage

__all__ = [
    "DEFAULT_DELTA", "AccountingRefused", "Calibration", "Chunk", "SigmaTable", "TableSpec",
    "calibrate", "calibrate_poisson", "calibrate_sigma", "calibrated_advantage", "compute_chunk",
    "epsilon_spent", "load_table", "merge_chunks", "mia_advantage", "participations", "plan_table",
    "poisson_epsilon", "save_table", "sigma_deterministic", "sigma_every_step",
]
