"""table:models — the models of the run with their measured parameter counts (paper Table 1).

Shapes come from the config (a family's presets or ``models.custom``); parameter
counts are the ones the training jobs measured on the built models (``n_params``
in each curve), never the paper's, split into the embedding tables (word, position and
token-type rows: most of a small model with a large vocabulary) and the non-embedding rest
(docs/models.md). The paper's count is shown beside a family member, labelled as the paper's.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import pandas as pd

from dpscaling.models.family import PAPER_PARAMS, PRESETS

LABEL = "table:models"
CAPTION = ("Models used in this run: shapes and measured trainable parameter counts (M), split into the "
           "embedding tables (word, position, token type) and the rest.")


def architecture(name: str, custom: Mapping[str, Mapping[str, Any]]) -> tuple[int, int, int]:
    """(layers, heads, hidden) of a preset of any family or a ``models.custom`` entry."""
    if name in custom:
        spec = custom[name]
        return int(spec["layers"]), int(spec["heads"]), int(spec["hidden"])
    return PRESETS[name].presets[name]


def models_table(metrics_paths: Iterable[str | Path], custom: Mapping[str, Mapping[str, Any]]) -> pd.DataFrame:
    columns = ["model", "n_params", "n_params_non_embedding"]
    runs = pd.concat([pd.read_parquet(path, columns=columns).iloc[:1] for path in metrics_paths])
    counts = runs.groupby("model").first().sort_values("n_params")
    rows = []
    for name, count in counts.iterrows():
        layers, heads, hidden = architecture(str(name), custom)
        rows.append({"Model": name, "Layers": layers, "Heads": heads, "Dims": hidden,
                     "Params": int(count["n_params"]),
                     "Embedding Params": int(count["n_params"] - count["n_params_non_embedding"]),
                     "Non-embedding Params": int(count["n_params_non_embedding"]),
                     "Paper Params (reference)": PAPER_PARAMS.get(str(name), float("nan"))})
    return pd.DataFrame(rows)
