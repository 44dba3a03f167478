"""``dpscaling floor``: the held-out unigram entropy of a packed data directory (docs/data.md).

The floor a trained model must beat (:mod:`dpscaling.data.floor`): held-out cross-entropy of an
objective's targets (masked-LM or next-token) under add-one-smoothed training-split frequencies.
"""

from __future__ import annotations

import argparse

from dpscaling.cli._output import add_json_flag, emit
from dpscaling.data.floor import TARGETS, unigram_floor


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "floor",
        help="print the held-out unigram entropy (nats) of packed data: the loss to beat",
        description="Cross-entropy of the held-out targets of a training objective (masked_lm: non-special "
        "tokens; causal_lm: every next token) under add-one-smoothed unigram frequencies of the training split.",
    )
    parser.add_argument(
        "--data", required=True, help="a packed data directory, e.g. results/default/data/packed/seq=64"
    )
    parser.add_argument("--objective", choices=sorted(TARGETS), default="masked_lm",
                        help="whose targets: masked_lm (BERT, default) or causal_lm (decoders)")
    add_json_flag(parser)
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    emit({"data": args.data, **unigram_floor(args.data, args.objective).to_dict()}, args.json)
    return 0
