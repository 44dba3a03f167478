"""The blocks of what is computed from the runs (docs/config.md): ``accounting``, ``fit``, ``audit``,
``private_model``, ``savings`` and ``explorer``, with the settings their stages derive from them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

from dpscaling.config.block import Block
from dpscaling.config.training_blocks import Evaluation, GridPoint


# ------------------------------------------------------------------------------------------ accounting


@dataclass(frozen=True, kw_only=True)
class AccountingTable(Block):
    epsilon_min: float
    epsilon_max: float
    epsilon_per_octave: int
    steps_min: int
    steps_max: int
    steps_per_octave: int
    q_min_log2: int
    q_per_octave: int
    accountant: str
    sigma_per_octave: int
    discretisation_fraction: float
    max_points: int
    q_per_chunk: int


@dataclass(frozen=True, kw_only=True)
class AccountingBlock(Block):
    NAME: ClassVar[str] = "accounting"
    NESTED: ClassVar[Mapping[str, type[Block]]] = {"table": AccountingTable}
    delta: float
    sampling: str
    check_points: int
    table: AccountingTable


# ------------------------------------------------------------------------------------------------- fit


@dataclass(frozen=True, kw_only=True)
class Window(Block):
    start: float
    end: float
    unit: str


@dataclass(frozen=True, kw_only=True)
class Bootstrap(Block):
    replicates: int
    chunk_size: int
    seed: int


@dataclass(frozen=True, kw_only=True)
class Validation(Block):
    replicates: int
    interval_scale: str


@dataclass(frozen=True, kw_only=True)
class PhysicalBatchCorrectionBlock(Block):
    NESTED_LISTS: ClassVar[Mapping[str, type[Block]]] = {"points": GridPoint}
    enabled: bool
    physical_batch: int
    points: tuple[GridPoint, ...]


@dataclass(frozen=True, kw_only=True)
class FitBlock(Block):
    NAME: ClassVar[str] = "fit"
    NESTED: ClassVar[Mapping[str, type[Block]]] = {"extrapolation_window": Window, "bootstrap": Bootstrap,
                                                   "physical_batch_correction": PhysicalBatchCorrectionBlock,
                                                   "validation": Validation}
    reference_compatible: bool
    near_optimal_tolerance: float
    rolling_window: int | None
    warmup_steps: int | None
    extrapolation_window: Window
    smooth_nonprivate_along_nbr: bool
    extrapolation_asymptote: str
    isotonic_skip_nan: bool
    interpolate_log_loss: bool
    fill_missing_nbr: str
    extension_doublings: int
    parametric: bool
    bootstrap: Bootstrap
    physical_batch_correction: PhysicalBatchCorrectionBlock
    validation: Validation


# ---------------------------------------------------------------------------- audit, private_model, savings


@dataclass(frozen=True, kw_only=True)
class AuditBlock(Block):
    NAME: ClassVar[str] = "audit"
    n_canaries: int
    expected_batch_size: int
    steps: int
    epsilon: float
    significance: float
    microbatch_size: int
    seed: int


@dataclass(frozen=True, kw_only=True)
class BudgetEntry(Block):
    epsilon: float
    delta: float | None = None
    data_budget: int
    compute: float
    # {model, batch_size, iterations, learning_rate}: train this instead of the law's search (None: search)
    configuration: Mapping[str, Any] | None = None
    pretrained: bool | None = None  # fine-tuned from the run's pretrained checkpoints (needs a finetune block)
    mechanism: str | None = None  # a mechanism of training.mechanisms, or "choose" (docs/mechanisms.md)


@dataclass(frozen=True, kw_only=True)
class PrivateModelBlock(Block):
    NAME: ClassVar[str] = "private_model"
    NESTED: ClassVar[Mapping[str, type[Block]]] = {"evaluation": Evaluation}
    NESTED_LISTS: ClassVar[Mapping[str, type[Block]]] = {"budgets": BudgetEntry}
    budgets: tuple[BudgetEntry, ...]
    learning_rate: float | None
    decision_rule: str
    evaluation: Evaluation


@dataclass(frozen=True, kw_only=True)
class SavingsBaseline(Block):
    name: str
    model: str | None = None
    tokens_per_parameter: float | None = None
    iterations: int


@dataclass(frozen=True, kw_only=True)
class SavingsBlock(Block):
    """Target ``savings`` (typed further by :class:`dpscaling.savings.plan.SavingsSettings`)."""

    NAME: ClassVar[str] = "savings"
    NESTED: ClassVar[Mapping[str, type[Block]]] = {"evaluation": Evaluation}
    NESTED_LISTS: ClassVar[Mapping[str, type[Block]]] = {"budgets": BudgetEntry, "baselines": SavingsBaseline}
    budgets: tuple[BudgetEntry, ...]
    fractions: tuple[float, ...]
    seeds: tuple[int, ...]
    baselines: tuple[SavingsBaseline, ...]
    neighbours: tuple[str, ...]
    neighbour_factor: float
    physical_batch_correction: bool
    decision_rule: str
    evaluation: Evaluation


@dataclass(frozen=True, kw_only=True)
class ExplorerBlock(Block):
    """Rule ``explorer``: the grid of budgets the explorer page answers (:mod:`dpscaling.explorer`)."""

    NAME: ClassVar[str] = "explorer"
    epsilons: tuple[float, ...]
    data_budgets: tuple[float, ...] | None
    compute_range: tuple[float, ...] | None
    compute_steps_per_octave: int
