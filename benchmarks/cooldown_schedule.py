"""The constant-then-cooldown schedule against the paper's, at equal steps, on the default's data and settings.

Results: docs/runs.md ("constant_cooldown against the paper's schedule"); docs/train.md ("Schedules") says what
each schedule is.

Per σ̄ of ``--nbrs``, one model and learning rate: the paper's schedule trained once to the longest horizon, read
at each horizon of ``--horizons`` (as the law reads it: the curve's row ending there); and ``constant_cooldown``
trained to each horizon, each longer horizon branching from the shorter one's cooldown start
(:mod:`dpscaling.train.prefix`), read at its own last row. Printed side by side: both losses, the difference
(cooldown − paper, negative = cooldown better), and the steps each schedule trained for all horizons. The last line
is one JSON object.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import tempfile
from pathlib import Path

import pyarrow.parquet as pq
import yaml

from dpscaling.config.blocks import load_config
from dpscaling.config.schema import validate_config
from dpscaling.train import run_training
from dpscaling.train.config import job_train_config
from dpscaling.workflow.params import model_param

REPO = Path(__file__).resolve().parents[1]


def loss_at(curve: Path, step: int) -> float:
    table = pq.read_table(curve, columns=["step", "loss"]).to_pandas()
    return float(table.loc[table["step"] == step, "loss"].iloc[0])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--config", default=str(REPO / "config" / "config.yaml"))
    p.add_argument("--data", required=True, help="packed shards, e.g. results/default/data/packed/seq=64")
    p.add_argument("--model", default="BertNano")
    p.add_argument("--lr", type=float, default=2.0**-8)
    p.add_argument("--nbrs", default="0,0.00390625", help="comma-separated σ̄")
    p.add_argument("--horizons", default="120,250,500")
    p.add_argument("--cooldown-fraction", type=float, default=0.2)
    p.add_argument("--out", default=None, help="keep the runs here (default: a temporary directory)")
    args = p.parse_args()
    config = yaml.safe_load(Path(args.config).read_text())
    validate_config(config)
    run = load_config(config)
    horizons = sorted(int(h) for h in args.horizons.split(","))
    training = run.training.job_params(run.accounting.delta)
    scratch = Path(args.out or tempfile.mkdtemp(prefix="cooldown-"))
    rows = []
    for nbr in (float(v) for v in args.nbrs.split(",")):
        wildcards = {"model": args.model, "nbr": str(nbr), "lr": str(args.lr),
                     "batch": str(run.training.physical_batch), "seed": str(run.training.seed)}
        paper = job_train_config(model_param(config, args.model), {**training, "steps": horizons[-1]}, wildcards,
                                 run.data.seq_len)
        where = scratch / f"nbr={nbr}"
        run_training(paper, args.data, where / "paper.parquet", where / "paper")
        previous = None
        for steps in horizons:
            cooled = dataclasses.replace(paper, num_steps=steps, schedule="constant_cooldown",
                                         cooldown_fraction=args.cooldown_fraction)
            summary = run_training(cooled, args.data, where / f"cooldown-{steps}.parquet", where / f"cooldown-{steps}",
                                   prefix_dir=previous)
            previous = where / f"cooldown-{steps}"
            rows.append({"noise_batch_ratio": nbr, "steps": steps,
                         "paper": loss_at(where / "paper.parquet", steps),
                         "constant_cooldown": loss_at(where / f"cooldown-{steps}.parquet", steps),
                         "cooldown_started_from": summary.resumed_from_step,
                         "cooldown_steps_trained": steps - summary.resumed_from_step})
    print(f"{args.model}, lr {args.lr:g}, cooldown {args.cooldown_fraction:g} of each horizon")
    print(f"{'σ̄':>12} {'steps':>6} {'paper':>8} {'cooldown':>9} {'diff':>8}")
    for row in rows:
        row["difference"] = row["constant_cooldown"] - row["paper"]
        print(f"{row['noise_batch_ratio']:>12g} {row['steps']:>6} {row['paper']:>8.4f} "
              f"{row['constant_cooldown']:>9.4f} {row['difference']:>+8.4f}")
    trained = {"paper": horizons[-1], "constant_cooldown": sum(r["cooldown_steps_trained"] for r in rows) // len(
        {r["noise_batch_ratio"] for r in rows})}
    print(f"steps trained per σ̄ for all horizons: paper {trained['paper']}, constant_cooldown "
          f"{trained['constant_cooldown']} (ratio {trained['constant_cooldown'] / trained['paper']:.2f})")
    print(json.dumps({"model": args.model, "learning_rate": args.lr, "rows": rows, "steps_trained": trained}))


if __name__ == "__main__":
    main()
