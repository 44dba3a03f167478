"""The ``dpscaling`` command line: one entry point, one subcommand per task.

Each subcommand lives in its own module under :mod:`dpscaling.cli` and
exposes ``register(subparsers)``; this file only assembles them. Errors a user
can fix (bad flags, budgets out of range) raise :class:`dpscaling.core.errors.UserError`
and end with a message on stderr and exit status 2.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from dpscaling import __version__
from dpscaling.core.errors import UserError

# Modules that provide subcommands, in the order `dpscaling --help` lists them.
COMMAND_MODULES: tuple[str, ...] = (
    "dpscaling.cli.params",
    "dpscaling.cli.accounting",
    "dpscaling.cli.law",
    "dpscaling.cli.explore",
    "dpscaling.cli.floor",
)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="dpscaling",
        description="Scaling laws for differentially private language models.",
    )
    parser.add_argument("--version", action="version", version=f"dpscaling {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module_name in COMMAND_MODULES:
        importlib.import_module(module_name).register(subparsers)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except UserError as error:
        print(f"dpscaling {args.command}: error: {error}", file=sys.stderr)
        return 2

