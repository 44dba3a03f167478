"""``dpscaling fit``, ``query``, ``table saturating`` and ``law info | bundle`` (docs/query.md, docs/fit.md;
paper §3.3–§3.4, Table 2).

Thin over the library: parse flags, call :mod:`dpscaling.law` (the API of :mod:`dpscaling.law.answers` for
queries), print. ``query`` prints exactly the :class:`~dpscaling.law.answers.Answer` the Python API returns.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dpscaling.accounting.branches import SAMPLINGS
from dpscaling.accounting.validation import DEFAULT_DELTA
from dpscaling.cli._output import add_json_flag, emit
from dpscaling.cli.answer_text import render_answer, render_choice, train_config_yaml
from dpscaling.core.errors import UserError
from dpscaling.law import LawSettings
from dpscaling.law.answers import ScalingLaw
from dpscaling.law.loading import load_law
from dpscaling.law.artifact import Law
from dpscaling.law.bundle import write_fitted_bundle
from dpscaling.law.conversion import convert_to_bundle
from dpscaling.law.collect import RESULTS_FORMATS
from dpscaling.law.decision import DECISION_RULES, DEFAULT_DECISION_RULE
from dpscaling.law.mechanisms import LawAcrossMechanisms, MechanismChoice
from dpscaling.law.pipeline import fit_from_files
from dpscaling.law.queries import SATURATION_TOLERANCE, model_size_grid, saturating_table
from dpscaling.law.sequence_length import PRIVACY_UNITS
from dpscaling.law.settings import ASYMPTOTE_CHOICES

TABLE2_DATA_BUDGETS = [1e5, 1e6, 1e7, 1e8, 1e9]
TABLE2_PRIVACY_BUDGETS = [1.0, 4.0, 16.0, 64.0]
# Table 2's candidate budgets: batch sizes from the paper's physical batch up to 2^20 sequences.
_SMALLEST_BATCH, _LARGEST_BATCH = 1024, 2**20
COMPUTE_BUDGET_COUNT = 100
# The authors' notebook: budgets from 6·S·4e6·1000·1024 to 6·S·335e6·128000·2^20
# (docs/fit.md, "The authors' analysis code").
REFERENCE_COMPUTE_RANGE_PER_TOKEN_FLOP = (4e6 * 1000 * 1024, 335e6 * 128_000 * 2**20)
DELTA_HELP = (f"δ of the (ε, δ) guarantee (default: the law's σ table's δ, or {DEFAULT_DELTA:g} without one); "
              "another δ builds σ on demand with dpscaling's accountant (seconds to a minute the first time, "
              "then cached; docs/query.md)")
USERS_HELP = "data budget N: the number of privacy units (users, or sequences with --privacy-unit sequence)"


def register(subparsers: argparse._SubParsersAction) -> None:
    _register_fit(subparsers)
    _register_query(subparsers)
    _register_table(subparsers)
    _register_law(subparsers)


# ---------------------------------------------------------------------------------------------- flags

def _add_accounting_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--accounting-amplified", metavar="CSV",
                        help="Poisson-amplified σ table in the authors' headerless CSV format")
    parser.add_argument("--accounting-unamplified", metavar="CSV",
                        help="unamplified (deterministic batching) σ table in the authors' CSV format")


def _add_law_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--law", required=True, metavar="DIR",
                        help="a law bundle: results/<run>/law/bundle (everything inside, its lengths and "
                             "mechanisms included) or `dpscaling fit --out`'s")


def _add_model_size_range(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model-size-range", nargs=2, type=float, metavar=("MIN", "MAX"),
                        help="ends of the candidate model-size grid (default: smallest and largest trained model; "
                             "4.52e6 335e6 reproduces the paper's Table 2)")


def _register_fit(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("fit", help="fit the semi-parametric scaling law and save it",
                                   description="Smooth, extrapolate and interpolate training results into a "
                                               "reusable law directory (paper §3.3). Formats: docs/results-format.md.")
    parser.add_argument("--results", required=True, metavar="PATH",
                        help="dpscaling: a tidy results table (Parquet/CSV) or a directory of training-curve "
                             "Parquet files; reference: a results.csv in the authors' analysis code's format")
    parser.add_argument("--results-format", choices=RESULTS_FORMATS, default="dpscaling",
                        help="dpscaling (tidy table or curves; default) or reference (the authors' results.csv "
                             "format; docs/results-format.md)")
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
                        help="E of each power-law fit: per_curve = free (paper, the default), nonprivate = tied to "
                             "the model's σ̄ = 0 asymptote E* (the authors' code; fixed with --reference-compatible) or "
                             "per_curve_else_nonprivate = free, tied to E* where the free fit fails (not in the paper)")
    parser.add_argument("--seq-len", type=int, help="sequence length S in C = 6·M·B·S·T "
                                                    "(default: from the curves, else 512)")
    parser.add_argument("--physical-batch", type=int,
                        help="training batch size, for the parametric fits' N (default: from the curves, else 1024)")
    parser.add_argument("--parametric", action="store_true", help="also fit the appendix's L̂1 and L̂2")
    parser.add_argument("--out", required=True, metavar="DIR",
                        help="the law bundle to write (add replicates and a calibration with `dpscaling law bundle`)")
    add_json_flag(parser)
    parser.set_defaults(func=run_fit)


def _register_query(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "query", help="the compute-optimal configuration for a budget, or the losses of given configurations",
        description="Either --compute/--epsilon with --users or --tokens (the compute-optimal answer, runnable: "
                    "a model shape, whole batches and steps, σ at your ε and δ, the predicted loss with its two 90%% "
                    "intervals, range flags and the config that trains it) or --configs CSV (evaluate rows of "
                    "Model Size, Batch Size, Iterations, Privacy Budget, Data Budget). docs/query.md.")
    _add_law_flag(parser)
    parser.add_argument("--compute", type=float, help="compute budget C in FLOPs (C = 6·M·B·S·T)")
    parser.add_argument("--epsilon", type=float, help="privacy budget ε")
    parser.add_argument("--users", type=float, help=USERS_HELP)
    parser.add_argument("--tokens", type=float,
                        help="data budget in tokens: N = tokens / S sequences, one sequence per privacy unit")
    parser.add_argument("--privacy-unit", choices=PRIVACY_UNITS,
                        help="what one privacy unit is (default: sequence with --tokens, user with --users)")
    parser.add_argument("--examples-per-user", type=int,
                        help="with --users: each user contributes up to k sequences and the guarantee is per user: "
                             "a user-level law (uls-m<m>) samples users, a sequence-level one their sequences, "
                             "priced for the k (ELS); a run of both chooses (docs/query.md)")
    parser.add_argument("--sequences", type=float,
                        help="with --examples-per-user: the sequences the N users hold in all, N..N·k, what ELS "
                             "samples and is priced on (default N, one each: the conservative end, the largest σ "
                             "any S needs)")
    parser.add_argument("--seq-len", type=float,
                        help="with a law across sequence lengths: answer at this S only (default: the best S in "
                             "the measured range)")
    parser.add_argument("--delta", type=float, help=DELTA_HELP)
    parser.add_argument("--tolerance", type=float,
                        help="near-optimal set: loss within this fraction of the optimum (default: the paper's "
                             "0.01; 0.02, the authors' code's band, for a reference-compatible law)")
    _add_model_size_range(parser)
    parser.add_argument("--allow-extrapolation", action="store_true",
                        help="answer even when the optimum's T is beyond the extrapolation the law's validation "
                             "measured (flagged); refused otherwise (docs/query.md, the refusal policy)")
    parser.add_argument("--microbatch-size", type=int,
                        help="round B to whole microbatches of this size (default: the law's runs' microbatch)")
    parser.add_argument("--physical-batch-correction", action="store_true",
                        help="not in the paper: correct the law's loss to each candidate's batch B trained as its "
                             "physical batch, with the bundle's correction (docs/fit.md)")
    parser.add_argument("--inference-tokens", type=float, metavar="N",
                        help="expected inference volume in tokens: also answer the configuration with the fewest "
                             "training + inference FLOPs (2·M per token) at the compute-optimal loss or better "
                             "(a smaller model trained on up to 2^10·C)")
    parser.add_argument("--count-pretraining", action="store_true",
                        help="a fine-tuning law only: --compute also pays for the chosen model's public "
                             "pretraining (6·M·D_pre, recorded in the bundle); by default it is sunk and the "
                             "compute is the fine-tuning's own (docs/finetune.md)")
    parser.add_argument("--mechanism", metavar="NAME",
                        help="with a bundle of several mechanisms: answer with this mechanism only "
                             "(dpsgd or bandmf-b<b>); default: every mechanism's law answers and the decision "
                             "rule chooses (docs/mechanisms.md)")
    parser.add_argument("--decision-rule", choices=DECISION_RULES, default=DEFAULT_DECISION_RULE,
                        help="how the answer is chosen among the law's candidates and mechanisms: "
                             "extrapolation_charged = the lowest prediction plus the calibrated interval's growth "
                             "outside the law's measured range (default), calibrated_upper = the lowest upper end "
                             "of the calibrated 90%% interval, point = the lowest predicted loss (the paper's "
                             "criterion); docs/query.md")
    parser.add_argument("--sampling", choices=SAMPLINGS,
                        help="the sampling rule the answer's σ is priced under (default: the law's, the paper's min of "
                             "Poisson and fixed batches; poisson = what the workflow's private runs train)")
    parser.add_argument("--train-config", metavar="YAML",
                        help="also write the config block that trains the answer with `snakemake private_model` "
                             "to this file (layer it over the run's config)")
    parser.add_argument("--configs", metavar="CSV", help="configurations to evaluate instead of a search")
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
    saturating.add_argument("--users", type=float, nargs="+", default=TABLE2_DATA_BUDGETS,
                            help=f"{USERS_HELP}; one row per value (default: the paper's 1e5 … 1e9)")
    saturating.add_argument("--epsilons", type=float, nargs="+", default=TABLE2_PRIVACY_BUDGETS,
                            help="privacy budgets ε, one column each (default: the paper's 1, 4, 16, 64)")
    saturating.add_argument("--delta", type=float, help=DELTA_HELP)
    saturating.add_argument("--compute-range", nargs=2, type=float, metavar=("MIN", "MAX"),
                            help="candidate budgets (default: smallest model × first iteration × batch 1024 to "
                                 "largest model × trained horizon × batch 2^20, times 6·S; with a reference-"
                                 "compatible law the notebook's 6·S·4e6·1000·1024 to 6·S·335e6·128000·2^20)")
    saturating.add_argument("--compute-count", type=int, default=COMPUTE_BUDGET_COUNT,
                            help=f"log-spaced compute budgets between the ends (default {COMPUTE_BUDGET_COUNT})")
    saturating.add_argument("--tolerance", type=float, default=SATURATION_TOLERANCE,
                            help="saturated: the best loss within this fraction of the best over all budgets "
                                 f"(default: the paper's {SATURATION_TOLERANCE:g})")
    _add_accounting_flags(saturating)
    saturating.add_argument("--out", required=True, metavar="CSV", help="the table to write")
    add_json_flag(saturating)
    saturating.set_defaults(func=run_table_saturating)


def _register_law(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser("law", help="inspect or assemble a law bundle (docs/query.md)")
    steps = parser.add_subparsers(dest="law_command", metavar="STEP", required=True)
    info = steps.add_parser("info", help="a bundle's provenance, validated ranges, loss units and contents",
                            description="Print what a law bundle holds and where it may be trusted.")
    info.add_argument("bundle", metavar="BUNDLE", help="a law bundle directory")
    add_json_flag(info)
    info.set_defaults(func=run_law_info)
    bundle = steps.add_parser("bundle", help="assemble a law bundle, or convert a law of an older format into one",
                              description="What `snakemake bundle` writes for a run, from files given by hand; "
                                          "a law directory from before bundles (law/fit, law/lengths, "
                                          "law/mechanisms) converted once, with the files the workflow wrote "
                                          "beside it (docs/query.md).")
    bundle.add_argument("--law", required=True, metavar="DIR",
                        help="a bundle (files given here are added), or a fitted law, a law across lengths or a "
                             "law across mechanisms of an older format")
    bundle.add_argument("--sigma-table", metavar="PARQUET",
                        help="dpscaling's σ table (default: the one the law points to, if any)")
    bundle.add_argument("--bootstrap", metavar="PATH", help="bootstrap replicates (a Parquet file or directory)")
    bundle.add_argument("--calibration", metavar="FILE", help="calibration.json of `snakemake validate`")
    bundle.add_argument("--physical-batch-correction", metavar="FILE", help="correction.json (not in the paper)")
    bundle.add_argument("--lengths", metavar="DIR", help="a directory with lengths.json: the laws at other lengths")
    bundle.add_argument("--out", required=True, metavar="DIR", help="the bundle directory to write")
    add_json_flag(bundle)
    bundle.set_defaults(func=run_law_bundle)


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
    write_fitted_bundle(law, args.out)
    report = law.report
    emit({"law": str(Path(args.out)), "models": len(law.loss.model_sizes),
          "iterations": f"{law.iteration_bounds()[0]:g}..{law.iteration_bounds()[1]:g}",
          "noise_batch_ratios": len(law.loss.noise_batch_ratios),
          "failed_fits": len(report["failed_fits"]), "missing_cells": report["missing_cells"],
          "filled_cells": report["filled_cells"], "runs_excluded": len(report["runs_excluded"]),
          "accounting": ",".join(sorted(law.accounting)) or "dpscaling.accounting on demand"}, args.json)
    for failure in report["failed_fits"]:
        print(f"dpscaling fit: warning: {failure['kind']} fit failed for {failure['model']} "
              f"σ̄={failure['noise_batch_ratio']:g}: {failure['reason']}", file=sys.stderr)
    return 0


# ---------------------------------------------------------------------------------------------- query

def _progress(message: str) -> None:
    print(f"dpscaling: {message}", file=sys.stderr)


def _load(args: argparse.Namespace) -> ScalingLaw | LawAcrossMechanisms:
    return load_law(args.law, accounting_amplified=args.accounting_amplified,
                    accounting_unamplified=args.accounting_unamplified, mechanism=getattr(args, "mechanism", None))


def run_query(args: argparse.Namespace) -> int:
    if args.tokens is not None and args.users is not None:
        raise UserError("give the data budget as exactly one of --users (privacy units) and --tokens")
    implied = "sequence" if args.tokens is not None else "user"
    if args.privacy_unit not in (None, implied) and (args.tokens is not None or args.users is not None):
        counted = "--tokens counts sequences of tokens" if implied == "sequence" else "--users counts users"
        raise UserError(f"--privacy-unit {args.privacy_unit}: {counted}: use --privacy-unit {implied}")
    search = {"--compute": args.compute, "--epsilon": args.epsilon,
              "--users/--tokens": args.users if args.users is not None else args.tokens}
    if args.configs:
        if any(value is not None for value in search.values()):
            raise UserError("give either --configs or --compute/--epsilon/--users, not both")
        if args.inference_tokens is not None:
            raise UserError("--inference-tokens is for the compute-optimal search (--compute/--epsilon/--users), "
                            "not --configs")
        return _query_configs(args)
    missing = [flag for flag, value in search.items() if value is None]
    if missing:
        raise UserError(f"missing {', '.join(missing)} (or give --configs CSV)")
    if args.out:
        raise UserError("--out is for --configs; use --json for a machine-readable compute-optimal answer "
                        "(and --train-config for the config that trains it)")
    for flag, value in search.items():
        if not value > 0:
            raise UserError(f"{flag} must be positive, got {value:g}")
    if args.tolerance is not None and not args.tolerance >= 0:
        raise UserError(f"--tolerance must be >= 0, got {args.tolerance:g}")
    if args.inference_tokens is not None and not args.inference_tokens >= 0:
        raise UserError(f"--inference-tokens must be >= 0, got {args.inference_tokens:g}")
    if args.microbatch_size is not None and args.microbatch_size < 1:
        raise UserError(f"--microbatch-size must be >= 1, got {args.microbatch_size}")
    result = _load(args).query(args.compute, args.epsilon, users=args.users, tokens=args.tokens, delta=args.delta,
                       privacy_unit=args.privacy_unit, seq_len=args.seq_len, tolerance=args.tolerance,
                       model_size_range=tuple(args.model_size_range) if args.model_size_range else None,
                       physical_batch_correction=bool(args.physical_batch_correction),
                       allow_extrapolation=args.allow_extrapolation, inference_tokens=args.inference_tokens,
                       microbatch_size=args.microbatch_size, count_pretraining=args.count_pretraining,
                       progress=_progress, decision_rule=args.decision_rule, sampling=args.sampling,
                       examples_per_user=args.examples_per_user, sequences=args.sequences)
    choice = result if isinstance(result, MechanismChoice) else None
    answer = result.answer if choice is not None else result
    if args.train_config:
        block = answer.runnable.train_config() if choice is None else choice.train_config()
        if not block:
            raise UserError(f"--train-config: {answer.runnable.model_note}")
        from dpscaling.core.io import write_text_atomic

        write_text_atomic(args.train_config, train_config_yaml(answer, block))
    if args.json:
        emit(answer.to_json() if choice is None else choice.to_json(), True)
        for flag in answer.flags:  # the text answer shows them itself
            print(f"dpscaling query: warning: {flag.message}", file=sys.stderr)
    else:
        print(render_answer(answer) if choice is None else render_choice(choice))
    return 0


def _one_law(args: argparse.Namespace) -> ScalingLaw:
    """One mechanism's law: a law across mechanisms is refused by name."""
    law = _load(args)
    if isinstance(law, LawAcrossMechanisms):
        raise UserError(f"--law {args.law}: a bundle of the mechanisms {law.mechanisms}; name one with --mechanism")
    return law


def _query_configs(args: argparse.Namespace) -> int:
    from dpscaling.law.pipeline import existing_file

    path = existing_file(args.configs, "--configs")
    configs = pd.read_csv(path, skipinitialspace=True)
    law = _one_law(args)
    try:
        evaluated = law.evaluate(configs, delta=args.delta,
                                 physical_batch_correction=bool(args.physical_batch_correction))
    except UserError as error:
        raise UserError(f"--configs {path}: {error}") from None
    unanswered = evaluated.attrs["unanswered"]
    has_interval = "Cross Entropy 5%" in evaluated
    if args.out:
        evaluated.to_csv(args.out, index=False)
    elif not args.json:
        evaluated.to_csv(sys.stdout, index=False)
    if args.json:
        emit({"rows": evaluated.to_dict("records"), "rows_without_answer": unanswered,
              "accounting": evaluated.attrs["accounting"], "sampling": evaluated.attrs["sampling"],
              "loss_units": law.bundle.loss_units,
              "interval": (f"90% over {len(law.bundle.replicates)} bootstrap replicates" if has_interval
                           else law.bundle.notes.get("bootstrap", "no interval"))}, True)
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
    measured = law.grid.loc[law.grid["Source"] == "measured", "Iterations"]
    first, horizon = float(measured.min()), float(measured.max())
    scale = 6.0 * law.seq_len
    return (scale * model_sizes[0] * first * _SMALLEST_BATCH, scale * model_sizes[-1] * horizon * _LARGEST_BATCH)


def run_table_saturating(args: argparse.Namespace) -> int:
    scaling = load_law(args.law, accounting_amplified=args.accounting_amplified,
                       accounting_unamplified=args.accounting_unamplified)
    if isinstance(scaling, LawAcrossMechanisms):
        raise UserError(f"--law {args.law}: a law across mechanisms; give one mechanism's law")
    law = scaling.bundle.law
    source = scaling.sigma_source(args.delta, _progress)
    model_sizes = model_size_grid(*(args.model_size_range or law.model_size_range()))
    low, high = args.compute_range or default_compute_range(law, model_sizes)
    if not 0 < low < high or args.compute_count < 2:
        raise UserError("--compute-range must satisfy 0 < MIN < MAX and --compute-count >= 2")
    budgets = np.geomspace(low, high, args.compute_count)
    table = saturating_table(budgets, args.epsilons, args.users, law.loss, source.sigma, law.seq_len, model_sizes,
                             law.iteration_bounds(), args.tolerance)
    table.to_csv(args.out, index=False)
    emit({"out": args.out, "rows": len(table), "compute_budgets": len(budgets),
          "compute_range": [float(low), float(high)], "accounting": source.description,
          "sampling": source.sampling, "delta": source.delta,
          "budgets_without_answer": int(table["Budgets Without Answer"].sum())}, args.json)
    return 0


# ---------------------------------------------------------------------------------------------- law

def run_law_info(args: argparse.Namespace) -> int:
    info = load_law(args.bundle).info()
    if args.json:
        emit(info, True)
        return 0
    provenance, ranges = info["provenance"], info["validated_ranges"]
    shown = {key: provenance.get(key) for key in ("family", "objective", "tokenizer", "vocab_size", "seq_len",
                                                  "privacy_unit", "delta", "sampling", "mode", "run_name",
                                                  "config_sha256") if provenance.get(key) is not None}
    if provenance.get("corpus"):
        shown["corpus"] = ", ".join(f"{k} {v}" for k, v in provenance["corpus"].items() if v is not None)
    shown["models"] = ", ".join(f"{name} ({shape['param_count']:,})"
                                for name, shape in (provenance.get("models") or {}).items()) or None
    shown.update({
        "model_size_range": ranges["model_size"],
        "iterations": f"measured {ranges['first_iteration']:g}..{ranges['horizon']:g}, law to "
                      f"{ranges['law_iterations'][1]:g}, validated to {ranges['validated_iterations']:g} "
                      f"({ranges['extrapolation_factor']:g}× the horizon)",
        "noise_batch_ratio_range": ranges["noise_batch_ratio"],
        "calibration_region": (f"T >= {ranges['calibration_iterations_from']:g}"
                               if ranges["calibration_iterations_from"] is not None else "no calibration"),
        "sampling_rate_limit": ranges["sampling_rate_limit"],
        "loss_units": info["loss_units"],
        "contents": ", ".join(f"{k}: {v}" for k, v in info["contents"].items() if v),
    })
    for item, why in info["missing"].items():
        shown[f"missing {item}"] = why
    emit({k: v for k, v in shown.items() if v is not None}, False)
    return 0


def run_law_bundle(args: argparse.Namespace) -> int:
    bundle = convert_to_bundle(args.law, args.out, sigma_table=args.sigma_table, bootstrap=args.bootstrap,
                               calibration=args.calibration, correction=args.physical_batch_correction,
                               lengths=args.lengths)
    emit({"bundle": str(args.out), **bundle.contents()}, args.json)
    return 0


