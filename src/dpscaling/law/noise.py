"""σ for a query: the injected accounting callable and the authors' accounting-table format (paper §3.4).

The law needs only ``sigma(epsilon, steps, q) -> sigma`` (noise multiplier on
the summed clipped gradients, vectorised, NaN where it cannot answer), so it
works with dpscaling's accounting tables or the authors' CSVs alike.
The authors' tables are headerless CSVs ``Iterations, Sampling Probability,
Epsilon, Delta, Noise Multiplier`` over a complete Cartesian grid; σ between
grid points is linear in (log ε, log T, log q) of log σ, as in their code.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

import numpy as np
import pandas as pd

from dpscaling.core.errors import UserError
from dpscaling.privacy.mechanisms import DPSGD

if TYPE_CHECKING:
    from scipy.interpolate import RegularGridInterpolator

ACCOUNTING_COLUMNS = ["Iterations", "Sampling Probability", "Epsilon", "Delta", "Noise Multiplier"]
_GRID_AXES = ["Epsilon", "Iterations", "Sampling Probability"]


class SigmaFunction(Protocol):
    """σ(ε, T, q) for fixed δ, vectorised over numpy arrays; NaN outside its domain."""

    def __call__(self, epsilon: np.ndarray, steps: np.ndarray, q: np.ndarray) -> np.ndarray: ...


def read_accounting_csv(path: str | os.PathLike[str]) -> pd.DataFrame:
    """Read one of the authors' headerless accounting tables.

    A NaN noise multiplier is a cell the accountant refused (dpscaling's export writes those);
    queries near it answer NaN with a reason instead of a made-up σ.
    """
    table = pd.read_csv(path, header=None, names=ACCOUNTING_COLUMNS)
    axes = [c for c in ACCOUNTING_COLUMNS if c != "Noise Multiplier"]
    if table[axes].isna().any().any() or not all(pd.api.types.is_numeric_dtype(table[c]) for c in ACCOUNTING_COLUMNS):
        raise UserError(f"{path}: expected a headerless numeric CSV with columns {', '.join(ACCOUNTING_COLUMNS)}")
    return table


@dataclass
class TableSigma:
    """σ by linear interpolation of log σ over (log ε, log T, log q) on a complete grid (one δ)."""
    table: pd.DataFrame
    delta: float
    interpolator: RegularGridInterpolator

    @classmethod
    def from_table(cls, table: pd.DataFrame, name: str = "accounting table") -> "TableSigma":
        deltas = table["Delta"].unique()
        if len(deltas) != 1:
            raise UserError(f"{name}: expected one delta, found {sorted(deltas)}")
        axes = [np.sort(table[column].unique()) for column in _GRID_AXES]
        index = pd.MultiIndex.from_product(axes)
        present = table.groupby(_GRID_AXES).size().reindex(index)
        if present.isna().any() or len(table) != len(index):
            raise UserError(f"{name}: not a complete (epsilon × iterations × q) grid: "
                            f"{len(table)} rows for {' × '.join(str(len(a)) for a in axes)} combinations")
        sigma = table.groupby(_GRID_AXES)["Noise Multiplier"].first(skipna=False).reindex(index)
        if (sigma <= 0).any() or sigma.isna().all():
            raise UserError(f"{name}: noise multipliers must be positive (NaN only where the accountant refused)")
        from scipy.interpolate import RegularGridInterpolator  # SciPy on first read, not when the workflow plans

        interpolator = RegularGridInterpolator(
            tuple(np.log(axis) for axis in axes), np.log(sigma.to_numpy(float)).reshape([len(a) for a in axes]),
            method="linear", bounds_error=False, fill_value=np.nan)
        return cls(table, float(deltas[0]), interpolator)

    def __call__(self, epsilon, steps, q) -> np.ndarray:
        e, t, p = np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in (epsilon, steps, q)))
        with np.errstate(divide="ignore", invalid="ignore"):
            points = np.stack([np.log(e), np.log(t), np.log(p)], axis=-1)
        return np.exp(self.interpolator(points.reshape(-1, 3))).reshape(e.shape)

    def domain(self) -> dict[str, tuple[float, float]]:
        return {column: (float(self.table[column].min()), float(self.table[column].max())) for column in _GRID_AXES}


@dataclass
class LowerSigma:
    """The paper's rule: the lower σ of several accountings (e.g. Poisson-amplified and unamplified)."""
    parts: tuple[SigmaFunction, ...]

    def __call__(self, epsilon, steps, q) -> np.ndarray:
        # fmin: a table that cannot answer (NaN) does not veto one that can.
        return np.fmin.reduce([np.asarray(part(epsilon, steps, q), dtype=float) for part in self.parts])


def sigma_from_tables(amplified: pd.DataFrame | None, unamplified: pd.DataFrame | None,
                      rule: str = "min") -> tuple[SigmaFunction, float]:
    """σ function and its δ from the authors' tables.

    ``rule="min"`` takes the lower σ of the two (the paper); ``"amplified"`` ignores the unamplified table
    (the authors' code, whose min never happens).
    """
    tables = {"amplified": amplified, "unamplified": unamplified}
    if rule == "amplified":
        tables.pop("unamplified")
    parts = {name: TableSigma.from_table(t, f"{name} accounting table") for name, t in tables.items() if t is not None}
    if not parts:
        raise UserError("no accounting table given" + (" (amplified is required in reference mode)"
                                                       if rule == "amplified" else ""))
    deltas = {part.delta for part in parts.values()}
    if len(deltas) != 1:
        raise UserError(f"accounting tables disagree on delta: {sorted(deltas)}")
    functions = tuple(parts.values())
    return (functions[0] if len(functions) == 1 else LowerSigma(functions)), deltas.pop()


def sigma_from_sigma_table(path: str | os.PathLike[str], sampling: str = "min",
                           mechanism: str = DPSGD.name) -> tuple[SigmaFunction, float]:
    """σ function and δ from dpscaling's accounting table (``accounting/sigma_table.parquet`` of a run).

    ``sampling`` is the rule σ comes from: ``poisson``, ``deterministic`` or ``min`` (the lower of the two,
    the paper's). Cells the accountant refused answer NaN, so queries there carry a reason. A table of
    another ``mechanism`` (its bands) is refused.
    """
    from dpscaling.accounting.table import SigmaTable
    from dpscaling.privacy.mechanisms import mechanism_named

    table = SigmaTable.load(path)
    if table.bands != mechanism_named(mechanism, "mechanism").bands:
        raise UserError(f"{path}: a σ table of {table.bands} band(s), but the law is {mechanism}'s: σ̄ would be "
                        "priced for another mechanism")

    def sigma(epsilon, steps, q) -> np.ndarray:
        return table.sigma(epsilon, steps, q, sampling=sampling, on_missing="nan")
    return sigma, table.delta


def sigma_from_accountant(delta: float, sampling: str = "min", mechanism: str = DPSGD.name) -> SigmaFunction:
    """σ of the paper's rule priced by :func:`dpscaling.accounting.pricing.paper_sigma` once per distinct
    (ε, T, q) (the accountant counts whole steps): exact, but seconds per row, so for a handful of
    configurations, never a search."""
    from dpscaling.accounting.pricing import paper_sigma

    def sigma(epsilon: np.ndarray, steps: np.ndarray, q: np.ndarray) -> np.ndarray:
        rows = np.column_stack([np.atleast_1d(epsilon), np.ceil(np.atleast_1d(steps)), np.atleast_1d(q)])
        distinct, inverse = np.unique(rows, axis=0, return_inverse=True)
        values = np.array([paper_sigma(mechanism, sampling, float(e), delta, float(p), int(t))[0]
                           for e, t, p in distinct])
        return values[inverse.ravel()]
    return sigma


def sigma_on_demand(delta: float, sampling: str = "min", progress=None, mechanism: str = DPSGD.name) -> SigmaFunction:
    """σ at any ``delta`` from tables built for the queried ε and cached (:mod:`dpscaling.accounting.on_demand`):
    for a law without an accounting table, or a δ other than its table's; built for ``mechanism``'s bands."""
    from dpscaling.accounting.on_demand import OnDemandSigma
    from dpscaling.privacy.mechanisms import mechanism_named

    return OnDemandSigma(delta, sampling, progress=progress, bands=mechanism_named(mechanism, "mechanism").bands)


@dataclass(frozen=True)
class SigmaSource:
    """Where a query's σ(ε, T, q) comes from: the function, its δ, the sampling rule it prices
    (``poisson``, ``deterministic`` or ``min``) and a description for the answer to cite."""

    sigma: SigmaFunction
    delta: float
    sampling: str
    description: str
    # k of a budget per user of up to k sequences; None: per unit of the law's runs (a sequence, or a user-level
    # mechanism's user). For a sequence-level law and k >= 2, σ is ELS's (dpscaling.accounting.user_level).
    examples_per_user: int | None = None


def els_sigma_source(delta: float, examples_per_user: int, progress=None,
                     steps_range: tuple[float, float] | None = None) -> SigmaSource:
    """ELS's σ for a user of ``examples_per_user`` sequences at the run's ``delta``: tables of the mixture event
    built on demand at the mixture's share of δ (what an ``els_poisson`` run calibrates at; the rest pays for
    truncation: :mod:`dpscaling.accounting.user_level`), Poisson only, each spanning ``steps_range`` (the law's
    search range: one table per ε serves every query of the law)."""
    from dpscaling.accounting.on_demand import OnDemandSigma
    from dpscaling.accounting.user_level import TRUNCATION_DELTA_SHARE

    mixture = delta * (1 - TRUNCATION_DELTA_SHARE)
    sigma = OnDemandSigma(mixture, "poisson", progress=progress, examples_per_user=int(examples_per_user),
                          steps_range=steps_range)
    return SigmaSource(sigma, float(delta), "poisson",
                       f"ELS for a user of k = {int(examples_per_user)} sequences (jax-privacy's user-level DP-SGD "
                       f"event, on demand at δ = {mixture:g}, the rest of δ = {delta:g} for truncation)",
                       int(examples_per_user))
