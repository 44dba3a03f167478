"""Privacy accounting for DP-SGD scaling laws (docs/accounting.md).

The noise multiplier σ on the sum (σ̄ = σ/B is the paper's noise-batch ratio, §2), priced in one module
(:mod:`dpscaling.accounting.pricing`): what a run pays for the sampler that trains it, and the paper's rule
(untruncated Poisson and fixed batches of ⌈qT⌉, the lower σ) that the study tabulates; the accounting table
the analysis interpolates (§3.4); and excess vulnerability (appendix "Caveats on Privacy Calibration").
"""

from importlib import import_module

# Where each public name lives. Loaded on first use (PEP 562): dp-accounting and SciPy cost most
# of a second to import, and most workflow jobs (figures, fits, collection) never calibrate.
_EXPORTS = {
    "calibration": ("calibrate_poisson", "poisson_epsilon"),
    "gaussian": ("fixed_batch_sigma", "sigma_every_step"),
    "pricing": ("paper_epsilon", "paper_sigma", "price", "price_run"),
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
