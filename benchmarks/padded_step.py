"""Cost of padding: the padded truncated-Poisson DP step against the drawn batch size, skipping its
microbatches of padding or computing all L rows, beside an unpadded step of L real rows (results in
docs/private-training.md, "Cost of padding").

Every variant runs the real training step of :mod:`dpscaling.train.step` (masking, forward, backward,
clipping, noise, Adam) on a physical batch of L = ``--physical`` sequences:

* unpadded: ``sampling: shuffle`` with batch L (every row a real example);
* padded, at each drawn size b of ``--drawn``: ``sampling: truncated_poisson`` with expected batch
  B = ``--expected`` and cap L, b real rows and L − b [PAD] rows of weight 0, laid out as the sampler lays
  them out (:func:`dpscaling.dp.per_example.real_examples_first`), once with ``skip_padding`` (the
  default: only the microbatches holding a real example are computed) and once without (every microbatch,
  the fixed-L cost). Both compile once: b is data.

Rounds alternate between the variants; each variant's time is the minimum over rounds of the round's
median. The last line printed is one JSON object with, per clipping path, ``skip_over_fixed`` at each b
and ``fixed_over_unpadded``.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np
from dp_step import MASK_ID, SPECIAL, token_batch

from dpscaling.dp.per_example import real_examples_first
from dpscaling.models.bert import BertMlm
from dpscaling.train.config import TrainConfig
from dpscaling.train.mlm import MaskingSpec
from dpscaling.train.objectives import MaskedLM
from dpscaling.train.step import init_state, make_optimizer, make_train_step, step_hyperparams


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--physical", type=int, default=32, help="physical batch L")
    parser.add_argument("--expected", type=int, default=16, help="expected Poisson batch B")
    parser.add_argument("--drawn", default="8,16,24,32", help="drawn batch sizes b (comma-separated, <= L)")
    parser.add_argument("--microbatch", type=int, default=4)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--clipping", default="vmap,ghost")
    parser.add_argument("--steps", type=int, default=6, help="timed steps per round")
    parser.add_argument("--rounds", type=int, default=3)
    return parser.parse_args()


class Variant:
    """One compiled step, run on a given batch: ``time(tokens, weights)`` is the median of ``steps`` steps."""

    def __init__(self, config: TrainConfig, args, tokens: np.ndarray, weights: np.ndarray | None):
        model = BertMlm(config.model_config(args.vocab_size))
        optimizer = make_optimizer(config)
        objective = MaskedLM(MaskingSpec(args.vocab_size, MASK_ID, SPECIAL, pad_id=0, p_mask=config.p_mask))
        step = jax.jit(make_train_step(model, objective, config), donate_argnums=0)
        self.state = init_state(model, objective, optimizer, config, args.seq_len)
        self.hyperparams = step_hyperparams(config)
        self.step = step.lower(self.state, self.hyperparams, *_inputs(tokens, weights)).compile()
        self.time(tokens, weights, 2)  # warm-up

    def time(self, tokens: np.ndarray, weights: np.ndarray | None, steps: int) -> float:
        inputs, out = _inputs(tokens, weights), []
        for _ in range(steps):
            tick = time.perf_counter()
            self.state, metrics = self.step(self.state, self.hyperparams, *inputs)
            jax.block_until_ready(metrics["loss"])
            out.append(time.perf_counter() - tick)
        return 1e3 * statistics.median(out)


def _inputs(tokens: np.ndarray, weights: np.ndarray | None) -> tuple:
    return (jnp.asarray(tokens),) if weights is None else (jnp.asarray(tokens), jnp.asarray(weights))


def padded_batch(tokens: np.ndarray, drawn: int, microbatch: int) -> tuple[np.ndarray, np.ndarray]:
    """``drawn`` real rows then [PAD] rows of weight 0, laid out as the truncated-Poisson sampler lays them out."""
    padded = tokens.copy()
    padded[drawn:] = 0
    weights = (np.arange(len(tokens)) < drawn).astype(np.float32)
    order = real_examples_first(np.arange(len(tokens)), microbatch)
    return padded[order], weights[order]


def main() -> None:
    args = parse_args()
    drawn = [int(b) for b in args.drawn.split(",")]
    tokens = token_batch(argparse.Namespace(batch=args.physical, seq_len=args.seq_len, vocab_size=args.vocab_size))
    batches = {b: padded_batch(tokens, b, args.microbatch) for b in drawn}
    base = dict(model="custom", model_overrides=dict(num_layers=args.layers, num_heads=args.heads,
                                                     hidden_size=args.hidden),
                microbatch_size=args.microbatch, warmup_steps=10, learning_rate=1e-3, noise_batch_ratio=2.0**-10)
    print(f"L={args.physical} (B={args.expected} expected), microbatch {args.microbatch}, seq {args.seq_len}, "
          f"{jax.device_count()} {jax.default_backend()} device(s)")
    results = {}
    for clipping in args.clipping.split(","):
        padded = dict(base, clipping=clipping, batch_size=args.expected, sampling="truncated_poisson",
                      truncated_batch_size=args.physical)
        unpadded = Variant(TrainConfig(**base, clipping=clipping, batch_size=args.physical), args, tokens, None)
        variants = {"skip": Variant(TrainConfig(**padded), args, *batches[drawn[0]]),
                    "fixed": Variant(TrainConfig(**padded, skip_padding=False), args, *batches[drawn[0]])}
        best = {"unpadded": float("inf")} | {(name, b): float("inf") for name in variants for b in drawn}
        for _ in range(args.rounds):
            best["unpadded"] = min(best["unpadded"], unpadded.time(tokens, None, args.steps))
            for b in drawn:
                for name, variant in variants.items():
                    best[name, b] = min(best[name, b], variant.time(*batches[b], args.steps))
        print(f"{clipping}: unpadded L = {args.physical}: {best['unpadded']:.1f} ms")
        for b in drawn:
            print(f"  drawn {b:4d}: skipping {best['skip', b]:8.1f} ms   all L {best['fixed', b]:8.1f} ms   "
                  f"skip ÷ fixed {best['skip', b] / best['fixed', b]:.3f}")
        results[clipping] = {
            "skip_over_fixed": {b: round(best["skip", b] / best["fixed", b], 3) for b in drawn},
            "fixed_over_unpadded": round(statistics.median(best["fixed", b] for b in drawn) / best["unpadded"], 3)}
    print(json.dumps({"physical": args.physical, "expected": args.expected, "microbatch": args.microbatch,
                      "by_clipping": results}))


if __name__ == "__main__":
    main()
