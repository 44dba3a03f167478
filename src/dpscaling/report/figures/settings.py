"""The budgets every figure and table queries (config.yaml's ``analysis:`` block).

Defaults are the paper's (§4 figures, appendix tables; the authors' notebook for
the constants the captions leave out, see docs/fit.md, "The authors' analysis code"). A grid that
spans other model sizes and budgets — the CPU default — sets its own values in
its config; the compute range is derived from the law unless given.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Any

from dpscaling.config.block import plain
from dpscaling.config.roles import LATE, fields_with, role
from dpscaling.config.schema import default as schema_default
from dpscaling.core.errors import UserError

if TYPE_CHECKING:  # the config's block, for the annotations only
    from dpscaling.config.blocks import RunConfig



@dataclass(frozen=True)
class Baseline:
    """A fixed training configuration spending ``compute`` FLOPs: model and iterations; B follows."""
    model: str
    iterations: float


@dataclass(frozen=True)
class VulnerabilityPanel:
    """One panel of fig:excess-vulnerability: fixed compute and model size, batch size varies."""
    compute: float
    model_size: float


def _typed(key: str, value: Any) -> Any:
    """An ``analysis`` key's value as the settings hold it: lists as tuples, the figures' entries as theirs."""
    if key == "baselines":
        return tuple(Baseline(str(b["model"]), float(b["iterations"])) for b in value)
    if key == "vulnerability_panels":
        return tuple(VulnerabilityPanel(float(p["compute"]), float(p["model_size"])) for p in value)
    return tuple(value) if isinstance(value, (list, tuple)) else value


def _analysis(key: str) -> Any:
    """The schema's default of ``analysis.<key>``, typed (:func:`_typed`): the defaults are declared once."""
    return _typed(key, schema_default(f"analysis.{key}"))


@dataclass(frozen=True)
class AnalysisSettings:
    """The ``analysis`` block, typed; every default is the schema's (the paper's values, and why, are its
    descriptions)."""

    # Compute budgets: `compute_count` log-spaced in [min, max]; None = derived from the law
    # (smallest model · first iteration · physical batch … largest · last iteration · 1024 × physical batch).
    compute_min: float | None = _analysis("compute_min")
    compute_max: float | None = _analysis("compute_max")
    compute_count: int = _analysis("compute_count")
    near_optimal_tolerance: float = schema_default("fit.near_optimal_tolerance")  # the fit's, not an analysis key
    # fig:compute_allocation_selection (data budget) and its extension over data budgets.
    allocation_data_budget: float = _analysis("allocation_data_budget")
    data_budgets: tuple[float, ...] = _analysis("data_budgets")
    privacy_budgets: tuple[float, ...] = _analysis("privacy_budgets")
    # fig:vary_compute_and_privacy: one panel per ε, one line per data budget.
    vary_compute_privacy_budgets: tuple[float, ...] = _analysis("vary_compute_privacy_budgets")
    # fig:token_model_ratios: ε = 10^0 … 10^6 and ∞ at one data budget.
    token_ratio_data_budget: float = _analysis("token_ratio_data_budget")
    token_ratio_privacy_budgets: tuple[float, ...] = _analysis("token_ratio_privacy_budgets")
    # table:inflection_points
    table_data_budgets: tuple[float, ...] = _analysis("table_data_budgets")
    # fig:full_grid: defaults (bold in the caption) and the values each row varies.
    grid_privacy_budget: float = _analysis("grid_privacy_budget")
    grid_data_budget: float = _analysis("grid_data_budget")
    grid_compute: float = _analysis("grid_compute")
    grid_compute_budgets: tuple[float, ...] = _analysis("grid_compute_budgets")
    # fig:baseline_compare: fixed configurations at `baseline_compute`, vs compute-optimal
    # at `baseline_compute` and `baseline_reduced_compute`, over ε = 2^0 … 2^13.
    baseline_compute: float = _analysis("baseline_compute")
    baseline_reduced_compute: float = _analysis("baseline_reduced_compute")
    baseline_data_budget: float = _analysis("baseline_data_budget")
    baseline_privacy_budgets: tuple[float, ...] = _analysis("baseline_privacy_budgets")
    baselines: tuple[Baseline, ...] = _analysis("baselines")
    # fig:vector_fields (pure accounting): T fixed; panel (a) N fixed, (b) ε fixed, (c) B fixed.
    vector_iterations: float = _analysis("vector_iterations")
    vector_data_budget: float = _analysis("vector_data_budget")
    vector_privacy_budget: float = _analysis("vector_privacy_budget")
    vector_batch_size: float = _analysis("vector_batch_size")
    vector_log2_batch_range: tuple[int, int] = _analysis("vector_log2_batch_range")
    vector_log2_data_range: tuple[int, int] = _analysis("vector_log2_data_range")
    vector_log2_epsilon_range: tuple[int, int] = _analysis("vector_log2_epsilon_range")
    # fig:excess-vulnerability: (ε, δ) fixed; the caption's three (compute, model size) settings.
    vulnerability_privacy_budget: float = _analysis("vulnerability_privacy_budget")
    # not stated in the paper; the data budget of its other N=1e7 figures
    vulnerability_data_budget: float = _analysis("vulnerability_data_budget")
    vulnerability_panels: tuple[VulnerabilityPanel, ...] = _analysis("vulnerability_panels")
    vulnerability_batch_count: int = _analysis("vulnerability_batch_count")
    # fig:smoothing and fig:training (raw curves): models and σ̄ values shown.
    smoothing_model: str | None = _analysis("smoothing_model")  # None = the smallest model
    smoothing_noise_batch_ratio: float = _analysis("smoothing_noise_batch_ratio")
    smoothing_iterations: float = _analysis("smoothing_iterations")
    training_models: tuple[str, ...] = _analysis("training_models")
    training_noise_batch_ratios: tuple[float, ...] = _analysis("training_noise_batch_ratios")
    # Parametric figure: σ̄ values of the optimal-model-size lines.
    parametric_noise_batch_ratios: tuple[float, ...] = _analysis("parametric_noise_batch_ratios")
    # fig:seq_len_tradeoff and the sequence-length finding (not in the paper; runs with several
    # training.seq_lens): what one privacy unit is, the data budget in that unit (None: allocation_data_budget
    # units at the primary length, i.e. allocation_data_budget · data.seq_len tokens or allocation_data_budget
    # users), and the privacy budgets drawn beside the non-private optimum. Added after figures existed
    # (role LATE): in the figures' params only where not at their default.
    privacy_unit: str = role(LATE, default=_analysis("privacy_unit"))
    seq_len_tokens: float | None = role(LATE, default=_analysis("seq_len_tokens"))
    seq_len_users: float | None = role(LATE, default=_analysis("seq_len_users"))
    seq_len_privacy_budgets: tuple[float, ...] = role(LATE, default=_analysis("seq_len_privacy_budgets"))
    # finding:user-level (not in the paper; runs with a user-level mechanism): ε per user and how many compute
    # budgets over the DP-SGD law's compute range (dpscaling.findings.user_level).
    user_level_privacy_budgets: tuple[float, ...] = role(LATE, default=_analysis("user_level_privacy_budgets"))
    user_level_compute_count: int = role(LATE, default=_analysis("user_level_compute_count"))

    def __post_init__(self) -> None:
        if self.compute_count < 2:
            raise UserError(f"analysis.compute_count: must be >= 2, got {self.compute_count}")
        if not 0 <= self.near_optimal_tolerance < 1:
            raise UserError(f"analysis.near_optimal_tolerance: must be in [0, 1), got {self.near_optimal_tolerance}")
        if (self.compute_min is None) != (self.compute_max is None):
            raise UserError("analysis.compute_min / compute_max: set both or neither (neither = from the law)")
        if self.compute_min is not None and not 0 < self.compute_min < self.compute_max:
            raise UserError("analysis.compute_min / compute_max: need 0 < compute_min < compute_max")
        from dpscaling.law.sequence_length import PRIVACY_UNITS

        if self.privacy_unit not in PRIVACY_UNITS:
            raise UserError(f"analysis.privacy_unit: must be one of {list(PRIVACY_UNITS)}, got {self.privacy_unit!r}")
        other = "seq_len_users" if self.privacy_unit == "sequence" else "seq_len_tokens"
        if getattr(self, other) is not None:
            unit = "tokens (seq_len_tokens)" if self.privacy_unit == "sequence" else "users (seq_len_users)"
            raise UserError(f"analysis.{other}: not used with analysis.privacy_unit {self.privacy_unit!r}, whose data "
                            f"budget is given in {unit}; remove it or change the unit")
        if len(self.seq_len_privacy_budgets) < 2:
            raise UserError("analysis.seq_len_privacy_budgets: give two or more privacy budgets")

    @classmethod
    def from_mapping(cls, values: dict[str, Any] | None) -> AnalysisSettings:
        values = dict(values or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            raise UserError(f"analysis: unknown key(s) {unknown}; accepted keys: {sorted(known)}")
        return cls(**{key: _typed(key, value) for key, value in values.items()})

    def to_mapping(self) -> dict[str, Any]:
        """The settings as plain data; keys added after figures existed (role ``LATE``) only where they differ
        from their default, so adding them reran no figure."""
        values, late = asdict(self), fields_with(type(self), LATE)
        defaults = {f.name: f.default for f in fields(self)}
        return {key: value for key, value in values.items() if key not in late or value != defaults[key]}

    def data_budget_across_lengths(self, primary_seq_len: int):
        """The :class:`~dpscaling.law.sequence_length.DataBudget` of fig:seq_len_tradeoff: ``privacy_unit`` with
        ``seq_len_tokens`` or ``seq_len_users``, by default ``allocation_data_budget`` units at the primary
        length."""
        from dpscaling.law.sequence_length import DataBudget

        if self.privacy_unit == "sequence":
            tokens = self.seq_len_tokens or self.allocation_data_budget * primary_seq_len
            return DataBudget("sequence", tokens=float(tokens))
        return DataBudget("user", users=float(self.seq_len_users or self.allocation_data_budget))


def analysis_settings_of(run: RunConfig) -> AnalysisSettings:
    """The figures' and tables' settings from the run's ``analysis`` block; the near-optimal tolerance is the
    fit's, so queries and figures agree."""
    return AnalysisSettings.from_mapping({**plain(run.analysis), "near_optimal_tolerance": run.fit.near_optimal_tolerance})
