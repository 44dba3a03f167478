"""What the savings runs measured (docs/savings.md): one row per run, and per budget the measured and predicted
comparison against the baselines (paper §4.4, ``fig:baseline_compare``), the measured compute saving and the
regret against the answer's neighbours.

**Measured loss.** The held-out loss of the run's final model (the same seeded held-out sample for every run):
what a practitioner keeps. The final training loss (the trailing mean the law is fitted on) is reported beside
it, against the law's prediction at the configuration that was trained.

**Seed noise.** The answer is trained with every seed of ``savings.seeds``; a budget's seed spread is the range
of its held-out losses. Two single runs are told apart only when they differ by more than the *seed noise*,
the mean of the budgets' spreads (one spread from two seeds is a single draw; the budgets share one grid, one
corpus and one sampler, so their spreads estimate the same noise).

**Measured saving.** The smallest trained fraction f of C (1 included) at which the answer re-optimised for
f·C ends within the seed noise of the best baseline's measured loss, or below it: a saving of 1/f (a lower
bound when even the smallest fraction matches); and, between the trained fractions, where the measured curve
(linear in log C) crosses that level. Beside it the law's predicted saving
(:meth:`dpscaling.private.savings_plan._Planner.predicted_saving`).

**Regret.** The answer's mean measured loss minus the lowest among it and its neighbours; within the seed
noise, the answer is as good as its neighbourhood can tell.

**Calibrated interval.** Every run with a prediction gets the bundle's calibrated 90% interval at its point
(M, T, σ̄); a budget's coverage is the share of its runs whose final training loss lies inside, beside the
interval's mean half-width: the savings runs are private answers the calibration never saw.

**ε.** Every run's ε is recomputed here from its own record (dataset size, sampling rate, L, σ, steps, δ) by
dp-accounting's PLD accountant on the truncated-Poisson event, independently of the run's accountant.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

import pandas as pd

from dpscaling.private.savings_plan import ANSWER, BASELINE, FRACTION, NEIGHBOUR

LABEL_RUNS = "table:savings_runs"
LABEL = "table:savings"
CAPTION_RUNS = ("Every savings run, trained privately (truncated Poisson at its priced L, σ calibrated for the "
                "budget's (ε, δ) on exactly N sequences): the configuration, its compute against the answer's, "
                "the law's prediction (corrected for the physical batch) beside the achieved final training and "
                "held-out loss, the ε the run's accountant spent and the ε recomputed independently.")
CAPTION = ("Per budget: the law's compute-optimal answer (mean held-out loss over its seeds, and their spread) "
           "against the best of the baselines at the same compute, measured and predicted; the measured "
           "compute saving (the answer re-optimised at C/k matching the best baseline within the seed noise) "
           "beside the law's; and the regret against the answer's neighbours (M or B scaled, T adjusted).")
RUN_SHOWN = {
    "epsilon": "ε", "data_budget": "N", "role": "run", "model": "model", "model_size": "M", "batch_size": "B",
    "iterations": "T", "compute_ratio": "C / answer's", "noise_batch_ratio": "σ̄", "predicted_loss": "predicted",
    "calibrated_low": "calibrated 5%", "calibrated_high": "calibrated 95%", "train_loss": "train",
    "heldout_loss": "held-out", "epsilon_spent": "ε spent",
    "epsilon_recomputed": "ε recomputed"}
SHOWN = {
    "epsilon": "ε", "data_budget": "N", "compute": "C", "answer": "answer (model, B, T)",
    "answer_heldout": "answer", "seed_spread": "seed spread", "best_baseline": "best baseline",
    "best_baseline_heldout": "its loss", "answer_vs_best_baseline": "answer − baseline",
    "predicted_answer_vs_best_baseline": "predicted", "measured_saving": "saving", "saving_is_lower_bound": "≥",
    "measured_saving_interpolated": "interpolated",
    "predicted_saving": "predicted saving", "best_neighbour": "best neighbour", "regret": "regret",
    "regret_within_noise": "within noise", "calibrated_coverage": "calibrated coverage",
    "calibrated_mean_half_width": "mean half-width"}
# dp-accounting's PLD discretisation for the recomputed ε (a finer one moves it by < 0.1% on these runs)
RECOMPUTE_INTERVAL = 1e-3


def recomputed_epsilon(last: Mapping[str, Any]) -> float:
    """ε of a private run from its own record, by dp-accounting's PLD accountant on the truncated-Poisson event."""
    import dp_accounting

    event = dp_accounting.SelfComposedDpEvent(
        dp_accounting.TruncatedSubsampledGaussianDpEvent(
            dataset_size=int(last["dataset_size"]), sampling_probability=float(last["sampling_probability"]),
            truncated_batch_size=int(last["truncated_batch_size"]), noise_multiplier=float(last["sigma"])),
        int(last["accounted_steps"]))
    accountant = dp_accounting.pld.PLDAccountant(value_discretization_interval=RECOMPUTE_INTERVAL)
    return float(accountant.compose(event).get_epsilon(float(last["delta"])))


def run_row(plan: Mapping[str, Any], role: str, curve: pd.DataFrame, evaluation: Mapping[str, Any],
            window: int | None, calibration=None) -> dict[str, Any]:
    """One trained run's line; with the law's ``calibration``, its calibrated 90% interval at the run's point and
    whether the achieved training loss (the law's quantity) lies inside."""
    from dpscaling.law.calibration import calibrated_interval
    from dpscaling.private.plans import PrivatePlan
    from dpscaling.report.tables.private_model import achieved_training_loss

    run = plan["runs"][role]
    priced = PrivatePlan.from_json(run)
    budget = plan["budget"]
    last = curve.sort_values("step").iloc[-1]
    predicted, train = float(priced.predicted_loss), achieved_training_loss(curve, window)
    low = high = math.nan
    if calibration is not None and math.isfinite(predicted) and math.isfinite(calibration.half_width):
        low, high = calibrated_interval(predicted, calibration, float(priced.model_size), float(priced.iterations),
                                        float(last["noise_batch_ratio"]))
    return {
        "budget": budget["label"], "epsilon": budget["epsilon"], "delta": budget["delta"],
        "data_budget": budget["data_budget"], "compute": budget["compute"], "role": role, "kind": run["kind"],
        "seed": int(run["seed"]), "fraction": float(run.get("fraction", 1.0)), "model": priced.model,
        "model_size": float(priced.model_size), "batch_size": int(priced.batch_size),
        "iterations": int(priced.iterations), "learning_rate": float(priced.learning_rate),
        "trained_compute": float(priced.compute), "compute_ratio": float(priced.compute) / plan["answer_compute"],
        "sigma": float(last["sigma"]), "noise_batch_ratio": float(last["noise_batch_ratio"]),
        "truncated_batch_size": int(last["truncated_batch_size"]),
        "predicted_loss": predicted, "law_loss": float(priced.law_loss),
        "calibrated_low": low, "calibrated_high": high,
        "inside_calibrated": bool(low <= train <= high) if math.isfinite(low) else None,
        "train_loss": train, "heldout_loss": float(evaluation["loss"]),
        "epsilon_spent": float(last["epsilon"]), "epsilon_recomputed": recomputed_epsilon(last),
        "accountant": str(last["accountant"]), "sampler": str(last["sampler"]), "status": str(last["status"]),
        "epsilon_covers": (priced.epsilon_covers or {}).get("statement"),  # and where its choices were fitted
    }


def seed_noise(runs: pd.DataFrame) -> float:
    """The mean over budgets of the answer's seed spread (max − min of its held-out losses); NaN with one seed."""
    answers = runs[runs["kind"] == ANSWER]
    spreads = answers.groupby("budget")["heldout_loss"].agg(lambda x: x.max() - x.min() if len(x) > 1 else math.nan)
    return float(spreads.mean()) if spreads.notna().any() else math.nan


def budget_row(plan: Mapping[str, Any], runs: pd.DataFrame, noise: float) -> dict[str, Any]:
    """One budget's comparison: the answer against the best baseline (measured and predicted), the measured
    and predicted saving, the regret."""
    budget = plan["budget"]
    mine = runs[runs["budget"] == budget["label"]]
    answers = mine[mine["kind"] == ANSWER]
    answer = float(answers["heldout_loss"].mean())
    first = answers.iloc[0]
    row: dict[str, Any] = {
        "budget": budget["label"], "epsilon": budget["epsilon"], "data_budget": budget["data_budget"],
        "compute": budget["compute"], "answer": f"{first['model']}, {first['batch_size']}, {first['iterations']}",
        "answer_seeds": len(answers), "answer_heldout": answer,
        "seed_spread": float(answers["heldout_loss"].max() - answers["heldout_loss"].min()),
        "seed_noise": noise, "answer_predicted": float(first["predicted_loss"]),
        "answer_train": float(answers["train_loss"].mean())}
    baselines = mine[mine["kind"] == BASELINE]
    if len(baselines):
        best = baselines.loc[baselines["heldout_loss"].idxmin()]
        predicted = baselines["predicted_loss"].dropna()
        row |= {"best_baseline": best["role"].removeprefix("baseline_"),
                "best_baseline_heldout": float(best["heldout_loss"]),
                "answer_vs_best_baseline": answer - float(best["heldout_loss"]),
                "predicted_best_baseline": float(predicted.min()) if len(predicted) else math.nan,
                "predicted_answer_vs_best_baseline": (float(first["predicted_loss"]) - float(predicted.min())
                                                      if len(predicted) else math.nan)}
        row |= measured_saving(mine, answer, float(best["heldout_loss"]), noise)
    predicted = mine[mine["calibrated_low"].notna()] if "calibrated_low" in mine else mine.iloc[:0]
    row |= {"runs_predicted": len(predicted),
            "calibrated_coverage": float(predicted["inside_calibrated"].astype(float).mean()) if len(predicted)
            else math.nan,
            "calibrated_mean_half_width": float(((predicted["calibrated_high"] - predicted["calibrated_low"]) / 2).mean())
            if len(predicted) else math.nan}
    saving = plan.get("predicted_saving") or {}
    row |= {"predicted_saving": saving.get("saving") if saving.get("saving") is not None else math.nan,
            "predicted_saving_baseline": str(saving.get("best_baseline", "")).removeprefix("baseline_")}
    neighbours = mine[mine["kind"] == NEIGHBOUR]
    if len(neighbours):
        best = neighbours.loc[neighbours["heldout_loss"].idxmin()]
        regret = answer - min(answer, float(best["heldout_loss"]))
        row |= {"best_neighbour": f"{best['role']} ({best['model']}, {best['batch_size']}, {best['iterations']})",
                "best_neighbour_heldout": float(best["heldout_loss"]), "regret": regret,
                "regret_within_noise": bool(regret <= noise) if math.isfinite(noise) else None}
    return row


def measured_saving(runs: pd.DataFrame, answer: float, baseline: float, noise: float) -> dict[str, Any]:
    """The smallest trained fraction f of C whose answer ends within ``noise`` of ``baseline`` (or below): 1/f."""
    tolerance = noise if math.isfinite(noise) else 0.0
    points = [(1.0, answer)] + [(float(r["fraction"]), float(r["heldout_loss"]))
                                for _, r in runs[runs["kind"] == FRACTION].iterrows()]
    points.sort(key=lambda p: -p[0])
    matching = [f for f, loss in points if loss - baseline <= tolerance]
    if not matching:
        return {"measured_saving": math.nan, "saving_is_lower_bound": False,
                "saving_note": "the answer at C does not match the best baseline"}
    smallest = min(matching)
    # between trained fractions: where the measured curve, linear in log C, crosses the baseline's level
    crossing = smallest
    below = [p for p in points if p[0] < smallest]
    if below:
        (f_low, l_low), l_at = below[0], dict(points)[smallest]
        level = baseline + tolerance
        share = (level - l_at) / (l_low - l_at) if l_low != l_at else 0.0
        crossing = math.exp(math.log(smallest) + min(max(share, 0.0), 1.0) * (math.log(f_low) - math.log(smallest)))
    return {"measured_saving": 1.0 / smallest, "saving_is_lower_bound": bool(smallest == points[-1][0]),
            "measured_saving_interpolated": 1.0 / crossing, "fractions_trained": len(points)}


def report(plans: Sequence[Mapping[str, Any]], curves: Mapping[tuple[str, str], pd.DataFrame],
           evaluations: Mapping[tuple[str, str], Mapping[str, Any]],
           window: int | None, calibration=None) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(every run's row, every budget's row) from the plans and each trained (budget, role)'s curve and
    evaluation, with the law's ``calibration`` (None: no calibrated intervals)."""
    rows = [run_row(plan, role, curves[plan["budget"]["label"], role], evaluations[plan["budget"]["label"], role],
                    window, calibration)
            for plan in plans for role in plan["runs"] if (plan["budget"]["label"], role) in curves]
    runs = pd.DataFrame(rows)
    noise = seed_noise(runs)
    return runs, pd.DataFrame([budget_row(plan, runs, noise) for plan in plans])


def write_report(plan_paths: Sequence[str], curve_paths: Sequence[str], evaluation_paths: Sequence[str],
                 window: int | None, runs_stem: str | os.PathLike[str], table_stem: str | os.PathLike[str],
                 compare_stem: str | os.PathLike[str], savings_stem: str | os.PathLike[str],
                 worth_stem: str | os.PathLike[str], regret_stem: str | os.PathLike[str],
                 bundle: str | os.PathLike[str] | None = None) -> pd.DataFrame:
    """Rule ``savings_report``: the runs' table, the budgets' table, the rules' worth table
    (:mod:`dpscaling.private.worth`) and the three figures. Every trained run's curve and evaluation lie in
    ``<budget>/<role>/`` beside the budget's ``plan.json``; the calibrated intervals are the law ``bundle``'s
    (None: none)."""
    from pathlib import Path

    from dpscaling.privacy.epsilon_scope import caption_note
    from dpscaling.report.figures import render
    from dpscaling.private import worth
    from dpscaling.report.figures.savings import BASELINE_COMPARE_MEASURED, REGRET_BY_BUDGET, SAVINGS, SavingsContext
    from dpscaling.private.plans import read_json
    from dpscaling.report.tables.write import write_table

    def run_of(path: str) -> tuple[str, str]:
        return Path(path).parent.parent.name, Path(path).parent.name

    plans = [read_json(path) for path in plan_paths]
    curves = {run_of(path): pd.read_parquet(path) for path in curve_paths}
    evaluations = {run_of(path): read_json(path) for path in evaluation_paths}
    calibration = None
    if bundle is not None:
        from dpscaling.law.bundle import read_bundle

        calibration = read_bundle(bundle).calibration
    runs, budgets = report(plans, curves, evaluations, window, calibration)
    covers = caption_note(runs["epsilon_covers"]) if "epsilon_covers" in runs else ""
    write_table(runs, runs_stem, CAPTION_RUNS + covers, LABEL_RUNS, shown=RUN_SHOWN)
    write_table(budgets, table_stem, CAPTION + covers, LABEL, shown={k: v for k, v in SHOWN.items() if k in budgets})
    context = SavingsContext(runs, budgets, plans)
    render(BASELINE_COMPARE_MEASURED.name, context, compare_stem)
    render(SAVINGS.name, context, savings_stem)
    table = worth.worth_table(runs)
    write_table(table, worth_stem, worth.CAPTION + covers, worth.LABEL, shown=worth.shown(table))
    render(REGRET_BY_BUDGET.name, context, regret_stem)
    return budgets

