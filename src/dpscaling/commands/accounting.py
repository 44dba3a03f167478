"""``dpscaling sigma | epsilon | vulnerability | truncation``: privacy accounting from the command line.

q = batch/users is the Poisson sampling probability, σ the noise multiplier on
the sum of clipped gradients, σ̄ = σ/batch the noise-batch ratio (paper §2).
"""

from __future__ import annotations

import argparse
import json
import math

from dpscaling.accounting import calibration, interpolation_check, reference_csv, table, truncation, vulnerability
from dpscaling.accounting.table_spec import TableSpec
from dpscaling.accounting.validation import DEFAULT_DELTA, MAX_EPSILON, MAX_STEPS
from dpscaling.commands._output import add_json_flag, emit
from dpscaling.errors import UserError

# The help texts every accounting command shares.
USERS_HELP = "data budget N: the number of privacy units (users, or sequences when one sequence is the unit)"
DELTA_HELP = ("δ of the (ε, δ) guarantee: the probability with which the ε bound may fail "
              f"(default {DEFAULT_DELTA:g})".replace("e-0", "e-"))


def _positive_number(flag: str, value: float, upper: float = math.inf) -> float:
    if not (0 < value <= upper) or math.isnan(value):
        raise UserError(f"{flag} must be in (0, {upper:g}], got {value!r}")
    return value


def _configuration(args: argparse.Namespace) -> tuple[float, int, float]:
    """Checked (q, steps, delta) from --users, --batch, --steps, --delta."""
    users = _positive_number("--users", args.users)
    batch = _positive_number("--batch", args.batch)
    if batch > users:
        raise UserError(f"--batch must be at most --users (sampling probability ≤ 1), "
                        f"got batch {batch:g} > users {users:g}")
    steps = args.steps
    if not (1 <= steps <= MAX_STEPS) or steps != math.floor(steps):
        raise UserError(f"--steps must be an integer in [1, {MAX_STEPS:.0e}], got {steps!r}")
    if not 0 < args.delta < 1:
        raise UserError(f"--delta must be in (0, 1), got {args.delta!r}")
    return batch / users, int(steps), args.delta


def _add_configuration_flags(parser: argparse.ArgumentParser, sampling: bool = True) -> None:
    parser.add_argument("--users", type=float, required=True, help=USERS_HELP)
    parser.add_argument("--batch", type=float, required=True,
                        help="(expected) batch size B; the sampling probability is q = B/N")
    parser.add_argument("--steps", type=float, required=True, help="training iterations T")
    parser.add_argument("--delta", type=float, default=DEFAULT_DELTA, help=DELTA_HELP)
    if sampling:
        parser.add_argument("--sampling", choices=calibration.SAMPLINGS, default="min",
                            help="poisson, deterministic (each example in ⌈qT⌉ steps) or min "
                                 "(the lower σ of the two, the paper's rule; default)")
    add_json_flag(parser)


def _run_sigma(args: argparse.Namespace) -> int:
    q, steps, delta = _configuration(args)
    epsilon = _positive_number("--epsilon", args.epsilon, MAX_EPSILON)
    if args.mechanism is not None:  # a configuration to train: the one pricing module, for its mechanism
        from dpscaling.accounting.pricing import price

        if args.users != math.floor(args.users) or args.batch != math.floor(args.batch):
            raise UserError("--mechanism prices a configuration to train: --users and --batch must be whole numbers")
        found = price(args.mechanism, args.sampling, epsilon, delta, int(args.users), int(args.batch), steps)
        emit(found.to_json(), args.json)
        return 0
    result = calibration.calibrate(epsilon, q, steps, delta, args.sampling)
    emit({"sigma": result.sigma, "noise_batch_ratio": result.sigma / args.batch,
          "epsilon": epsilon, "delta": delta, "sampling_probability": q,
          "sampling": result.sampling}, args.json)
    return 0


def _run_epsilon(args: argparse.Namespace) -> int:
    q, steps, delta = _configuration(args)
    sigma = _positive_number("--sigma", args.sigma)
    epsilon = calibration.epsilon_spent(sigma, q, steps, delta, args.sampling)
    emit({"sigma": sigma, "noise_batch_ratio": sigma / args.batch, "epsilon": epsilon,
          "delta": delta, "sampling_probability": q, "sampling": args.sampling}, args.json)
    return 0


def _run_vulnerability(args: argparse.Namespace) -> int:
    q, steps, delta = _configuration(args)
    if (args.sigma is None) == (args.epsilon is None):
        raise UserError("give exactly one of --epsilon (calibrate first) or --sigma")
    if args.sigma is not None:
        sigma = _positive_number("--sigma", args.sigma)
        branch = calibration.POISSON_BRANCH if args.sampling == calibration.MIN_RULE else args.sampling
        epsilon = calibration.epsilon_spent(sigma, q, steps, delta, branch)
    else:
        epsilon = _positive_number("--epsilon", args.epsilon, MAX_EPSILON)
        calibrated = calibration.calibrate(epsilon, q, steps, delta, args.sampling)
        sigma, branch = calibrated.sigma, calibrated.sampling
    advantage = vulnerability.mia_advantage(sigma, q, steps, branch)
    emit({"sigma": sigma, "noise_batch_ratio": sigma / args.batch, "epsilon": epsilon,
          "delta": delta, "sampling_probability": q, "sampling": branch,
          "mia_advantage": advantage}, args.json)
    return 0


def _spec(args: argparse.Namespace) -> TableSpec:
    try:
        values = json.loads(args.spec_json) if args.spec_json else {}
    except json.JSONDecodeError as error:
        raise UserError(f"--spec-json is not valid JSON: {error}") from error
    if not isinstance(values, dict):
        raise UserError("--spec-json must be a JSON object of TableSpec fields")
    return TableSpec.from_mapping(values)


def _run_table_plan(args: argparse.Namespace) -> int:
    spec = _spec(args)
    emit({"chunks": len(table.plan_table(spec)), "points": spec.size(),
          "epsilon": len(spec.epsilons()), "steps": len(spec.steps()),
          "sampling_probability": len(spec.sampling_probabilities())}, args.json)
    return 0


def _run_table_chunk(args: argparse.Namespace) -> int:
    spec = _spec(args)
    frame = table.compute_chunk(spec, table.chunk_by_index(spec, args.index))
    table.save_table(frame, args.output, spec)
    return 0


def _run_table_merge(args: argparse.Namespace) -> int:
    merged = table.merge_chunks(args.chunks)
    spec = table.read_frame(args.chunks[0])[1]
    table.save_table(merged, args.output, spec)
    if args.amplified_csv or args.unamplified_csv:
        if not (args.amplified_csv and args.unamplified_csv):
            raise UserError("--amplified-csv and --unamplified-csv go together")
        reference_csv.export_reference_csv(table.SigmaTable(merged), args.amplified_csv, args.unamplified_csv)
    return 0


def _run_table_check(args: argparse.Namespace) -> int:
    emit(interpolation_check.report_interpolation_error(args.table, args.points, args.output, args.seed), args.json)
    return 0


def _register_table(subparsers: argparse._SubParsersAction) -> None:
    """`dpscaling accounting-table plan|chunk|merge|check`: the steps Snakemake runs."""
    group = subparsers.add_parser("accounting-table", help="build the σ(ε, T, q) accounting table in chunks")
    steps = group.add_subparsers(dest="table_command", metavar="STEP", required=True)

    def with_spec(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
        parser.add_argument("--spec-json", default="",
                            help="JSON object of TableSpec fields, e.g. '{\"q_min_log2\": -10}' "
                                 "(default: the built-in grid, docs/accounting.md)")
        return parser

    plan = with_spec(steps.add_parser("plan", help="grid sizes and number of chunks"))
    add_json_flag(plan)
    plan.set_defaults(func=_run_table_plan)
    chunk = with_spec(steps.add_parser("chunk", help="compute one chunk to Parquet"))
    chunk.add_argument("--index", type=int, required=True,
                       help="which chunk to compute: 0 .. chunks-1, as `plan` counts them")
    chunk.add_argument("--output", required=True, help="Parquet file to write the chunk to")
    chunk.set_defaults(func=_run_table_chunk)
    merge = steps.add_parser("merge", help="merge chunk files into the table (and optional CSV export)")
    merge.add_argument("chunks", nargs="+", help="chunk Parquet files written by `chunk`")
    merge.add_argument("--output", required=True, help="Parquet file to write the merged table to")
    merge.add_argument("--amplified-csv",
                       help="also write σ with Poisson amplification as a headerless CSV in the format the "
                            "authors' analysis code reads (needs --unamplified-csv)")
    merge.add_argument("--unamplified-csv",
                       help="also write σ without amplification (deterministic batches) in that format "
                            "(needs --amplified-csv)")
    merge.set_defaults(func=_run_table_merge)
    check = steps.add_parser("check", help="measure interpolation error at off-grid points")
    check.add_argument("--table", required=True, help="the merged table (Parquet) to check")
    check.add_argument("--points", type=int, default=30,
                       help="number of random off-grid (ε, T, q) points, each calibrated directly (default 30)")
    check.add_argument("--seed", type=int, default=0, help="random seed of the off-grid points (default 0)")
    check.add_argument("--output", help="CSV of every measured point (default: none written)")
    add_json_flag(check)
    check.set_defaults(func=_run_table_check)


def _run_truncation(args: argparse.Namespace) -> int:
    q, steps, delta = _configuration(args)
    epsilon = _positive_number("--epsilon", args.epsilon, MAX_EPSILON)
    users, batch = int(args.users), round(args.batch)
    if args.users != users or args.multiple < 1:
        raise UserError(f"--users must be a whole number of sequences and --multiple >= 1, "
                        f"got {args.users!r} and {args.multiple!r}")
    run = truncation.truncated_poisson_run(q=q, steps=steps, dataset_size=users, delta=delta,
                                           multiple=args.multiple, target_epsilon=epsilon)
    lengths = args.lengths or [truncation.round_up(batch + k * math.sqrt(batch), args.multiple) for k in (3, 4, 5, 6)]
    if min(lengths) < batch:
        raise UserError(f"--lengths must be at least --batch ({batch}), got {min(lengths)}")
    trade = truncation.truncation_trade(epsilon, q, steps, users, delta,
                                        [*lengths, run.price.truncated_batch_size])
    result = {"truncated_batch_size": run.price.truncated_batch_size, "sigma": run.sigma,
              "untruncated_sigma": run.untruncated_sigma, "epsilon": run.epsilon,
              "truncation_probability": run.price.truncation_probability,
              "padding_share": run.price.padding_share, "tolerance": truncation.EPSILON_TOLERANCE,
              "trade": trade}
    if args.json:
        emit(result, True)
        return 0
    emit({k: v for k, v in result.items() if k != "trade"}, False)
    print("\n     L  P(batch > L)  padding       sigma  extra noise")
    for row in trade:
        print(f"{row['truncated_batch_size']:>6}  {row['truncation_probability']:>12.2g}  "
              f"{row['padding_share']:>7.1%}  {row['sigma']:>10.4g}  {row['extra_noise']:>+11.1%}")
    return 0


def register(subparsers: argparse._SubParsersAction) -> None:
    sigma = subparsers.add_parser("sigma", help="noise multiplier σ and noise-batch ratio σ/B for (ε, δ)")
    sigma.add_argument("--epsilon", type=float, required=True, help="privacy budget ε to calibrate σ for")
    sigma.add_argument("--mechanism", metavar="NAME",
                       help="price a configuration to train for this noise mechanism (dpsgd or bandmf-b<b>): the "
                            "events of the samplers that run it, BandMF's cyclic Poisson included, with its sampler, "
                            "adjacency and event (docs/accounting.md, 'Pricing a configuration'); default: the "
                            "paper's rule for DP-SGD's hypothetical batches")
    _add_configuration_flags(sigma)
    sigma.set_defaults(func=_run_sigma)

    epsilon = subparsers.add_parser("epsilon", help="ε spent by noise multiplier σ")
    epsilon.add_argument("--sigma", type=float, required=True,
                         help="noise multiplier σ: noise std on the sum of clipped gradients, in units of "
                              "the clipping norm")
    _add_configuration_flags(epsilon)
    epsilon.set_defaults(func=_run_epsilon)

    vuln = subparsers.add_parser(
        "vulnerability", help="membership-inference advantage (total variation) of a configuration")
    vuln.add_argument("--epsilon", type=float, help="calibrate σ for this ε first (give this or --sigma)")
    vuln.add_argument("--sigma", type=float,
                      help="or use this noise multiplier σ directly (give this or --epsilon)")
    _add_configuration_flags(vuln)
    vuln.set_defaults(func=_run_vulnerability)

    trade = subparsers.add_parser(
        "truncation", help="the truncation length L of truncated Poisson, priced: padding against noise")
    trade.add_argument("--epsilon", type=float, required=True, help="privacy budget ε the run is calibrated for")
    trade.add_argument("--multiple", type=int, default=1, help="L is a multiple of this (the microbatch size)")
    trade.add_argument("--lengths", type=lambda v: [int(x) for x in v.split(",")],
                       help="comma-separated L to compare (default: B + k√B, k = 3..6, and the priced L)")
    _add_configuration_flags(trade, sampling=False)
    trade.set_defaults(func=_run_truncation)

    _register_table(subparsers)
