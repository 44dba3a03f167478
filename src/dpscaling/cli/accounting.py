"""``dpscaling sigma | epsilon | vulnerability | truncation``: privacy accounting from the command line.

q = batch/users is the sampling probability, σ the noise multiplier on the sum of clipped gradients, σ̄ =
σ/batch the noise-batch ratio (paper §2). Every number is priced by :mod:`dpscaling.accounting.pricing`:
by default (``--rule runnable``) what a run pays, the sampler that trains it, its participations and its
truncation (:func:`~dpscaling.accounting.pricing.price_run`, what ``private_model`` trains), printed with
that sampler; ``--rule paper`` the paper's rule (:func:`~dpscaling.accounting.pricing.paper_sigma`), which
prices hypothetical batches no sampler runs, and says so.
"""

from __future__ import annotations

import argparse
import json
import math
from typing import Any

from dpscaling.accounting import interpolation_check, pricing, reference_csv, table, truncation, vulnerability
from dpscaling.accounting.branches import MIN_RULE, POISSON_BRANCH, SAMPLINGS
from dpscaling.accounting.table_spec import TableSpec
from dpscaling.accounting.validation import DEFAULT_DELTA, MAX_EPSILON, MAX_STEPS
from dpscaling.cli._output import add_json_flag, emit
from dpscaling.core.errors import UserError

# The help texts every accounting command shares.
USERS_HELP = "data budget N: the number of privacy units (users, or sequences when one sequence is the unit)"
DELTA_HELP = ("δ of the (ε, δ) guarantee: the probability with which the ε bound may fail "
              f"(default {DEFAULT_DELTA:g})".replace("e-0", "e-"))
RUNNABLE, PAPER = "runnable", "paper"
RULES: tuple[str, ...] = (RUNNABLE, PAPER)
PAPER_RULE_NOTE = ("the paper's rule prices hypothetical batches: untruncated Poisson, or fixed batches in which "
                   "each example joins ceil(q*T) steps; no sampler runs it (a shuffle's fixed batches can give more "
                   "participations, and private Poisson batches are truncated); train with --rule runnable's price")


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
        parser.add_argument(
            "--rule", choices=RULES, default=RUNNABLE,
            help="runnable (default): the price of the sampler that trains it, its participations and truncation, "
                 "what private_model trains; paper: the paper's rule (hypothetical batches, no sampler runs it)")
        parser.add_argument(
            "--sampling", choices=SAMPLINGS, default=None,
            help="poisson, deterministic (fixed batches) or min (the lower of the two). Runnable: poisson = "
                 "truncated Poisson at a priced L (default), deterministic = a shuffle's fixed batches (each "
                 "example in ceil(T/floor(N/B)) steps); paper: poisson untruncated, deterministic = ceil(q*T) "
                 "participations, default min")
        parser.add_argument("--mechanism", metavar="NAME", default="dpsgd",
                            help="the noise mechanism: dpsgd (default), bandmf-b<b> (cyclic Poisson, or cyclic "
                                 "fixed batches) or uls-m<m> (users sampled, N and B counting users)")
        parser.add_argument("--examples-per-user", type=int, metavar="K", default=None,
                            help="protect a user of up to K sequences (runnable only): DP-SGD's price is then ELS's "
                                 "(Poisson only, N counting sequences); a uls-m<m> mechanism's is over N users")
        parser.add_argument("--multiple", type=int, default=1,
                            help="runnable Poisson: the truncation length L is a multiple of this (the microbatch)")
        parser.add_argument("--truncated-batch-size", type=int, metavar="L", default=None,
                            help="runnable Poisson: the run's truncation length L (default: L priced, the "
                                 "smallest whose truncation costs at most 1%% more epsilon)")
    add_json_flag(parser)


def _whole(args: argparse.Namespace) -> tuple[int, int]:
    """--users and --batch as whole numbers: a run trains whole examples."""
    if args.users != math.floor(args.users) or args.batch != math.floor(args.batch):
        raise UserError("--users and --batch must be whole numbers for --rule runnable (a run trains whole "
                        f"examples), got {args.users!r} and {args.batch!r}; --rule paper prices any rate")
    if args.multiple < 1:
        raise UserError(f"--multiple must be >= 1, got {args.multiple!r}")
    if args.truncated_batch_size is not None and not args.batch <= args.truncated_batch_size <= args.users:
        raise UserError(f"--truncated-batch-size must be in [--batch, --users] = [{args.batch:g}, {args.users:g}], "
                        f"got {args.truncated_batch_size!r}")
    return int(args.users), int(args.batch)


def _runnable(args: argparse.Namespace, *, epsilon: float | None = None, sigma: float | None = None):
    """The run's price (:func:`dpscaling.accounting.pricing.price_run`) of the flags."""
    _, steps, delta = _configuration(args)
    users, batch = _whole(args)
    return pricing.price_run(args.mechanism, epsilon, delta, users, batch, steps, args.multiple,
                             args.examples_per_user, sigma=sigma, truncated_batch_size=args.truncated_batch_size,
                             sampling=args.sampling or POISSON_BRANCH)


def _runnable_record(run: Any, as_json: bool) -> dict[str, Any]:
    """The run's record (:class:`~dpscaling.accounting.matched.RunPrivacy`) under ``rule: runnable``; as text
    without the fields its sampler has not (an L of fixed batches, say)."""
    from dpscaling.privacy.epsilon_scope import COVERS

    record = {"rule": RUNNABLE, **run.record(),
              "epsilon_covers": f"{COVERS}; not the choices made from data before them (hyper-parameters, "
                                "vocabulary): docs/private-training.md"}
    return record if as_json else {key: value for key, value in record.items() if value is not None}


def _paper_only(args: argparse.Namespace) -> str:
    """The paper rule's sampling; refuses the flags that only a runnable price reads."""
    for flag, value, default in (("--examples-per-user", args.examples_per_user, None), ("--multiple", args.multiple, 1),
                                 ("--truncated-batch-size", args.truncated_batch_size, None)):
        if value != default:
            raise UserError(f"{flag}: prices a run (--rule runnable); the paper's rule has no such setting")
    return args.sampling or MIN_RULE


def _paper_record(args: argparse.Namespace, q: float, steps: int, delta: float, sigma: float, epsilon: float,
                  branch: str | None) -> dict[str, Any]:
    return {"rule": PAPER, "sampling": args.sampling or MIN_RULE, "branch": branch, "mechanism": args.mechanism,
            "sigma": sigma, "noise_batch_ratio": sigma / args.batch, "epsilon": epsilon, "delta": delta,
            "sampling_probability": q, "steps": steps, "sampler": None, "note": PAPER_RULE_NOTE}


def _run_price(args: argparse.Namespace, *, epsilon: float | None = None, sigma: float | None = None) -> int:
    """σ for ``epsilon`` (``dpscaling sigma``) or ε spent by ``sigma`` (``dpscaling epsilon``), by ``--rule``."""
    q, steps, delta = _configuration(args)
    if args.rule == RUNNABLE:
        emit(_runnable_record(_runnable(args, epsilon=epsilon, sigma=sigma), args.json), args.json)
        return 0
    if sigma is None:
        sigma, branch = pricing.paper_sigma(args.mechanism, _paper_only(args), epsilon, delta, q, steps)
    else:
        epsilon, branch = pricing.paper_epsilon(args.mechanism, _paper_only(args), sigma, delta, q, steps)
    if branch is None:
        raise UserError(f"--rule paper: no branch of {args.sampling or MIN_RULE!r} prices {args.mechanism} at "
                        f"q = {q:g}, T = {steps}")
    emit(_paper_record(args, q, steps, delta, sigma, epsilon, branch), args.json)
    return 0


def _run_sigma(args: argparse.Namespace) -> int:
    return _run_price(args, epsilon=_positive_number("--epsilon", args.epsilon, MAX_EPSILON))


def _run_epsilon(args: argparse.Namespace) -> int:
    return _run_price(args, sigma=_positive_number("--sigma", args.sigma))


def _run_vulnerability(args: argparse.Namespace) -> int:
    q, steps, delta = _configuration(args)
    if (args.sigma is None) == (args.epsilon is None):
        raise UserError("give exactly one of --epsilon (calibrate first) or --sigma")
    sigma = None if args.sigma is None else _positive_number("--sigma", args.sigma)
    epsilon = None if args.epsilon is None else _positive_number("--epsilon", args.epsilon, MAX_EPSILON)
    if args.rule == RUNNABLE:
        run = _runnable(args, epsilon=epsilon, sigma=sigma)
        emit({**_runnable_record(run, args.json), "mia_advantage": vulnerability.run_advantage(run)}, args.json)
        return 0
    rule = _paper_only(args)
    if sigma is None:
        sigma, branch = pricing.paper_sigma(args.mechanism, rule, epsilon, delta, q, steps)
    else:  # the advantage of the branch a σ is read under: min reads it as the (amplified) Poisson one
        branch = POISSON_BRANCH if rule == MIN_RULE else rule
        epsilon, _ = pricing.paper_epsilon(args.mechanism, branch, sigma, delta, q, steps)
    if branch is None:
        raise UserError(f"--rule paper: no branch of {rule!r} prices {args.mechanism} at q = {q:g}, T = {steps}")
    if args.mechanism != "dpsgd":
        raise UserError("--mechanism: the paper rule's advantage is DP-SGD's; use --rule runnable for "
                        f"{args.mechanism}")
    advantage = vulnerability.mia_advantage(sigma, q, steps, branch)
    emit({**_paper_record(args, q, steps, delta, sigma, epsilon, branch), "mia_advantage": advantage}, args.json)
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
    run = pricing.price_run("dpsgd", epsilon, delta, users, batch, steps, args.multiple)
    lengths = args.lengths or [truncation.round_up(batch + k * math.sqrt(batch), args.multiple) for k in (3, 4, 5, 6)]
    if min(lengths) < batch:
        raise UserError(f"--lengths must be at least --batch ({batch}), got {min(lengths)}")
    trade = truncation.truncation_trade(epsilon, q, steps, users, delta, [*lengths, run.truncated_batch_size])
    result = {"truncated_batch_size": run.truncated_batch_size, "sigma": run.sigma,
              "untruncated_sigma": run.untruncated_sigma, "epsilon": run.epsilon,
              "truncation_probability": run.truncation_probability, "padding_share": run.padding_share,
              "sampler": run.sampler, "accountant": run.accountant, "tolerance": truncation.EPSILON_TOLERANCE,
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
    sigma = subparsers.add_parser("sigma", help="noise multiplier σ and noise-batch ratio σ/B for (ε, δ): what a run pays")
    sigma.add_argument("--epsilon", type=float, required=True, help="privacy budget ε to calibrate σ for")
    _add_configuration_flags(sigma)
    sigma.set_defaults(func=_run_sigma)

    epsilon = subparsers.add_parser("epsilon", help="ε spent by noise multiplier σ in a run")
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
