"""Privacy accounting for DP-SGD scaling laws (docs/accounting.md).

Calibration of the noise multiplier σ on the sum (σ̄ = σ/B is the paper's
noise-batch ratio, §2), for Poisson sampling (tight dp-accounting PLD),
deterministic batching (analytic Gaussian) and the paper's min rule; the
accounting table the analysis interpolates (§3.4); and excess vulnerability
(appendix "Caveats on Privacy Calibration").
"""

from importlib import import_module

# Where each public name lives. Loaded on first use (PEP 562): dp-accounting and SciPy cost most
# of a second to import, and most workflow jobs (figures, fits, collection) never calibrate.
_EXPORTS = {
    "calibration": ("Calibration", "calibrate", "calibrate_poisson", "calibrate_sigma", "epsilon_spent",
                    "poisson_epsilon"),
    "gaussian": ("participations", "sigma_deterministic", "sigma_every_step"),
    "table": ("Chunk", "SigmaTable", "compute_chunk", "load_table", "merge_chunks", "plan_table", "save_table"),
    "table_spec": ("TableSpec",),
    "validation": ("DEFAULT_DELTA", "AccountingRefused"),
    "vulnerability": ("calibrated_advantage", "mia_advantage"),
}
_MODULE_OF = {name: module for module, names in _EXPORTS.items() for name in names}
__all__ = sorted(_MODULE_OF)


def __getattr__(name: str):
    if name in _MODULE_OF:
        return getattr(import_module(f"{__name__}.{_MODULE_OF[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
