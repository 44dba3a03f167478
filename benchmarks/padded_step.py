"""Cost of padding: the padded truncated-Poisson DP step vs an unpadded step of the same
physical size (target ≤ 1.05×; results in docs/private-training.md, "Cost of padding").

Both variants run the real training step of :mod:`dpscaling.train.step` (masking, forward,
backward, clipping, noise, Adam) on L = ``--physical`` sequences:

* unpadded: ``sampling: shuffle`` with batch L (every row a real example);
* padded: ``sampling: poisson`` with expected batch B = ``--expected`` and truncation L: the
  first B rows real, the other L − B rows [PAD] rows with weight 0 (what
  :class:`dpscaling.train.sampling.StepBatches` feeds a private run).

Rounds alternate between the variants; each variant's time is the minimum over rounds of
the round's median. The last line printed is one JSON object with ``padded_over_unpadded``
per clipping path.
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

from dpscaling.models.bert import BertMlm
from dpscaling.train.config import TrainConfig
from dpscaling.train.mlm import MaskingSpec
from dpscaling.train.objectives import MaskedLM
from dpscaling.train.step import init_state, make_optimizer, make_train_step, step_hyperparams


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--physical", type=int, default=32, help="physical batch L")
    parser.add_argument("--expected", type=int, default=16, help="expected Poisson batch B")
    parser.add_argument("--microbatch", type=int, default=16)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument("--clipping", default="vmap,ghost")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per round")
    parser.add_argument("--rounds", type=int, default=3)
    return parser.parse_args()


class Variant:
    def __init__(self, config: TrainConfig, args, tokens: np.ndarray, weights: np.ndarray | None):
        model = BertMlm(config.model_config(args.vocab_size))
        optimizer = make_optimizer(config)
        objective = MaskedLM(MaskingSpec(args.vocab_size, MASK_ID, SPECIAL, pad_id=0, p_mask=config.p_mask))
        step = jax.jit(make_train_step(model, objective, config), donate_argnums=0)
        self.state = init_state(model, objective, optimizer, config, args.seq_len)
        weight_input = () if weights is None else (jnp.asarray(weights),)
        self.inputs = (step_hyperparams(config), jnp.asarray(tokens)) + weight_input
        self.step = step.lower(self.state, *self.inputs).compile()
        self.run(2)  # warm-up

    def run(self, n: int) -> list[float]:
        out = []
        for _ in range(n):
            tick = time.perf_counter()
            self.state, metrics = self.step(self.state, *self.inputs)
            jax.block_until_ready(metrics["loss"])
            out.append(time.perf_counter() - tick)
        return out


def main() -> None:
    args = parse_args()
    token_args = argparse.Namespace(batch=args.physical, seq_len=args.seq_len, vocab_size=args.vocab_size)
    tokens = token_batch(token_args)
    padded_tokens = tokens.copy()
    padded_tokens[args.expected :] = 0  # [PAD] rows, as StepBatches feeds them
    weights = (np.arange(args.physical) < args.expected).astype(np.float32)
    base = dict(
        model="custom",
        model_overrides=dict(num_layers=args.layers, num_heads=args.heads, hidden_size=args.hidden),
        microbatch_size=args.microbatch,
        warmup_steps=10,
        learning_rate=1e-3,
        noise_batch_ratio=2.0**-10,
    )
    print(
        f"L={args.physical} (B={args.expected} expected), microbatch {args.microbatch}, "
        f"seq {args.seq_len}, {jax.device_count()} {jax.default_backend()} device(s)"
    )
    ratios = {}
    for clipping in args.clipping.split(","):
        unpadded = Variant(TrainConfig(**base, clipping=clipping, batch_size=args.physical), args,
                           tokens, None)
        padded = Variant(
            TrainConfig(**base, clipping=clipping, batch_size=args.expected, sampling="poisson",
                        truncated_batch_size=args.physical),
            args, padded_tokens, weights)
        best = {"unpadded": float("inf"), "padded": float("inf")}
        for _ in range(args.rounds):
            for name, variant in (("unpadded", unpadded), ("padded", padded)):
                best[name] = min(best[name], 1e3 * statistics.median(variant.run(args.steps)))
        ratios[clipping] = best["padded"] / best["unpadded"]
        print(f"{clipping:6s} unpadded {best['unpadded']:8.1f} ms  padded {best['padded']:8.1f} ms  "
              f"ratio {ratios[clipping]:.3f}")
    print(json.dumps({"physical": args.physical, "expected": args.expected,
                      "padded_over_unpadded": {k: round(v, 3) for k, v in ratios.items()}}))


if __name__ == "__main__":
    main()
