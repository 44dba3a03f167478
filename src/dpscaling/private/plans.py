"""A private run's plan as data (paper §5's closing of the loop, beyond the paper: docs/private-training.md):
the practitioner's budget, the law's own answer, and the configuration priced as it will train, written
as a budget's ``plan.json`` and read back by the private run, its study twins, its audit, its job's
resources (:mod:`dpscaling.workflow.cluster`) and the reports. The search that fills it is
:mod:`dpscaling.private.model`; this module is JAX-free so that sizing a job can read a plan.
"""

from __future__ import annotations

import dataclasses
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dpscaling.workflow.grid import canonical
from dpscaling.law.physical_batch import PhysicalBatchCorrection
from dpscaling.privacy.mechanisms import DPSGD, mechanism_named
from dpscaling.privacy.samplers import TRUNCATED_POISSON


@dataclass(frozen=True)
class FixedConfiguration:
    """A configuration to train as it stands instead of the law's search (what ``dpscaling query`` prints
    under ``train_config``): a model of the config, the expected batch B, the steps T and, optionally, the
    learning rate."""

    model: str
    batch_size: int
    iterations: int
    learning_rate: float | None = None


@dataclass(frozen=True)
class Budget:
    """One practitioner's budget: privacy (ε, δ), data (N sequences, or N users of up to k sequences each) and
    compute (FLOPs, C = 6·M·B·S·T), and optionally the configuration to train for it."""

    epsilon: float
    delta: float
    data_budget: int
    compute: float
    configuration: FixedConfiguration | None = None
    # Fine-tuned from the run's pretrained checkpoints, planned by the fine-tuning law (docs/finetune.md).
    pretrained: bool = False
    # The noise mechanism (docs/mechanisms.md): a name of training.mechanisms, "choose" (every mechanism's law
    # plans it, the lowest predicted loss wins), or None: the run's primary law, as before mechanisms existed.
    mechanism: str | None = None
    # A budget per user (docs/private-training.md, "A budget per user"): N counts users of up to k sequences each,
    # and ε protects a user; None: a budget per sequence.
    examples_per_user: int | None = None

    @property
    def per_user(self) -> bool:
        return self.examples_per_user is not None

    @property
    def label(self) -> str:
        """The budget's directory under ``private_model/`` (and its wildcard)."""
        label = (f"eps={canonical(self.epsilon)}_delta={canonical(self.delta)}"
                 f"_N={canonical(self.data_budget)}_C={self.compute:.4g}")
        fixed = self.configuration
        if fixed is not None:
            label = f"{label}_{fixed.model}_B={fixed.batch_size}_T={fixed.iterations}"
        label = f"{label}_pretrained" if self.pretrained else label
        label = label if self.mechanism is None else f"{label}_mech={self.mechanism}"
        return label if self.examples_per_user is None else f"{label}_k={self.examples_per_user}"

    def to_json(self) -> dict[str, Any]:
        """The budget as a plan records it: its fields (``pretrained``, ``mechanism`` and ``examples_per_user``
        only when set) and its label."""
        record = dataclasses.asdict(self) | {"label": self.label}
        for optional in ("pretrained", "mechanism", "examples_per_user"):
            if record[optional] in (None, False):
                del record[optional]
        return record

    @classmethod
    def from_json(cls, record: Mapping[str, Any]) -> Budget:
        """The budget :meth:`to_json` wrote (its label follows from the fields)."""
        fixed = record["configuration"]
        return cls(float(record["epsilon"]), float(record["delta"]), int(record["data_budget"]),
                   float(record["compute"]), None if fixed is None else FixedConfiguration(**fixed),
                   bool(record.get("pretrained", False)), record.get("mechanism"),
                   None if record.get("examples_per_user") is None else int(record["examples_per_user"]))


@dataclass(frozen=True)
class LawQuery:
    """The law's own answer beside a plan, σ from its table (the study's accountant): the search's optimum
    for a searched budget, the law at the configuration for a fixed one. The report sets it beside what
    the real sampler's σ gives."""

    model_size: float
    batch_size: float
    iterations: float  # the search's continuous optimum, before T is rounded to whole steps
    sigma: float
    noise_batch_ratio: float
    predicted_loss: float
    sampling: str  # the table's sampling rule
    delta: float  # the table's δ, which may differ from the budget's
    candidates: int  # configurations the search priced
    models: tuple[str, ...] | None = None  # a searched budget: the run's models it chose among
    fixed: bool = False  # a budget's fixed configuration, not searched

    def to_json(self) -> dict[str, Any]:
        """The record a plan holds: ``models`` only for a searched budget, ``fixed`` only for a fixed one."""
        record = {field.name: getattr(self, field.name) for field in dataclasses.fields(self)
                  if field.name not in ("models", "fixed")}
        if self.models is not None:
            record["models"] = list(self.models)
        if self.fixed:
            record["fixed"] = True
        return record

    @classmethod
    def from_json(cls, record: Mapping[str, Any]) -> LawQuery:
        """The query :meth:`to_json` wrote."""
        models = record.get("models")
        return cls(record["model_size"], record["batch_size"], record["iterations"], record["sigma"],
                   record["noise_batch_ratio"], record["predicted_loss"], record["sampling"], record["delta"],
                   record["candidates"], None if models is None else tuple(models), bool(record.get("fixed", False)))


@dataclass(frozen=True)
class PrivatePlan:
    """One private run of a budget, priced as it will train: (model, B, T, learning rate), σ calibrated for
    truncated Poisson at its priced L on exactly N sequences, and the law's loss there. Written as the
    budget's ``plan.json`` (:meth:`to_json`) and read back (:meth:`from_json`) by the private run, its study
    twins, its audit, its job's resources and the report; each savings run is one too."""

    budget: Budget
    model: str
    model_size: float  # the law's Model Size M of ``model``
    batch_size: int  # the expected batch B = q·N
    iterations: int
    learning_rate: float
    seq_len: int
    compute: float  # C = 6·M·B·S·T of what is trained, at whole B and T
    sigma: float  # calibrated for (ε, δ) at L, as the private run calibrates it
    noise_batch_ratio: float  # σ̄ = σ / B
    untruncated_sigma: float  # the σ untruncated Poisson needs for the same ε
    truncated_batch_size: int  # L, the padded batch the job runs
    truncation_probability: float
    padding_share: float  # the expected share of L that is padding
    predicted_loss: float  # the law's loss at (M, T, σ̄), corrected to B when a correction is given
    law_loss: float  # the same, uncorrected
    physical_batch_correction: PhysicalBatchCorrection | None
    # What asked for the configuration: the law's own answer (private_model) or a savings run's kind.
    query: LawQuery | Mapping[str, Any]
    # A searched budget: the decision rule's record of the chosen configuration (dpscaling.law.decision: rule,
    # score, predicted loss, half-width), its calibrated interval and flags.
    decision: Mapping[str, Any] | None = None
    # The noise mechanism it trains with (docs/mechanisms.md), and, for a budget that chose, every mechanism's
    # plan (mechanism, model, B, T, σ̄, predicted loss) or why its law could not plan it.
    mechanism: str = DPSGD.name
    mechanisms_compared: tuple[Mapping[str, Any], ...] | None = None
    # A budget per user (docs/private-training.md, "A budget per user"): the private run's sampler (user_poisson
    # for a user-level mechanism, els_poisson for DP-SGD on the users' sequences), the accountant's N in its units
    # (the budget's users, or their sequences for ELS) and the sequences one sampled unit brings to a step.
    sampler: str = TRUNCATED_POISSON.name
    dataset_size: int | None = None
    sequences_per_unit: int = 1
    # What the run's ε covers, and where the choices it rests on were fitted (dpscaling.privacy.epsilon_scope: its law
    # bundle's record); None in a plan written before plans recorded it.
    epsilon_covers: Mapping[str, Any] | None = None

    @property
    def units(self) -> int:
        """N as the private run's accountant counts it."""
        return int(self.budget.data_budget if self.dataset_size is None else self.dataset_size)

    def computed_sequences(self, microbatch_size: int | None) -> float:
        """The sequences one step is expected to compute, skipping its whole microbatches of padding
        (:func:`dpscaling.accounting.truncation.computed_batch`; a cyclic mechanism samples one of its b groups)."""
        from dpscaling.accounting.truncation import computed_batch  # SciPy: only where a job is sized

        group = self.units // mechanism_named(self.mechanism).cycle_length
        slots = computed_batch(group, self.batch_size / group, self.truncated_batch_size,
                               microbatch_size or self.truncated_batch_size)
        return slots * self.sequences_per_unit

    def to_json(self) -> dict[str, Any]:
        """The record ``plan.json`` holds: every field, the search's counts only where a search ran, the
        mechanism's fields only for a budget that names one, the unit's only for a budget per user."""
        record = {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}
        if not self.budget.per_user:
            del record["sampler"], record["dataset_size"], record["sequences_per_unit"]
        if self.budget.mechanism is None:
            del record["mechanism"], record["mechanisms_compared"]
        elif self.mechanisms_compared is not None:
            record["mechanisms_compared"] = [dict(row) for row in self.mechanisms_compared]
        correction, query = self.physical_batch_correction, self.query
        record |= {"budget": self.budget.to_json(),
                   "physical_batch_correction": None if correction is None else correction.to_json(),
                   "query": query.to_json() if isinstance(query, LawQuery) else dict(query)}
        if self.decision is None:  # nothing was searched
            del record["decision"]
        else:
            record["decision"] = dict(self.decision)
        if self.epsilon_covers is None:
            del record["epsilon_covers"]
        else:
            record["epsilon_covers"] = dict(self.epsilon_covers)
        return record

    @classmethod
    def from_json(cls, record: Mapping[str, Any]) -> PrivatePlan:
        """The plan :meth:`to_json` wrote; a savings run's record adds its role's keys, which stay its own."""
        values = {field.name: record[field.name] for field in dataclasses.fields(cls) if field.name in record}
        if values.get("mechanisms_compared") is not None:
            values["mechanisms_compared"] = tuple(values["mechanisms_compared"])
        correction, query = record["physical_batch_correction"], record["query"]
        return cls(**values | {
            "budget": Budget.from_json(record["budget"]),
            "physical_batch_correction": None if correction is None else PhysicalBatchCorrection(**correction),
            "query": LawQuery.from_json(query) if "sampling" in query else dict(query)})


def read_json(path: str | os.PathLike[str]) -> dict[str, Any]:
    """A plan file's JSON."""
    return json.loads(Path(path).read_text(encoding="utf-8"))


def read_plan(path: str | os.PathLike[str]) -> PrivatePlan:
    """The plan :func:`write_plan` wrote at ``path``."""
    return PrivatePlan.from_json(read_json(path))
