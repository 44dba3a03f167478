"""The accounting table: σ(ε, T, q) on a log grid, computed in chunks, queried by interpolation.

Paper §3.4 ("Using the Fitted Functions"): every hypothetical configuration
(ε, N, B, T) becomes a noise-batch ratio σ̄ = σ/B. Direct calibration costs ~0.1–5 s
per point, the figures need ~10^5–10^6 points, so σ is tabulated once (one
Snakemake job per chunk of sampling probabilities, cached) and interpolated in
(log ε, log T, log q) on log σ. The authors interpolate linearly on a factor-2
grid (up to 4.5% off); here the default is cubic at fixed σ
(:mod:`dpscaling.accounting.interpolation`), exact at grid points, which keeps a
grid with factor-2 steps in T and q within 0.5% — so the table costs a fraction
of the compute. ``method="linear"`` gives the authors' scheme.

The Poisson branch is tabulated; the deterministic branch is exact and cheap
(√⌈qT⌉ · s_AG(ε, δ); for a BandMF table the cyclic sampler's k), so :class:`SigmaTable` evaluates it
directly at the query (:func:`dpscaling.accounting.pricing.paper_fixed_batch_sigma`, the one implementation of
the paper's rule) instead of interpolating a ceiling function.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pandas as pd

from dpscaling.accounting import interpolation, sweep
from dpscaling.accounting.branches import DETERMINISTIC_BRANCH, POISSON_BRANCH, SAMPLINGS
from dpscaling.accounting.table_spec import Chunk, TableSpec, plan_table  # noqa: F401 - the table's API
from dpscaling.accounting.validation import AccountingRefused
from dpscaling.core.errors import UserError
from dpscaling.core.io import read_parquet_verified, write_parquet_atomic

COLUMNS = ("epsilon", "steps", "sampling_probability", "delta", "sigma", "status")
_OK, _REFUSED_CELL, _JUMP, _NEAR_STEPS = range(4)
_REASONS = {
    _REFUSED_CELL: "the table refused a neighbouring cell (tiny q, many steps, small epsilon)",
    _JUMP: "sigma jumps there (q*T near sqrt(2*delta): the chance of taking part in two steps crosses "
           "delta) and cannot be interpolated",
    _NEAR_STEPS: "the Poisson sigma has near-steps in T and q there (participation counts crossing delta) "
                 "that the table cannot resolve; it exceeds the deterministic sigma, so sampling='min' "
                 "is unaffected",
}
STATUS_OK, STATUS_REFUSED = "ok", "refused"
_SPEC_METADATA_KEY = b"dpscaling.accounting.spec"


def compute_chunk(spec: TableSpec, chunk: Chunk) -> pd.DataFrame:
    """Poisson σ for every (ε, T) at the chunk's q values, long format (see COLUMNS)."""
    epsilons, steps = spec.epsilons(), spec.steps()
    frames = []
    for q in chunk.sampling_probabilities:
        slab = sweep.poisson_slab(spec, q).sigma
        eps_mesh, steps_mesh = np.meshgrid(epsilons, steps, indexing="ij")
        frames.append(pd.DataFrame({
            "epsilon": eps_mesh.ravel(), "steps": steps_mesh.ravel().astype(np.int64),
            "sampling_probability": q, "delta": spec.delta, "sigma": slab.ravel(),
            "status": np.where(np.isfinite(slab.ravel()), STATUS_OK, STATUS_REFUSED)}))
    return pd.concat(frames, ignore_index=True)


def save_table(frame: pd.DataFrame, path: str | Path, spec: TableSpec | None = None,
               metadata: dict[bytes, bytes] | None = None) -> None:
    """Parquet, with the spec stored in the file metadata so a table knows its grid (and any other
    ``metadata``: an on-demand slab's key, :mod:`dpscaling.accounting.on_demand`)."""
    import pyarrow as pa

    table = pa.Table.from_pandas(frame.reset_index(drop=True), preserve_index=False)
    if spec is not None or metadata:
        stored = dict(table.schema.metadata or {}) | dict(metadata or {})
        if spec is not None:
            stored[_SPEC_METADATA_KEY] = json.dumps(spec.to_mapping()).encode()
        table = table.replace_schema_metadata(stored)
    # Atomic, with page checksums and a content digest: a damaged chunk is refused by name on read.
    write_parquet_atomic(table, path)


def read_frame(path: str | Path) -> tuple[pd.DataFrame, TableSpec | None]:
    """A chunk or table file and its spec; a truncated, damaged or altered file is a UserError naming it."""
    table = read_parquet_verified(path, "delete it and rerun snakemake to recompute it")
    raw = (table.schema.metadata or {}).get(_SPEC_METADATA_KEY)
    spec = TableSpec.from_mapping(json.loads(raw)) if raw else None
    return table.to_pandas(), spec


def merge_chunks(paths: Iterable[str | Path], spec: TableSpec | None = None) -> pd.DataFrame:
    """Concatenate chunk files into one complete, sorted table; fails on gaps or duplicates.

    Completeness is checked against ``spec`` (default: the spec stored in the chunk files).
    """
    parts = [read_frame(p) for p in paths]
    if not parts:
        raise UserError("accounting: no chunk files to merge")
    stored = {part_spec for _, part_spec in parts}
    if spec is None and len(stored) == 1:
        spec = stored.pop()
    elif spec is None and len(stored) > 1:
        raise UserError("accounting chunks were computed with different table specs")
    frame = pd.concat([part for part, _ in parts], ignore_index=True)
    frame = frame.sort_values(["sampling_probability", "steps", "epsilon"], ignore_index=True)
    key = ["epsilon", "steps", "sampling_probability"]
    if frame.duplicated(key).any():
        raise UserError("accounting chunks overlap: duplicate (epsilon, steps, q) rows")
    expected = frame["epsilon"].nunique() * frame["steps"].nunique() * frame["sampling_probability"].nunique()
    if spec is not None:
        missing = set(spec.sampling_probabilities()) - set(frame["sampling_probability"])
        if missing:
            raise UserError(f"accounting chunks incomplete: {len(missing)} sampling probabilities missing, "
                            f"e.g. q={min(missing):g}")
        expected = spec.size()
    if len(frame) != expected:
        raise UserError(f"accounting chunks incomplete: {len(frame)} rows, full grid has {expected}")
    return frame


def _grid_array(frame: pd.DataFrame) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    eps = np.sort(frame["epsilon"].unique())
    steps = np.sort(frame["steps"].unique())
    qs = np.sort(frame["sampling_probability"].unique())
    cube = np.full((len(eps), len(steps), len(qs)), np.nan)
    i = np.searchsorted(eps, frame["epsilon"].to_numpy())
    j = np.searchsorted(steps, frame["steps"].to_numpy())
    k = np.searchsorted(qs, frame["sampling_probability"].to_numpy())
    cube[i, j, k] = frame["sigma"].to_numpy(dtype=float)
    return eps, steps.astype(float), qs, cube


class SigmaTable:
    """Vectorised σ(ε, T, q) lookups: Poisson by interpolation, deterministic exactly.

    Poisson σ is interpolated on log σ over (log ε, log T, log q), ``method``
    "cubic" (default, at fixed σ: :mod:`dpscaling.accounting.interpolation`) or
    "linear" (the authors').
    Out-of-grid queries and cells the table refused — including queries whose
    cubic stencil touches a refused cell — raise UserError / AccountingRefused;
    ``on_missing="nan"`` returns NaN for them instead (the caller then owns
    dropping them, as the authors' analysis drops out-of-range queries).
    """

    def __init__(self, frame: pd.DataFrame, delta: float | None = None, method: str = "cubic", bands: int = 1,
                 examples_per_user: int = 1):
        deltas = frame["delta"].unique()
        if len(deltas) != 1:
            raise UserError(f"accounting table mixes several delta values: {deltas}")
        if method not in interpolation.STENCIL_SIZES:
            raise UserError(f"interpolation method must be one of {', '.join(interpolation.STENCIL_SIZES)}, "
                            f"got {method!r}")
        self.delta = float(deltas[0]) if delta is None else float(delta)
        self.epsilons, self.steps, self.sampling_probabilities, cube = _grid_array(frame)
        if np.isnan(cube).all():
            raise UserError("accounting table has no usable cells")
        self.frame, self.method, self.bands = frame, method, int(bands)
        self.examples_per_user = int(examples_per_user)  # ELS's k (> 1: Poisson only, no fixed batches)
        self._log_axes = (np.log(self.epsilons), np.log(self.steps), np.log(self.sampling_probabilities))
        self._log_cube = np.log(cube)
        self._columns = interpolation.Columns(self._log_cube, self._log_axes[0]) if method == "cubic" else None

    @classmethod
    def load(cls, path: str | Path) -> SigmaTable:
        frame, spec = read_frame(path)
        return cls(frame, bands=1 if spec is None else spec.bands,
                   examples_per_user=1 if spec is None else spec.examples_per_user)

    def _check_range(self, values: np.ndarray, axis: np.ndarray, name: str) -> None:
        low, high = axis[0] * (1 - 1e-12), axis[-1] * (1 + 1e-12)
        bad = (values < low) | (values > high) | ~np.isfinite(values)
        if bad.any():
            example = values[bad][0]
            raise UserError(f"{name}={example:g} outside the accounting table's range "
                            f"[{axis[0]:g}, {axis[-1]:g}]; extend the table spec")

    def _interpolated(self, epsilon, steps, q, on_missing: str):
        """(ε, T, q, Poisson σ with NaN where refused, reason code per query; see _REASONS)."""
        eps, t, q = np.broadcast_arrays(np.asarray(epsilon, float), np.asarray(steps, float),
                                        np.asarray(q, float))
        if on_missing == "raise":
            self._check_range(eps, self.epsilons, "epsilon")
            self._check_range(t, self.steps, "steps")
            self._check_range(q, self.sampling_probabilities, "sampling probability")
        points = np.stack([np.log(np.clip(eps, 1e-300, None)), np.log(np.clip(t, 1e-300, None)),
                           np.log(np.clip(q, 1e-300, None))], axis=-1)
        # Clamp float round-off at the grid edges (e.g. q = B/N = 1.0000000000000002).
        for axis_index, axis in enumerate(self._log_axes):
            near = np.abs(points[..., axis_index] - np.clip(points[..., axis_index], axis[0], axis[-1])) < 1e-9
            points[..., axis_index] = np.where(near, np.clip(points[..., axis_index], axis[0], axis[-1]),
                                               points[..., axis_index])
        flat = points.reshape(-1, 3)
        inside = np.all([(flat[:, n] >= axis[0]) & (flat[:, n] <= axis[-1])
                         for n, axis in enumerate(self._log_axes)], axis=0)
        log_sigma = np.full(len(flat), np.nan)
        log_sigma[inside] = interpolation.interpolate(self._log_cube, self._log_axes, flat[inside], self.method,
                                                      self._columns)
        reason = np.where(np.isnan(log_sigma), _REFUSED_CELL, _OK)
        jump = np.zeros(len(flat), dtype=bool)
        jump[inside] = interpolation.across_participation_jump(self._log_axes, flat[inside], self.delta)
        log_sigma[jump], reason[jump] = np.nan, _JUMP
        return eps, t, q, np.exp(log_sigma).reshape(eps.shape), reason.reshape(eps.shape)

    @staticmethod
    def _refuse(eps, t, q, sigma, reason, on_missing: str) -> np.ndarray:
        if on_missing == "raise" and np.isnan(sigma).any():
            where = np.flatnonzero(np.isnan(sigma.ravel()))[0]
            raise AccountingRefused(
                f"no tight Poisson sigma at epsilon={eps.ravel()[where]:g}, steps={t.ravel()[where]:g}, "
                f"q={q.ravel()[where]:g}: {_REASONS[reason.ravel()[where]]}; use on_missing='nan' to drop "
                "such queries")
        return sigma

    def poisson(self, epsilon, steps, q, on_missing: str = "raise") -> np.ndarray:
        eps, t, q, sigma, reason = self._interpolated(epsilon, steps, q, on_missing)
        near_steps = interpolation.near_participation_steps(eps, q * t, sigma, self.deterministic(eps, t, q))
        sigma, reason = np.where(near_steps, np.nan, sigma), np.where(near_steps, _NEAR_STEPS, reason)
        return self._refuse(eps, t, q, sigma, reason, on_missing)

    def deterministic(self, epsilon, steps, q) -> np.ndarray:
        """The paper's rule's fixed-batch σ, computed exactly at the query, not interpolated
        (:func:`dpscaling.accounting.pricing.paper_fixed_batch_sigma`: DP-SGD's k = ⌈qT⌉; a BandMF table's cyclic
        k, NaN where ⌊1/q⌋ < b; NaN everywhere for ELS's table)."""
        from dpscaling.accounting.pricing import paper_fixed_batch_sigma

        return paper_fixed_batch_sigma(epsilon, self.delta, q, steps, self.bands, self.examples_per_user)

    def sigma(self, epsilon, steps, q, sampling: str = "min", on_missing: str = "raise") -> np.ndarray:
        """σ on the sum; ``sampling`` ∈ poisson | deterministic | min (the paper's rule)."""
        if sampling not in SAMPLINGS:
            raise UserError(f"sampling must be one of {', '.join(SAMPLINGS)}, got {sampling!r}")
        if on_missing not in ("raise", "nan"):
            raise UserError(f"on_missing must be raise or nan, got {on_missing!r}")
        if sampling == DETERMINISTIC_BRANCH:
            return self.deterministic(epsilon, steps, q)
        if sampling == POISSON_BRANCH:
            return self.poisson(epsilon, steps, q, on_missing)
        # Where the Poisson branch alone is refused for near-steps it exceeds the
        # deterministic σ by ≥ 10% (more than its error), so the min rule is exact there.
        eps, t, q, poisson, reason = self._interpolated(epsilon, steps, q, on_missing)
        fixed = self.deterministic(eps, t, q)  # NaN only where no BandMF run has fixed batches
        lower = np.where(np.isnan(fixed), poisson, np.minimum(poisson, fixed))
        return self._refuse(eps, t, q, lower, reason, on_missing)

    def noise_batch_ratio(self, epsilon, users, batch, steps, sampling: str = "min",
                          on_missing: str = "raise") -> np.ndarray:
        """σ̄ = σ/B with q = B/N."""
        batch = np.asarray(batch, float)
        return self.sigma(epsilon, steps, batch / np.asarray(users, float), sampling, on_missing) / batch


def chunk_by_index(spec: TableSpec, index: int) -> Chunk:
    chunks = plan_table(spec)
    if not 0 <= index < len(chunks):
        raise UserError(f"chunk index must be in [0, {len(chunks) - 1}], got {index}")
    return chunks[index]


def load_table(path: str | Path) -> SigmaTable:
    return SigmaTable.load(path)

