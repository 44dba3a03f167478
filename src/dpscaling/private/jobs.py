"""A private plan's jobs (:mod:`dpscaling.private.model` makes the plan): the private run itself (truncated
Poisson, σ calibrated for the budget's (ε, δ) on exactly N training sequences, secret keys), its study twins
(the cause split of docs/private-training.md, "Why a prediction misses") and the matched one-run audit
(:mod:`dpscaling.privacy.audit`); one function per workflow rule (``private_model_train``, ``private_model_twin``,
``private_model_audit``) and the ``savings`` runs, which train plans the same way.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dpscaling.config.training_blocks import TrainingBlock
from dpscaling.core.errors import UserError
from dpscaling.privacy.mechanisms import mechanism_named
from dpscaling.private.plans import PrivatePlan, read_plan
from dpscaling.privacy.samplers import ELS_POISSON, SHUFFLE, TRUNCATED_POISSON

from dpscaling.private.model import BLOCK

if TYPE_CHECKING:  # importing the training stack pulls in JAX
    from dpscaling.train.config import TrainConfig


def private_training(training: Mapping[str, Any]) -> dict[str, Any]:
    """The ``training`` block as a private job's param (:meth:`TrainingBlock.private_params`)."""
    return TrainingBlock.private_params(training)


def plan_job_config(plan: PrivatePlan, model_param: str | Mapping[str, Any], training: Mapping[str, Any],
                    sampling: Mapping[str, Any], batch: int, noise_batch_ratio: float, seed: int) -> TrainConfig:
    """A training job of a plan: its model, T and learning rate on exactly N training sequences (more than
    one pass allowed), with ``sampling``'s keys over the grid's optimiser, clipping, masking and schedule."""
    from dpscaling.train.config import job_train_config

    # a user-level mechanism draws users as ``sampling`` draws sequences (Mechanism.training)
    job = mechanism_named(plan.mechanism).training(
        {**training, "steps": int(plan.iterations), "allow_repeats": True, **sampling})
    wildcards = {"model": plan.model, "nbr": repr(float(noise_batch_ratio)), "mech": plan.mechanism,
                 "lr": repr(float(plan.learning_rate)), "batch": str(batch), "seed": str(seed)}
    config = job_train_config(model_param, job, wildcards, int(plan.seq_len))
    if plan.budget.per_user:  # N users, every sequence of each (the subset its plan was priced on)
        return dataclasses.replace(config, train_users=int(plan.budget.data_budget))
    return dataclasses.replace(config, train_sequences=int(plan.budget.data_budget))


def train_config_for(plan: PrivatePlan, model_param: str | Mapping[str, Any], training: Mapping[str, Any],
                     seed: int) -> TrainConfig:
    """The private training job of a plan: truncated Poisson sampling, σ calibrated for the budget's (ε, δ) on
    exactly N training sequences; the grid's optimiser, clipping, masking and learning-rate schedule. A budget
    per user: its plan's sampler (user_poisson over N users, or els_poisson over their sequences), protecting
    users of up to k sequences."""
    sampler = ELS_POISSON.name if plan.sampler == ELS_POISSON.name else TRUNCATED_POISSON.name
    private = {"sampling": sampler, "accountant": None, "truncated_batch_size": None, "delta": plan.budget.delta}
    config = plan_job_config(plan, model_param, training, private, int(plan.batch_size), 0.0, seed)
    if config.sampling != plan.sampler:
        raise ValueError(f"the plan of {plan.budget.label} was priced for {plan.sampler}; its job samples "
                         f"{config.sampling}")
    return dataclasses.replace(config, target_epsilon=float(plan.budget.epsilon),
                               examples_per_user=plan.budget.examples_per_user)


# The cause split (docs/private-training.md, "Why a prediction misses"): each plan retrained in study
# mode, at the grid's physical batch and at the plan's batch, both with the study's shuffled batches.
# law error = grid_batch - prediction, physical batch = recommended_batch - grid_batch,
# sampler = private - recommended_batch.
TWINS = ("grid_batch", "recommended_batch")


def twin_batch(plan: PrivatePlan, twin: str, grid_batch: int, microbatch_size: int | None) -> int:
    """The physical batch of a plan's study twin: the grid's, or the plan's B rounded to a multiple of the
    microbatch (the compiled step scans whole microbatches)."""
    if twin not in TWINS:
        raise UserError(f"{BLOCK} twin: must be one of {TWINS}, got {twin!r}")
    if twin == "grid_batch":
        return int(grid_batch)
    multiple = int(microbatch_size or 1)
    return max(multiple, multiple * round(int(plan.batch_size) / multiple))


def twin_config_for(plan: PrivatePlan, model_param: str | Mapping[str, Any], training: Mapping[str, Any],
                    twin: str, grid_batch: int, seed: int) -> TrainConfig:
    """A plan's study twin: shuffled batches at :func:`twin_batch`, the plan's σ̄ as the study's noise on
    the mean clipped gradient, its T and learning rate, on the same N training sequences."""
    study = {"sampling": SHUFFLE.name, "accountant": None, "truncated_batch_size": None}
    batch = twin_batch(plan, twin, grid_batch, training.get("microbatch_size"))
    return plan_job_config(plan, model_param, training, study, batch, float(plan.noise_batch_ratio), seed)


def audit_settings_for(plan: PrivatePlan, audit: Mapping[str, Any], microbatch: int | None,
                       strategy: str | None = None) -> dict[str, Any]:
    """The matched audit's settings (:class:`dpscaling.privacy.audit.AuditSettings`): 2N canaries (≈ N of them
    included, the run's dataset size), the run's expected batch B, steps T, ε and δ; a correlated mechanism's
    with the run's strategy criterion (``strategy``, training.bandmf_strategy)."""
    budget, noise = plan.budget, mechanism_named(plan.mechanism)
    extra = {} if not noise.correlated else {"mechanism": plan.mechanism,
                                             **({"strategy": strategy} if strategy else {})}
    # A budget per user: 2N canary users (docs/private-training.md, "Audit"); ELS's each hold k canary sequences.
    if budget.per_user:
        extra |= {"mechanism": plan.mechanism} | (
            {"examples_per_user": int(budget.examples_per_user)} if plan.sampler == ELS_POISSON.name else {})
    return {"n_canaries": 2 * int(budget.data_budget), "expected_batch_size": int(plan.batch_size),
            "steps": int(plan.iterations), "epsilon": float(budget.epsilon), "delta": float(budget.delta),
            "significance": float(audit["significance"]), "microbatch_size": int(microbatch or plan.batch_size),
            "seed": int(audit["seed"])} | extra


# ---------------------------------------------------------------------------------------- the rules' steps

def train_plan(plan_path: str | os.PathLike[str], models: Mapping[str, Any], training: Mapping[str, Any],
               data_dir: str | os.PathLike[str], output: str | os.PathLike[str],
               checkpoint_dir: str | os.PathLike[str], twin: str | None = None, grid_batch: int | None = None):
    """Rules ``private_model_train`` (``twin`` None: the plan trained privately, its curve with its accounting
    to ``output``) and ``private_model_twin`` (the plan's study twin ``twin``, :func:`twin_config_for`)."""
    from dpscaling.train import run_training

    plan = read_plan(plan_path)
    training = dict(training)
    # A pretrained budget (docs/finetune.md): the run starts from its model's pretrained checkpoint.
    init_checkpoints = training.pop("init_checkpoints", None) or {}
    if plan.budget.pretrained:
        if plan.model not in init_checkpoints:
            raise UserError(f"private_model.budgets {plan.budget.label}: no pretrained checkpoint for "
                            f"{plan.model!r} (have {sorted(init_checkpoints)})")
        training = TrainingBlock.starting_from(training, str(init_checkpoints[plan.model]))
    model, seed = models[plan.model], int(training["seed"])
    config = (train_config_for(plan, model, training, seed) if twin is None
              else twin_config_for(plan, model, training, twin, int(grid_batch), seed))
    discard_other_plans_checkpoint(checkpoint_dir, config)
    return run_training(config, data_dir=Path(data_dir), output=Path(output), checkpoint_dir=Path(checkpoint_dir))


def discard_other_plans_checkpoint(checkpoint_dir: str | os.PathLike[str], config: TrainConfig) -> bool:
    """Remove a budget's checkpoint written for another plan (the law or the budget changed): that run
    is obsolete, and its directory holds a secret key. A checkpoint of this plan is kept and resumed."""
    import shutil

    from dpscaling.train.checkpoint import config_differences

    if not config_differences(checkpoint_dir, config):  # none recorded, or this plan's
        return False
    shutil.rmtree(checkpoint_dir)
    return True


def audit_budget(plan_path: str | os.PathLike[str], audit: Mapping[str, Any], microbatch: int | None,
                 summary_path: str | os.PathLike[str], table_path: str | os.PathLike[str],
                 strategy: str | None = None) -> dict[str, Any]:
    """Rule ``private_model_audit``: the matched one-run audit of the plan (and its negative control)."""
    from dpscaling.privacy.audit import write_audit

    plan = read_plan(plan_path)
    settings = audit_settings_for(plan, audit, microbatch, strategy)
    delta = settings.pop("delta")
    return write_audit(settings, delta, summary_path, table_path, plan.epsilon_covers)
