"""Every choice the semi-parametric fit makes, in one place (paper §3.3 and appendix "Smoothing and Extrapolation").

Windows are given either in steps or as fractions of the trained horizon H (the
largest measured iteration count), so the paper's numbers (H = 128K: fit on
[16K, 128K] = [H/8, H], extend to 8.192M = 64·H) carry over to the CPU-sized
default grid, which trains a few hundred steps.
``reference_compatible=True`` switches every knob to what the authors' public
analysis code does (see docs/fit.md, "The authors' analysis code").
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from dpscaling.accounting.branches import MIN_RULE, POISSON_BRANCH
from dpscaling.core.errors import UserError

if TYPE_CHECKING:  # the config's block, for the annotations only
    from dpscaling.config.blocks import RunConfig

PAPER_HORIZON = 128_000
PAPER_WARMUP = 1000
# The asymptote E of the (model, σ̄) fits: free (the paper), the model's E* (the authors' code), or free with
# E* where the free fit fails (not in the paper).
PER_CURVE, NONPRIVATE, PER_CURVE_ELSE_NONPRIVATE = "per_curve", "nonprivate", "per_curve_else_nonprivate"
ASYMPTOTE_CHOICES = (PER_CURVE, NONPRIVATE, PER_CURVE_ELSE_NONPRIVATE)
FILL_CHOICES = ("log_nbr", "positional")


@dataclass(frozen=True)
class Window:
    """An iteration window [start, end], in steps or as fractions of the horizon."""
    start: float
    end: float
    unit: Literal["fraction", "steps"] = "fraction"

    def resolve(self, horizon: float) -> tuple[float, float]:
        scale = horizon if self.unit == "fraction" else 1.0
        start, end = self.start * scale, self.end * scale
        if not 0 <= start < end:
            raise UserError(f"iteration window must satisfy 0 <= start < end, got [{start:g}, {end:g}] steps")
        return start, end


@dataclass(frozen=True)
class LawSettings:
    """Parameters of smoothing → extrapolation → interpolation (defaults: the paper's)."""
    reference_compatible: bool = False
    # Measurements at T < warmup_steps are dropped (paper: the 1000 learning-rate warm-up steps).
    warmup_steps: float = PAPER_WARMUP
    # Isotonic regression on the finite entries only, NaNs left in place (paper intent) — or NaNs passed to
    # scipy as the authors' code does (scipy then returns the vector unchanged: monotonicity silently lost).
    isotonic_skip_nan: bool = True
    # Trailing rolling mean over this many measurements; None = off (the authors' code never applies it).
    rolling_window: int | None = 10
    # E* per model is fitted on the noise-free curve over this window (code: [1000, 128K]);
    # None means [warmup_steps, H].
    asymptote_window: Window | None = None
    # Whether σ̄ = 0 takes part in the isotonic pass along σ̄. The paper orders "the 18 loss values"
    # (the noisy columns) only; the authors' code includes σ̄ = 0, which pins the noise-free curve below
    # every noisy one and lets a bad noise-free column pull the private ones down.
    smooth_nonprivate_along_nbr: bool = False
    # The asymptote E of each (model, σ̄) power-law fit: "per_curve" = free in every fit (paper: "we
    # independently fit a function for each model size and NBR"); "nonprivate" = tied to the model's E*
    # fitted on its σ̄ = 0 curve over ``asymptote_window`` (the authors' code); "per_curve_else_nonprivate" (not
    # in the paper) = free, and tied to E* only for a curve whose free fit fails.
    extrapolation_asymptote: Literal["per_curve", "nonprivate", "per_curve_else_nonprivate"] = "per_curve"
    # Per-(model, σ̄) power-law fits use this window (paper: [16K, 128K] = [H/8, H]).
    extrapolation_window: Window = field(default_factory=lambda: Window(1 / 8, 1.0))
    # Extrapolated iteration counts: H·2^k for k = 1..extension_doublings (paper: 256K … 8.192M).
    extension_doublings: int = 6
    # Interpolate log cross entropy (the code) instead of cross entropy (the paper).
    interpolate_log_loss: bool = False
    # How an absent σ̄ column is filled: linearly in log σ̄ (paper intent) or by column position (code).
    fill_missing_nbr: Literal["log_nbr", "positional"] = "log_nbr"
    # Not in the paper: a cell without a value (a failed fit) leaves NaN only where the interpolation weighs
    # it; False is scipy's interpolant as the authors' code uses it (NaN wherever it is a corner, weight 0 too).
    ignore_zero_weight_nan: bool = False
    # Not in the paper, for designs that train some points only, some to shorter horizons (dpscaling.design):
    # each curve extrapolated from its own horizon instead of the longest's, and a cell no run measured filled
    # between two models that have it, in log M (dpscaling.law.interpolation.fill_missing_model_sizes).
    curve_horizons: bool = False
    fill_missing_models: bool = False
    fill_models_first: bool = False  # across models before along σ̄ (a model form of the design's committee)
    # Accounting: the lower σ of the amplified and unamplified tables (paper) or amplified only (code).
    accounting_rule: Literal["min", "amplified"] = "min"

    @property
    def table_sampling(self) -> str:
        """The sampling rule σ from the authors' accounting tables prices under :attr:`accounting_rule`:
        Poisson-amplified only (the authors' code) or the lower of both (the paper)."""
        return POISSON_BRANCH if self.accounting_rule == "amplified" else MIN_RULE

    @classmethod
    def reference(cls, **overrides: Any) -> "LawSettings":
        """The authors' analysis code's choices (docs/fit.md, "The authors' analysis code", steps 1–7).

        Its windows ([1000, 128K] for E*, [16K, 128K] for the fits) are the
        defaults' [warmup, H] and [H/8, H] at the paper's H = 128K.
        """
        values: dict[str, Any] = dict(
            reference_compatible=True, rolling_window=None, interpolate_log_loss=True,
            fill_missing_nbr="positional", accounting_rule="amplified", smooth_nonprivate_along_nbr=True,
            extrapolation_asymptote="nonprivate", isotonic_skip_nan=False)
        values.update(overrides)
        return cls(**values)

    @classmethod
    def create(cls, reference_compatible: bool = False, **overrides: Any) -> "LawSettings":
        return cls.reference(**overrides) if reference_compatible else cls(**overrides)

    def __post_init__(self) -> None:
        if self.extrapolation_asymptote not in ASYMPTOTE_CHOICES:
            raise UserError(f"fit.extrapolation_asymptote: {self.extrapolation_asymptote!r} is not one of "
                            f"{list(ASYMPTOTE_CHOICES)}")
        if self.fill_missing_nbr not in FILL_CHOICES:
            raise UserError(f"fit.fill_missing_nbr: {self.fill_missing_nbr!r} is not one of {list(FILL_CHOICES)}")

    def asymptote_range(self, horizon: float) -> tuple[float, float]:
        window = self.asymptote_window or Window(self.warmup_steps, horizon, "steps")
        return window.resolve(horizon)

    def extension_iterations(self, horizon: float) -> list[float]:
        return [horizon * 2.0**k for k in range(1, self.extension_doublings + 1)]

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> "LawSettings":
        values = dict(data)
        for key in ("asymptote_window", "extrapolation_window"):
            if values.get(key) is not None:
                values[key] = Window(**values[key])
        return cls(**values)


# The two modes' names, as every output that records a mode writes them (provenance, validation, bundles).
PAPER_MODE, REFERENCE_MODE = "paper", "reference-compatible"


def mode_name(reference_compatible: bool) -> str:
    """The name of the analysis mode: :data:`REFERENCE_MODE` for the authors' code's, else :data:`PAPER_MODE`."""
    return REFERENCE_MODE if reference_compatible else PAPER_MODE


def law_settings_of(run: RunConfig, reference_compatible: bool | None = None) -> LawSettings:
    """The :class:`LawSettings` the run's ``fit`` block asks for, in paper or reference-compatible mode
    (``reference_compatible``; None = the block's own). The reference mode fixes the keys the authors' code
    hard-wires, whatever the block says; ``fit.warmup_steps`` unset is the training's."""
    fit = run.fit
    reference = fit.reference_compatible if reference_compatible is None else reference_compatible
    window = fit.extrapolation_window
    choices: dict[str, Any] = dict(
        warmup_steps=run.training.warmup_steps if fit.warmup_steps is None else fit.warmup_steps,
        extrapolation_window=Window(window.start, window.end, window.unit),
        extension_doublings=fit.extension_doublings,
    )
    if not reference:
        choices["rolling_window"] = fit.rolling_window
        for key in ("smooth_nonprivate_along_nbr", "extrapolation_asymptote", "isotonic_skip_nan",
                    "interpolate_log_loss", "fill_missing_nbr", "ignore_zero_weight_nan"):
            choices[key] = getattr(fit, key)
    return LawSettings.create(reference, **choices)
