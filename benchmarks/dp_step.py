"""DP-Adam step cost vs non-private Adam, per clipping path, and vs Opacus; BERT or the decoder family.

Results: docs/train.md, "The DP step on this CPU".

Times the real training step of :mod:`dpscaling.train.step` (masking, forward,
backward, clipping, noise, Adam) on one fixed batch for:

* non-private: plain mean gradient (no clipping, no noise), whole batch and microbatched;
* DP, ``vmap`` path: per-example gradients of each microbatch, tensordot-weighted sum;
* DP, ``ghost`` path: ghost norms + book-keeping, no per-example gradients;

and, if ``torch`` and ``opacus`` are importable, the same BERT in PyTorch with Opacus
(hooks; hooks with microbatches as BatchMemoryManager does). Memory is XLA's compiled
temporary-buffer size. The last line printed is one JSON object with
``dp_over_nonprivate`` (best DP path ÷ non-private whole-batch step, the ratio
docs/train.md reports), ``dp_over_best_nonprivate`` (÷ the fastest non-private variant) and
``dp_over_opacus`` (best DP path ÷ Opacus' best DP step; null without Opacus).

Default shape: a 1.5M-parameter BERT (2 layers, hidden 128, 2 heads,
intermediate 512, vocab 8000, seq 128, 20 masked positions), B = 32, float32.
``--family decoder`` times the same shape as a causal decoder (1.4M parameters, next-token loss at
every position; no Opacus comparison).
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

import jax
import jax.numpy as jnp
import numpy as np

from dpscaling.models.family import family_named
from dpscaling.train.config import TrainConfig
from dpscaling.train.mlm import MaskingSpec
from dpscaling.train.objectives import CausalLM, MaskedLM
from dpscaling.train.step import init_state, make_optimizer, make_train_step, step_hyperparams

SPECIAL = (0, 1, 2, 3, 4)  # [PAD] [UNK] [CLS] [SEP] [MASK]
MASK_ID = 4


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--vocab-size", type=int, default=8000)
    parser.add_argument("--layers", type=int, default=2)
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--heads", type=int, default=2)
    parser.add_argument(
        "--microbatches", default="8,16", help="microbatch sizes to try besides the whole batch"
    )
    parser.add_argument("--steps", type=int, default=15, help="timed steps per round")
    parser.add_argument(
        "--rounds", type=int, default=3, help="rounds over all variants; min of round medians"
    )
    parser.add_argument("--no-opacus", action="store_true")
    parser.add_argument("--family", choices=("bert", "decoder"), default="bert")
    return parser.parse_args()


def token_batch(args: argparse.Namespace) -> np.ndarray:
    rng = np.random.default_rng(0)
    tokens = rng.integers(len(SPECIAL), args.vocab_size, (args.batch, args.seq_len), dtype=np.int32)
    tokens[:, 0], tokens[:, -1] = 2, 3
    return tokens


def objective_of(config: TrainConfig, args: argparse.Namespace) -> MaskedLM | CausalLM:
    if config.model_family.objective == "masked_lm":
        return MaskedLM(MaskingSpec(args.vocab_size, MASK_ID, SPECIAL, pad_id=0, p_mask=config.p_mask))
    return CausalLM(pad_id=0)


class JaxVariant:
    """One compiled training step (a TrainConfig variant) and its memory footprint."""

    def __init__(
        self, name: str, config: TrainConfig, args: argparse.Namespace, tokens: np.ndarray
    ):
        self.name = name
        model = config.model_family.module_class()(config.model_config(args.vocab_size))
        optimizer = make_optimizer(config)
        objective = objective_of(config, args)
        step = jax.jit(make_train_step(model, objective, config), donate_argnums=0)
        self.state = init_state(model, objective, optimizer, config, args.seq_len)
        self.inputs = (step_hyperparams(config), jnp.asarray(tokens))
        self.step = step.lower(self.state, *self.inputs).compile()
        memory = self.step.memory_analysis()
        self.temp_mb = memory.temp_size_in_bytes / 2**20 if memory is not None else float("nan")
        self.times: list[float] = []
        self.run(2)  # warm-up

    def run(self, n: int) -> list[float]:
        out = []
        for _ in range(n):
            tick = time.perf_counter()
            self.state, metrics = self.step(self.state, *self.inputs)
            jax.block_until_ready(metrics["loss"])
            out.append(time.perf_counter() - tick)
        return out


def jax_variants(args: argparse.Namespace, tokens: np.ndarray) -> list[JaxVariant]:
    base = dict(
        model="custom",
        family=args.family,
        model_overrides=dict(num_layers=args.layers, num_heads=args.heads, hidden_size=args.hidden),
        batch_size=args.batch,
        warmup_steps=10,
        learning_rate=1e-3,
    )
    sizes = [args.batch] + [int(m) for m in args.microbatches.split(",") if int(m) < args.batch]
    variants = []
    for clipping in ("none", "vmap", "ghost"):
        for m in sizes:
            noise = 0.0 if clipping == "none" else 2.0**-10
            label = "non-private" if clipping == "none" else f"DP {clipping}"
            name = f"{label}, " + (
                "whole batch" if m == args.batch else f"{args.batch // m}x{m} microbatches"
            )
            config = TrainConfig(
                **base, clipping=clipping, microbatch_size=m, noise_batch_ratio=noise
            )
            variants.append(JaxVariant(name, config, args, tokens))
    return variants


def time_rounds(variants, args) -> dict[str, float]:
    """Milliseconds per step: the minimum over rounds of each round's median."""
    best = {v.name: float("inf") for v in variants}
    for _ in range(args.rounds):
        for v in variants:
            best[v.name] = min(best[v.name], 1e3 * statistics.median(v.run(args.steps)))
    return best


# --- PyTorch + Opacus ---------------------------------------------------------------


def opacus_times(
    args: argparse.Namespace, tokens: np.ndarray, n_predictions: int
) -> dict[str, float] | None:
    try:
        import torch
        from opacus import GradSampleModule
        from opacus.optimizers import DPOptimizer
    except ImportError:
        return None
    from torch import nn

    torch.manual_seed(0)
    d, heads, inter = args.hidden, args.heads, 4 * args.hidden

    class Layer(nn.Module):
        def __init__(self):
            super().__init__()
            self.q, self.k, self.v, self.o = (nn.Linear(d, d) for _ in range(4))
            self.ln1, self.ff1, self.ff2, self.ln2 = (
                nn.LayerNorm(d),
                nn.Linear(d, inter),
                nn.Linear(inter, d),
                nn.LayerNorm(d),
            )

        def forward(self, x):
            b, s, _ = x.shape
            split = lambda t: t.view(b, s, heads, d // heads).transpose(1, 2)  # noqa: E731
            a = torch.softmax(
                split(self.q(x)) @ split(self.k(x)).transpose(-1, -2) / (d // heads) ** 0.5, -1
            )
            a = (a @ split(self.v(x))).transpose(1, 2).reshape(b, s, d)
            x = self.ln1(x + self.o(a))
            return self.ln2(x + self.ff2(nn.functional.gelu(self.ff1(x))))

    class Bert(nn.Module):
        """The same post-LN BERT + tied MLM head as dpscaling.models.bert."""

        def __init__(self):
            super().__init__()
            self.word, self.pos, self.token_type = (
                nn.Embedding(args.vocab_size, d),
                nn.Embedding(512, d),
                nn.Embedding(2, d),
            )
            self.ln = nn.LayerNorm(d)
            self.layers = nn.ModuleList(Layer() for _ in range(args.layers))
            self.transform, self.head_ln = nn.Linear(d, d), nn.LayerNorm(d)
            self.decoder = nn.Linear(d, args.vocab_size)
            self.decoder.weight = self.word.weight  # tied output embedding

        def forward(self, ids, positions):
            b, s = ids.shape
            pos = torch.arange(s).expand(b, s)
            x = self.ln(self.word(ids) + self.pos(pos) + self.token_type(torch.zeros_like(ids)))
            for layer in self.layers:
                x = layer(x)
            h = torch.gather(x, 1, positions[..., None].expand(-1, -1, d))
            return self.decoder(self.head_ln(nn.functional.gelu(self.transform(h))))

    ids = torch.as_tensor(tokens, dtype=torch.long)
    positions = torch.as_tensor(
        np.sort(
            np.random.default_rng(1).choice(
                np.arange(1, args.seq_len - 1), (args.batch, n_predictions)
            )
        ),
        dtype=torch.long,
    )
    labels = torch.gather(ids, 1, positions)

    def loss_of(model, start, stop):
        rows = slice(start, stop)
        logits = model(ids[rows], positions[rows])
        ce = nn.functional.cross_entropy(
            logits.reshape(-1, args.vocab_size), labels[rows].reshape(-1), reduction="none"
        )
        return (
            ce.view(stop - start, -1).mean(1).mean()
        )  # mean over the batch of per-sequence losses

    def timed(step) -> float:
        for _ in range(2):
            step()
        best = float("inf")
        for _ in range(args.rounds):
            times = []
            for _ in range(args.steps):
                tick = time.perf_counter()
                step()
                times.append(time.perf_counter() - tick)
            best = min(best, 1e3 * statistics.median(times))
        return best

    results = {}
    plain = Bert()
    adam = torch.optim.Adam(plain.parameters(), lr=1e-3)

    def plain_step():
        adam.zero_grad()
        loss_of(plain, 0, args.batch).backward()
        adam.step()

    results["PyTorch non-private"] = timed(plain_step)
    for m in [args.batch] + [int(x) for x in args.microbatches.split(",") if int(x) < args.batch]:
        private = GradSampleModule(Bert())
        optimizer = DPOptimizer(
            torch.optim.Adam(private.parameters(), lr=1e-3),
            noise_multiplier=args.batch * 2.0**-10,
            max_grad_norm=1.0,
            expected_batch_size=args.batch,
        )

        def dp_step(private=private, optimizer=optimizer, m=m):
            for start in range(0, args.batch, m):
                # BatchMemoryManager's pattern: zero_grad keeps the clipped sum of skipped
                # steps; every chunk is clipped, only the last step adds noise and updates.
                optimizer.zero_grad()
                loss_of(private, start, start + m).backward()
                last = start + m >= args.batch
                optimizer.signal_skip_step(do_skip=not last)
                optimizer.step()

        name = "Opacus hooks, " + (
            "whole batch" if m == args.batch else f"{args.batch // m}x{m} microbatches"
        )
        results[name] = timed(dp_step)
    return results


def main() -> None:
    args = parse_args()
    tokens = token_batch(args)
    model_config = family_named(args.family).config(
        "custom",
        vocab_size=args.vocab_size,
        max_positions=TrainConfig().max_positions,  # the timed steps' positions
        num_layers=args.layers,
        num_heads=args.heads,
        hidden_size=args.hidden,
    )
    n_params = model_config.param_count().total
    print(
        f"{args.family}: {n_params / 1e6:.2f}M parameters, B={args.batch}, seq={args.seq_len}, "
        f"{jax.device_count()} {jax.default_backend()} device(s), jax {jax.__version__}"
    )
    variants = jax_variants(args, tokens)
    ms = time_rounds(variants, args)
    nonprivate = ms["non-private, whole batch"]
    best_nonprivate = min(v for k, v in ms.items() if k.startswith("non-private"))
    print(f"{'variant':44s} {'ms/step':>8s} {'÷ non-private':>14s} {'XLA temp MB':>12s}")
    for v in variants:
        print(f"{v.name:44s} {ms[v.name]:8.1f} {ms[v.name] / nonprivate:14.2f} {v.temp_mb:12.1f}")
    dp = {k: v for k, v in ms.items() if k.startswith("DP")}
    best_dp_name = min(dp, key=dp.get)
    best_by_path = {
        path: min(v for k, v in dp.items() if k.startswith(f"DP {path}"))
        for path in ("vmap", "ghost")
    }

    n_predictions = max(1, int(np.ceil(0.15 * args.seq_len)))
    torch_ms = None if args.no_opacus or args.family != "bert" else opacus_times(args, tokens, n_predictions)
    dp_over_opacus = None
    if torch_ms:
        torch_nonprivate = torch_ms["PyTorch non-private"]
        for name, value in torch_ms.items():
            print(f"{name:44s} {value:8.1f} {value / torch_nonprivate:14.2f} {'(PyTorch)':>12s}")
        best_opacus = min(v for k, v in torch_ms.items() if k.startswith("Opacus"))
        dp_over_opacus = dp[best_dp_name] / best_opacus
    else:
        print("Opacus: not installed (pip install torch opacus to compare)")
    summary = {
        "family": args.family,
        "n_params": n_params,
        "batch": args.batch,
        "best_dp_variant": best_dp_name,
        "best_dp_ms": round(dp[best_dp_name], 2),
        "nonprivate_ms": round(nonprivate, 2),
        "dp_over_nonprivate": round(dp[best_dp_name] / nonprivate, 3),
        "dp_over_best_nonprivate": round(dp[best_dp_name] / best_nonprivate, 3),
        "dp_over_nonprivate_by_path": {
            p: round(v / nonprivate, 3) for p, v in best_by_path.items()
        },
        "temp_mb": {v.name: round(v.temp_mb, 1) for v in variants},
        "opacus_best_ms": None if not torch_ms else round(best_opacus, 2),
        "dp_over_opacus": None if dp_over_opacus is None else round(dp_over_opacus, 3),
    }
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
