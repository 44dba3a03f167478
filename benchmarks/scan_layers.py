"""Scanned against unrolled layers, side by side: the compilation of one DP step, and the step time.

Results: docs/runs.md (docs/train.md, "Compiling deep models", says what the option does).

* ``compile``: per preset (default BertTiny, BertBase, BertLarge, GPT2Small, GPT2Medium), one DP-Adam step
  (``--clipping``, batch 2 in one microbatch, S = ``--seq-len``, float32, σ̄ 2^-10) lowered from shapes alone
  and compiled, unrolled and scanned in turn: seconds to lower and to compile, and the ratios. Lowering and
  compiling run one at a time, on an otherwise idle machine for numbers worth keeping.
* ``step``: the default grid's models (config/config.yaml: ghost clipping unless ``--step-clipping``, B 40 in
  microbatches of 4, S 64, vocabulary 1,024), each layout compiled, then ``--rounds`` rounds of ``--steps`` timed steps alternating
  between the layouts; the median of each layout's round medians and their ratio (scanned ÷ unrolled).

The last line printed is one JSON object.
Usage: .venv/bin/python benchmarks/scan_layers.py [compile|step|both] [--models BertTiny,BertBase]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import jax
import jax.numpy as jnp
import yaml

sys.path.insert(0, str(Path(__file__).parent))
from dp_step import objective_of, token_batch  # noqa: E402

from dpscaling.models.family import PRESETS, configured_model  # noqa: E402
from dpscaling.train.config import TrainConfig  # noqa: E402
from dpscaling.train.step import init_state, make_optimizer, make_train_step, step_hyperparams  # noqa: E402

DEFAULT_CONFIG = Path(__file__).resolve().parents[1] / "config" / "config.yaml"


def step_of(config: TrainConfig, vocab_size: int, seq_len: int, *, abstract: bool):
    """(jitted step, state, inputs) of ``config``; an abstract state (shapes only) when ``abstract``."""
    shape = argparse.Namespace(vocab_size=vocab_size, batch=config.batch_size, seq_len=seq_len)
    model = config.model_family.module_class()(config.model_config(vocab_size))
    objective = objective_of(config, shape)
    optimizer = make_optimizer(config)
    build = lambda: init_state(model, objective, optimizer, config, seq_len)  # noqa: E731
    state = jax.eval_shape(build) if abstract else jax.jit(build)()
    step = jax.jit(make_train_step(model, objective, config), donate_argnums=0)
    return step, state, (step_hyperparams(config), jnp.asarray(token_batch(shape)))


def compile_seconds(name: str, scan: bool, clipping: str, seq_len: int) -> dict:
    family = PRESETS[name]
    config = TrainConfig(model=name, family=family.name, max_positions=max(seq_len, family.max_positions),
                         batch_size=2, microbatch_size=2, clipping=clipping, noise_batch_ratio=2.0**-10,
                         warmup_steps=10, scan_layers=scan)
    step, state, inputs = step_of(config, family.vocab_size, seq_len, abstract=True)
    tick = time.perf_counter()
    lowered = step.lower(state, *inputs)
    lowering = time.perf_counter() - tick
    tick = time.perf_counter()
    lowered.compile()
    compiling = time.perf_counter() - tick
    return {"lower_s": round(lowering, 2), "compile_s": round(compiling, 2), "total_s": round(lowering + compiling, 2)}


def compile_table(models: list[str], clipping: str, seq_len: int) -> dict:
    rows = {}
    for name in models:
        row = {layout: compile_seconds(name, layout == "scanned", clipping, seq_len) for layout in ("unrolled", "scanned")}
        row["scanned_over_unrolled"] = round(row["scanned"]["total_s"] / row["unrolled"]["total_s"], 3)
        rows[name] = row
        print(name, json.dumps(row), flush=True)
    first = models[0] if "BertBase" not in rows else "BertBase"
    if "BertLarge" in rows and first in rows:
        for layout in ("unrolled", "scanned"):
            rows[f"BertLarge_over_{first}_{layout}"] = round(
                rows["BertLarge"][layout]["total_s"] / rows[first][layout]["total_s"], 3)
    return rows


def step_table(config_path: Path, rounds: int, steps: int, clipping: str | None = None) -> dict:
    run = yaml.safe_load(config_path.read_text())
    training, data = run["training"], run["data"]
    vocab_size, seq_len = int(data["vocab_size"]), int(data["seq_len"])
    rows = {}
    for name in run["models"]["names"]:
        shape = configured_model(name, run["models"]["custom"], vocab_size, seq_len)
        variants = {}
        for layout in ("unrolled", "scanned"):
            config = TrainConfig(model="custom", family="bert", max_positions=shape.max_positions,
                                 model_overrides={"num_layers": shape.num_layers, "num_heads": shape.num_heads,
                                                  "hidden_size": shape.hidden_size,
                                                  "type_vocab_size": shape.type_vocab_size},
                                 batch_size=int(training["physical_batch"]),
                                 microbatch_size=int(training["microbatch_size"]), clipping=clipping or training["clipping"],
                                 noise_batch_ratio=2.0**-10, warmup_steps=10, scan_layers=layout == "scanned")
            step, state, inputs = step_of(config, vocab_size, seq_len, abstract=False)
            compiled = step.lower(state, *inputs).compile()
            for _ in range(2):
                state, metrics = compiled(state, *inputs)
            jax.block_until_ready(metrics["loss"])
            variants[layout] = [compiled, state, inputs, []]
        for _ in range(rounds):
            for layout, variant in variants.items():
                compiled, state, inputs, medians = variant
                times = []
                for _ in range(steps):
                    tick = time.perf_counter()
                    state, metrics = compiled(state, *inputs)
                    jax.block_until_ready(metrics["loss"])
                    times.append(time.perf_counter() - tick)
                variant[1] = state
                medians.append(statistics.median(times))
        ms = {layout: 1e3 * statistics.median(variant[3]) for layout, variant in variants.items()}
        rows[name] = {"unrolled_ms": round(ms["unrolled"], 2), "scanned_ms": round(ms["scanned"], 2),
                      "scanned_over_unrolled": round(ms["scanned"] / ms["unrolled"], 3)}
        print(name, json.dumps(rows[name]), flush=True)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("what", nargs="?", choices=("compile", "step", "both"), default="both")
    parser.add_argument("--models", default="BertTiny,BertBase,BertLarge,GPT2Small,GPT2Medium")
    parser.add_argument("--clipping", choices=("ghost", "vmap"), default="ghost",
                        help="the compiled step's clipping; 'step' uses the grid's unless --step-clipping")
    parser.add_argument("--step-clipping", choices=("ghost", "vmap"), default=None)
    parser.add_argument("--seq-len", type=int, default=128)
    parser.add_argument("--config", type=Path, default=DEFAULT_CONFIG, help="the grid whose models 'step' times")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=10)
    args = parser.parse_args()
    models = [name for name in args.models.split(",") if name]
    unknown = [name for name in models if name not in PRESETS]
    if unknown:
        parser.error(f"--models: {unknown} not among {sorted(PRESETS)}")
    result = {"device": jax.devices()[0].device_kind, "jax": jax.__version__, "clipping": args.clipping}
    if args.what in ("compile", "both"):
        result["compile"] = compile_table(models, args.clipping, args.seq_len)
    if args.what in ("step", "both"):
        result["step"] = step_table(args.config, args.rounds, args.steps, args.step_clipping)
    print(json.dumps(result))


if __name__ == "__main__":
    main()
