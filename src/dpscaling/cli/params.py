"""``dpscaling params``: parameter count of a model of any family (total and non-embedding).

Presets: the paper's BERTs (Table 1; BERT's vocabulary by default) and the decoders (GPT-2's three
sizes and NanoDO30M; GPT-2's vocabulary by default). ``custom`` builds a shape of ``--family``.
Counted in closed form (:mod:`dpscaling.models.shapes`), equal to the built module's (tested).
"""

from __future__ import annotations

import argparse

from dpscaling.cli._output import add_json_flag, emit
from dpscaling.models.family import BERT, BERT_VOCAB_SIZE, FAMILIES, PAPER_PARAMS, PRESETS, family_named


def register(subparsers: argparse._SubParsersAction) -> None:
    parser = subparsers.add_parser(
        "params",
        help="print a model's parameter count (total and non-embedding)",
        description="Parameter count of a model as trained here: BERT with its tied MLM head (no pooler), "
                    "or a decoder with its tied output layer.",
    )
    parser.add_argument("--model", required=True, help=f"one of {', '.join(PRESETS)}, or 'custom'")
    parser.add_argument("--family", choices=sorted(FAMILIES), help="custom model: its family (default bert)")
    parser.add_argument("--vocab-size", type=int,
                        help="vocabulary size (default: the family's own, BERT 30522, GPT-2 50257)")
    parser.add_argument("--max-positions", type=int,
                        help="position embeddings, the longest sequence (default: the preset's, BERT 512, GPT-2 1024)")
    parser.add_argument("--num-layers", type=int, help="custom model: number of transformer layers")
    parser.add_argument("--num-heads", type=int, help="custom model: attention heads")
    parser.add_argument("--hidden-size", type=int, help="custom model: hidden size (model width)")
    parser.add_argument("--intermediate-size", type=int, help="feed-forward (MLP) size (default 4 × hidden size)")
    add_json_flag(parser)
    parser.set_defaults(func=_run)


def _run(args: argparse.Namespace) -> int:
    family = PRESETS[args.model] if args.model in PRESETS else family_named(args.family or BERT.name, "--family")
    overrides = {
        name: getattr(args, name)
        for name in ("num_layers", "num_heads", "hidden_size", "intermediate_size")
        if getattr(args, name) is not None
    }
    vocab_size = args.vocab_size or family.vocab_size
    config = family.config(args.model, vocab_size=vocab_size, max_positions=args.max_positions, **overrides)
    counts = config.param_count()
    result = {
        "model": args.model,
        "family": family.name,
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
    if paper is not None and not overrides and vocab_size == BERT_VOCAB_SIZE:
        result["paper_params"] = int(paper)
    emit(result, args.json)
    return 0
