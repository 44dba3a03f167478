"""How XLA's compiler options change one DP step's compilation time and step time on this device.

Results: docs/runs.md, "Measured on an H200" (docs/train.md, "On a GPU", says how to run it).

On a GPU, compiling a BERT DP step (XLA's autotuning of each matrix product among its kernels, then
code generation) took longer than every measurement it was for. This lowers one step (``--clipping``
path, whole batch) once per option set, compiles all of them at once in threads, then runs each in
turn: compilation seconds, and ms per step (median of ``--steps`` after two warm-up steps).

``--flags-out`` receives, as ``XLA_FLAGS`` text, the option set among ``SPEEDUPS`` that compiles fastest
while its step stays within ``--tolerance`` of the default's (empty when none does, or when it saves less
than a fifth of the default's compilation), so that a session
script can apply it to the measurements that follow. ``deterministic_ops`` (what a workflow job sets with
``deterministic_gpu_ops: true``, for exact resume) is measured for its step cost only. The last line printed is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import jax

sys.path.insert(0, str(Path(__file__).parent))
from dp_step import JaxVariant, base_config, token_batch  # noqa: E402

from dpscaling.models.family import PRESETS  # noqa: E402
from dpscaling.train.config import TrainConfig  # noqa: E402

OPTION_SETS: dict[str, dict] = {
    "default": {},
    "autotune_level_0": {"xla_gpu_autotune_level": 0},
    "no_triton_gemm": {"xla_gpu_enable_triton_gemm": False},
    "deterministic_ops": {"xla_gpu_deterministic_ops": True},
}
SPEEDUPS = ("autotune_level_0", "no_triton_gemm")


def as_xla_flags(options: dict) -> str:
    return " ".join(f"--{key}={str(value).lower()}" for key, value in options.items())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="BertMini", help="a preset")
    parser.add_argument("--batch", type=int, default=256, help="physical batch (one microbatch)")
    parser.add_argument("--seq-len", type=int, default=512)
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="bfloat16", help="compute dtype")
    parser.add_argument("--clipping", choices=("ghost", "vmap"), default="ghost", help="per-example clipping path")
    parser.add_argument("--steps", type=int, default=10, help="timed steps per option set")
    parser.add_argument("--tolerance", type=float, default=1.10, help="largest step-time ratio to the default's")
    parser.add_argument("--flags-out", default=None, help="write the chosen XLA_FLAGS text to this file")
    parser.add_argument("--json-out", default=None, help="also write the result JSON to this file")
    args = parser.parse_args()
    if args.model not in PRESETS:
        parser.error(f"--model: {args.model!r} is not one of {sorted(PRESETS)}")
    args.family, args.vocab_size = PRESETS[args.model].name, PRESETS[args.model].vocab_size
    config = TrainConfig(**base_config(args, args.batch), clipping=args.clipping, microbatch_size=args.batch,
                         noise_batch_ratio=2.0**-10)
    tokens = token_batch(args)
    variants = {name: JaxVariant(name, config, args, tokens) for name in OPTION_SETS}
    rows: dict[str, dict] = {}
    with ThreadPoolExecutor(len(variants)) as pool:
        futures = {name: pool.submit(v.compile, OPTION_SETS[name]) for name, v in variants.items()}
        for name, future in futures.items():
            try:
                future.result()
                rows[name] = {"compile_s": round(variants[name].compile_s, 1)}
            except Exception as error:  # noqa: BLE001 - an option this XLA does not know: report it
                rows[name] = {"error": str(error).splitlines()[0][:200]}
            print(name, rows[name], flush=True)
    for name, row in rows.items():
        if "error" not in row:
            variants[name].warm_up()
            row["ms_per_step"] = round(1e3 * statistics.median(variants[name].run(args.steps)), 2)
            print(name, row, flush=True)
    default = rows.get("default", {}).get("ms_per_step")
    candidates = [name for name in SPEEDUPS if default and rows[name].get("ms_per_step", float("inf"))
                  <= args.tolerance * default]
    chosen = min(candidates, key=lambda name: rows[name]["compile_s"], default=None)
    if chosen and rows[chosen]["compile_s"] > 0.8 * rows["default"]["compile_s"]:
        chosen = None  # within the threads' contention: no speed-up worth a non-default flag
    result = {"device": jax.devices()[0].device_kind, "jax": jax.__version__, "model": args.model,
              "batch": args.batch, "seq_len": args.seq_len, "dtype": args.dtype, "clipping": args.clipping,
              "options": OPTION_SETS, "rows": rows, "chosen": chosen,
              "xla_flags": as_xla_flags(OPTION_SETS[chosen]) if chosen else ""}
    print(json.dumps(result))
    if args.flags_out:
        Path(args.flags_out).write_text(result["xla_flags"])
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
