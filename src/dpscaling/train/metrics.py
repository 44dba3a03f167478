"""Training curves as Parquet (paper §3.2 "Metrics": mean training loss of every 100 steps).

One row per logging interval. Every row also carries the run's constants (model, its
parameter count, σ̄, learning rate, batch, sequence length, seed, code version) and the
final ``status`` so that a concatenation of many runs' files is self-describing; the
full :class:`~dpscaling.train.config.TrainConfig` is stored as JSON in the Parquet
schema metadata under ``dpscaling.config`` (and the run summary under
``dpscaling.summary``).
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa

import dpscaling
from dpscaling.core.io import write_parquet_atomic

CONFIG_KEY = b"dpscaling.config"
SUMMARY_KEY = b"dpscaling.summary"

# Columns that vary per interval, in file order; the run constants follow them.
INTERVAL_COLUMNS: tuple[str, ...] = (
    "step",  # steps completed at the end of the interval
    "loss",  # mean per-step training loss over the interval
    "grad_norm",  # mean per-example gradient norm before clipping
    "clipped_fraction",  # fraction of per-example gradients with norm > C
    "lr",  # scheduled learning rate at the last step of the interval
    "steps_per_s",
    "examples_per_s",
)


def code_version() -> str:
    """``dpscaling.__version__``, plus ``git describe`` of the source tree when available."""
    try:
        described = subprocess.run(
            ["git", "describe", "--always", "--dirty", "--tags"],
            cwd=Path(dpscaling.__file__).parent,
            capture_output=True,
            text=True,
            timeout=10,
            check=True,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        described = ""
    return f"{dpscaling.__version__}+{described}" if described else dpscaling.__version__


def write_metrics(
    path: str | Path,
    rows: Sequence[Mapping[str, Any]],
    run: Mapping[str, Any],
    config: Mapping[str, Any],
    summary: Mapping[str, Any] | None = None,
) -> None:
    """Atomically write the curve ``rows`` with the run constants ``run`` as columns."""
    columns: dict[str, list] = {name: [row[name] for row in rows] for name in INTERVAL_COLUMNS}
    for name, value in run.items():
        columns[name] = [value] * len(rows)
    types = {name: pa.float64() for name in INTERVAL_COLUMNS} | {"step": pa.int64()}
    arrays = {
        name: pa.array(values, type=types.get(name, _arrow_type(run.get(name))))
        for name, values in columns.items()
    }
    metadata = {CONFIG_KEY: json.dumps(config, sort_keys=True)}
    if summary is not None:
        metadata[SUMMARY_KEY] = json.dumps(summary, sort_keys=True)
    # Page checksums and a content digest: a damaged file is refused by name when read.
    write_parquet_atomic(pa.table(arrays).replace_schema_metadata(metadata), path)


def _arrow_type(value: Any) -> pa.DataType:
    if isinstance(value, bool):
        return pa.bool_()
    if isinstance(value, int):
        return pa.int64()
    if isinstance(value, float) or value is None:
        return pa.float64()
    return pa.string()
