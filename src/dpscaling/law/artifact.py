"""The saved, reusable law: fit once, query many times (paper §3.3 → §3.4).

A law is a directory holding Parquet tables and a JSON manifest:

- ``grid.parquet``: the smoothed, extrapolated and σ̄-filled grid the
  interpolants are built from (Model, Model Size, Iterations, Noise Batch
  Ratio, Cross Entropy, Learning Rate, Source);
- ``fits.parquet``: every power-law fit (one per (model, σ̄), plus E* per model
  when E is tied to it), failures included with their reason;
- ``accounting_amplified.parquet`` / ``accounting_unamplified.parquet`` when the
  law was fitted with the authors' accounting tables;
- ``parametric.json`` + ``parametric_diagnostics.parquet`` when parametric fits were requested;
- ``manifest.json``: format version, library versions, settings, S, physical
  batch, sources and the fit report (counts of dropped / missing / failed items),
  and, for a law the workflow fitted, ``sigma_table``: its run's accounting table
  (path relative to the law directory) and the sampling rule its σ comes from, so
  ``dpscaling query --law`` answers compute-optimal queries without extra flags.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dpscaling.accounting.validation import DEFAULT_DELTA
from dpscaling.core.errors import UserError
from dpscaling.core.io import atomic_path
from dpscaling.law.collect import EXCLUDED_STATUSES, one_family, primary_seed_curves
from dpscaling.law.columns import (
    CROSS_ENTROPY, ITERATIONS, MODEL, MODEL_SIZE, NOISE_BATCH_RATIO, PAPER_PHYSICAL_BATCH,
    PAPER_SEQUENCE_LENGTH, SOURCE, STATUS)
from dpscaling.law.extrapolation import extrapolate, own_extrapolation_where_unfilled
from dpscaling.law.interpolation import LossFunction, fill_missing_model_sizes, fill_missing_noise_batch_ratios
from dpscaling.law.noise import (
    SigmaSource, sigma_from_accountant, sigma_from_sigma_table, sigma_from_tables, sigma_on_demand)
from dpscaling.law.settings import LawSettings
from dpscaling.law.smoothing import smooth_results
from dpscaling.privacy.mechanisms import DPSGD, mechanism_named
from dpscaling.models.family import BERT

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
ACCOUNTING_KINDS = ("amplified", "unamplified")
RUN_KEYS = [MODEL, "Learning Rate", NOISE_BATCH_RATIO, "Seed"]


@dataclass
class Law:
    """A fitted law: its grid, fits, settings, optional accounting tables, and the interpolated L(M, T, σ̄)."""
    grid: pd.DataFrame
    fits: pd.DataFrame
    settings: LawSettings
    seq_len: int
    physical_batch: int
    accounting: dict[str, pd.DataFrame] = field(default_factory=dict)
    report: dict[str, Any] = field(default_factory=dict)
    sources: dict[str, Any] = field(default_factory=dict)
    parametric: dict[str, Any] | None = None
    parametric_diagnostics: pd.DataFrame | None = None
    # {"path": dpscaling σ table, "sampling": poisson | deterministic | min}: the run's accounting table.
    sigma_table: dict[str, str] | None = None
    family: str = BERT.name  # the model family of the curves (dpscaling.models.family)
    mechanism: str = DPSGD.name  # the noise mechanism of its noisy curves (dpscaling.privacy.mechanisms): what σ̄ costs

    def __post_init__(self) -> None:
        self.loss = LossFunction.from_grid(self.grid, log_loss=self.settings.interpolate_log_loss,
                                           ignore_zero_weight_nan=self.settings.ignore_zero_weight_nan)

    def model_size_range(self) -> tuple[float, float]:
        return float(self.loss.model_sizes[0]), float(self.loss.model_sizes[-1])

    def iteration_bounds(self) -> tuple[float, float]:
        return float(self.loss.iterations[0]), float(self.loss.iterations[-1])

    def sigma_source(self, tables: tuple[pd.DataFrame | None, pd.DataFrame | None] | None = None, *,
                     sigma_table: str | os.PathLike[str] | None = None, sampling: str | None = None,
                     delta: float | None = None, per_row: bool = False, progress=None) -> SigmaSource:
        """Where σ comes from, in one order for every caller (the command line, the API, the figures,
        ``private_model``):

        1. accounting tables the caller gives (the authors' format: ``tables`` = (amplified, unamplified));
        2. the accounting tables saved with the law;
        3. a dpscaling σ table: ``sigma_table`` read with ``sampling``, else the run's table the law points to;
        4. with ``per_row``, dpscaling's accountant at ``delta``, once per distinct (ε, T, q) (a few rows);
        5. otherwise σ built on demand at ``delta`` (:mod:`dpscaling.accounting.on_demand`, cached).

        The authors' tables price :attr:`LawSettings.table_sampling`. A ``delta`` other than the found
        source's is answered on demand under the same sampling rule (the table cannot answer it); without
        any source the rule is :attr:`LawSettings.table_sampling` and δ defaults to 1e-8.
        """
        if tables is not None and any(t is not None for t in tables):
            sigma, found = sigma_from_tables(*tables, self.settings.accounting_rule)
            source = SigmaSource(sigma, found, self.settings.table_sampling, "command-line accounting tables")
        elif self.accounting:
            sigma, found = sigma_from_tables(self.accounting.get("amplified"), self.accounting.get("unamplified"),
                                             self.settings.accounting_rule)
            source = SigmaSource(sigma, found, self.settings.table_sampling,
                                 f"the law's accounting tables (authors' format, {self.settings.accounting_rule} rule)")
        elif sigma_table is not None or self.sigma_table:
            path = Path(os.path.normpath(sigma_table if sigma_table is not None else self.sigma_table["path"]))
            rule = sampling or (self.sigma_table or {}).get("sampling", "min")
            if not path.is_file():
                raise UserError(f"this law's accounting table {path} does not exist: build it (`snakemake "
                                "accounting`), or query the run's law bundle (<run>/law/bundle)")
            sigma, found = sigma_from_sigma_table(path, rule, self.mechanism)
            source = SigmaSource(sigma, found, rule, f"the run's accounting table {path} ({rule})")
        else:
            rule, at = self.settings.table_sampling, DEFAULT_DELTA if delta is None else delta
            if per_row:
                return SigmaSource(sigma_from_accountant(at, rule, self.mechanism), at, rule,
                                   f"dpscaling.accounting ({rule})")
            return SigmaSource(sigma_on_demand(at, rule, progress, self.mechanism), at, rule,
                               f"dpscaling.accounting on demand ({rule}, δ = {at:g}; no accounting table in the law)")
        if delta is not None and not np.isclose(delta, source.delta, rtol=1e-9, atol=0):
            if per_row:
                return SigmaSource(sigma_from_accountant(delta, source.sampling, self.mechanism), delta, source.sampling,
                                   f"dpscaling.accounting ({source.sampling}, δ = {delta:g} instead of the "
                                   f"table's {source.delta:g})")
            return SigmaSource(sigma_on_demand(delta, source.sampling, progress, self.mechanism), delta,
                               source.sampling,
                               f"dpscaling.accounting on demand ({source.sampling}, δ = {delta:g} instead of the "
                               f"table's {source.delta:g})")
        return source

    def manifest(self, directory: str | os.PathLike[str] | None = None) -> dict[str, Any]:
        return {
            "format_version": FORMAT_VERSION,
            "versions": _versions(),
            "settings": self.settings.to_json(),
            "seq_len": self.seq_len,
            "physical_batch": self.physical_batch,
            "family": self.family,
            "mechanism": self.mechanism,
            "accounting": sorted(self.accounting) or None,
            "model_sizes": [float(m) for m in self.loss.model_sizes],
            "iterations": list(self.iteration_bounds()),
            "noise_batch_ratios": [float(s) for s in self.loss.noise_batch_ratios],
            "sources": self.sources,
            "report": self.report,
            "parametric": self.parametric,
            "sigma_table": self._relative_sigma_table(directory),
        }

    def _relative_sigma_table(self, directory: str | os.PathLike[str] | None) -> dict[str, str] | None:
        """The σ-table pointer with its path relative to the law's directory (a moved run dir still works)."""
        if not self.sigma_table:
            return None
        path = Path(self.sigma_table["path"])
        if directory is not None:
            path = Path(os.path.relpath(path.resolve(), Path(directory).resolve()))
        return {**self.sigma_table, "path": str(path)}

    def save(self, directory: str | os.PathLike[str]) -> Path:
        """Write the law atomically: a reader sees the old directory or the complete new one."""
        with atomic_path(directory, directory=True) as tmp:
            self.grid.to_parquet(tmp / "grid.parquet", index=False)
            self.fits.to_parquet(tmp / "fits.parquet", index=False)
            for kind, table in self.accounting.items():
                table.to_parquet(tmp / f"accounting_{kind}.parquet", index=False)
            if self.parametric_diagnostics is not None:
                self.parametric_diagnostics.to_parquet(tmp / "parametric_diagnostics.parquet", index=False)
            manifest = self.manifest(directory)
            (tmp / MANIFEST).write_text(json.dumps(_jsonable(manifest), indent=2, sort_keys=True) + "\n")
        return Path(directory)


def _versions() -> dict[str, str]:
    versions = {}
    for package in ("dpscaling", "numpy", "scipy", "pandas", "pyarrow"):
        try:
            versions[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            versions[package] = "unknown"
    return versions


def _jsonable(value: Any) -> Any:
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        value = value.item()
    if isinstance(value, float) and not np.isfinite(value):
        return None
    return value


def exclude_unfit_runs(results: pd.DataFrame) -> tuple[pd.DataFrame, pd.DataFrame]:
    """Drop runs whose status is diverged or still running; return (kept rows, dropped runs with their status).

    A diverged run's loss is not a training curve; the other learning rates cover its cells
    (minimum over learning rates), and cells no run covers are reported as missing.
    """
    excluded = results[STATUS].astype(str).str.lower().isin(EXCLUDED_STATUSES)
    keys = [k for k in RUN_KEYS if k in results.columns] + [STATUS]
    dropped_runs = results.loc[excluded, keys].drop_duplicates()
    return results[~excluded], dropped_runs.reset_index(drop=True)


def _filled(grid: pd.DataFrame, settings: LawSettings) -> pd.DataFrame:
    """The extrapolated grid with its empty cells filled: along σ̄ (the paper); with ``fill_missing_models`` across
    models too, after σ̄ and then along σ̄ again where that made neighbours (or, ``fill_models_first``, across models
    first); with ``curve_horizons`` a short curve's own extrapolation where no fill reached, and the fills across
    models again from it."""
    def along_nbr(cells: pd.DataFrame) -> pd.DataFrame:
        return fill_missing_noise_batch_ratios(cells, settings.fill_missing_nbr)

    fills = [along_nbr]
    if settings.fill_missing_models:
        fills = [fill_missing_model_sizes, along_nbr] if settings.fill_models_first else [
            along_nbr, fill_missing_model_sizes, along_nbr]
    for fill in fills:
        grid = fill(grid)
    if settings.curve_horizons:
        grid = own_extrapolation_where_unfilled(grid)
        if settings.fill_missing_models:
            for fill in (fills if settings.fill_models_first else fills[1:]):
                grid = fill(grid)
    return grid


def fit_law(results: pd.DataFrame, settings: LawSettings | None = None, *,
            seq_len: int = PAPER_SEQUENCE_LENGTH, physical_batch: int = PAPER_PHYSICAL_BATCH,
            accounting_amplified: pd.DataFrame | None = None, accounting_unamplified: pd.DataFrame | None = None,
            parametric: bool = False, sources: dict[str, Any] | None = None,
            sigma_table: str | os.PathLike[str] | None = None, sampling: str = "min",
            mechanism: str | None = None) -> Law:
    """Tidy measurements → a :class:`Law` (smoothing → extrapolation → σ̄ fill → interpolants).

    ``sigma_table``: a dpscaling accounting table (the run's ``accounting/sigma_table.parquet``) the law
    points to, with the ``sampling`` rule (poisson / deterministic / min) its σ is read with. ``mechanism``:
    the noise mechanism of the curves (None: DP-SGD), whose price σ̄ is.
    Raises UserError if nothing survives the warm-up cut or the grid cannot be interpolated.
    """
    if sigma_table is not None:
        from dpscaling.accounting.branches import SAMPLINGS

        if sampling not in SAMPLINGS:
            raise UserError(f"accounting.sampling: {sampling!r} is not one of {list(SAMPLINGS)}")
    settings = settings or LawSettings()
    family = one_family(results)  # a law is fitted on one model family
    # One curve per run: repeated seeds (training.repeat_seeds) measure noise for the bootstrap only.
    results, repeat_runs = primary_seed_curves(results)
    kept, excluded = exclude_unfit_runs(results)
    smoothed = smooth_results(kept, settings)
    if smoothed.empty or smoothed[CROSS_ENTROPY].notna().sum() == 0:
        raise UserError(f"no measurements at or after the warm-up ({settings.warmup_steps:g} steps); "
                        "lower the warm-up or train longer")
    extended, fits = extrapolate(smoothed, settings)
    grid = _filled(extended, settings)
    failed = fits[fits["status"] != "ok"]
    report = {
        "measurements": int(len(results)),
        "repeat_seed_runs_set_aside": repeat_runs,
        "runs_excluded": excluded.to_dict("records"),
        "warmup_measurements_dropped": int((kept[ITERATIONS] < settings.warmup_steps).sum()),
        "nan_cells_after_smoothing": int(smoothed[CROSS_ENTROPY].isna().sum()),
        "failed_fits": failed[["model", "noise_batch_ratio", "kind", "reason"]].to_dict("records"),
        "filled_cells": int((grid[SOURCE] == "filled").sum()),
        "missing_cells": _missing_cells(grid),
    }
    accounting = {kind: table for kind, table in zip(ACCOUNTING_KINDS, (accounting_amplified, accounting_unamplified))
                  if table is not None}
    law = Law(grid, fits, settings, int(seq_len), int(physical_batch), accounting, report, sources or {},
              sigma_table={"path": str(sigma_table), "sampling": sampling} if sigma_table else None, family=family,
              mechanism=mechanism_named(mechanism or DPSGD.name, "mechanism").name)
    if accounting:
        law.sigma_source()  # validate the tables now, not at the first query
    if parametric:
        from dpscaling.law.parametric import TooFewPointsError, fit_paper_forms
        try:
            law.parametric, law.parametric_diagnostics = fit_paper_forms(smoothed, physical_batch=physical_batch)
        except TooFewPointsError as error:  # reported, not fatal: the semi-parametric law stands on its own
            report["parametric_failed"] = str(error)
    return law


def _missing_cells(grid: pd.DataFrame) -> int:
    """Cells of the full (M × T × σ̄) grid without a finite value: queries there come back NaN with a reason."""
    full = grid[MODEL_SIZE].nunique() * grid[ITERATIONS].nunique() * grid[NOISE_BATCH_RATIO].nunique()
    return int(full - grid[CROSS_ENTROPY].notna().sum())


def read_law(directory: str | os.PathLike[str]) -> Law:
    """Read a law written by :meth:`Law.save`."""
    directory = Path(directory)
    manifest_path = directory / MANIFEST
    if not manifest_path.is_file():
        raise UserError(f"{directory} is not a fitted law (no {MANIFEST}); create one with `dpscaling fit`")
    manifest = json.loads(manifest_path.read_text())
    if manifest.get("format_version") != FORMAT_VERSION:
        raise UserError(f"{directory}: law format {manifest.get('format_version')} is not {FORMAT_VERSION}; refit it")
    accounting = {kind: pd.read_parquet(directory / f"accounting_{kind}.parquet") for kind in ACCOUNTING_KINDS
                  if (directory / f"accounting_{kind}.parquet").is_file()}
    diagnostics_path = directory / "parametric_diagnostics.parquet"
    sigma_table = manifest.get("sigma_table")
    if sigma_table:
        sigma_table = {**sigma_table, "path": str(directory / sigma_table["path"])}  # absolute paths stay
    return Law(
        grid=pd.read_parquet(directory / "grid.parquet"), fits=pd.read_parquet(directory / "fits.parquet"),
        settings=LawSettings.from_json(manifest["settings"]), seq_len=manifest["seq_len"],
        physical_batch=manifest["physical_batch"], accounting=accounting, report=manifest["report"],
        sources=manifest["sources"], parametric=manifest.get("parametric"),
        parametric_diagnostics=pd.read_parquet(diagnostics_path) if diagnostics_path.is_file() else None,
        sigma_table=sigma_table, family=manifest.get("family", BERT.name),
        mechanism=manifest.get("mechanism") or _table_mechanism(sigma_table))


def _table_mechanism(sigma_table: dict[str, str] | None) -> str:
    """The mechanism of a law saved before laws recorded theirs: its σ table's (its bands), else DP-SGD."""
    from dpscaling.accounting.table import read_frame
    from dpscaling.privacy.mechanisms import DPSGD, bandmf_name

    if not sigma_table or not Path(sigma_table["path"]).is_file():
        return DPSGD.name
    _, spec = read_frame(sigma_table["path"])
    return DPSGD.name if spec is None or spec.bands == 1 else bandmf_name(spec.bands)
