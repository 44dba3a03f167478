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
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import jax

sys.path.insert(0, str(Path(__file__).parent))
from dp_step import base_config, build_variants, device_bytes, fitting_size, lower_probe, token_batch  # noqa: E402

from dpscaling.workflow.cluster import PAPER_THROUGHPUT  # noqa: E402
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
    parser.add_argument("--compile-threads", type=int, default=6, help="models compiled at once")
    parser.add_argument("--scan-layers", action="store_true",
                        help="the layers scanned, not unrolled (training.scan_layers): compilation flat in depth")
    parser.add_argument("--json-out", default=None, help="also write the result JSON to this file")
    args = parser.parse_args()
    unknown = sorted(set(args.models.split(",")) - set(BERT_PRESETS))
    if unknown:
        parser.error(f"--models: {unknown} are not BERT presets {sorted(BERT_PRESETS)}")
    # what dp_step's helpers read
    args.family, args.vocab_size, args.layers = "bert", 30522, None
    return args


def model_args(args: argparse.Namespace, name: str) -> argparse.Namespace:
    return argparse.Namespace(**{**vars(args), "model": name})


def fitting_microbatches(args: argparse.Namespace, names: list[str], limit: int | None) -> dict[str, int]:
    """Per model, the largest power-of-two microbatch (≤ batch) whose DP step fits in 70% of ``limit``;
    the probe compilations run ``--compile-threads`` at a time."""
    if limit is None:  # a CPU reports no limit
        return {name: min(args.batch, 8) for name in names}
    each = {name: model_args(args, name) for name in names}
    probes = {name: TrainConfig(**base_config(each[name], 8), clipping=args.clipping, noise_batch_ratio=2.0**-10)
              for name in names}
    lowered = {name: lower_probe(probes[name], each[name]) for name in names}
    with ThreadPoolExecutor(max(1, args.compile_threads)) as pool:
        fits = {name: pool.submit(fitting_size, probes[name], each[name], 0.7 * limit, lowered=lowered[name])
                for name in names}
        return {name: min(args.batch, future.result()) for name, future in fits.items()}


def variant_specs(args: argparse.Namespace, microbatches: dict[str, int]) -> list[tuple[str, TrainConfig]]:
    return [(name, TrainConfig(**base_config(model_args(args, name), args.batch), clipping=args.clipping,
                               microbatch_size=m, noise_batch_ratio=2.0**-10)) for name, m in microbatches.items()]


def main() -> None:
    args = parse_args()
    limit = device_bytes()
    paper = dict(zip(PAPER_PARAMS.values(), PAPER_THROUGHPUT))
    device = jax.devices()[0].device_kind
    names = args.models.split(",")
    tokens = token_batch(args)
    microbatches = fitting_microbatches(args, names, limit)
    variants = {v.name: v for v in build_variants(variant_specs(args, microbatches), args, tokens, args.compile_threads)}
    # out of memory at the estimated microbatch: once more at half
    retry = {name: max(1, m // 2) for name, m in microbatches.items() if name not in variants}
    if retry:
        print(f"halving the microbatch of {sorted(retry)}", flush=True)
        microbatches.update(retry)
        variants.update({v.name: v for v in build_variants(variant_specs(args, retry), args, tokens, args.compile_threads)})
    rows = {}
    for name in names:
        if name not in variants:
            rows[name] = {"microbatch": microbatches[name], "error": "did not fit or compile"}
            continue
        variant = variants.pop(name)
        ms = 1e3 * statistics.median(variant.run(args.steps))
        footprint_gib, compile_s = variant.footprint_gb, variant.compile_s
        del variant  # its state's device memory
        paper_rate = paper[PAPER_PARAMS[name]][1]
        rows[name] = {"microbatch": microbatches[name], "ms_per_step": round(ms, 1),
                      "records_per_s": round(args.batch / ms * 1e3, 1),
                      "footprint_gib": round(footprint_gib, 2), "compile_s": round(compile_s, 1),
                      "paper_records_per_s_per_tpuv3_core": paper_rate,
                      "over_tpuv3_core": round(args.batch / ms * 1e3 / paper_rate, 2)}
        print(f"{name:11s} m={microbatches[name]:5d} {ms:9.1f} ms/step {rows[name]['records_per_s']:9.1f} records/s  "
              f"paper TPUv3 core {paper_rate:6.1f}  ratio {rows[name]['over_tpuv3_core']:6.2f}", flush=True)
    result = {"device": device, "dtype": args.dtype, "clipping": args.clipping, "batch": args.batch,
              "seq_len": args.seq_len, "jax": jax.__version__, "models": rows}
    print(json.dumps(result))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
