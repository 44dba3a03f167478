"""``dpscaling params``: parameter count of a BERT model (paper Table 1 / throughput table)."""

from __future__ import annotations

import argparse

from dpscaling.commands._output import add_json_flag, emit
from dpscaling.models.family import (
    BERT_MAX_POSITIONS,
    BERT_VOCAB_SIZE,
    FAMILY,
    PAPER_PARAMS,
    bert_config,
)


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "params",
        help="print a model's parameter count (total and non-embedding)",
        description="Parameter count of a BERT MLM model as trained here (tied output embedding, no pooler).",
    )
    parser.add_argument("--model", required=True, help=f"one of {', '.join(FAMILY)}, or 'custom'")
    parser.add_argument("--vocab-size", type=int, default=BERT_VOCAB_SIZE)
    parser.add_argument("--max-positions", type=int, default=BERT_MAX_POSITIONS)
    parser.add_argument("--num-layers", type=int, help="custom model: encoder layers")
    parser.add_argument("--num-heads", type=int, help="custom model: attention heads")
    parser.add_argument("--hidden-size", type=int, help="custom model: hidden size")
    parser.add_argument(
        "--intermediate-size", type=int, help="feed-forward size (default 4 × hidden)"
    )
    add_json_flag(parser)
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    overrides = {
        name: getattr(args, name)
        for name in ("num_layers", "num_heads", "hidden_size", "intermediate_size")
        if getattr(args, name) is not None
    }
    config = bert_config(
        args.model, vocab_size=args.vocab_size, max_positions=args.max_positions, **overrides
    )
    counts = config.param_count()
    result = {
        "model": args.model,
        "num_layers": config.num_layers,
        "num_heads": config.num_heads,
        "hidden_size": config.hidden_size,
        "intermediate_size": config.intermediate_size,
        "vocab_size": config.vocab_size,
        "max_positions": config.max_positions,
        "params": counts.total,
        "non_embedding_params": counts.non_embedding,
    }
    paper = PAPER_PARAMS.get(args.model)
    if paper is not None and not overrides and args.vocab_size == BERT_VOCAB_SIZE:
        result["paper_params"] = int(paper)
    emit(result, args.json)
    return 0
