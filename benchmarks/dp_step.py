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
``dp_over_opacus`` (best DP path ÷ Opacus' best DP step; null without Opacus). ``--mechanisms
bandmf-b4,bandmf-b64`` also times each DP path with DP-BandMF's correlated noise: ``bandmf_over_dpsgd``
(docs/mechanisms.md).

Default shape: a 1.5M-parameter BERT (2 layers, hidden 128, 2 heads,
intermediate 512, vocab 8000, seq 128, 20 masked positions), B = 32, float32.
``--family decoder`` times the same shape as a causal decoder (1.4M parameters, next-token loss at
every position; no Opacus comparison).

Accelerator mode (docs/train.md, "Measured on an H100"): ``--model BertBase --seq-len 512 --dtype
bfloat16 --batch auto`` times a preset at its own vocabulary. ``--batch auto`` takes the largest
power-of-two batch whose non-private step fits in the device's memory, extrapolated from XLA's
compiled footprint at two small batches. Each row then also gives tokens/s, model-FLOPs utilisation
(:func:`training_flops` ÷ time ÷ ``--peak-tflops``, default the device's bf16 dense peak where known)
and the compiled footprint (arguments + outputs + temporaries). A variant that does not fit is
reported as such, and the run goes on.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import time
from concurrent.futures import ThreadPoolExecutor

import jax
import jax.numpy as jnp
import numpy as np

from dpscaling.models.family import PRESETS, family_named
from dpscaling.train.config import TrainConfig
from dpscaling.train.mlm import MaskingSpec
from dpscaling.train.objectives import CausalLM, MaskedLM
from dpscaling.train.step import init_state, make_optimizer, make_train_step, step_hyperparams

SPECIAL = (0, 1, 2, 3, 4)  # [PAD] [UNK] [CLS] [SEP] [MASK]
MASK_ID = 4


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--batch", default="32", help="physical batch, or 'auto': the largest power of two that fits"
    )
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument(
        "--vocab-size", type=int, default=None, help="default 8000, or the preset's own with --model"
    )
    parser.add_argument(
        "--model", default="custom", help="a preset (BertBase, GPT2Small, ...) instead of the custom shape"
    )
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="float32", help="compute dtype")
    parser.add_argument(
        "--peak-tflops", type=float, default=None, help="bf16 dense peak for MFU (default: known devices)"
    )
    parser.add_argument("--json-out", default=None, help="also write the summary JSON to this file")
    parser.add_argument(
        "--variants",
        choices=("all", "accelerator", "minimal"),
        default="all",
        help="all: every path at every size; accelerator: non-private and ghost whole-batch, "
        "ghost and vmap at each --microbatches size (fewer compilations); minimal: non-private and ghost "
        "whole-batch, ghost at each --microbatches size (for a GPU, where one compilation takes minutes)",
    )
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
    parser.add_argument("--no-opacus", action="store_true", help="skip the PyTorch + Opacus comparison")
    parser.add_argument(
        "--compile-threads", type=int, default=1,
        help="variants compiled at once (XLA releases the GIL; on a GPU compilation dominates a run)",
    )
    parser.add_argument("--family", choices=("bert", "decoder"), default="bert")
    parser.add_argument("--scan-layers", action="store_true",
                        help="the layers scanned, not unrolled (training.scan_layers): compilation flat in depth")
    parser.add_argument(
        "--mechanisms", default="",
        help="comma-separated correlated-noise mechanisms (e.g. bandmf-b4,bandmf-b64) also timed on each DP path "
             "over the whole batch; the summary's bandmf_over_dpsgd is each one's step ÷ DP-SGD's on that path",
    )
    parser.add_argument("--mechanism-steps", type=int, default=1024,
                        help="T the BandMF strategy is optimised for (its cost per step does not depend on it)")
    args = parser.parse_args()
    if args.model != "custom":
        if args.model not in PRESETS:
            parser.error(f"--model: {args.model!r} is not one of {sorted(PRESETS)} or 'custom'")
        args.family = PRESETS[args.model].name
    if args.vocab_size is None:
        args.vocab_size = PRESETS[args.model].vocab_size if args.model != "custom" else 8000
    return args


# bf16 dense tensor-core peak (datasheets, FLOP/s) by the start of jax's device_kind.
BF16_PEAK = {"NVIDIA H100": 989.4e12, "NVIDIA H200": 989.4e12, "NVIDIA A100": 312e12}


def bf16_peak(args: argparse.Namespace) -> float | None:
    if args.peak_tflops:
        return args.peak_tflops * 1e12
    kind = jax.devices()[0].device_kind
    return next((peak for prefix, peak in BF16_PEAK.items() if kind.startswith(prefix)), None)


def device_bytes() -> int | None:
    """The accelerator's memory that XLA may use (None on CPU, which reports none)."""
    stats = jax.devices()[0].memory_stats() or {}
    return stats.get("bytes_limit")


def training_flops(model_config, seq_len: int, n_predictions: int) -> float:
    """Model FLOPs of one training sequence (forward + backward = 3 × forward): the per-token
    matrix products of every layer, attention scores and mixing (4·L·H·S² forward, causal masking
    not discounted) and the output layer at the positions that are scored (BERT: its transform and
    the vocabulary at the masked positions; a decoder: the vocabulary at every position)."""
    c = model_config
    hidden, layers, inner = c.hidden_size, c.num_layers, c.intermediate_size
    body = layers * (4 * hidden * hidden + 2 * hidden * inner) * 2 * seq_len
    attention = 4 * layers * hidden * seq_len * seq_len
    if hasattr(c, "type_vocab_size"):  # BERT: the MLM head scores the masked positions only
        head = 2 * (hidden * hidden + c.vocab_size * hidden) * n_predictions
    else:
        head = 2 * c.vocab_size * hidden * seq_len
    return 3.0 * (body + attention + head)


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
    """One compiled training step (a TrainConfig variant) and its memory footprint.

    Lowered at construction (:func:`build_variants` compiles and warms up a list of them); :meth:`compile` may run in a thread beside other variants' (XLA releases the
    GIL while it compiles, and on a GPU compilation and autotuning, not the steps, take most of a run's
    time); :meth:`warm_up` runs two steps, one variant at a time."""

    def __init__(self, name: str, config: TrainConfig, args: argparse.Namespace, tokens: np.ndarray):
        self.name = name
        model = config.model_family.module_class()(config.model_config(args.vocab_size))
        optimizer = make_optimizer(config)
        objective = objective_of(config, args)
        step = jax.jit(make_train_step(model, objective, config), donate_argnums=0)
        self.state = init_state(model, objective, optimizer, config, args.seq_len)
        self.inputs = (step_hyperparams(config), jnp.asarray(tokens))
        self.lowered = step.lower(self.state, *self.inputs)
        self.compile_s = float("nan")

    def compile(self, compiler_options: dict | None = None) -> "JaxVariant":
        tick = time.perf_counter()
        self.step = self.lowered.compile(compiler_options=compiler_options)
        self.compile_s = time.perf_counter() - tick
        memory = self.step.memory_analysis()
        self.temp_mb = memory.temp_size_in_bytes / 2**20 if memory is not None else float("nan")
        self.footprint_gb = footprint_bytes(memory) / 2**30 if memory is not None else float("nan")
        return self

    def warm_up(self) -> None:
        self.run(2)

    def run(self, n: int) -> list[float]:
        out = []
        for _ in range(n):
            tick = time.perf_counter()
            self.state, metrics = self.step(self.state, *self.inputs)
            jax.block_until_ready(metrics["loss"])
            out.append(time.perf_counter() - tick)
        return out


def build_variants(
    specs: list[tuple[str, TrainConfig]], args: argparse.Namespace, tokens: np.ndarray, threads: int
) -> list[JaxVariant]:
    """Each (name, config) as a warmed-up :class:`JaxVariant`: lowered in turn, compiled ``threads`` at a
    time, warmed up in turn. A variant that fails (an accelerator's out-of-memory) is reported and left out."""

    def failed(name: str, error: Exception) -> None:
        print(f"{name}: failed, {str(error).splitlines()[0][:160]}", flush=True)

    lowered = []
    for name, config in specs:
        try:
            lowered.append(JaxVariant(name, config, args, tokens))
        except Exception as error:  # noqa: BLE001 - report, go on
            failed(name, error)
    compiled = []
    with ThreadPoolExecutor(max(1, threads)) as pool:
        for variant, future in [(v, pool.submit(v.compile)) for v in lowered]:
            try:
                compiled.append(future.result())
                print(f"{variant.name}: compiled in {variant.compile_s:.0f} s", flush=True)
            except Exception as error:  # noqa: BLE001
                failed(variant.name, error)
    ready = []
    for variant in compiled:
        try:
            variant.warm_up()
            ready.append(variant)
        except Exception as error:  # noqa: BLE001
            failed(variant.name, error)
    return ready


def footprint_bytes(memory) -> int:
    """XLA's compiled footprint of a step: arguments + outputs (less donated aliases) + temporaries."""
    return (
        memory.argument_size_in_bytes
        + memory.output_size_in_bytes
        - memory.alias_size_in_bytes
        + memory.temp_size_in_bytes
    )


def base_config(args: argparse.Namespace, batch: int) -> dict:
    shape = (
        dict(model=args.model, max_positions=max(args.seq_len, PRESETS[args.model].max_positions))
        if args.model != "custom"
        else dict(
            model="custom",
            model_overrides=dict(num_layers=args.layers, num_heads=args.heads, hidden_size=args.hidden),
        )
    )
    return dict(
        **shape,
        family=args.family,
        batch_size=batch,
        warmup_steps=10,
        learning_rate=1e-3,
        model_dtype=args.dtype,
        scan_layers=getattr(args, "scan_layers", False),
    )


def lower_probe(config: TrainConfig, args: argparse.Namespace, probe: int = 8):
    """``config``'s step at batch = microbatch = ``probe``, lowered from shapes alone (no state allocated)."""
    config = dataclasses.replace(config, batch_size=probe, microbatch_size=probe)
    model = config.model_family.module_class()(config.model_config(args.vocab_size))
    objective = objective_of(config, args)
    optimizer = make_optimizer(config)
    state = jax.eval_shape(lambda: init_state(model, objective, optimizer, config, args.seq_len))
    tokens = jax.ShapeDtypeStruct((probe, args.seq_len), jnp.int32)
    step = jax.jit(make_train_step(model, objective, config), donate_argnums=0)
    return step.lower(state, step_hyperparams(config), tokens)


def fitting_size(
    config: TrainConfig, args: argparse.Namespace, budget: float, probe: int = 8, lowered=None
) -> int:
    """The largest power of two B whose step (``config`` at batch = microbatch = B) fits in ``budget``
    bytes, from one compilation at B = ``probe`` (``lowered``: :func:`lower_probe`'s, if already made):
    XLA's footprint there, less the float32 state (parameters, two Adam moments and the gradient: 16 bytes
    per parameter), is ``probe`` examples' activations, which grow linearly in B."""
    lowered = lowered if lowered is not None else lower_probe(config, args, probe)
    footprint = footprint_bytes(lowered.compile().memory_analysis())
    fixed = 16 * config.model_config(args.vocab_size).param_count().total
    per_example = max((footprint - fixed) / probe, 1.0)
    fits = max(1, int((budget - fixed) / per_example))
    return 1 << (fits.bit_length() - 1)


def fitting_batch(args: argparse.Namespace, limit: int) -> int:
    """The largest power-of-two batch whose non-private whole-batch step fits in 85% of ``limit`` bytes."""
    return fitting_size(TrainConfig(**base_config(args, 8), clipping="none"), args, 0.85 * limit)


def _wanted_variant(variants: str, clipping: str, whole_batch: bool) -> bool:
    """``--variants accelerator``: non-private and ghost over the whole batch, ghost and vmap in microbatches;
    ``minimal``: the same without vmap; ``all``: every one."""
    if variants == "all":
        return True
    if whole_batch:
        return clipping in ("none", "ghost")
    return clipping == "ghost" or (variants == "accelerator" and clipping == "vmap")


def jax_variants(args: argparse.Namespace, tokens: np.ndarray, n_params: int) -> list[JaxVariant]:
    sizes = [args.batch] + [int(m) for m in args.microbatches.split(",") if int(m) < args.batch]
    limit = device_bytes()
    specs = []
    for clipping in ("none", "vmap", "ghost"):
        for m in sizes:
            if not _wanted_variant(args.variants, clipping, m == args.batch):
                continue
            noise = 0.0 if clipping == "none" else 2.0**-10
            label = "non-private" if clipping == "none" else f"DP {clipping}"
            name = f"{label}, " + (
                "whole batch" if m == args.batch else f"{args.batch // m}x{m} microbatches"
            )
            if clipping == "vmap" and limit and 4 * m * n_params > 0.3 * limit:
                print(f"{name}: skipped, {m} per-example float32 gradients need "
                      f"{4 * m * n_params / 2**30:.0f} GiB of {limit / 2**30:.0f}")
                continue
            config = TrainConfig(
                **base_config(args, args.batch), clipping=clipping, microbatch_size=m,
                noise_batch_ratio=noise,
            )
            specs.append((name, config))
    # The same DP steps with correlated noise (docs/mechanisms.md): b − 1 more parameter copies to read and write.
    for mechanism in [m for m in args.mechanisms.split(",") if m]:
        for clipping in ("vmap", "ghost"):
            if not any(name == f"DP {clipping}, whole batch" for name, _ in specs):
                continue
            config = TrainConfig(**base_config(args, args.batch), clipping=clipping, microbatch_size=args.batch,
                                 noise_batch_ratio=2.0**-10, mechanism=mechanism, num_steps=args.mechanism_steps)
            specs.append((f"DP {clipping}, whole batch, {mechanism}", config))
    return build_variants(specs, args, tokens, args.compile_threads)


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
    limit = device_bytes()
    if args.batch == "auto":
        if limit is None:
            raise SystemExit("--batch auto: this device reports no memory limit (CPU); give a number")
        args.batch = fitting_batch(args, limit)
    else:
        args.batch = int(args.batch)
    tokens = token_batch(args)
    model_config = TrainConfig(**base_config(args, args.batch)).model_config(args.vocab_size)
    n_params = model_config.param_count().total
    n_predictions = max(1, int(np.ceil(0.15 * args.seq_len)))
    device = jax.devices()[0]
    print(
        f"{args.model} ({args.family}): {n_params / 1e6:.2f}M parameters, B={args.batch}, "
        f"seq={args.seq_len}, {args.dtype}, {jax.device_count()} {jax.default_backend()} device(s) "
        f"({device.device_kind}), jax {jax.__version__}"
    )
    variants = jax_variants(args, tokens, n_params)
    if not any(v.name.startswith("non-private") for v in variants) or not any(v.name.startswith("DP") for v in variants):
        raise SystemExit(f"no ratio: the variants that compiled and ran are {[v.name for v in variants]}")
    ms = time_rounds(variants, args)
    best_nonprivate = min(v for k, v in ms.items() if k.startswith("non-private"))
    nonprivate = ms.get("non-private, whole batch", best_nonprivate)
    flops = training_flops(model_config, args.seq_len, n_predictions) * args.batch
    peak = bf16_peak(args)
    print(
        f"{'variant':44s} {'ms/step':>8s} {'÷ non-private':>14s} {'XLA temp MB':>12s} "
        f"{'tokens/s':>10s} {'MFU':>6s} {'GiB':>6s}"
    )
    for v in variants:
        seconds = ms[v.name] / 1e3
        mfu = f"{flops / seconds / peak:6.1%}" if peak else f"{'-':>6s}"
        print(
            f"{v.name:44s} {ms[v.name]:8.1f} {ms[v.name] / nonprivate:14.2f} {v.temp_mb:12.1f} "
            f"{args.batch * args.seq_len / seconds:10.0f} {mfu} {v.footprint_gb:6.1f}"
        )
    dp = {k: v for k, v in ms.items() if k.startswith("DP") and "bandmf" not in k}
    bandmf_over_dpsgd = {k: round(v / ms[k.rsplit(", ", 1)[0]], 3) for k, v in ms.items() if "bandmf" in k}
    best_dp_name = min(dp, key=dp.get)
    best_by_path = {
        path: min(v for k, v in dp.items() if k.startswith(f"DP {path}"))
        for path in ("vmap", "ghost")
        if any(k.startswith(f"DP {path}") for k in dp)
    }

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
        "model": args.model,
        "dtype": args.dtype,
        "seq_len": args.seq_len,
        "device": device.device_kind,
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
        "footprint_gib": {v.name: round(v.footprint_gb, 2) for v in variants},
        "ms": {k: round(v, 2) for k, v in ms.items()},
        "compile_s": {v.name: round(v.compile_s, 1) for v in variants},
        "tokens_per_s": {k: round(args.batch * args.seq_len / (v / 1e3)) for k, v in ms.items()},
        "mfu": None if not peak else {k: round(flops / (v / 1e3) / peak, 4) for k, v in ms.items()},
        "training_flops_per_step": flops,
        "opacus_best_ms": None if not torch_ms else round(best_opacus, 2),
        "dp_over_opacus": None if dp_over_opacus is None else round(dp_over_opacus, 3),
        # each "DP <path>, whole batch, <mechanism>" step ÷ the same path's DP-SGD step, timed in the same rounds
        "bandmf_over_dpsgd": bandmf_over_dpsgd or None,
    }
    print(json.dumps(summary))
    if args.json_out:
        with open(args.json_out, "w") as out:
            json.dump(summary, out, indent=1)


if __name__ == "__main__":
    main()
