"""The runs that measure the law's promise at one budget (paper §4.4, "Comparison Against Baselines", measured
instead of predicted; docs/savings.md).

The paper draws ``fig:baseline_compare`` from its law's predictions and reads off "5× to 100× compute
savings". This module plans, per budget (ε, δ, N, C), the private runs that measure the same claim on trained
models, each one a configuration priced exactly as ``private_model`` prices a plan (truncated Poisson at its
priced L, σ calibrated for (ε, δ) on exactly N sequences):

* ``answer`` (and ``answer_seed<s>`` for each further seed): what ``dpscaling query`` answers at C from the
  run's law bundle, the runnable configuration (model shape, whole microbatches, whole steps);
* ``answer_c<k>``: the answer re-optimised by the law at each fraction C/k (the measured saving);
* ``baseline_<name>``: the fixed configurations a practitioner would otherwise pick (:class:`BaselineStyle`),
  at the answer's compute;
* ``model_x<f>``, ``model_div<f>``, ``batch_x<f>``, ``batch_div<f>``: the answer's neighbours (M or B scaled
  by f, T adjusted) at the answer's compute (the regret).

Every run at the answer's compute spends it to :data:`COMPUTE_TOLERANCE` (B and T chosen together in whole
microbatches and steps by :func:`spend`).
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dpscaling.privacy.epsilon_scope import choices_of_provenance, epsilon_scope
from dpscaling.core.errors import UserError
from dpscaling.law.columns import COMPUTE, CROSS_ENTROPY
from dpscaling.config.schema import default
from dpscaling.law.decision import rule_named
from dpscaling.law.queries import compute_cost
from dpscaling.law.runnable import ModelShape, whole_batch, whole_steps
from dpscaling.private.plans import Budget, PrivatePlan
from dpscaling.private.model import budgets as read_budgets

BLOCK = "savings"
# Every run at the answer's compute spends it to this relative error.
COMPUTE_TOLERANCE = 0.01
# How many whole microbatches around the wanted B :func:`spend` tries when rounding T alone misses the compute.
BATCH_SEARCH = 16
NEIGHBOURS = ("model_x", "model_div", "batch_x", "batch_div")

ANSWER, FRACTION, BASELINE, NEIGHBOUR = "answer", "fraction", "baseline", "neighbour"


@dataclass(frozen=True)
class BaselineStyle:
    """A fixed configuration of the DP literature (paper §4.4): a model — a named one, or the size a
    ``tokens_per_parameter`` ratio gives at the budget's compute (Chinchilla: ≈ 20) — trained for
    ``iterations`` steps, B then set by the compute."""

    name: str
    iterations: int
    model: str | None = None
    tokens_per_parameter: float | None = None

    @property
    def role(self) -> str:
        return f"baseline_{self.name}"


@dataclass(frozen=True)
class SavingsSettings:
    """The ``savings`` config block, typed and checked beyond the schema; a key left out takes the schema's
    default."""

    budgets: tuple[Budget, ...]
    fractions: tuple[float, ...]
    seeds: tuple[int, ...]
    baselines: tuple[BaselineStyle, ...]
    neighbours: tuple[str, ...]
    neighbour_factor: float
    physical_batch_correction: bool
    decision_rule: str

    @classmethod
    def from_mapping(cls, block: Mapping[str, Any], default_delta: float) -> SavingsSettings:
        budgets = tuple(read_budgets(block, default_delta, BLOCK))
        if any(budget.configuration is not None for budget in budgets):
            raise UserError(f"{BLOCK}.budgets: a budget takes no configuration (the law answers it)")
        fractions = tuple(float(f) for f in block.get("fractions", default("savings.fractions")))
        if any(not 0 < f < 1 for f in fractions):
            raise UserError(f"{BLOCK}.fractions: each must lie in (0, 1) (C/2 is 0.5), got {list(fractions)}")
        seeds = tuple(int(s) for s in block.get("seeds", default("savings.seeds")))
        if not seeds or len(set(seeds)) != len(seeds):
            raise UserError(f"{BLOCK}.seeds: at least one seed, none twice, got {list(seeds)}")
        styles = []
        for index, entry in enumerate(block.get("baselines", default("savings.baselines"))):
            model, ratio = entry.get("model"), entry.get("tokens_per_parameter")
            if (model is None) == (ratio is None):
                raise UserError(f"{BLOCK}.baselines[{index}]: give exactly one of model and tokens_per_parameter, "
                                f"got {dict(entry)}")
            styles.append(BaselineStyle(str(entry["name"]), int(entry["iterations"]), model,
                                        None if ratio is None else float(ratio)))
        names = [style.name for style in styles]
        if len(set(names)) != len(names):
            raise UserError(f"{BLOCK}.baselines: a name is used twice ({names})")
        neighbours = tuple(block.get("neighbours", default("savings.neighbours")))
        unknown = sorted(set(neighbours) - set(NEIGHBOURS))
        if unknown:
            raise UserError(f"{BLOCK}.neighbours: {unknown} not among {list(NEIGHBOURS)}")
        factor = float(block.get("neighbour_factor", default("savings.neighbour_factor")))
        if not factor > 1:
            raise UserError(f"{BLOCK}.neighbour_factor: must be > 1, got {factor}")
        return cls(budgets, fractions, seeds, tuple(styles), neighbours, factor,
                   bool(block.get("physical_batch_correction", default("savings.physical_batch_correction"))),
                   rule_named(block.get("decision_rule", default("savings.decision_rule"))).name)

    def fraction_role(self, fraction: float) -> str:
        return f"answer_c{1 / fraction:.4g}"

    def neighbour_role(self, kind: str) -> str:
        return f"{kind}{self.neighbour_factor:.4g}"

    def roles(self) -> list[str]:
        """Every run a budget may train, in the report's order."""
        return ([ANSWER, *(f"answer_seed{seed}" for seed in self.seeds[1:])]
                + [self.fraction_role(f) for f in self.fractions]
                + [style.role for style in self.baselines]
                + [self.neighbour_role(kind) for kind in self.neighbours])

    def budget(self, label: str) -> Budget:
        for budget in self.budgets:
            if budget.label == label:
                return budget
        raise UserError(f"{BLOCK}.budgets: no budget {label!r}")


def spend(compute: float, model_size: float, seq_len: int, microbatch: int, units: float, *,
          batch: float | None = None, steps: float | None = None) -> tuple[int, int]:
    """(B, T) in whole microbatches and steps that spend ``compute`` = 6·M·B·S·T to :data:`COMPUTE_TOLERANCE`:
    B near ``batch`` (or near C/(6·M·S·``steps``)), at most N; T = C/(6·M·B·S) rounded. When rounding T
    misses the tolerance (few steps), the B within :data:`BATCH_SEARCH` microbatches that misses least."""
    if (batch is None) == (steps is None):
        raise ValueError("give exactly one of batch and steps")
    wanted = batch if batch is not None else compute / (6.0 * model_size * seq_len * float(steps))
    first = whole_batch(wanted, microbatch, units)
    candidates = sorted({whole_batch(first + k * microbatch, microbatch, units)
                         for k in range(-BATCH_SEARCH, BATCH_SEARCH + 1)}, key=lambda b: abs(b - first))

    def error(b: int) -> float:
        return abs(float(compute_cost(model_size, b, whole_steps(compute, model_size, b, seq_len), seq_len)) / compute - 1)

    chosen = first if error(first) <= COMPUTE_TOLERANCE else min(candidates, key=error)
    return chosen, whole_steps(compute, model_size, chosen, seq_len)


# ------------------------------------------------------------------------------------------------ planning

def plan_savings(bundle_dir: str | os.PathLike[str], settings: SavingsSettings, label: str,
                 microbatch_size: int | None) -> dict[str, Any]:
    """Every run of budget ``label``, priced (``runs``: role → a :class:`dpscaling.private.plans.PrivatePlan`'s
    record with ``role``, ``kind``, ``seed``, ``model_shape``; or ``{"skipped": why}``), the law's answer and its
    predicted saving."""
    from dpscaling.law.loading import load_primary_law

    law = load_primary_law(bundle_dir)
    budget = settings.budget(label)
    microbatch = int(microbatch_size or law.bundle.provenance.get("microbatch_size") or 1)
    correction = law.bundle.correction if settings.physical_batch_correction else None
    units = float(budget.data_budget)
    try:
        answer = law.query(budget.compute, budget.epsilon, users=units, delta=budget.delta,
                           physical_batch_correction=correction is not None, microbatch_size=microbatch,
                           decision_rule=settings.decision_rule)
    except UserError as error:
        raise UserError(f"{BLOCK}.budgets {label}: the law does not answer it inside its validated range "
                        f"({error}); pick a budget `dpscaling query` answers without --allow-extrapolation") from error
    chosen = answer.runnable
    if chosen.model is None or not math.isfinite(chosen.predicted_loss):
        raise UserError(f"{BLOCK}.budgets {label}: the law's answer is not runnable ({chosen.model_note})")
    planner = _Planner(law, budget, microbatch, correction, settings.decision_rule)
    spent = chosen.compute
    runs: dict[str, dict[str, Any]] = {}
    for index, seed in enumerate(settings.seeds):
        role = ANSWER if index == 0 else f"answer_seed{seed}"
        runs[role] = planner.run(role, ANSWER, chosen.model, chosen.batch_size, chosen.iterations, seed, budget)
    for fraction in settings.fractions:
        runs[settings.fraction_role(fraction)] = planner.fraction(settings.fraction_role(fraction), fraction,
                                                                  settings.seeds[0])
    for style in settings.baselines:
        runs[style.role] = planner.baseline(style, spent, settings.seeds[0])
    for kind in settings.neighbours:
        runs[settings.neighbour_role(kind)] = planner.neighbour(settings.neighbour_role(kind), kind,
                                                                settings.neighbour_factor, chosen, spent,
                                                                settings.seeds[0])
    return {"budget": budget.to_json(), "answer": answer.to_json(),
            "answer_compute": spent, "microbatch_size": microbatch,
            "physical_batch_correction": correction is not None, "runs": runs,
            "predicted_saving": planner.predicted_saving(runs, settings)}


class _Planner:
    """Prices the runs of one budget against one law."""

    def __init__(self, law, budget: Budget, microbatch: int, correction, decision_rule: str):
        self.law, self.budget, self.microbatch, self.correction = law, budget, microbatch, correction
        self.decision_rule = decision_rule
        self.covers = epsilon_scope(choices_of_provenance(law.bundle.provenance))  # every run's: one law's choices
        self.seq_len = law.seq_len
        self.units = float(budget.data_budget)
        self._priced: dict[tuple, PrivatePlan] = {}  # a configuration trained with several seeds is priced once

    def shape(self, model_size: float) -> ModelShape:
        return self.law.shape_near(model_size)

    def run(self, role: str, kind: str, shape: ModelShape, batch: int, steps: int, seed: int,
            budget: Budget) -> dict[str, Any]:
        from dpscaling.private.model import priced_plan

        key = (shape.name, shape.param_count, int(batch), int(steps), budget.compute)
        if key not in self._priced:
            priced = priced_plan(self.law.bundle.law, budget, shape.name, shape.param_count, int(batch), int(steps),
                                 None, self.microbatch, self.correction, {"kind": kind}, self.law.mechanism)
            self._priced[key] = dataclasses.replace(priced, epsilon_covers=self.covers)
        return self._priced[key].to_json() | {"role": role, "kind": kind, "seed": int(seed),
                                               "model_shape": shape.to_json(),
                                               "model_param": shape.job_param(self.seq_len)}

    def fraction(self, role: str, fraction: float, seed: int) -> dict[str, Any]:
        compute = self.budget.compute * fraction
        try:
            answer = self.law.query(compute, self.budget.epsilon, users=self.units, delta=self.budget.delta,
                                    physical_batch_correction=self.correction is not None,
                                    microbatch_size=self.microbatch, allow_extrapolation=True,
                                    decision_rule=self.decision_rule)
        except UserError as error:
            return {"role": role, "kind": FRACTION, "fraction": fraction, "skipped": f"the law has no answer: {error}"}
        chosen = answer.runnable
        if chosen.model is None or not math.isfinite(chosen.predicted_loss):
            return {"role": role, "kind": FRACTION, "fraction": fraction,
                    "skipped": f"the law's answer is not runnable ({chosen.model_note})"}
        plan = self.run(role, FRACTION, chosen.model, chosen.batch_size, chosen.iterations, seed,
                        dataclasses.replace(self.budget, compute=compute))
        return plan | {"fraction": fraction, "flags": [flag.code for flag in answer.flags]}

    def baseline(self, style: BaselineStyle, compute: float, seed: int) -> dict[str, Any]:
        if style.model is not None:
            known = {shape.name: shape for shape in self.law.bundle.shapes}
            if style.model not in known:
                raise UserError(f"{BLOCK}.baselines {style.name}: model {style.model!r} is not one the law measured "
                                f"({sorted(known)})")
            shape = known[style.model]
        else:  # C = 6·M·D with D = r·M tokens
            shape = self.shape(math.sqrt(compute / (6.0 * float(style.tokens_per_parameter))))
        batch, steps = spend(compute, shape.param_count, self.seq_len, self.microbatch, self.units,
                             steps=style.iterations)
        return self.run(style.role, BASELINE, shape, batch, steps, seed, self.budget) | {"style": dataclasses.asdict(style)}

    def neighbour(self, role: str, kind: str, factor: float, chosen, compute: float, seed: int) -> dict[str, Any]:
        scale = factor if kind.endswith("_x") else 1 / factor
        shape, batch = chosen.model, chosen.batch_size * scale
        if kind.startswith("model"):
            shape, batch = self.shape(chosen.model_size * scale), chosen.batch_size
            if shape.param_count == chosen.model_size:
                return {"role": role, "kind": NEIGHBOUR, "skipped": f"no shape of the family nearer "
                        f"{chosen.model_size * scale:,.0f} parameters than the answer's own"}
        batch, steps = spend(compute, shape.param_count, self.seq_len, self.microbatch, self.units, batch=batch)
        if batch == chosen.batch_size and shape.param_count == chosen.model_size:
            return {"role": role, "kind": NEIGHBOUR, "skipped": f"B × {scale:g} rounds to the answer's own B "
                    f"(at most N = {self.units:g} in whole microbatches of {self.microbatch})"}
        return self.run(role, NEIGHBOUR, shape, batch, steps, seed, self.budget)

    def predicted_saving(self, runs: Mapping[str, Mapping[str, Any]], settings: SavingsSettings) -> dict[str, Any]:
        """The law's saving: C over the smallest compute whose optimum the law predicts no worse than its
        prediction for the best baseline (scanned at 2^(1/8) steps below C)."""
        import numpy as np

        from dpscaling.law.queries import best_loss_per_compute, model_size_grid

        baselines = {role: run["predicted_loss"] for role, run in runs.items()
                     if run.get("kind") == BASELINE and math.isfinite(run.get("predicted_loss", math.nan))}
        if not baselines:
            return {"saving": None, "why": "no baseline is inside the law's range"}
        best_role = min(baselines, key=baselines.get)
        target = baselines[best_role]
        budgets = self.budget.compute * 2.0 ** (-np.arange(0, 8 * 10 + 1) / 8)
        fitted = self.law.bundle.law
        source = self.law.sigma_source(self.budget.delta)
        best = best_loss_per_compute(budgets, self.budget.epsilon, self.units, fitted.loss, source.sigma,
                                     self.seq_len, model_size_grid(*fitted.model_size_range()),
                                     fitted.iteration_bounds(), correction=self.correction)
        matching = best[best[CROSS_ENTROPY] <= target]
        if matching.empty:
            return {"saving": None, "best_baseline": best_role, "baseline_loss": target,
                    "why": "no budget at or below C reaches the best baseline's predicted loss"}
        smallest = float(matching[COMPUTE].min())
        return {"saving": self.budget.compute / smallest, "best_baseline": best_role, "baseline_loss": target,
                "matching_compute": smallest, "resolution": "2^(1/8) in compute",
                "lower_bound": bool(smallest <= budgets[-1] * (1 + 1e-9))}


def write_savings_plan(bundle_dir: str | os.PathLike[str], block: Mapping[str, Any], default_delta: float,
                       label: str, microbatch_size: int | None, out: str | os.PathLike[str]) -> dict[str, Any]:
    """Rule ``savings_plan``: budget ``label``'s runs as JSON."""
    from dpscaling.core.io import write_json_atomic

    plan = plan_savings(bundle_dir, SavingsSettings.from_mapping(block, default_delta), label, microbatch_size)
    write_json_atomic(out, plan)
    return plan


def trained_roles(plan: Mapping[str, Any]) -> list[str]:
    """The roles of a budget's plan that train (the others say why not)."""
    return [role for role, run in plan["runs"].items() if "skipped" not in run]


def train_role(plan_path: str | os.PathLike[str], role: str, models: Mapping[str, Any], training: Mapping[str, Any],
               data_dir: str | os.PathLike[str], output: str | os.PathLike[str],
               checkpoint_dir: str | os.PathLike[str], evaluation: Mapping[str, Any],
               evaluation_out: str | os.PathLike[str]):
    """Rule ``savings_train``: one role's private run (:func:`dpscaling.private.jobs.train_config_for`: truncated
    Poisson, σ calibrated for (ε, δ) on exactly N sequences, secret noise), then its held-out loss."""
    from pathlib import Path

    from dpscaling.core.io import write_json_atomic
    from dpscaling.private.plans import read_json
    from dpscaling.private.jobs import discard_other_plans_checkpoint, train_config_for
    from dpscaling.train import run_training
    from dpscaling.train.evaluate import evaluate_checkpoint

    run = read_json(plan_path)["runs"][role]
    if "skipped" in run:
        raise UserError(f"{BLOCK} {role}: not a run of this plan ({run['skipped']})")
    plan = PrivatePlan.from_json(run)
    # a model of the config keeps its own param (its rows, intermediate size); a new shape is built from the plan
    model = models.get(plan.model, run["model_param"])
    config = train_config_for(plan, model, training, int(run["seed"]))
    discard_other_plans_checkpoint(checkpoint_dir, config)
    summary = run_training(config, data_dir=Path(data_dir), output=Path(output), checkpoint_dir=Path(checkpoint_dir))
    scored = evaluate_checkpoint(checkpoint_dir, data_dir, **{**evaluation, "split": "heldout"})
    write_json_atomic(evaluation_out, scored.to_dict())
    return summary, scored
