"""table:pretraining — what fine-tuning's public pretraining cost, reported beside the fine-tuning law
(docs/finetune.md). The law's compute is the fine-tuning's own C = 6·M·B·S·T: the pretraining is public and
sunk. This table gives, per model, the pretraining's steps, batch, length and compute 6·M·B·S·T (M the
trained parameters its curve measured) and the last logged loss on the public domain, so that a reader can
add it to a budget."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pandas as pd

LABEL = "table:pretraining"
CAPTION = ("Public pretraining of each fine-tuned model: steps T, batch B, sequence length S, its compute "
           "6·M·B·S·T (not counted in the fine-tuning law's compute) and its last training loss (public domain).")
COLUMNS = ["model", "n_params", "batch_size", "seq_len", "step", "loss"]


def pretraining_table(metrics_paths: Iterable[str | Path]) -> pd.DataFrame:
    """One row per pretraining curve (``metrics.parquet``), smallest model first."""
    rows = []
    for path in metrics_paths:
        curve = pd.read_parquet(path, columns=COLUMNS)
        last = curve.iloc[-1]
        steps, n_params = int(last["step"]), int(last["n_params"])
        batch, seq_len = int(last["batch_size"]), int(last["seq_len"])
        rows.append({"Model": last["model"], "Model Size": n_params, "Iterations": steps, "Batch Size": batch,
                     "Sequence Length": seq_len, "Compute": 6.0 * n_params * batch * seq_len * steps,
                     "Final Loss": float(last["loss"])})
    return pd.DataFrame(rows).sort_values("Model Size", ignore_index=True)


def pretraining_tokens(metrics_paths: Iterable[str | Path]) -> dict[str, float]:
    """Model → D_pre, the tokens its pretraining saw (B·S·T of its curve): what paying for it from a compute
    budget costs, 6·M·D_pre (:func:`dpscaling.findings.finetune.counted_optimum`)."""
    paths = list(metrics_paths)
    if not paths:  # every model given a checkpoint: nothing pretrained here
        return {}
    table = pretraining_table(paths)
    tokens = table["Batch Size"] * table["Sequence Length"] * table["Iterations"]
    return dict(zip(table["Model"], tokens.astype(float)))
