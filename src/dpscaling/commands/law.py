"""``dpscaling fit``, ``dpscaling query`` and ``dpscaling table saturating`` (docs/fit.md; paper §3.3–§3.4, Table 2).

Thin wrappers: parse flags, load inputs, call :mod:`dpscaling.law`, print.
σ comes from, in order: ``--accounting-amplified/--accounting-unamplified``
given to the command, the accounting tables saved with the law, the run's
accounting table a workflow-fitted law points to, or dpscaling's own
accounting package (:mod:`dpscaling.accounting`); answers name the sampling rule.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dpscaling.commands._output import add_json_flag, emit
from dpscaling.errors import UserError
from dpscaling.law import LawSettings, load_law
from dpscaling.law.artifact import Law
from dpscaling.law.collect import RESULTS_FORMATS
from dpscaling.law.pipeline import existing_file, fit_from_files
from dpscaling.law.columns import (
    BATCH_SIZE, CROSS_ENTROPY, DATA_BUDGET, ITERATIONS, MODEL_SIZE, NOISE_BATCH_RATIO,
    PRIVACY_BUDGET, REASON, SIGMA, TOKENS, TOKENS_PER_PARAMETER)
from dpscaling.law.bootstrap import (
    ANSWERING, LOSS_HIGH, LOSS_LOW, NO_REPEATS, Replicates, band, bootstrap_directory, interval, load_replicates,
    optimum_intervals)
from dpscaling.law.calibration import Calibration, calibrated_interval, calibration_file, load_calibration
from dpscaling.law.interpolation import reason_counts
from dpscaling.law.physical_batch import PhysicalBatchCorrection, load_correction
from dpscaling.law.sequence_length import (
    LENGTHS_FILE, PRIVACY_UNITS, SEQ_LEN, DataBudget, compute_optimal_across_lengths, is_law_across_lengths,
    law_directories, length_tradeoff, load_law_across_lengths, privacy_units, replicate_laws)
from dpscaling.law.settings import ASYMPTOTE_CHOICES
from dpscaling.law.noise import SigmaSource, read_accounting_csv
from dpscaling.law.queries import (
    DEFAULT_BATCH_SIZES, DEFAULT_TOLERANCE, INFERENCE_FLOPS, REFERENCE_BAND_TOLERANCE, SATURATION_TOLERANCE, TOTAL_FLOPS, TRAINING_FLOPS,
    compute_optimal, constant_compute_configurations, evaluate_configurations, inference_aware, model_size_grid,
    saturating_table)

CONFIG_COLUMNS = [MODEL_SIZE, BATCH_SIZE, ITERATIONS, PRIVACY_BUDGET, DATA_BUDGET]
DEFAULT_DELTA = 1e-8
TABLE2_DATA_BUDGETS = [1e5, 1e6, 1e7, 1e8, 1e9]
TABLE2_PRIVACY_BUDGETS = [1.0, 4.0, 16.0, 64.0]
# Table 2's candidate budgets: batch sizes from the paper's physical batch up to 2^20 sequences.
_SMALLEST_BATCH, _LARGEST_BATCH = 1024, 2**20
COMPUTE_BUDGET_COUNT = 100
# The authors' notebook: budgets from 6·S·4e6·1000·1024 to 6·S·335e6·128000·2^20
# (docs/fit.md, "The authors' analysis code").
REFERENCE_COMPUTE_RANGE_PER_TOKEN_FLOP = (4e6 * 1000 * 1024, 335e6 * 128_000 * 2**20)


def register(subparsers: argparse._SubParsersAction) -> None:
    _register_fit(subparsers)
    _register_query(subparsers)
    _register_table(subparsers)


# ---------------------------------------------------------------------------------------------- flags

def _add_accounting_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--accounting-amplified", metavar="CSV",
                        help="Poisson-amplified σ table in the authors' headerless CSV format")
    parser.add_argument("--accounting-unamplified", metavar="CSV",
                        help="unamplified (deterministic batching) σ table in the authors' CSV format")


def _add_law_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--law", required=True, metavar="DIR", help="a law directory written by `dpscaling fit`")


def _add_model_size_range(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model-size-range", nargs=2, type=float, metavar=("MIN", "MAX"),
                        help="ends of the candidate model-size grid (default: smallest and largest trained model; "
                             "4.52e6 335e6 reproduces the paper's Table 2)")


def _register_fit(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("fit", help="fit the semi-parametric scaling law and save it",
                                   description="Smooth, extrapolate and interpolate training results into a "
                                               "reusable law directory (paper §3.3).")
    parser.add_argument("--results", required=True, metavar="PATH",
                        help="dpscaling: a tidy results table (Parquet/CSV) or a directory of training-curve "
                             "Parquet files; reference: the authors' results.csv")
    parser.add_argument("--results-format", choices=RESULTS_FORMATS, default="dpscaling")
    _add_accounting_flags(parser)
    parser.add_argument("--reference-compatible", action="store_true",
                        help="reproduce the authors' analysis code instead of the paper's text")
    parser.add_argument("--warmup-steps", type=float, default=1000,
                        help="drop measurements before this many steps (paper: 1000)")
    parser.add_argument("--rolling-window", type=int,
                        help="trailing rolling mean over this many measurements, 0 = off "
                             "(default: 10; off with --reference-compatible)")
    parser.add_argument("--smooth-nonprivate-along-nbr", action="store_true",
                        help="include σ̄ = 0 in the isotonic pass along σ̄, as the authors' code does (paper: the "
                             "noisy columns only; always on with --reference-compatible)")
    parser.add_argument("--extrapolation-asymptote", choices=ASYMPTOTE_CHOICES,
                        help="E of each power-law fit: per_curve = free (paper, the default) or nonprivate = tied to "
                             "the model's σ̄ = 0 asymptote E* (the authors' code; fixed with --reference-compatible)")
    parser.add_argument("--seq-len", type=int, help="sequence length S in C = 6·M·B·S·T "
                                                    "(default: from the curves, else 512)")
    parser.add_argument("--physical-batch", type=int,
                        help="training batch size, for the parametric fits' N (default: from the curves, else 1024)")
    parser.add_argument("--parametric", action="store_true", help="also fit the appendix's L̂1 and L̂2")
    parser.add_argument("--out", required=True, metavar="DIR")
    add_json_flag(parser)
    parser.set_defaults(func=run_fit)


def _register_query(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("query", help="compute-optimal configuration, or losses of given configurations",
                                   description="Either --compute/--epsilon/--users (compute-optimal search) or "
                                               "--configs CSV (evaluate rows of Model Size, Batch Size, Iterations, "
                                               "Privacy Budget, Data Budget).")
    _add_law_flag(parser)
    parser.add_argument("--compute", type=float, help="compute budget C in FLOPs")
    parser.add_argument("--epsilon", type=float, help="privacy budget ε")
    parser.add_argument("--users", type=float, help="data budget N (privacy units)")
    parser.add_argument("--tokens", type=float,
                        help="data budget in tokens: N = tokens / S sequences (--privacy-unit sequence)")
    parser.add_argument("--privacy-unit", choices=PRIVACY_UNITS,
                        help="what one privacy unit is (default: sequence with --tokens, user with --users)")
    parser.add_argument("--seq-len", type=float,
                        help="with a law across sequence lengths (lengths.json): answer at this S only "
                             "(default: the best S in the measured range)")
    parser.add_argument("--delta", type=float, default=DEFAULT_DELTA)
    parser.add_argument("--tolerance", type=float,
                        help="near-optimal set: loss within this fraction of the optimum (default: the paper's "
                             "0.01; 0.02, the authors' code's band, for a reference-compatible law)")
    _add_model_size_range(parser)
    parser.add_argument("--bootstrap", metavar="DIR",
                        help="the law's bootstrap replicates (default: the workflow's <run>/law/bootstrap next to "
                             "--law <run>/law/fit, if present): answers get a 90%% interval")
    parser.add_argument("--calibration", metavar="FILE",
                        help="the law's held-out calibration, calibration.json of `snakemake validate` (default: "
                             "<run>/validate/calibration.json next to --law <run>/law/fit, if present): "
                             "compute-optimal answers also get the calibrated 90%% interval, which carries the "
                             "law's own error")
    parser.add_argument("--physical-batch-correction", metavar="FILE",
                        help="not in the paper: correct the law's loss to each candidate's batch B trained as its "
                             "physical batch, with the slope fitted by the workflow (<run>/law/physical_batch/"
                             "correction.json, fit.physical_batch_correction; docs/fit.md)")
    parser.add_argument("--inference-tokens", type=float, metavar="N",
                        help="expected inference volume in tokens: also answer the configuration with the fewest "
                             "training + inference FLOPs (2·M per token) at the compute-optimal loss or better "
                             "(a smaller model trained on up to 2^10·C)")
    parser.add_argument("--configs", metavar="CSV", help="configurations to evaluate")
    parser.add_argument("--out", metavar="CSV", help="with --configs: write the evaluated rows here")
    _add_accounting_flags(parser)
    add_json_flag(parser)
    parser.set_defaults(func=run_query)


def _register_table(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("table", help="tables of the paper computed from a law")
    tables = parser.add_subparsers(dest="table", metavar="TABLE", required=True)
    saturating = tables.add_parser("saturating", help="saturating compute budgets (paper Table 2)",
                                   description="Smallest compute budget whose best loss is within --tolerance of "
                                               "the best over all budgets, per data and privacy budget.")
    _add_law_flag(saturating)
    _add_model_size_range(saturating)
    saturating.add_argument("--users", type=float, nargs="+", default=TABLE2_DATA_BUDGETS)
    saturating.add_argument("--epsilons", type=float, nargs="+", default=TABLE2_PRIVACY_BUDGETS)
    saturating.add_argument("--delta", type=float, default=DEFAULT_DELTA)
    saturating.add_argument("--compute-range", nargs=2, type=float, metavar=("MIN", "MAX"),
                            help="candidate budgets (default: smallest model × first iteration × batch 1024 to "
                                 "largest model × trained horizon × batch 2^20, times 6·S; with a reference-"
                                 "compatible law the notebook's 6·S·4e6·1000·1024 to 6·S·335e6·128000·2^20)")
    saturating.add_argument("--compute-count", type=int, default=COMPUTE_BUDGET_COUNT)
    saturating.add_argument("--tolerance", type=float, default=SATURATION_TOLERANCE)
    _add_accounting_flags(saturating)
    saturating.add_argument("--out", required=True, metavar="CSV")
    add_json_flag(saturating)
    saturating.set_defaults(func=run_table_saturating)


# ---------------------------------------------------------------------------------------------- fit

def run_fit(args: argparse.Namespace) -> int:
    overrides: dict[str, Any] = {"warmup_steps": args.warmup_steps}
    if args.rolling_window is not None:
        overrides["rolling_window"] = args.rolling_window or None
    if args.reference_compatible and (args.smooth_nonprivate_along_nbr or args.extrapolation_asymptote):
        raise UserError("--reference-compatible fixes --smooth-nonprivate-along-nbr and --extrapolation-asymptote "
                        "to the authors' choices; drop them")
    if args.smooth_nonprivate_along_nbr:
        overrides["smooth_nonprivate_along_nbr"] = True
    if args.extrapolation_asymptote:
        overrides["extrapolation_asymptote"] = args.extrapolation_asymptote
    law = fit_from_files(
        args.results, LawSettings.create(args.reference_compatible, **overrides),
        results_format=args.results_format, accounting_amplified=args.accounting_amplified,
        accounting_unamplified=args.accounting_unamplified, parametric=args.parametric,
        seq_len=args.seq_len, physical_batch=args.physical_batch)
    law.save(args.out)
    report = law.report
    emit({"law": str(Path(args.out)), "models": len(law.loss.model_sizes),
          "iterations": f"{law.iteration_bounds()[0]:g}..{law.iteration_bounds()[1]:g}",
          "noise_batch_ratios": len(law.loss.noise_batch_ratios),
          "failed_fits": len(report["failed_fits"]), "missing_cells": report["missing_cells"],
          "filled_cells": report["filled_cells"], "runs_excluded": len(report["runs_excluded"]),
          "accounting": ",".join(sorted(law.accounting)) or "dpscaling.accounting"}, args.json)
    for failure in report["failed_fits"]:
        print(f"dpscaling fit: warning: {failure['kind']} fit failed for {failure['model']} "
              f"σ̄={failure['noise_batch_ratio']:g}: {failure['reason']}", file=sys.stderr)
    return 0


# ---------------------------------------------------------------------------------------------- σ

def resolve_sigma(args: argparse.Namespace, law: Law, allow_per_row: bool = False) -> SigmaSource:
    """σ for a query (:meth:`Law.sigma_source`): the command's accounting CSVs first, then what the law has."""
    amplified = existing_file(args.accounting_amplified, "--accounting-amplified")
    unamplified = existing_file(args.accounting_unamplified, "--accounting-unamplified")
    tables = (read_accounting_csv(amplified) if amplified else None,
              read_accounting_csv(unamplified) if unamplified else None)
    return law.sigma_source(tables, delta=args.delta, per_row=allow_per_row)


def _candidate_model_sizes(args: argparse.Namespace, law: Law) -> np.ndarray:
    smallest, largest = args.model_size_range or law.model_size_range()
    return model_size_grid(smallest, largest)


# ---------------------------------------------------------------------------------------------- query

def _data_budget(args: argparse.Namespace) -> None:
    """--tokens or --users, and the privacy unit they imply (refused when they disagree)."""
    if (args.tokens is None) == (args.users is None) and not args.configs:
        raise UserError("give the data budget as exactly one of --users (privacy units) and --tokens")
    implied = "sequence" if args.tokens is not None else "user"
    if args.privacy_unit not in (None, implied):
        counted = "--tokens counts sequences of tokens" if implied == "sequence" else "--users counts users"
        raise UserError(f"--privacy-unit {args.privacy_unit}: {counted}: use --privacy-unit {implied}")
    args.privacy_unit = implied


def run_query(args: argparse.Namespace) -> int:
    if is_law_across_lengths(args.law):
        return _query_across_lengths(args)
    if args.seq_len is not None:
        raise UserError(f"--seq-len: {args.law} is a law of one sequence length; --seq-len needs a law across "
                        f"lengths (a directory with {LENGTHS_FILE})")
    if args.tokens is not None or args.privacy_unit is not None:
        _data_budget(args)
    if args.tokens is not None:  # one law, one S: N = tokens / S sequences
        args.users = privacy_units("sequence", load_law(args.law).seq_len, tokens=args.tokens)
    budget_flags = {"--compute": args.compute, "--epsilon": args.epsilon, "--users": args.users}
    if args.configs and any(v is not None for v in budget_flags.values()):
        raise UserError("give either --configs or --compute/--epsilon/--users, not both")
    if args.configs and args.inference_tokens is not None:
        raise UserError("--inference-tokens is for the compute-optimal search (--compute/--epsilon/--users), "
                        "not --configs")
    if args.configs:
        return _query_configs(args)
    missing = [flag for flag, value in budget_flags.items() if value is None]
    if missing:
        raise UserError(f"missing {', '.join(missing)} (or give --configs CSV)")
    if args.out:
        raise UserError("--out is for --configs; use --json for a machine-readable compute-optimal answer")
    for flag, value in budget_flags.items():
        if not value > 0:
            raise UserError(f"{flag} must be positive, got {value:g}")
    if args.inference_tokens is not None and not args.inference_tokens >= 0:
        raise UserError(f"--inference-tokens must be >= 0, got {args.inference_tokens:g}")
    law = load_law(args.law)
    source = resolve_sigma(args, law)
    if args.tolerance is None:
        args.tolerance = REFERENCE_BAND_TOLERANCE if law.settings.reference_compatible else DEFAULT_TOLERANCE
    if not args.tolerance >= 0:
        raise UserError(f"--tolerance must be >= 0, got {args.tolerance:g}")
    correction = _correction(args)
    answer = compute_optimal(args.compute, args.epsilon, args.users, law.loss, source.sigma, law.seq_len,
                             _candidate_model_sizes(args, law), law.iteration_bounds(), args.tolerance,
                             correction=correction)
    best = answer.optimum
    result: dict[str, Any] = {
        "compute": args.compute, "epsilon": args.epsilon, "users": args.users, "delta": args.delta,
        "model_size": best[MODEL_SIZE], "batch_size": best[BATCH_SIZE], "iterations": best[ITERATIONS],
        "sigma": best[SIGMA], "noise_batch_ratio": best[NOISE_BATCH_RATIO], "tokens": best[TOKENS],
        "tokens_per_parameter": best[TOKENS_PER_PARAMETER], "predicted_loss": best[CROSS_ENTROPY],
        "tolerance": args.tolerance, "near_optimal_count": len(answer.near_optimal),
    }
    for column, (low, high) in answer.ranges().items():
        result[f"near_optimal_{_snake(column)}"] = [low, high]
    result["physical_batch_correction"] = "off (the paper's law)" if correction is None else correction.to_json()
    result.update(_optimum_interval(args, law, source, float(best[CROSS_ENTROPY]), correction))
    if args.inference_tokens is not None:
        served = inference_aware(args.compute, args.epsilon, args.users, law.loss, source.sigma, law.seq_len,
                                 _candidate_model_sizes(args, law), law.iteration_bounds(), args.inference_tokens,
                                 correction=correction)
        columns = {"model_size": MODEL_SIZE, "batch_size": BATCH_SIZE, "iterations": ITERATIONS, "sigma": SIGMA,
                   "noise_batch_ratio": NOISE_BATCH_RATIO, "predicted_loss": CROSS_ENTROPY,
                   "training_flops": TRAINING_FLOPS, "inference_flops": INFERENCE_FLOPS, "total_flops": TOTAL_FLOPS}
        result["inference_aware"] = {
            "inference_tokens": served.inference_tokens,
            **{key: float(served.choice[column]) for key, column in columns.items()},
            "compute_optimal_total_flops": float(served.compute_optimal[TOTAL_FLOPS]),
            "candidates": served.candidates, "candidates_without_answer": served.unanswered}
    result["candidates"] = answer.candidates
    result["candidates_without_answer"] = answer.unanswered
    result["accounting"] = source.description
    result["sampling"] = source.sampling
    emit(result, args.json)
    return 0


def _query_across_lengths(args: argparse.Namespace) -> int:
    """``query`` on a law across sequence lengths: the compute-optimal (M, S, B, T), or at --seq-len."""
    missing = [flag for flag, value in (("--compute", args.compute), ("--epsilon", args.epsilon)) if value is None]
    if missing or args.configs:
        raise UserError(f"a law across sequence lengths answers --compute/--epsilon with --tokens or --users "
                        f"(missing {', '.join(missing) or 'nothing'}; --configs is for a law of one length)")
    _data_budget(args)
    across, laws = load_law_across_lengths(args.law)
    first = laws[across.lengths[0]]
    source = resolve_sigma(args, first)
    tolerance = args.tolerance if args.tolerance is not None else (
        REFERENCE_BAND_TOLERANCE if first.settings.reference_compatible else DEFAULT_TOLERANCE)
    answer = compute_optimal_across_lengths(args.compute, args.epsilon, across, source.sigma, args.privacy_unit,
                                            tokens=args.tokens, users=args.users, seq_len=args.seq_len,
                                            tolerance=tolerance)
    replicates, note = replicate_laws(laws, law_directories(args.law))
    if replicates:  # each replicate's own optimum over the same candidates: the seed-only 90% interval
        lengths = None if args.seq_len is None else [args.seq_len]
        bands = length_tradeoff(across, source.sigma, np.array([args.compute]), args.epsilon,
                                DataBudget(args.privacy_unit, args.tokens, args.users), DEFAULT_BATCH_SIZES,
                                replicates, lengths=lengths).iloc[0]
        interval = {"seed_only_interval_90": [float(bands[name]) for name in band(CROSS_ENTROPY)],
                    "seq_len_90": [float(bands[name]) for name in band(SEQ_LEN)],
                    "interval": f"{note} (seed noise only; docs/fit.md \"Sequence length\")"}
    else:
        interval = {"interval": note}
    best = answer.answer.optimum
    per_length = answer.per_length
    result: dict[str, Any] = {
        "compute": args.compute, "epsilon": args.epsilon, "delta": args.delta, "privacy_unit": args.privacy_unit,
        "tokens": args.tokens, "users": args.users, "seq_len": answer.seq_len,
        "units": float(per_length.set_index(SEQ_LEN).loc[answer.seq_len, DATA_BUDGET]),
        "model_size": best[MODEL_SIZE], "batch_size": best[BATCH_SIZE], "iterations": best[ITERATIONS],
        "sigma": best[SIGMA], "noise_batch_ratio": best[NOISE_BATCH_RATIO], "predicted_loss": best[CROSS_ENTROPY],
        "measured_lengths": across.lengths,
        "per_length": [{"seq_len": int(row[SEQ_LEN]), "units": float(row[DATA_BUDGET]),
                        "predicted_loss": float(row[CROSS_ENTROPY]), "model_size": float(row[MODEL_SIZE]),
                        "batch_size": float(row[BATCH_SIZE]), "iterations": float(row[ITERATIONS])}
                       for _, row in per_length.iterrows()],
        "lengths_without_answer": answer.unanswered_lengths,
        **interval,
        "calibrated_interval_90": None,
        "calibration": ("none across lengths: validate calibrates the primary length's law only; its held-out "
                        "length error is in <run>/validate/seq_len_holdout.csv"),
        "accounting": source.description, "sampling": source.sampling,
    }
    emit(result, args.json)
    return 0


def _replicates(args: argparse.Namespace, law: Law) -> tuple[Replicates | None, str]:
    """The law's bootstrap replicates (``--bootstrap`` or the workflow's directory next to the law) and,
    when there are none, why."""
    if args.bootstrap is not None:
        if not Path(args.bootstrap).is_dir():
            raise UserError(f"--bootstrap: no such directory {args.bootstrap}")
        replicates = load_replicates(args.bootstrap, law.settings)
        if replicates is None:
            raise UserError(f"--bootstrap {args.bootstrap}: no replicate files (*.parquet) in it")
        return replicates, ""
    replicates = load_replicates(bootstrap_directory(args.law), law.settings)
    return replicates, "" if replicates else f"{NO_REPEATS} (no bootstrap replicates next to the law)"


def _calibration(args: argparse.Namespace, law: Law) -> tuple[Calibration | None, str]:
    """The law's held-out calibration (``--calibration`` or the workflow's ``<run>/validate/calibration.json``
    next to the law) in the law's mode and, when there is none, why."""
    if args.calibration is not None:
        return load_calibration(existing_file(args.calibration, "--calibration"), law.settings), ""
    path = calibration_file(args.law)
    if not path.is_file():
        return None, (f"no calibrated interval: no {path.parent.name}/{path.name} next to the law (run "
                      "`snakemake validate`, or pass --calibration FILE)")
    return load_calibration(path, law.settings), ""


def _correction(args: argparse.Namespace) -> PhysicalBatchCorrection | None:
    """The physical-batch correction of ``--physical-batch-correction`` (None: the paper's law, uncorrected)."""
    if args.physical_batch_correction is None:
        return None
    return load_correction(existing_file(args.physical_batch_correction, "--physical-batch-correction"))


def _optimum_interval(args: argparse.Namespace, law: Law, source: SigmaSource, predicted: float,
                      correction: PhysicalBatchCorrection | None = None) -> dict[str, Any]:
    """The compute-optimal answer's two 90% intervals: :func:`_seed_only_interval` and
    :func:`_calibrated_interval`."""
    return {**_seed_only_interval(args, law, source, correction), **_calibrated_interval(args, law, predicted)}


def _seed_only_interval(args: argparse.Namespace, law: Law, source: SigmaSource,
                        correction: PhysicalBatchCorrection | None) -> dict[str, Any]:
    """The compute-optimal answer of every bootstrap replicate: 5% / 95% quantiles of its loss and of its M, B, T
    (:func:`dpscaling.law.bootstrap.optimum_intervals`, which the figures' bands use too), as
    ``predicted_loss_90`` = ``seed_only_interval_90``."""
    replicates, reason = _replicates(args, law)
    if replicates is None:
        return {"interval": reason}
    configs = constant_compute_configurations(args.compute, _candidate_model_sizes(args, law), law.seq_len,
                                              law.iteration_bounds())
    candidates = evaluate_configurations(configs.assign(**{PRIVACY_BUDGET: args.epsilon, DATA_BUDGET: args.users}),
                                         law.loss, source.sigma, law.seq_len, correction)
    table = optimum_intervals(candidates.dropna(subset=[NOISE_BATCH_RATIO]), replicates, correction=correction)
    if table.empty:
        return {"interval": f"no interval: none of the {len(replicates)} replicates answers this query"}
    row = table.iloc[0]
    result: dict[str, Any] = {"interval": f"90% over {len(replicates)} bootstrap replicates"}
    for column, key in ((CROSS_ENTROPY, "predicted_loss_90"), (MODEL_SIZE, "model_size_5_95"),
                        (BATCH_SIZE, "batch_size_5_95"), (ITERATIONS, "iterations_5_95")):
        result[key] = [float(row[name]) for name in band(column)]
    result["seed_only_interval_90"] = result["predicted_loss_90"]  # the same: seed-to-seed noise only
    result["bootstrap_replicates"] = len(replicates)
    result["replicates_without_answer"] = len(replicates) - int(row[ANSWERING])
    return result


def _calibrated_interval(args: argparse.Namespace, law: Law, predicted: float) -> dict[str, Any]:
    """The predicted loss ± the held-out half-width q (:mod:`dpscaling.law.calibration`) as
    ``calibrated_interval_90``, and what it was calibrated on (or why there is none) as ``calibration``."""
    calibration, missing = _calibration(args, law)
    if calibration is None:
        return {"calibration": missing}
    if not np.isfinite(calibration.half_width):
        return {"calibration": f"no calibrated interval: {calibration.source} pools no answered held-out set"}
    return {"calibrated_interval_90": list(calibrated_interval(predicted, calibration)),
            "calibration": {"method": calibration.method, "mode": calibration.mode, "level": calibration.level,
                            "guaranteed_level": calibration.guaranteed_level,
                            "half_width": calibration.half_width, "sets": len(calibration.sets),
                            "source": calibration.source}}


def _snake(column: str) -> str:
    return column.lower().replace(" / ", "_per_").replace(" ", "_")


def _query_configs(args: argparse.Namespace) -> int:
    path = existing_file(args.configs, "--configs")
    configs = pd.read_csv(path, skipinitialspace=True)
    missing = [c for c in CONFIG_COLUMNS if c not in configs.columns]
    if missing:
        raise UserError(f"--configs {path}: missing column(s) {', '.join(missing)}; "
                        f"expected {', '.join(CONFIG_COLUMNS)}")
    values = configs[CONFIG_COLUMNS].apply(pd.to_numeric, errors="coerce")
    bad = values.index[~(values > 0).all(axis=1)]
    if len(bad):
        raise UserError(f"--configs {path}: row(s) {', '.join(str(i + 2) for i in bad[:10])} have a missing, "
                        "non-numeric or non-positive value (line numbers count the header)")
    law = load_law(args.law)
    source = resolve_sigma(args, law, allow_per_row=True)
    correction = _correction(args)
    evaluated = evaluate_configurations(configs.assign(**values), law.loss, source.sigma, law.seq_len, correction)
    replicates, reason = _replicates(args, law)
    if replicates is not None:  # the 90% interval of each row's loss over the replicate laws
        m, t, nbr = (evaluated[c].to_numpy(float) for c in (MODEL_SIZE, ITERATIONS, NOISE_BATCH_RATIO))
        shift = 0.0 if correction is None else correction.shift(evaluated[BATCH_SIZE].to_numpy(float), nbr, m)
        low, high = interval(replicates.loss_matrix(m, t, nbr))
        evaluated = evaluated.assign(**{LOSS_LOW: low - shift, LOSS_HIGH: high - shift})
    unanswered = reason_counts(evaluated[REASON].to_numpy())
    if args.out:
        evaluated.to_csv(args.out, index=False)
    elif not args.json:
        evaluated.to_csv(sys.stdout, index=False)
    if args.json:
        emit({"rows": evaluated.to_dict("records"), "rows_without_answer": unanswered,
              "accounting": source.description, "sampling": source.sampling,
              "interval": reason or f"90% over {len(replicates)} bootstrap replicates"}, True)
    for reason, count in unanswered.items():
        # Never a silent NaN row: each one has its Reason column and is counted here.
        print(f"dpscaling query: warning: {count} row(s) without a predicted loss: {reason}", file=sys.stderr)
    return 0


# ---------------------------------------------------------------------------------------------- table

def default_compute_range(law: Law, model_sizes: np.ndarray) -> tuple[float, float]:
    """From (smallest model, first iteration, batch 1024) to (largest model, trained horizon, batch 2^20).

    Reference-compatible laws use the authors' notebook's range, 6·S·(4e6·1000·1024, 335e6·128000·2^20).
    """
    if law.settings.reference_compatible:
        return tuple(6.0 * law.seq_len * np.array(REFERENCE_COMPUTE_RANGE_PER_TOKEN_FLOP))
    measured = law.grid.loc[law.grid["Source"] == "measured", ITERATIONS]
    first, horizon = float(measured.min()), float(measured.max())
    scale = 6.0 * law.seq_len
    return (scale * model_sizes[0] * first * _SMALLEST_BATCH, scale * model_sizes[-1] * horizon * _LARGEST_BATCH)


def run_table_saturating(args: argparse.Namespace) -> int:
    law = load_law(args.law)
    source = resolve_sigma(args, law)
    model_sizes = _candidate_model_sizes(args, law)
    low, high = args.compute_range or default_compute_range(law, model_sizes)
    if not 0 < low < high or args.compute_count < 2:
        raise UserError("--compute-range must satisfy 0 < MIN < MAX and --compute-count >= 2")
    budgets = np.geomspace(low, high, args.compute_count)
    table = saturating_table(budgets, args.epsilons, args.users, law.loss, source.sigma, law.seq_len, model_sizes,
                             law.iteration_bounds(), args.tolerance)
    table.to_csv(args.out, index=False)
    emit({"out": args.out, "rows": len(table), "compute_budgets": len(budgets),
          "compute_range": [float(low), float(high)], "accounting": source.description,
          "sampling": source.sampling,
          "budgets_without_answer": int(table["Budgets Without Answer"].sum())}, args.json)
    return 0

