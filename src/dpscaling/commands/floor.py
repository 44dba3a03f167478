"""``dpscaling floor``: the held-out unigram entropy of a packed data directory (docs/data.md).

The floor a trained model must beat (:mod:`dpscaling.data.floor`): held-out cross-entropy
of the masked-LM targets under add-one-smoothed training-split token frequencies.
"""

from __future__ import annotations

import argparse

from dpscaling.commands._output import add_json_flag, emit
from dpscaling.data.floor import unigram_floor


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "floor",
        help="print the held-out unigram entropy (nats) of packed data: the loss to beat",
        description="Cross-entropy of the held-out masked-LM targets (non-special tokens) under "
        "add-one-smoothed unigram frequencies of the training split.",
    )
    parser.add_argument(
        "--data", required=True, help="a packed data directory, e.g. results/default/data/packed"
    )
    add_json_flag(parser)
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    emit({"data": args.data, **unigram_floor(args.data).to_dict()}, args.json)
    return 0
