"""The ``private_model`` report's table: per budget, what the law predicted at the configuration that was
trained (with its seed-only and its calibrated 90% interval), what the private run achieved, the cause
split of the difference (its study twins), and the ε it spent and an audit found (docs/private-training.md,
"Closing the loop" and "Why a prediction misses"). Its figure is :mod:`dpscaling.report.figures.private_model`."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

if TYPE_CHECKING:
    from dpscaling.private.plans import PrivatePlan

LABEL = "table:private_model"
CAPTION = ("The law's compute-optimal configuration per budget, trained with truncated Poisson sampling at "
           "the L priced by its accountant (padding: the expected share of L that is padding; σ untruncated: "
           "the σ untruncated Poisson would need for the same ε): predicted final loss (bootstrap 5%–95%) at "
           "the trained σ̄ against the achieved final training loss (trailing mean, the law's quantity) and "
           "held-out loss, with the calibrated 90% interval (the law's held-out error, split-conformal); the "
           "cause split: law (its study twin at the grid's physical batch minus the law), physical batch (the "
           "twin at the plan's B minus that) and sampler (the private run minus the twin at B); ε spent by "
           "the run's accountant and the matched one-run audit's ε lower bound.")
# The columns the Markdown and LaTeX tables show (the CSV keeps every column), with their headings.
SHOWN = {
    "epsilon": "ε", "data_budget": "N", "compute": "C (FLOPs)", "model": "model", "batch_size": "B",
    "iterations": "T", "truncated_batch_size": "L", "padding_share": "padding", "sigma": "σ",
    "untruncated_sigma": "σ untruncated", "noise_batch_ratio": "σ̄", "law_loss": "law",
    "predicted_loss": "predicted", "predicted_loss_5": "seed 5%", "predicted_loss_95": "seed 95%",
    "calibrated_low": "calibrated 5%", "calibrated_high": "calibrated 95%", "achieved_train_loss": "achieved (train)",
    "inside_calibrated": "inside", "achieved_heldout_loss": "achieved (held-out)",
    "law_error": "law error", "physical_batch_effect": "batch effect", "sampler_effect": "sampler effect",
    "epsilon_spent": "ε spent", "audited_epsilon": "ε audited"}


def achieved_training_loss(curve: pd.DataFrame, window: int | None) -> float:
    """The run's final training loss as the law measures it: the trailing mean of its last ``window``
    logged intervals (the fit's rolling mean; one interval without it)."""
    losses = curve.sort_values("step")["loss"].to_numpy(float)
    return float(np.mean(losses[-(window or 1):]))


def cause_split(law_loss: float, achieved: float, twins: Mapping[str, float]) -> dict[str, float]:
    """The difference achieved − law split in three that add up to it: the law's own error (its study twin
    at the grid's physical batch against the law), the physical batch (the twin at the plan's B against
    the one at the grid's) and the sampler (the private truncated-Poisson run against the twin at B)."""
    grid, recommended = twins["grid_batch"], twins["recommended_batch"]
    return {"law_error": grid - law_loss, "physical_batch_effect": recommended - grid,
            "sampler_effect": achieved - recommended}


TWIN_COLUMNS = ("twin_grid_batch", "twin_recommended_batch", "achieved_grid_batch", "achieved_recommended_batch",
                "law_error", "physical_batch_effect", "sampler_effect")


def twin_columns(law_loss: float, achieved: float, twins: Mapping[str, pd.DataFrame],
                 window: int | None) -> dict[str, float]:
    """The study twins' batches and losses and the :func:`cause_split`; NaN without twins
    (``private_model.cause_split: false``)."""
    if not twins:
        return dict.fromkeys(TWIN_COLUMNS, math.nan)
    losses = {name: achieved_training_loss(twin, window) for name, twin in twins.items()}
    return {"twin_grid_batch": int(twins["grid_batch"]["batch_size"].iloc[0]),
            "twin_recommended_batch": int(twins["recommended_batch"]["batch_size"].iloc[0]),
            "achieved_grid_batch": losses["grid_batch"], "achieved_recommended_batch": losses["recommended_batch"],
            **cause_split(law_loss, achieved, losses)}


def report_row(plan: PrivatePlan, curve: pd.DataFrame, evaluation: Mapping[str, Any],
               audit: Mapping[str, Any], law, replicates, window: int | None,
               twins: Mapping[str, pd.DataFrame], correction=None, calibration=None) -> dict[str, Any]:
    """One budget's line: the law's prediction at what was trained (corrected for the physical batch when
    the run fits that correction), its seed-only and calibrated intervals, what was achieved, the cause
    split (empty ``twins``: none), ε spent and audited."""
    from dpscaling.law.bootstrap import interval
    from dpscaling.law.calibration import calibrated_interval

    last = curve.sort_values("step").iloc[-1]
    budget = plan.budget
    nbr = float(last["noise_batch_ratio"])
    point = (np.array([plan.model_size]), np.array([float(plan.iterations)]), np.array([nbr]))
    law_loss = float(law.loss(*point)[0])
    shift = 0.0 if correction is None else float(correction.shift(plan.batch_size, nbr, plan.model_size))
    predicted = law_loss - shift
    low = high = math.nan
    if replicates is not None:
        lows, highs = interval(replicates.loss_matrix(*point))
        low, high = float(lows[0]) - shift, float(highs[0]) - shift
    calibrated_low = calibrated_high = math.nan
    if calibration is not None:
        calibrated_low, calibrated_high = calibrated_interval(predicted, calibration, float(plan.model_size),
                                                              float(plan.iterations), nbr)
    achieved = achieved_training_loss(curve, window)
    return {
        "budget": budget.label, "epsilon": budget.epsilon, "delta": budget.delta,
        "data_budget": budget.data_budget, "compute": budget.compute,
        "model": plan.model, "model_size": plan.model_size, "batch_size": plan.batch_size,
        "iterations": plan.iterations, "learning_rate": plan.learning_rate,
        "trained_compute": plan.compute,
        "sigma": float(last["sigma"]), "noise_batch_ratio": nbr,
        "truncated_batch_size": int(last["truncated_batch_size"]),
        # ELS's accountant charges truncation in δ (no per-step probability, no untruncated σ): NaN there
        "truncation_probability": _number(last, "truncation_probability"),
        "padding_share": float(last["padding_share"]), "untruncated_sigma": _number(last, "untruncated_sigma"),
        "dataset_size": int(last["dataset_size"]), "sampling_probability": float(last["sampling_probability"]),
        "planned_sigma": plan.sigma, "query_noise_batch_ratio": plan.query.noise_batch_ratio,
        "query_predicted_loss": plan.query.predicted_loss,
        "law_loss": law_loss, "physical_batch_shift": shift,
        "predicted_loss": predicted, "predicted_loss_5": low, "predicted_loss_95": high,
        "calibrated_low": calibrated_low, "calibrated_high": calibrated_high,
        "achieved_train_loss": achieved, "achieved_heldout_loss": float(evaluation["loss"]),
        "error_train": achieved - predicted,
        "inside_seed_only": bool(low <= achieved <= high),
        "inside_calibrated": bool(calibrated_low <= achieved <= calibrated_high),
        **twin_columns(law_loss, achieved, twins, window),
        "epsilon_spent": float(last["epsilon"]), "accountant": str(last["accountant"]),
        "audited_epsilon": float(audit["audited_epsilon"]),
        "audit_has_power": bool(audit["audit_has_power"]), "status": str(last["status"]),
        "epsilon_covers": (plan.epsilon_covers or {}).get("statement"),  # and where its choices were fitted
    }


def report_from_files(inputs: Mapping[str, Any], settings: Mapping[str, Any]) -> tuple[pd.DataFrame, str]:
    """Every budget's row, and what the seed-only interval is over. ``inputs``: the rule's named inputs,
    ``law``, ``plans``, ``curves``, ``evaluations``, ``audits`` (one per budget, in the same order),
    ``twins`` (per budget, its :data:`dpscaling.private.model.TWINS` in order; empty when
    ``private_model.cause_split`` is off), and lists (empty when
    absent) ``bootstrap``, ``correction`` (the physical-batch correction) and ``calibration``."""
    from dpscaling.law import LawSettings, read_law
    from dpscaling.law.bootstrap import NO_REPEATS, load_replicates
    from dpscaling.law.calibration import load_calibration
    from dpscaling.law.physical_batch import load_correction
    from dpscaling.private.plans import read_json, read_plan
    from dpscaling.private.jobs import TWINS

    law_settings = LawSettings.from_json(dict(settings))
    law = read_law(inputs["law"])
    bootstrap, correction, calibration, mechanisms = (
        _paths(inputs.get(key)) for key in ("bootstrap", "correction", "calibration", "mechanisms"))
    replicates = load_replicates(bootstrap[0], law_settings) if bootstrap else None
    correction = load_correction(correction[0]) if correction else None
    calibration = load_calibration(calibration[0], law_settings) if calibration else None
    # A budget trained with another mechanism is predicted by that mechanism's law (docs/mechanisms.md).
    by_mechanism = _mechanism_laws(mechanisms[0]) if mechanisms else {}
    note = f"90% over {len(replicates)} bootstrap replicates" if replicates else NO_REPEATS
    plans = list(inputs["plans"])
    twins = list(inputs["twins"])
    if twins and len(twins) != len(TWINS) * len(plans):
        raise ValueError(f"private_model report: {len(twins)} twin curves for {len(plans)} budgets")
    rows = []
    for index, (plan, curve, evaluation, audit) in enumerate(zip(plans, inputs["curves"], inputs["evaluations"],
                                                                 inputs["audits"], strict=True)):
        pair = twins[index * len(TWINS):(index + 1) * len(TWINS)]
        plan = read_plan(plan)
        own = (law, replicates, correction, calibration)
        if by_mechanism and plan.mechanism != next(iter(by_mechanism)):
            # the physical-batch correction applies to every mechanism alike, as the plan's choice applied it
            own = (*by_mechanism[plan.mechanism][:2], correction, by_mechanism[plan.mechanism][2])
        row = report_row(plan, pd.read_parquet(curve), read_json(evaluation), read_json(audit), own[0], own[1],
                         law_settings.rolling_window,
                         {name: pd.read_parquet(path) for name, path in zip(TWINS, pair, strict=True)} if twins else {},
                         own[2], own[3])
        if plan.budget.mechanism is not None:
            row["mechanism"] = plan.mechanism
        if plan.budget.per_user:  # N and ε are a user's; the run names its sampler and its N in that unit
            row |= {"privacy_unit": "user", "examples_per_user": plan.budget.examples_per_user,
                    "sampler": plan.sampler, "sequences_per_unit": plan.sequences_per_unit}
        rows.append(row)
    return pd.DataFrame(rows), note


def _number(row: pd.Series, key: str) -> float:
    """A curve's column as a float, NaN where the run's accountant has none."""
    value = row.get(key)
    return math.nan if value is None or pd.isna(value) else float(value)


def _mechanism_laws(bundle: str) -> dict[str, tuple]:
    """Each mechanism's (law, replicates or None, calibration or None) in the run's bundle, the primary first."""
    from dpscaling.law.bundle import read_bundle

    primary = read_bundle(bundle)
    return {found.mechanism: (found.law, found.replicates, found.calibration)
            for found in (primary, *primary.mechanisms.values())}


def _paths(value) -> list[str]:
    """An optional input as a list of paths (a rule's named input is a string when it is one file)."""
    if not value:
        return []
    return [str(value)] if isinstance(value, str | os.PathLike) else [str(v) for v in value]


def write_report(inputs: Mapping[str, Any], settings: Mapping[str, Any], table_stem: str | os.PathLike[str],
                 figure_stem: str | os.PathLike[str]) -> pd.DataFrame:
    """Rule ``private_model_report``: ``table_stem``.csv/.md/.tex (:func:`dpscaling.report.tables.write.write_table`)
    and the figure ``figure_stem``.pdf/.png/.csv (:data:`dpscaling.report.figures.private_model.PREDICTED_VS_ACHIEVED`)."""
    from dpscaling.privacy.epsilon_scope import caption_note
    from dpscaling.report.figures import render
    from dpscaling.report.figures.private_model import PREDICTED_VS_ACHIEVED, PrivateModelContext
    from dpscaling.report.tables.write import write_table

    table, note = report_from_files(inputs, settings)
    shown = SHOWN
    if "mechanism" in table:  # budgets that name their mechanism: which one trained, after the model
        shown = {key: heading for name, heading in SHOWN.items()
                 for key, heading in ([(name, heading), ("mechanism", "mechanism")] if name == "model"
                                      else [(name, heading)])}
    covers = caption_note(table["epsilon_covers"]) if "epsilon_covers" in table else ""
    write_table(table, table_stem, f"{CAPTION} Seed-only interval: {note}.{covers}", LABEL, shown=shown)
    render(PREDICTED_VS_ACHIEVED.name, PrivateModelContext(table, note), figure_stem)
    return table
