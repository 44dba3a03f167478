"""Close the loop: ask the law, train its answer privately, compare (paper §3.4, "Using the fitted function").

The paper's promise to a practitioner is a prediction: for a compute budget C (FLOPs), a privacy
budget (ε, δ) and a data budget N (sequences), the law names the compute-optimal model, batch size
B and iterations T and predicts the final loss (§3.4, "Using the fitted function"). This module
checks that promise on the run's own law, one budget at a time, in five steps (one workflow rule
each, target ``private_model``):

1. :func:`plan_budget` — the answer of ``dpscaling query`` (:meth:`dpscaling.law.answers.ScalingLaw.query`:
   one search, one rounding, one price, one decision rule) restricted to what the workflow can build: the
   run's own trained models, whole microbatches and steps, σ priced for Poisson batches of the law's
   mechanism; then priced exactly as the private run will be (truncated Poisson at its priced L). The
   learning rate is the one that won on the law's measured grid for that model at the nearest noisy σ̄.
   The answer is a :class:`PrivatePlan`, which every later step reads.
2. :func:`dpscaling.private.jobs.train_config_for` — a ``poisson`` (truncated Poisson, secret keys) training job at that
   (model, B, T) on exactly N training sequences, whose σ is calibrated for (ε, δ) by the run's
   matched accountant (``target_epsilon``), with the grid's learning-rate schedule.
3. The matched audit (:func:`dpscaling.private.jobs.audit_settings_for`): the gradient-canary one-run audit of
   :mod:`dpscaling.privacy.audit` at the run's (N, B, T, L, ε, δ) — see docs/private-training.md for why
   the private run itself carries no canaries.
4. The study twins (:func:`dpscaling.private.jobs.twin_config_for`, not in the paper): the plan retrained with shuffled
   batches at its σ̄ and T, at the grid's physical batch and at B, which split achieved − law into the
   law's error, the physical batch and the sampler.
5. The report (:mod:`dpscaling.report.tables.private_model`, :mod:`dpscaling.report.figures.private_model`) — the
   law's prediction at the configuration that was actually trained (its σ̄ = the calibrated σ / B;
   corrected for the physical batch when the run fits that correction) with the bootstrap 90% interval
   and the calibrated one, beside the achieved final training loss (the law's quantity) and held-out
   loss, the cause split, the ε the run's own accountant spent and the audited ε.
"""

from __future__ import annotations

import dataclasses
import math
import os
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np

from dpscaling.core.errors import UserError
from dpscaling.accounting.branches import POISSON_BRANCH
from dpscaling.privacy.epsilon_scope import choices_of_provenance, epsilon_scope
from dpscaling.law.columns import MODEL, MODEL_SIZE
from dpscaling.law.decision import Scored, comparable_scores
from dpscaling.law.physical_batch import PhysicalBatchCorrection
from dpscaling.law.runnable import best_learning_rate
from dpscaling.privacy.mechanisms import CHOOSE, DPSGD, mechanism_named
from dpscaling.private.plans import Budget, FixedConfiguration, LawQuery, PrivatePlan

if TYPE_CHECKING:  # the law's answers pull in SciPy
    from dpscaling.law.answers import ScalingLaw

BLOCK = "private_model"


def refuse_budget_per_user(budget: Budget, where: str) -> None:
    """What a budget per user (``examples_per_user``) does not combine with here: a fixed configuration (its B
    and T would need a unit) and a pretrained start (fine-tuning per user is not built)."""
    if not budget.per_user:
        return
    if budget.examples_per_user < 1:
        raise UserError(f"{where}.examples_per_user: must be >= 1, got {budget.examples_per_user}")
    for key, present in (("configuration", budget.configuration is not None), ("pretrained", budget.pretrained)):
        if present:
            raise UserError(f"{where}.{key}: a budget per user (examples_per_user) is planned by the law's search "
                            f"from scratch; remove {key} or examples_per_user")


def budgets(block: Mapping[str, Any], default_delta: float, name: str = BLOCK) -> list[Budget]:
    """The budgets of a config block ``name`` (``private_model``, ``savings``; δ defaults to ``default_delta``,
    accounting.delta)."""
    result = []
    for index, entry in enumerate(block["budgets"]):
        delta = entry.get("delta")
        fixed = entry.get("configuration")
        if fixed is not None:
            rate = fixed.get("learning_rate")
            fixed = FixedConfiguration(str(fixed["model"]), int(fixed["batch_size"]), int(fixed["iterations"]),
                                       None if rate is None else float(rate))
        mechanism = entry.get("mechanism")
        if mechanism not in (None, CHOOSE):
            mechanism_named(mechanism, f"{name}.budgets[{index}].mechanism")
        per_user = entry.get("examples_per_user")
        budget = Budget(float(entry["epsilon"]), float(default_delta if delta is None else delta),
                        int(entry["data_budget"]), float(entry["compute"]), fixed, bool(entry.get("pretrained")),
                        mechanism, None if per_user is None else int(per_user))
        refuse_budget_per_user(budget, f"{name}.budgets[{index}]")
        if not (budget.epsilon > 0 and 0 < budget.delta < 1 and budget.data_budget >= 1 and budget.compute > 0):
            raise UserError(f"{name}.budgets[{index}]: epsilon, data_budget and compute must be positive and "
                            f"delta in (0, 1), got {dict(entry)}")
        result.append(budget)
    labels = [b.label for b in result]
    if len(set(labels)) != len(labels):
        raise UserError(f"{name}.budgets: a budget is listed twice ({labels})")
    return result


def budget_by_label(block: Mapping[str, Any], default_delta: float, label: str) -> Budget:
    for budget in budgets(block, default_delta):
        if budget.label == label:
            return budget
    raise UserError(f"{BLOCK}.budgets: no budget {label!r}")


def plan_budget(law_dir: str | os.PathLike[str] | ScalingLaw, budget: Budget, models: Sequence[str],
                learning_rate: float | None = None, microbatch_size: int | None = None,
                correction: PhysicalBatchCorrection | None = None,
                fixed_sizes: Mapping[str, float] | None = None, mechanism: str | None = None,
                decision_rule: str | None = None, user_sequences: int | None = None) -> PrivatePlan:
    """The law's answer for ``budget`` among the run's ``models``, made trainable, or the budget's fixed
    configuration as it stands (its model's parameter count in ``fixed_sizes``). A budget per user is asked
    per user (``examples_per_user``), searched and priced on ``user_sequences``, the sequences its N users hold
    (the query's ``sequences``; :func:`priced_plan`).

    The answer is ``dpscaling query``'s (:meth:`dpscaling.law.answers.ScalingLaw.query`: one search, one
    rounding, one pricing, one decision rule), asked with what the private run trains: the run's own
    ``models``, whole microbatches, Poisson's σ (``sampling="poisson"``) and extrapolation allowed (flagged:
    the closed loop measures it). Its configuration is then priced exactly as the private run will be
    (:func:`priced_plan`: truncated Poisson at its priced L). ``law_dir``: a law bundle (its own mechanism's
    law answers) or a loaded law. With a ``correction`` (not in the paper:
    :mod:`dpscaling.law.physical_batch`) every loss is the law's corrected to the candidate's B;
    ``law_loss`` keeps the uncorrected prediction.
    """
    from dpscaling.law.answers import ScalingLaw

    law = law_dir if isinstance(law_dir, ScalingLaw) else _load_one(law_dir)
    mechanism = mechanism or law.mechanism
    fixed_rate = budget.configuration is not None and budget.configuration.learning_rate is not None
    # what the run's ε covers: where the law's choices were fitted, its learning rate given or chosen on data
    covers = epsilon_scope(choices_of_provenance(law.bundle.provenance),
                           learning_rate_given=learning_rate is not None or fixed_rate)
    if budget.configuration is not None:
        return dataclasses.replace(_fixed_plan(law.bundle.law, law.sigma_source(), budget, fixed_sizes or {},
                                               learning_rate, microbatch_size, correction, mechanism),
                                   epsilon_covers=covers)
    try:
        answer = law.query(budget.compute, budget.epsilon, users=float(budget.data_budget), delta=budget.delta,
                           physical_batch_correction=correction or False, allow_extrapolation=True,
                           microbatch_size=microbatch_size, optimum_interval=False, sampling=POISSON_BRANCH,
                           models=list(models), decision_rule=decision_rule,
                           examples_per_user=budget.examples_per_user, sequences=user_sequences)
    except UserError as error:
        raise UserError(f"{BLOCK}.budgets {budget.label}: the law cannot answer it: {error}") from error
    chosen = answer.runnable
    model = chosen.measured_model or (chosen.model.name if chosen.model is not None else None)
    if model is None or not math.isfinite(chosen.predicted_loss):
        raise UserError(f"{BLOCK}.budgets {budget.label}: the law's answer is not runnable ({chosen.model_note})")
    plan = priced_plan(law.bundle.law, budget, model, chosen.model_size, chosen.batch_size, chosen.iterations,
                       learning_rate or chosen.learning_rate, microbatch_size, correction,
                       search_query(answer, models), mechanism, user_sequences)
    decision = None if chosen.decision is None else {
        **chosen.decision.to_json(), "calibrated_interval_90": answer.to_json()["calibrated_interval_90"],
        "flags": [flag.code for flag in answer.flags]}
    return dataclasses.replace(plan, decision=decision, epsilon_covers=covers)


def _load_one(bundle: str | os.PathLike[str]) -> ScalingLaw:
    """The law of the bundle's own mechanism (a budget that names no mechanism is planned by the run's
    primary mechanism's law)."""
    from dpscaling.law.loading import load_primary_law

    return load_primary_law(bundle)


def search_query(answer, models: Sequence[str]) -> LawQuery:
    """The search's own optimum (the paper's point optimum), as its σ source priced it."""
    optimum = answer.optimum
    return LawQuery(optimum.model_size, optimum.batch_size, optimum.iterations, optimum.sigma,
                    optimum.noise_batch_ratio, optimum.predicted_loss, answer.sampling, float(answer.query["delta"]),
                    answer.candidates, models=tuple(models))


def _fixed_plan(law, source, budget: Budget, fixed_sizes: Mapping[str, float], learning_rate: float | None,
                microbatch_size: int | None, correction: PhysicalBatchCorrection | None,
                mechanism: str = DPSGD.name) -> PrivatePlan:
    """A budget's fixed configuration, priced as the private run will be; its query is the law at that
    configuration with σ from its table (the study's accountant)."""
    fixed = budget.configuration
    if fixed.model not in fixed_sizes:
        raise UserError(f"{BLOCK}.budgets {budget.label}: configuration.model {fixed.model!r} is not a model of "
                        f"this config (models.names or models.custom: {sorted(fixed_sizes)})")
    if fixed.batch_size > budget.data_budget:
        raise UserError(f"{BLOCK}.budgets {budget.label}: configuration.batch_size {fixed.batch_size} exceeds "
                        f"data_budget {budget.data_budget}")
    size, batch, steps = float(fixed_sizes[fixed.model]), fixed.batch_size, fixed.iterations
    table_sigma = float(source.sigma(np.array([budget.epsilon]), np.array([float(steps)]),
                                     np.array([batch / budget.data_budget]))[0])
    query = LawQuery(size, float(batch), float(steps), table_sigma, table_sigma / batch,
                     corrected_loss(law, correction, size, steps, table_sigma / batch, batch), source.sampling,
                     float(source.delta), 1, fixed=True)
    return priced_plan(law, budget, fixed.model, size, batch, steps, fixed.learning_rate or learning_rate,
                       microbatch_size, correction, query, mechanism)


def priced_plan(law, budget: Budget, model: str, model_size: float, batch: int, steps: int,
                learning_rate: float | None, microbatch_size: int | None, correction: PhysicalBatchCorrection | None,
                query: LawQuery | Mapping[str, Any], mechanism: str = DPSGD.name,
                user_sequences: int | None = None) -> PrivatePlan:
    """The plan of (model, B, T) for ``budget``: σ calibrated for truncated Poisson at its priced L (as the
    private run will be: :func:`dpscaling.accounting.matched.account_run` with the plan's ``mechanism``), the
    law's loss there (corrected and not), the learning rate (:func:`plan_learning_rate`) and ``query``, what
    asked for it. A budget per user: a user-level mechanism's B and N count users, each bringing m sequences
    to a step (C = 6·M·B·m·S·T); DP-SGD's are sequences, priced by ELS on ``user_sequences``, the sequences
    of the N users the run trains on (None: N, the conservative end, as the query assumes:
    :func:`dpscaling.law.budget.held_sequences`)."""
    from dpscaling.accounting.pricing import price_run, private_sampler
    from dpscaling.law.budget import held_sequences
    from dpscaling.law.queries import compute_cost

    noise, k = mechanism_named(mechanism), budget.examples_per_user
    units = budget.data_budget
    if budget.per_user and noise.unit == "sequence":
        units = int(held_sequences(budget.data_budget, int(k), user_sequences))
    run = price_run(mechanism, budget.epsilon, budget.delta, units, batch, steps, microbatch_size or 1,
                    examples_per_user=k)
    nbr = run.sigma / batch
    sequences_per_unit = noise.sequences_per_unit
    return PrivatePlan(
        budget=budget, model=model, model_size=float(model_size), batch_size=int(batch), iterations=int(steps),
        learning_rate=learning_rate or plan_learning_rate(law, model, model_size, nbr, steps),
        seq_len=int(law.seq_len),
        compute=float(compute_cost(model_size, batch * sequences_per_unit, steps, law.seq_len)),
        sigma=run.sigma, noise_batch_ratio=nbr, untruncated_sigma=run.untruncated_sigma,
        truncated_batch_size=run.truncated_batch_size,
        truncation_probability=run.truncation_probability, padding_share=run.padding_share,
        predicted_loss=float(corrected_loss(law, correction, model_size, steps, nbr, batch)),
        law_loss=float(corrected_loss(law, None, model_size, steps, nbr, batch)),
        physical_batch_correction=correction, query=query, mechanism=mechanism,
        sampler=private_sampler(noise, k), dataset_size=None if units == budget.data_budget else int(units),
        sequences_per_unit=sequences_per_unit)


def plan_learning_rate(law, model: str, model_size: float, noise_batch_ratio: float, steps: int) -> float:
    """The learning rate that won on the law's measured grid for ``model`` (a model the grid did not train:
    the measured one nearest in size) at the nearest noisy σ̄ and T."""
    from dpscaling.law.runnable import nearest_measured

    measured = law.grid.drop_duplicates(MODEL).set_index(MODEL)[MODEL_SIZE].to_dict()
    nearest = model if model in measured else nearest_measured(model_size, measured)
    return best_learning_rate(law.grid, nearest, noise_batch_ratio, steps)


def corrected_loss(law, correction: PhysicalBatchCorrection | None, model_size: float, iterations: float,
                   noise_batch_ratio: float, batch: float) -> float:
    """The law's loss at (M, T, σ̄), corrected to physical batch ``batch`` when a correction is given."""
    point = (np.array([float(model_size)]), np.array([float(iterations)]), np.array([float(noise_batch_ratio)]))
    loss = law.loss(*point)
    if correction is not None:
        loss = correction.apply(loss, batch, point[2], point[0])
    return float(loss[0])


# ---------------------------------------------------------------------------------------- the rules' steps

def write_plan(law_dir: str | os.PathLike[str], block: Mapping[str, Any], default_delta: float, label: str,
               models: Sequence[str], microbatch_size: int | None, out: str | os.PathLike[str],
               correction_file: str | os.PathLike[str] | None = None,
               fixed_sizes: Mapping[str, float] | None = None, data_dir: str | os.PathLike[str] | None = None,
               seed: int = 0) -> PrivatePlan:
    """Rule ``private_model_plan``: the plan of budget ``label`` as JSON (corrected for the physical batch
    when the run fits the correction: ``correction_file``; a fixed configuration's model sized by
    ``fixed_sizes``), chosen by the block's ``decision_rule``. A budget per user reads the users of the packed
    data in ``data_dir``: its run trains on N of them drawn with ``seed`` (:func:`user_sequences`)."""
    from dpscaling.core.io import write_json_atomic
    from dpscaling.law.physical_batch import load_correction

    correction = load_correction(correction_file) if correction_file else None
    budget = budget_by_label(block, default_delta, label)
    rule = block.get("decision_rule")
    sequences = None
    if budget.per_user:
        if data_dir is None:
            raise ValueError("a budget per user is planned with the packed data's users (data_dir)")
        sequences = user_sequences(data_dir, budget.data_budget, seed)
    if budget.mechanism is None:
        plan = plan_budget(law_dir, budget, models, block["learning_rate"], microbatch_size, correction, fixed_sizes,
                           decision_rule=rule, user_sequences=sequences)
    else:
        plan = plan_mechanisms(law_dir, budget, models, block["learning_rate"], microbatch_size, correction,
                               fixed_sizes, rule, sequences)
    write_json_atomic(out, plan.to_json())
    return plan


def user_sequences(data_dir: str | os.PathLike[str], users: int, seed: int) -> int:
    """The sequences of the ``users`` users a budget's private run trains on (the subset its run draws with
    ``seed``: :func:`dpscaling.data.users.subset_of_users`, keyed by the users' own rows)."""
    from dpscaling.data.shards import load_split, load_users
    from dpscaling.data.users import subset_of_users

    kept, _ = subset_of_users(load_split(data_dir, "train"), load_users(data_dir), int(users), int(seed))
    return int(kept.sum())


def plan_mechanisms(laws: str | os.PathLike[str], budget: Budget, models: Sequence[str],
                    learning_rate: float | None = None, microbatch_size: int | None = None,
                    correction: PhysicalBatchCorrection | None = None,
                    fixed_sizes: Mapping[str, float] | None = None, decision_rule: str | None = None,
                    user_sequences: int | None = None) -> PrivatePlan:
    """A budget that names its mechanism, planned by that mechanism's law, or, with ``mechanism: choose``, by
    every mechanism's law (``laws``: the run's bundle, holding every mechanism's law), the decision rule's lowest score
    winning (:mod:`dpscaling.law.decision`, as ``dpscaling query`` chooses); the plan lists what each
    mechanism's law planned. The physical-batch correction, fitted on the primary mechanism's runs, applies
    to every mechanism's plan alike, so that they compare at the same physical batch."""
    from dpscaling.law.answers import ScalingLaw
    from dpscaling.law.loading import load_law

    across = load_law(laws)
    if isinstance(across, ScalingLaw):
        raise UserError(f"{BLOCK}.budgets {budget.label}: {laws} holds one mechanism's law, not a run's several")
    wanted = across.mechanisms if budget.mechanism == CHOOSE else [budget.mechanism]
    unknown = [name for name in wanted if name not in across.mechanisms]
    if unknown:
        raise UserError(f"{BLOCK}.budgets {budget.label}: mechanism {unknown[0]!r} is not one of this run's "
                        f"training.mechanisms {across.mechanisms} (or {CHOOSE!r})")
    plans, compared = {}, []
    for name in wanted:
        try:
            plans[name] = plan_budget(across.law(name), budget, models, learning_rate, microbatch_size, correction,
                                      fixed_sizes, name, decision_rule, user_sequences)
        except UserError as error:
            compared.append({"mechanism": name, "planned": False, "reason": str(error)})
            if len(wanted) == 1:
                raise
            continue
        plan = plans[name]
        compared.append({"mechanism": name, "planned": True, "model": plan.model, "batch_size": plan.batch_size,
                         "iterations": plan.iterations, "noise_batch_ratio": plan.noise_batch_ratio,
                         "predicted_loss": plan.predicted_loss, "decision": plan.decision})
    if not plans:
        raise UserError(f"{BLOCK}.budgets {budget.label}: no mechanism's law plans it: "
                        + "; ".join(f"{row['mechanism']}: {row['reason']}" for row in compared))
    scores, notes = comparable_scores({name: plan_scored(plan) for name, plan in plans.items()})
    for row in compared:
        if row["mechanism"] in plans:
            row.update(score=scores[row["mechanism"]], score_note=notes.get(row["mechanism"]))
    best = min(plans, key=scores.__getitem__)
    return dataclasses.replace(plans[best], mechanisms_compared=tuple(compared))


def plan_scored(plan: PrivatePlan) -> Scored:
    """What the choice among mechanisms reads of a plan (:func:`dpscaling.law.decision.comparable_scores`): the
    decision rule's score (its predicted loss for a fixed configuration, which has none)."""
    decision = plan.decision
    if decision is None:
        return Scored(float(plan.predicted_loss), float(plan.predicted_loss), None, None, None)
    interval = decision.get("calibrated_interval_90")
    width = None if not interval or None in interval else (float(interval[1]) - float(interval[0])) / 2
    return Scored(float(decision["predicted_loss"]), float(decision["score"]), decision["rule"], decision["applied"],
                  width)
