"""tab:physical-batch-size-sweep-loss-entire-train-set (paper appendix "Physical Batch Size Ablation - Extended").

The final model of each physical batch size (at the sweep's noise-batch ratio and the
ablation's learning rate; paper: σ̄ = 2^-15), scored on training sequences it may have
seen by :func:`dpscaling.train.evaluate.evaluate_checkpoint`: masked-LM cross entropy
and accuracy, averaged over seeds. Beside them, for comparison, the last logged
training loss (the mean over the run's last logging interval, measured before each
update) averaged over the same seeds.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import pandas as pd

from dpscaling.core.errors import UserError

LABEL = "tab:physical-batch-size-sweep-loss-entire-train-set"
CAPTION = ("Cross entropy and masked-LM accuracy of the final models on training sequences for each physical "
           "batch size (mean over seeds), with the last logged training loss beside them.")
COLUMNS = ["Batch Size", "Cross Entropy", "Accuracy", "Final Training Loss", "Seeds", "Examples", "Step",
           "Noise Batch Ratio", "Learning Rate", "Model"]


def train_set_table(evaluation_paths: Iterable[str | Path], metrics_paths: Iterable[str | Path]) -> pd.DataFrame:
    """One row per physical batch size from the evaluations (JSON of
    :class:`~dpscaling.train.evaluate.Evaluation`) and the same runs' training curves."""
    evaluations = pd.DataFrame([json.loads(Path(path).read_text(encoding="utf-8")) for path in evaluation_paths])
    if evaluations.empty:
        raise UserError("no evaluations to tabulate")
    last = []
    for path in metrics_paths:
        curve = pd.read_parquet(path)
        if not curve.empty:
            row = curve.iloc[-1]
            last.append({"batch_size": int(row["batch_size"]), "seed": int(row["seed"]),
                         "noise_batch_ratio": float(row["noise_batch_ratio"]),
                         "learning_rate": float(row["learning_rate"]), "final_training_loss": float(row["loss"])})
    keys = ["batch_size", "seed", "noise_batch_ratio", "learning_rate"]
    runs = evaluations.merge(pd.DataFrame(last, columns=[*keys, "final_training_loss"]), on=keys, how="left")
    table = runs.groupby("batch_size").agg(
        **{"Cross Entropy": ("loss", "mean"), "Accuracy": ("accuracy", "mean"),
           "Final Training Loss": ("final_training_loss", "mean"), "Seeds": ("seed", "nunique"),
           "Examples": ("examples", "min"), "Step": ("step", "min"),
           "Noise Batch Ratio": ("noise_batch_ratio", "first"), "Learning Rate": ("learning_rate", "first"),
           "Model": ("model", "first")}).reset_index().rename(columns={"batch_size": "Batch Size"})
    return table[COLUMNS].sort_values("Batch Size").reset_index(drop=True)
