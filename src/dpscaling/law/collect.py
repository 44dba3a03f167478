"""Collect training curves into one tidy table (paper §3.2 "Metrics", §3.3 input data).

Two sources: the training job's per-run curve Parquet files (one row per
logging interval), and a ``results.csv`` in the format the authors' analysis code reads
(docs/results-format.md). Both end up with
the columns of :mod:`dpscaling.law.columns`: Model, Model Size, Learning Rate,
Iterations, Noise Batch Ratio, Cross Entropy, Status, Seed.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa

from dpscaling.core.errors import UserError
from dpscaling.core.io import read_parquet_verified, write_parquet_atomic
from dpscaling.law.columns import (
    BERT_MODEL_SIZES, CROSS_ENTROPY, FAMILY, PAPER_PHYSICAL_BATCH, PAPER_SEQUENCE_LENGTH, ITERATIONS, LEARNING_RATE, MODEL, MODEL_SIZE, NOISE_BATCH_RATIO,
    SEED, STATUS)
from dpscaling.privacy.mechanisms import DPSGD
from dpscaling.models.family import BERT

TIDY_COLUMNS = [MODEL, MODEL_SIZE, LEARNING_RATE, ITERATIONS, NOISE_BATCH_RATIO, CROSS_ENTROPY, STATUS, SEED, FAMILY]
REFERENCE_RESULTS_COLUMNS = [MODEL, LEARNING_RATE, ITERATIONS, NOISE_BATCH_RATIO, CROSS_ENTROPY]
# One run of the grid (its seeds are repeats of it).
RUN = [MODEL, LEARNING_RATE, NOISE_BATCH_RATIO]
RESULTS_FORMATS = ("dpscaling", "reference")
# Runs whose curve is not a training curve to fit: diverged ones, and partial files of unfinished runs.
EXCLUDED_STATUSES = ("diverged", "running")

# Tidy column ← training-curve column(s), first present wins. The one place to edit when the training
# job's schema changes: dpscaling.train.metrics writes n_params / batch_size; an earlier draft of that schema
# said params / physical_batch.
TRAINING_CURVE_COLUMNS: dict[str, tuple[str, ...]] = {
    MODEL: ("model",),
    MODEL_SIZE: ("n_params", "params"),  # total parameter count, as the paper's model table
    LEARNING_RATE: ("learning_rate",),
    ITERATIONS: ("step",),  # steps completed at the END of the logging interval
    NOISE_BATCH_RATIO: ("noise_batch_ratio",),
    CROSS_ENTROPY: ("loss",),  # mean training loss over the interval
    STATUS: ("status",),
    SEED: ("seed",),
    FAMILY: ("family",),
}
# Curves written before a column existed: BERT's, finished, seed 0.
OPTIONAL_CURVE_COLUMNS = {STATUS: "finished", SEED: 0, FAMILY: BERT.name}
# Run constants the law keeps (C = 6·M·B·S·T needs S; the parametric fit's N = physical batch · T).
RUN_CONSTANT_COLUMNS: dict[str, tuple[str, ...]] = {
    "physical_batch": ("batch_size", "physical_batch"),
    "seq_len": ("seq_len",),
}


def _first_present(frame: pd.DataFrame, candidates: tuple[str, ...]) -> str | None:
    return next((name for name in candidates if name in frame.columns), None)


def tidy_training_curve(curve: pd.DataFrame) -> pd.DataFrame:
    """Rename one training curve's columns to the tidy names; non-finite losses become NaN."""
    columns = {}
    for tidy_name, candidates in TRAINING_CURVE_COLUMNS.items():
        source = _first_present(curve, candidates)
        if source is not None:
            columns[tidy_name] = curve[source]
        elif tidy_name in OPTIONAL_CURVE_COLUMNS:
            columns[tidy_name] = OPTIONAL_CURVE_COLUMNS[tidy_name]
        else:
            raise UserError(f"training curve lacks column {' or '.join(candidates)} (for {tidy_name})")
    return _with_finite_losses(pd.DataFrame(columns, index=curve.index)[TIDY_COLUMNS])


# The noise mechanism of a law's curves (dpscaling.privacy.mechanisms), a run constant that is a name.
MECHANISM_CONSTANT = "mechanism"


def run_constants(curves: Iterable[pd.DataFrame]) -> dict[str, int]:
    """The physical batch and sequence length shared by all runs (a mix would make C ambiguous)."""
    found: dict[str, set[int]] = {name: set() for name in RUN_CONSTANT_COLUMNS}
    for curve in curves:
        for name, candidates in RUN_CONSTANT_COLUMNS.items():
            source = _first_present(curve, candidates)
            if source is not None:
                found[name].update(int(v) for v in curve[source].dropna().unique())
    constants = {}
    for name, values in found.items():
        if len(values) > 1:
            raise UserError(f"training curves disagree on {name}: {sorted(values)}")
        if values:
            constants[name] = values.pop()
    return constants


def collect_training_curves(paths: Iterable[str | os.PathLike[str]]) -> tuple[pd.DataFrame, dict[str, int]]:
    """Read per-run curve Parquet files → (tidy table, run constants such as seq_len)."""
    curves = [read_curve(path) for path in paths]
    if not curves:
        raise UserError("no training curves to collect")
    # A law is one mechanism's (σ̄ is priced by its own table); a σ̄ = 0 run adds no noise, so it is every
    # mechanism's (dpscaling.workflow.grid.trains) and is left out of the check.
    mechanisms = {str(curve["mechanism"].iloc[0]) if "mechanism" in curve.columns else DPSGD.name
                  for curve in curves if len(curve) and float(curve["noise_batch_ratio"].iloc[0]) != 0}
    if len(mechanisms) > 1:
        raise UserError(f"training curves mix noise mechanisms {sorted(mechanisms)}; a law is fitted on one "
                        "mechanism's curves (docs/mechanisms.md)")
    tidy = pd.concat([tidy_training_curve(curve) for curve in curves], ignore_index=True)
    # The law's mechanism rides along with the run constants (a law of σ̄ = 0 curves only is DP-SGD's).
    return tidy, {**run_constants(curves), MECHANISM_CONSTANT: mechanisms.pop() if mechanisms else DPSGD.name}


CURVE_REMEDY = ("delete it and rerun snakemake to retrain the run "
                "(it resumes from its last verified checkpoint)")


def read_curve(path: str | os.PathLike[str]) -> pd.DataFrame:
    """One run's curve file, refused by name (UserError) when truncated, damaged or altered."""
    return read_parquet_verified(path, CURVE_REMEDY).to_pandas()


def collect_to_parquet(paths: Iterable[str | os.PathLike[str]], out: str | os.PathLike[str]) -> pd.DataFrame:
    """Collect curves into one tidy Parquet table; the run constants ride along as columns for ``dpscaling fit``."""
    tidy, constants = collect_training_curves(paths)
    tidy = tidy.assign(**constants)
    write_parquet_atomic(pa.Table.from_pandas(tidy, preserve_index=False), out)
    return tidy


def read_reference_results(path: str | os.PathLike[str],
                           model_sizes: Mapping[str, float] = BERT_MODEL_SIZES) -> pd.DataFrame:
    """Import a ``results.csv`` in the format the authors' analysis code reads (Model, Learning Rate,
    Iterations, Noise Batch Ratio, Cross Entropy; docs/results-format.md). Model sizes come from an optional
    ``Model Size`` column, else from the paper's table of BERT sizes by name."""
    frame = pd.read_csv(path, skipinitialspace=True)
    frame.columns = [str(c).strip() for c in frame.columns]
    missing = sorted(set(REFERENCE_RESULTS_COLUMNS) - set(frame.columns))
    if missing:
        raise UserError(f"{path}: not in the authors' results.csv format, missing column(s) {', '.join(missing)}")
    sizes = frame[MODEL].map(model_sizes)
    if MODEL_SIZE in frame:
        sizes = pd.to_numeric(frame[MODEL_SIZE], errors="coerce").fillna(sizes)
    unknown = sorted(set(frame.loc[sizes.isna(), MODEL].astype(str)))
    if unknown:
        raise UserError(f"{path}: no size for model(s) {', '.join(unknown)}: add a 'Model Size' column (parameters) "
                        f"or use the paper's names ({', '.join(model_sizes)})")
    frame = frame.assign(**{MODEL_SIZE: sizes, STATUS: "finished", SEED: 0, FAMILY: BERT.name})
    return _with_finite_losses(frame[TIDY_COLUMNS])


def read_tidy_results(path: str | os.PathLike[str]) -> pd.DataFrame:
    """Read a table this module wrote (Parquet or CSV with the tidy columns)."""
    path = str(path)
    frame = pd.read_parquet(path) if path.endswith(".parquet") else pd.read_csv(path)
    missing = sorted(set(TIDY_COLUMNS[:6]) - set(frame.columns))
    if missing:
        raise UserError(f"{path}: missing column(s) {', '.join(missing)}")
    frame = frame.assign(**{column: frame.get(column, default) for column, default in OPTIONAL_CURVE_COLUMNS.items()})
    return _with_finite_losses(frame[TIDY_COLUMNS])


def _with_finite_losses(frame: pd.DataFrame) -> pd.DataFrame:
    """Coerce dtypes; ±inf losses (a blown-up run) become NaN so every later step sees one 'missing' marker."""
    numeric = [MODEL_SIZE, LEARNING_RATE, ITERATIONS, NOISE_BATCH_RATIO, CROSS_ENTROPY]
    frame = frame.astype({column: "float64" for column in numeric})
    loss = frame[CROSS_ENTROPY].to_numpy()
    return frame.assign(**{CROSS_ENTROPY: np.where(np.isfinite(loss), loss, np.nan)}).reset_index(drop=True)


def load_results(path: str | Path, results_format: str = "dpscaling") -> tuple[pd.DataFrame, dict[str, int]]:
    """Results in any supported form → (tidy table, run constants like seq_len/physical_batch)."""
    if results_format not in RESULTS_FORMATS:
        raise UserError(f"--results-format: {results_format!r} is not one of {list(RESULTS_FORMATS)}")
    source = Path(path)
    if not source.exists():
        raise UserError(f"--results: no such file or directory {path}")
    if results_format == "reference":
        return read_reference_results(source), {"seq_len": PAPER_SEQUENCE_LENGTH,
                                                 "physical_batch": PAPER_PHYSICAL_BATCH}
    if source.is_dir():
        return collect_training_curves(sorted(source.rglob("*.parquet")))
    raw = (read_parquet_verified(source, "delete it and rerun snakemake to rebuild it").to_pandas()
           if source.suffix == ".parquet" else pd.read_csv(source))
    if not set(TIDY_COLUMNS[:6]) <= set(raw.columns):
        if source.suffix != ".parquet":
            raise UserError(f"--results {path}: not a tidy results table; expected columns "
                            f"{', '.join(TIDY_COLUMNS[:6])} (or use --results-format reference)")
        return collect_training_curves([source])
    constants: dict[str, Any] = run_constants([raw])
    if MECHANISM_CONSTANT in raw.columns:  # a table collect_to_parquet wrote
        constants[MECHANISM_CONSTANT] = str(raw[MECHANISM_CONSTANT].dropna().iloc[0])
    return read_tidy_results(source), constants


def primary_seed(results: pd.DataFrame) -> int | None:
    """The seed the main grid was trained with: the one most runs have (ties: the smallest)."""
    if SEED not in results.columns or results.empty:
        return None
    runs = results[RUN + [SEED]].drop_duplicates()
    counts = runs[SEED].value_counts()
    return int(min(counts.index[counts == counts.max()]))


def primary_seed_curves(results: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """(the primary seed's curves, how many repeat-seed runs were set aside); the main fit sees one seed."""
    seed = primary_seed(results)
    if seed is None:
        return results, 0
    other = results[results[SEED] != seed]
    return results[results[SEED] == seed], int(len(other[RUN + [SEED]].drop_duplicates()))


def one_family(results: pd.DataFrame) -> str:
    """The one model family of ``results``; a law is fitted on one family, so a mix is refused, naming the
    models of each family."""
    families = results.groupby(FAMILY)[MODEL].unique() if FAMILY in results else pd.Series({BERT.name: []})
    if len(families) > 1:
        mixed = "; ".join(f"{family}: {', '.join(sorted(map(str, models)))}" for family, models in families.items())
        raise UserError(f"these results mix model families ({mixed}); a law is fitted on one family: fit each "
                        "family's curves separately")
    return str(families.index[0]) if len(families) else BERT.name
