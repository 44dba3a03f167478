"""tab:throughput — measured training throughput per model on the hardware this run used (paper appendix).

Steps/s is the median over every logged interval of every run of the model
(intervals are timed after compilation); records/s = steps/s × batch. The
paper's TPUv3 numbers are printed beside ours as a labelled reference, never
mixed into our rows.
"""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pandas as pd

LABEL = "tab:throughput"
CAPTION = ("Training throughput measured by this run (median over logged intervals), with the paper's TPUv3 "
           "measurements as a reference.")

# Paper appendix "Training Throughput" (TPUv3): params, steps/s, per-core batch, records/s.
PAPER_TPUV3 = {
    "BertTiny": (4.52e6, 8.959, 64, 573), "BertMini": (11.4e6, 5.494, 64, 352),
    "BertSmall": (29.0e6, 6.602, 32, 211), "BertMedium": (41.6e6, 4.196, 32, 134),
    "BertBase": (110e6, 3.621, 16, 54), "BertLarge": (335e6, 2.225, 8, 17.8),
    "BertMega": (729e6, 1.536, 4, 6.1),
}
_COLUMNS = ["model", "n_params", "steps_per_s", "batch_size", "seq_len", "n_devices", "device_kind", "clipping"]


def throughput_table(metrics_paths: Iterable[str | Path]) -> pd.DataFrame:
    frames = []
    for path in metrics_paths:
        curve = pd.read_parquet(path)
        frames.append(curve.reindex(columns=_COLUMNS))  # older curves lack the device columns
    runs = pd.concat(frames, ignore_index=True)
    runs["n_devices"] = runs["n_devices"].fillna(1).astype(int)
    runs["device_kind"] = runs["device_kind"].fillna("unknown")
    rows = []
    for (model, devices, kind), group in runs.groupby(["model", "n_devices", "device_kind"], sort=False):
        steps = float(group["steps_per_s"].median())
        batch = int(group["batch_size"].iloc[0])
        rows.append({"Source": f"this run ({devices} × {kind})", "Model": model,
                     "Params": int(group["n_params"].iloc[0]), "Steps/sec": steps,
                     "Per Device Batch Size": batch / devices, "Records/sec": steps * batch,
                     "Sequence Length": int(group["seq_len"].iloc[0]), "Clipping": group["clipping"].iloc[0]})
    ours = pd.DataFrame(rows).sort_values("Params")
    paper = pd.DataFrame([{"Source": "paper (TPUv3, reference)", "Model": name, "Params": params,
                           "Steps/sec": steps, "Per Device Batch Size": per_core, "Records/sec": records,
                           "Sequence Length": 512, "Clipping": "per-example"}
                          for name, (params, steps, per_core, records) in PAPER_TPUV3.items()])
    return pd.concat([ours, paper], ignore_index=True)
