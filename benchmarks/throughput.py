"""Records/s of the DP training step per BERT size, beside the paper's records/s per TPUv3 core.

Results: docs/runs.md, "Measured on an H100" (docs/train.md, "On a GPU", says how to run it).

The paper's appendix "Training Throughput" measured records/s per TPUv3 core at sequence length 512
(pure data parallelism). This times the same work on this machine's first device: the DP-Adam step
(:mod:`dpscaling.train.step`, clipping path ``--clipping``) of each preset at ``--seq-len`` and physical
batch ``--batch``, accumulated over microbatches of the largest power of two whose step fits in 70%
of the device's memory (extrapolated from XLA's compiled footprint at microbatch 8; halved once if
the step still fails). Records/s = batch ÷ the median step time. The last line is one JSON object.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import jax

sys.path.insert(0, str(Path(__file__).parent))
from dp_step import JaxVariant, base_config, device_bytes, fitting_size, token_batch  # noqa: E402

from dpscaling.cluster import PAPER_THROUGHPUT  # noqa: E402
from dpscaling.models.family import BERT_PRESETS, PAPER_PARAMS  # noqa: E402
from dpscaling.train.config import TrainConfig  # noqa: E402

SIZES = ("BertTiny", "BertMini", "BertSmall", "BertMedium", "BertBase", "BertLarge")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default=",".join(SIZES), help="comma-separated BERT presets")
    parser.add_argument("--dtype", choices=("float32", "bfloat16"), default="bfloat16", help="compute dtype")
    parser.add_argument("--clipping", choices=("ghost", "vmap"), default="ghost", help="per-example clipping path")
    parser.add_argument("--batch", type=int, default=1024, help="physical batch (the paper's 1024)")
    parser.add_argument("--seq-len", type=int, default=512, help="sequence length (the paper's 512)")
    parser.add_argument("--steps", type=int, default=3, help="timed steps per model, after one warm-up")
    parser.add_argument("--deadline", type=float, default=None, help="seconds; later models are skipped")
    parser.add_argument("--json-out", default=None, help="also write the result JSON to this file")
    args = parser.parse_args()
    unknown = sorted(set(args.models.split(",")) - set(BERT_PRESETS))
    if unknown:
        parser.error(f"--models: {unknown} are not BERT presets {sorted(BERT_PRESETS)}")
    # what dp_step's helpers read
    args.family, args.vocab_size, args.layers = "bert", 30522, None
    return args


def fitting_microbatch(args: argparse.Namespace, limit: int | None) -> int:
    """The largest power-of-two microbatch (≤ batch) whose DP step fits in 70% of ``limit``."""
    if limit is None:  # a CPU reports no limit
        return min(args.batch, 8)
    probe = TrainConfig(**base_config(args, 8), clipping=args.clipping, noise_batch_ratio=2.0**-10)
    return min(args.batch, fitting_size(probe, args, 0.7 * limit))


def measure(args: argparse.Namespace, name: str, microbatch: int) -> dict:
    config = TrainConfig(**base_config(args, args.batch), clipping=args.clipping, microbatch_size=microbatch,
                         noise_batch_ratio=2.0**-10)
    variant = JaxVariant(f"{name} DP {args.clipping}", config, args, token_batch(args))
    ms = 1e3 * statistics.median(variant.run(args.steps))
    return {"microbatch": microbatch, "ms_per_step": round(ms, 1), "records_per_s": round(args.batch / ms * 1e3, 1),
            "footprint_gib": round(variant.footprint_gb, 2)}


def main() -> None:
    args = parse_args()
    started, limit = time.perf_counter(), device_bytes()
    paper = dict(zip(PAPER_PARAMS.values(), PAPER_THROUGHPUT))
    device = jax.devices()[0].device_kind
    rows = {}
    for name in args.models.split(","):
        if args.deadline and time.perf_counter() - started > args.deadline:
            rows[name] = {"skipped": "deadline"}
            continue
        args.model = name
        microbatch = fitting_microbatch(args, limit)
        try:
            rows[name] = measure(args, name, microbatch)
        except Exception as error:  # noqa: BLE001 - out of memory at this microbatch: once more at half
            print(f"{name}: microbatch {microbatch} failed ({str(error).splitlines()[0][:120]}); halving")
            rows[name] = measure(args, name, max(1, microbatch // 2))
        rows[name]["paper_records_per_s_per_tpuv3_core"] = paper[PAPER_PARAMS[name]][1]
        rows[name]["over_tpuv3_core"] = round(rows[name]["records_per_s"] / paper[PAPER_PARAMS[name]][1], 2)
        print(f"{name:11s} m={microbatch:5d} {rows[name]['ms_per_step']:9.1f} ms/step "
              f"{rows[name]['records_per_s']:9.1f} records/s  paper TPUv3 core {paper[PAPER_PARAMS[name]][1]:6.1f}  "
              f"ratio {rows[name]['over_tpuv3_core']:6.2f}", flush=True)
    result = {"device": device, "dtype": args.dtype, "clipping": args.clipping, "batch": args.batch,
              "seq_len": args.seq_len, "jax": jax.__version__, "models": rows}
    print(json.dumps(result))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
