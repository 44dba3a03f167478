"""A small, fast AnalysisContext for figure and table tests: a law fitted to synthetic curves.

The synthetic "true law" (dpscaling.law.synthetic) spans models of 1e5 … 1.6e6
parameters, 2000 steps and σ̄ ∈ {0, 2^-12 … 2^-6}; σ comes from the exact
closed form for unamplified DP-SGD, so no accounting table is needed. Budgets
are scaled to that grid the way config/config.yaml scales them to the CPU default.
"""

from __future__ import annotations

from functools import lru_cache

from dpscaling.report.figures.context import AnalysisContext
from dpscaling.report.figures.settings import AnalysisSettings, Baseline, VulnerabilityPanel
from dpscaling.law import LawSettings
from dpscaling.law.artifact import fit_law
from dpscaling.law.synthetic import DeterministicGaussianSigma, synthetic_results

SEQ_LEN, PHYSICAL_BATCH = 128, 32

SETTINGS = AnalysisSettings(
    compute_count=12,
    allocation_data_budget=1e5,
    data_budgets=(1e4, 1e5, 1e6),
    privacy_budgets=(1.0, 8.0),
    token_ratio_data_budget=1e5,
    token_ratio_privacy_budgets=(1.0, 10.0, 100.0),
    table_data_budgets=(1e4, 1e5),
    grid_privacy_budget=4.0,
    grid_data_budget=1e5,
    grid_compute=1e13,
    grid_compute_budgets=(1e12, 1e13, 1e14),
    baseline_compute=1e13,
    baseline_reduced_compute=2e12,
    baseline_data_budget=1e5,
    baseline_privacy_budgets=(1.0, 4.0, 16.0),
    baselines=(Baseline("Synthetic2", 400), Baseline("Synthetic0", 200)),
    vector_iterations=1000,
    vector_data_budget=2.0**16,
    vector_privacy_budget=4.0,
    vector_batch_size=256,
    vector_log2_batch_range=(4, 10),
    vector_log2_data_range=(12, 18),
    vector_log2_epsilon_range=(-1, 4),
    vulnerability_privacy_budget=8.0,
    vulnerability_data_budget=1e5,
    vulnerability_panels=(VulnerabilityPanel(1e13, 4e5),),
    vulnerability_batch_count=5,
    smoothing_model="Synthetic0",
    smoothing_noise_batch_ratio=2.0**-10,
    smoothing_iterations=1000,
    training_models=("Synthetic0", "Synthetic2"),
    training_noise_batch_ratios=(2.0**-12, 2.0**-8),
    parametric_noise_batch_ratios=(2.0**-12, 2.0**-8),
)


@lru_cache(maxsize=1)
def _law():
    results = synthetic_results(model_sizes=(1e5, 4e5, 1.6e6))
    settings = LawSettings(warmup_steps=100, rolling_window=3)
    return results, fit_law(results, settings, seq_len=SEQ_LEN, physical_batch=PHYSICAL_BATCH, parametric=True)


def synthetic_context(settings: AnalysisSettings = SETTINGS) -> AnalysisContext:
    results, law = _law()
    return AnalysisContext(law, DeterministicGaussianSigma(), settings, delta=1e-8, sampling="deterministic",
                           results=results, accounting_source="closed-form unamplified Gaussian")
