"""Real training jobs on an accelerator through the workflow's own entry point (``run_training``).

Results: docs/runs.md, "Measured on an H100" (docs/train.md, "On a GPU", says how to run it).

* ``spec`` (here, where Snakemake validates the config): the ``train_run`` job of one grid point of
  a config, written as JSON: the model and training params the rule would pass, and the wildcards.
* ``job``: that job, as the rule runs it, for ``--steps`` steps; prints its records/s and loss.
* ``precision``: the same job twice at one σ̄ and seed, float32 and bfloat16 compute (clipped sums,
  noise and Adam stay float32), at ``--batch`` for ``--steps`` steps; prints the final-loss
  difference and how far the per-example gradient norms before clipping (the curve's ``grad_norm``)
  and the clipped fractions differ, interval by interval.

Each command ends with one JSON line; ``--json-out`` also writes it to a file.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq


def write_spec(args: argparse.Namespace) -> dict:
    import yaml

    from dpscaling.config.schema import validate_config
    from dpscaling.workflow.params import model_param, training_params

    config: dict = {}
    for path in args.configfile:
        config.update(yaml.safe_load(Path(path).read_text()))
    validate_config(config)
    training = config["training"]
    return {
        "config": args.configfile,
        "model": model_param(config, args.model, config["data"]["seq_len"]),
        "training": training_params(config),
        "wildcards": {
            "model": args.model,
            "nbr": repr(args.nbr),
            "lr": repr(training["learning_rates"][0]),
            "batch": str(training["physical_batch"]),
            "seed": str(training["seed"]),
        },
    }


def spec_config(spec: dict, data: Path, **changes):
    from dpscaling.data.shards import load_meta
    from dpscaling.train.config import job_train_config

    config = job_train_config(spec["model"], spec["training"], spec["wildcards"], load_meta(data).seq_len)
    # the vendored corpus holds ~8.5K sequences of 512 tokens: a few hundred steps of 1024 repeat them
    return dataclasses.replace(config, allow_repeats=True, **changes)


def train(config, data: Path, out: Path, name: str) -> dict:
    from dpscaling.train import run_training

    started = time.perf_counter()
    try:
        summary = run_training(config, data_dir=data, output=out / f"{name}.parquet", checkpoint_dir=out / name)
    except Exception as error:  # noqa: BLE001 - an accelerator's out-of-memory is a finding: report it
        return {"name": name, "error": str(error).splitlines()[0][:300]}
    curve = pq.read_table(out / f"{name}.parquet").to_pandas()
    return {
        "name": name,
        "status": summary.status,
        "steps": summary.steps,
        "final_loss": summary.final_loss,
        "wall_s": round(time.perf_counter() - started, 1),
        # the last interval: the first one holds compilation
        "records_per_s": round(float(curve["examples_per_s"].iloc[-1]), 1),
        "curve": curve[["step", "loss", "grad_norm", "clipped_fraction"]].to_dict("list"),
    }


def run_job(args: argparse.Namespace) -> dict:
    spec = json.loads(Path(args.spec).read_text())
    config = spec_config(spec, Path(args.data), num_steps=args.steps, **(
        {"log_every": args.log_every, "checkpoint_every": args.steps} if args.log_every else {}))
    result = train(config, Path(args.data), Path(args.out), "paper_job")
    if "error" in result and args.fallback_microbatch:
        smaller = dataclasses.replace(config, microbatch_size=args.fallback_microbatch)
        result = {"as_configured": result,
                  **train(smaller, Path(args.data), Path(args.out), f"paper_job_mb{args.fallback_microbatch}")}
    result.update(model=config.display_name, batch=config.batch_size, microbatch=config.microbatch_size,
                  clipping=config.clipping, seq_len=spec_config(spec, Path(args.data)).max_positions)
    return result


def run_precision(args: argparse.Namespace) -> dict:
    spec = json.loads(Path(args.spec).read_text())
    changes = dict(num_steps=args.steps, batch_size=args.batch, microbatch_size=None, warmup_steps=args.steps // 10,
                   decay_steps=args.steps, log_every=args.log_every, checkpoint_every=args.steps,
                   noise_batch_ratio=args.nbr)
    runs = {}
    for dtype in ("float32", "bfloat16"):
        config = spec_config(spec, Path(args.data), model_dtype=dtype, **changes)
        runs[dtype] = train(config, Path(args.data), Path(args.out), f"precision_{dtype}")
    if any("error" in run for run in runs.values()):
        return {"runs": runs}
    f32, b16 = (runs[d]["curve"] for d in ("float32", "bfloat16"))
    norm_ratio = np.asarray(b16["grad_norm"]) / np.asarray(f32["grad_norm"])
    return {
        "batch": args.batch, "steps": args.steps, "nbr": args.nbr,
        "final_loss": {d: runs[d]["final_loss"] for d in runs},
        "final_loss_difference": runs["bfloat16"]["final_loss"] - runs["float32"]["final_loss"],
        "max_abs_loss_difference": float(np.max(np.abs(np.subtract(b16["loss"], f32["loss"])))),
        "grad_norm_ratio_range": [float(norm_ratio.min()), float(norm_ratio.max())],
        "clipped_fraction": {d: [min(runs[d]["curve"]["clipped_fraction"]), max(runs[d]["curve"]["clipped_fraction"])]
                             for d in runs},
        "records_per_s": {d: runs[d]["records_per_s"] for d in runs},
        "runs": runs,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    steps = parser.add_subparsers(dest="command", required=True)
    spec = steps.add_parser("spec", help="write a config's train_run job as JSON (needs Snakemake)")
    spec.add_argument("--configfile", nargs="+", required=True, help="config files, layered in order")
    spec.add_argument("--model", default="BertTiny", help="a model of the config")
    spec.add_argument("--nbr", type=float, default=2.0**-10, help="the grid point's noise-batch ratio")
    spec.add_argument("--out", required=True, help="the JSON file to write")
    for name, help_text in (("job", "run the job for --steps steps"), ("precision", "float32 against bfloat16")):
        command = steps.add_parser(name, help=help_text)
        command.add_argument("--spec", required=True, help="a job spec written by `spec`")
        command.add_argument("--data", required=True, help="the packed data directory (meta.json, train/)")
        command.add_argument("--out", required=True, help="directory for curves and checkpoints")
        command.add_argument("--steps", type=int, default=200, help="training steps")
        command.add_argument("--json-out", default=None, help="also write the result JSON to this file")
    steps.choices["job"].add_argument("--log-every", type=int, default=None,
                                      help="steps per curve row (default the config's)")
    steps.choices["job"].add_argument("--fallback-microbatch", type=int, default=None,
                                      help="if the job as configured fails, run it again with this microbatch")
    precision = steps.choices["precision"]
    precision.add_argument("--batch", type=int, default=128, help="physical batch")
    precision.add_argument("--nbr", type=float, default=2.0**-10, help="noise-batch ratio of both runs")
    precision.add_argument("--log-every", type=int, default=100, help="steps per curve row")
    args = parser.parse_args()
    if args.command == "spec":
        Path(args.out).write_text(json.dumps(write_spec(args), indent=1))
        return
    result = run_job(args) if args.command == "job" else run_precision(args)
    line = json.dumps(result)
    print(line)
    if args.json_out:
        Path(args.json_out).write_text(line)


if __name__ == "__main__":
    main()
