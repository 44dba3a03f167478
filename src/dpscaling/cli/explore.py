"""``dpscaling explore``: the interactive explorer page of a law bundle (docs/explorer.md). Thin over
:mod:`dpscaling.report.explorer`."""

from __future__ import annotations

import argparse
import os

from dpscaling.cli._output import add_json_flag, emit
from dpscaling.report.explorer import default_grid, write_explorer
from dpscaling.report.explorer.sweep import COMPUTE_STEPS_PER_OCTAVE, DEFAULT_EPSILONS
from dpscaling.law.loading import load_primary_law


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "explore", help="write the interactive explorer page of a law bundle",
        description="Answer the law at every point of a grid of (ε, N, C) budgets with `dpscaling query`'s code "
                    "and write one self-contained HTML page (no network access) that shows them: the answer, "
                    "its interval and flags, loss and allocation against compute, the near-optimal set and the "
                    "command that reproduces each answer. docs/explorer.md.")
    parser.add_argument("bundle", metavar="BUNDLE", help="a law bundle directory (results/<run>/law/bundle)")
    parser.add_argument("--out", required=True, metavar="HTML", help="the page to write")
    parser.add_argument("--epsilons", type=float, nargs="+", metavar="EPS",
                        help=f"privacy budgets ε of the grid (default: {' '.join(f'{e:g}' for e in DEFAULT_EPSILONS)})")
    parser.add_argument("--users", type=float, nargs="+", metavar="N",
                        help="data budgets of the grid in privacy units (default: 10^3 … 10^9, two per decade)")
    parser.add_argument("--compute-range", type=float, nargs=2, metavar=("MIN", "MAX"),
                        help="ends of the compute axis in FLOPs (default: the smallest model at the law's physical "
                             "batch and first measured T to the largest at 64 physical batches and the validated T)")
    parser.add_argument("--compute-steps-per-octave", type=int, default=COMPUTE_STEPS_PER_OCTAVE, choices=(1, 2),
                        help="compute budgets per doubling: 1 (a factor 2 apart, the default) or 2 (√2)")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1,
                        help="processes answering the grid (default: the machine's cores)")
    parser.add_argument("--bundle-argument", metavar="PATH",
                        help="the bundle path the page's commands show (default: BUNDLE as given)")
    add_json_flag(parser)
    parser.set_defaults(func=run_explore)


def run_explore(args: argparse.Namespace) -> int:
    law = load_primary_law(args.bundle)
    grid = default_grid(law, epsilons=args.epsilons, data=args.users, compute_range=args.compute_range,
                        compute_steps_per_octave=args.compute_steps_per_octave)
    summary = write_explorer(law, args.bundle, args.out, grid, bundle_argument=args.bundle_argument,
                             workers=max(1, args.workers))
    emit(summary if args.json else {key: value for key, value in summary.items() if key != "grid"}, args.json)
    return 0
