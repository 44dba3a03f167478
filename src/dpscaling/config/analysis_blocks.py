"""The blocks of what is computed from the runs (docs/config.md): ``accounting``, ``fit``, ``audit``,
``private_model``, ``savings``, ``adaptive_design`` and ``explorer``, with the settings their stages derive from them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import ClassVar

from dpscaling.config.block import Block, from_schema
from dpscaling.config.training_blocks import Evaluation, GridPoint


# ------------------------------------------------------------------------------------------ accounting


@from_schema("accounting.table")
class AccountingTable(Block):
    """``accounting.table``: the grid the σ table is computed on."""


@from_schema("accounting")
class AccountingBlock(Block):
    """``accounting``."""

    NAME: ClassVar[str] = "accounting"
    NESTED: ClassVar[Mapping[str, type[Block]]] = {"table": AccountingTable}


# ------------------------------------------------------------------------------------------------- fit


@from_schema("fit.extrapolation_window")
class Window(Block):
    """``fit.extrapolation_window``."""


@from_schema("fit.bootstrap")
class Bootstrap(Block):
    """``fit.bootstrap``."""


@from_schema("fit.validation")
class Validation(Block):
    """``fit.validation``."""


@from_schema("fit.physical_batch_correction")
class PhysicalBatchCorrectionBlock(Block):
    """``fit.physical_batch_correction``."""

    NESTED_LISTS: ClassVar[Mapping[str, type[Block]]] = {"points": GridPoint}


@from_schema("fit")
class FitBlock(Block):
    """``fit``."""

    NAME: ClassVar[str] = "fit"
    NESTED: ClassVar[Mapping[str, type[Block]]] = {"extrapolation_window": Window, "bootstrap": Bootstrap,
                                                   "physical_batch_correction": PhysicalBatchCorrectionBlock,
                                                   "validation": Validation}


# ---------------------------------------------------------------------------- audit, private_model, savings


@from_schema("audit")
class AuditBlock(Block):
    """``audit``: the canary audit's settings."""

    NAME: ClassVar[str] = "audit"


@from_schema("private_model.budgets[]")
class BudgetEntry(Block):
    """A budget of ``private_model.budgets`` (and of ``savings.budgets``)."""


@from_schema("private_model")
class PrivateModelBlock(Block):
    """``private_model``."""

    NAME: ClassVar[str] = "private_model"
    NESTED: ClassVar[Mapping[str, type[Block]]] = {"evaluation": Evaluation}
    NESTED_LISTS: ClassVar[Mapping[str, type[Block]]] = {"budgets": BudgetEntry}


@from_schema("savings.baselines[]")
class SavingsBaseline(Block):
    """A baseline of ``savings.baselines``."""


@from_schema("savings")
class SavingsBlock(Block):
    """Target ``savings`` (typed further by :class:`dpscaling.private.savings_plan.SavingsSettings`)."""

    NAME: ClassVar[str] = "savings"
    NESTED: ClassVar[Mapping[str, type[Block]]] = {"evaluation": Evaluation}
    NESTED_LISTS: ClassVar[Mapping[str, type[Block]]] = {"budgets": BudgetEntry, "baselines": SavingsBaseline}


@from_schema("adaptive_design")
class AdaptiveDesignBlock(Block):
    """``adaptive_design``: the rounds of ``design: adaptive`` (:mod:`dpscaling.design.rounds`)."""

    NAME: ClassVar[str] = "adaptive_design"


@from_schema("explorer")
class ExplorerBlock(Block):
    """Rule ``explorer``: the grid of budgets the explorer page answers (:mod:`dpscaling.report.explorer`)."""

    NAME: ClassVar[str] = "explorer"
