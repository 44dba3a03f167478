"""The ``private_model`` report's table: per budget, what the law predicted at the configuration that was
trained, what the private run achieved, and the ε it spent and an audit found (docs/private-training.md,
"Closing the loop"). Its figure is :mod:`dpscaling.figures.private_model`."""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

LABEL = "table:private_model"
CAPTION = ("The law's compute-optimal configuration per budget, trained with truncated Poisson sampling at "
           "the L priced by its accountant (padding: the expected share of L that is padding; σ untruncated: "
           "the σ untruncated Poisson would need for the same ε): predicted final loss (bootstrap 5%–95%) at "
           "the trained σ̄ against the achieved final training loss (trailing mean, the law's quantity) and "
           "held-out loss; ε spent by the run's accountant and the matched one-run audit's ε lower bound.")
# The columns the Markdown and LaTeX tables show (the CSV keeps every column), with their headings.
SHOWN = {
    "epsilon": "ε", "data_budget": "N", "compute": "C (FLOPs)", "model": "model", "batch_size": "B",
    "iterations": "T", "truncated_batch_size": "L", "padding_share": "padding", "sigma": "σ",
    "untruncated_sigma": "σ untruncated", "noise_batch_ratio": "σ̄", "predicted_loss": "predicted",
    "predicted_loss_5": "5%", "predicted_loss_95": "95%", "achieved_train_loss": "achieved (train)",
    "achieved_heldout_loss": "achieved (held-out)", "epsilon_spent": "ε spent", "audited_epsilon": "ε audited"}


def achieved_training_loss(curve: pd.DataFrame, window: int | None) -> float:
    """The run's final training loss as the law measures it: the trailing mean of its last ``window``
    logged intervals (the fit's rolling mean; one interval without it)."""
    losses = curve.sort_values("step")["loss"].to_numpy(float)
    return float(np.mean(losses[-(window or 1):]))


def report_row(plan: Mapping[str, Any], curve: pd.DataFrame, evaluation: Mapping[str, Any],
               audit: Mapping[str, Any], law, replicates, window: int | None) -> dict[str, Any]:
    """One budget's line: the law's prediction at what was trained, what was achieved, ε spent and audited."""
    from dpscaling.law.bootstrap import interval

    last = curve.sort_values("step").iloc[-1]
    budget = plan["budget"]
    nbr = float(last["noise_batch_ratio"])
    point = (np.array([plan["model_size"]]), np.array([float(plan["iterations"])]), np.array([nbr]))
    predicted = float(law.loss(*point)[0])
    low = high = math.nan
    if replicates is not None:
        lows, highs = interval(replicates.loss_matrix(*point))
        low, high = float(lows[0]), float(highs[0])
    achieved = achieved_training_loss(curve, window)
    return {
        "budget": budget["label"], "epsilon": budget["epsilon"], "delta": budget["delta"],
        "data_budget": budget["data_budget"], "compute": budget["compute"],
        "model": plan["model"], "model_size": plan["model_size"], "batch_size": plan["batch_size"],
        "iterations": plan["iterations"], "learning_rate": plan["learning_rate"],
        "trained_compute": plan["compute"],
        "sigma": float(last["sigma"]), "noise_batch_ratio": nbr,
        "truncated_batch_size": int(last["truncated_batch_size"]),
        "truncation_probability": float(last["truncation_probability"]),
        "padding_share": float(last["padding_share"]), "untruncated_sigma": float(last["untruncated_sigma"]),
        "dataset_size": int(last["dataset_size"]), "sampling_probability": float(last["sampling_probability"]),
        "planned_sigma": plan["sigma"], "query_noise_batch_ratio": plan["query"]["noise_batch_ratio"],
        "query_predicted_loss": plan["query"]["predicted_loss"],
        "predicted_loss": predicted, "predicted_loss_5": low, "predicted_loss_95": high,
        "achieved_train_loss": achieved, "achieved_heldout_loss": float(evaluation["loss"]),
        "error_train": achieved - predicted,
        "epsilon_spent": float(last["epsilon"]), "accountant": str(last["accountant"]),
        "audited_epsilon": float(audit["audited_epsilon"]),
        "audit_has_power": bool(audit["audit_has_power"]), "status": str(last["status"]),
    }


def report_from_files(law_dir: str | os.PathLike[str], bootstrap: Sequence[str], plans: Sequence[str],
                      curves: Sequence[str], evaluations: Sequence[str], audits: Sequence[str],
                      settings: Mapping[str, Any]) -> tuple[pd.DataFrame, str]:
    """Every budget's row (inputs in the same order), and what the interval is over."""
    from dpscaling.law import LawSettings, load_law
    from dpscaling.law.bootstrap import NO_REPEATS, load_replicates
    from dpscaling.private_model import read_json

    law_settings = LawSettings.from_json(dict(settings))
    law = load_law(law_dir)
    replicates = load_replicates(bootstrap[0], law_settings) if bootstrap else None
    note = f"90% over {len(replicates)} bootstrap replicates" if replicates else NO_REPEATS
    rows = [report_row(read_json(plan), pd.read_parquet(curve), read_json(evaluation), read_json(audit), law,
                       replicates, law_settings.rolling_window)
            for plan, curve, evaluation, audit in zip(plans, curves, evaluations, audits, strict=True)]
    return pd.DataFrame(rows), note


def write_report(law_dir: str | os.PathLike[str], bootstrap: Sequence[str], plans: Sequence[str],
                 curves: Sequence[str], evaluations: Sequence[str], audits: Sequence[str],
                 settings: Mapping[str, Any], table_stem: str | os.PathLike[str],
                 figure_stem: str | os.PathLike[str]) -> pd.DataFrame:
    """Rule ``private_model_report``: ``table_stem``.csv/.md/.tex (:func:`dpscaling.tables.write.write_table`)
    and the figure ``figure_stem``.pdf/.png/.csv (:data:`dpscaling.figures.private_model.PREDICTED_VS_ACHIEVED`)."""
    from dpscaling.figures import render
    from dpscaling.figures.private_model import PREDICTED_VS_ACHIEVED, PrivateModelContext
    from dpscaling.tables.write import write_table

    table, note = report_from_files(law_dir, bootstrap, plans, curves, evaluations, audits, settings)
    write_table(table, table_stem, f"{CAPTION} Interval: {note}.", LABEL, shown=SHOWN)
    render(PREDICTED_VS_ACHIEVED.name, PrivateModelContext(table, note), figure_stem)
    return table
