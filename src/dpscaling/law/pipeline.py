"""From results on disk to a saved law: the one path the CLI (`dpscaling fit`) and the workflow share.

Paper §3.3: measurements → smoothing → extrapolation → interpolation. This
module only locates and reads the inputs (our training curves, a collected
table, or the authors' ``results.csv``; optional accounting CSVs), records
their provenance, and calls :func:`dpscaling.law.fit_law`.
"""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any

import pandas as pd

from dpscaling.errors import UserError
from dpscaling.io import read_parquet_verified
from dpscaling.law.artifact import Law, fit_law
from dpscaling.law.collect import (
    TIDY_COLUMNS,
    collect_training_curves,
    read_reference_results,
    read_tidy_results,
    run_constants,
)
from dpscaling.law.columns import PAPER_PHYSICAL_BATCH, PAPER_SEQUENCE_LENGTH
from dpscaling.law.noise import read_accounting_csv
from dpscaling.law.settings import LawSettings

RESULTS_FORMATS = ("dpscaling", "reference")


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


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
    return read_tidy_results(source), run_constants([raw])


def existing_file(path: str | Path | None, flag: str) -> Path | None:
    if path is None:
        return None
    if not Path(path).is_file():
        raise UserError(f"{flag}: no such file {path}")
    return Path(path)


def fit_from_files(
    results: str | Path,
    settings: LawSettings,
    *,
    results_format: str = "dpscaling",
    accounting_amplified: str | Path | None = None,
    accounting_unamplified: str | Path | None = None,
    parametric: bool = False,
    seq_len: int | None = None,
    physical_batch: int | None = None,
    sigma_table: str | Path | None = None,
    sampling: str = "min",
) -> Law:
    """Fit a law to the results at ``results``; every input's path and sha256 go into its sources.

    ``sigma_table`` (the run's dpscaling accounting table, which need not exist yet) and its ``sampling``
    rule are recorded in the law, so queries on it need no accounting flags.
    """
    table, constants = load_results(results, results_format)
    amplified = existing_file(accounting_amplified, "--accounting-amplified")
    unamplified = existing_file(accounting_unamplified, "--accounting-unamplified")
    sources: dict[str, Any] = {"results": {"path": str(Path(results).resolve()), "format": results_format}}
    if Path(results).is_file():
        sources["results"]["sha256"] = sha256(Path(results))
    for kind, path in (("accounting_amplified", amplified), ("accounting_unamplified", unamplified)):
        if path is not None:
            sources[kind] = {"path": str(path.resolve()), "sha256": sha256(path)}
    if not (amplified or unamplified):
        sources["accounting"] = "dpscaling.accounting at query time"
    return fit_law(
        table,
        settings,
        seq_len=seq_len or constants.get("seq_len", PAPER_SEQUENCE_LENGTH),
        physical_batch=physical_batch or constants.get("physical_batch", PAPER_PHYSICAL_BATCH),
        accounting_amplified=read_accounting_csv(amplified) if amplified else None,
        accounting_unamplified=read_accounting_csv(unamplified) if unamplified else None,
        parametric=parametric,
        sources=sources,
        sigma_table=sigma_table,
        sampling=sampling,
    )
