"""σ(ε, T, q) at any δ, built when a query asks for it and cached on disk (docs/query.md, "Which δ, which σ").

A law bundle ships the run's σ table, which answers at that table's δ. A query at another δ, or a law
fitted without any accounting table, needs σ for the thousands of candidates of one compute-optimal
search (paper §3.4): too many for one calibration each (0.05–1 s), yet few distinct in (ε, q). So for
the ε of a query this builds a small table exactly as the accounting stage builds its own
(:func:`dpscaling.accounting.table.compute_chunk`: one σ walk per (T, q) with dp-accounting's PLD,
add/remove adjacency): ε from an octave below the smallest queried to an octave above the largest at
2^(1/4) steps, T at factor-2 steps over the
queried range, q at the powers of two that bracket the queried sampling rates, each range one node wider
on both sides for the cubic stencil; it is then read as the stage's table is
(:class:`dpscaling.accounting.table.SigmaTable`, cubic at fixed σ, within 0.5% of direct calibration,
NaN with a reason where the accountant refused). Each (grid, q) is one file under the cache directory
(``$DPSCALING_CACHE``, else ``$XDG_CACHE_HOME/dpscaling``, else ``~/.cache/dpscaling``; the workflow keeps its
run's under ``results/<run>/accounting/sigma_cache``), so the next query at that ε and δ costs nothing. A slab
costs 0.5–3 s on one core (more for tiny q and long T).

A slab is served only for exactly what computed it. Its key (:func:`slab_key`) is the table's settings, its
sampling rate, the source of every module that computes its values (:data:`SLAB_CODE`) and the versions of the
libraries they call (:data:`SLAB_LIBRARIES`): a changed constant, discretisation or accountant gets new slabs.
The key is stored in the slab, and a slab whose recorded key differs from the one asked for (a file copied or
planted under another key, a damaged one) is rebuilt. Builders of one slab take its lock (``flock`` on a
sibling ``.lock`` file) and look again once they hold it, so two processes asking for the same slab both get
it, computed once.
"""

from __future__ import annotations

import fcntl
import functools
import hashlib
import json
import math
import multiprocessing
import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pandas as pd

from dpscaling.accounting.table import Chunk, SigmaTable, compute_chunk, save_table
from dpscaling.accounting.table_spec import TableSpec
from dpscaling.accounting.validation import check_delta
from dpscaling.core.errors import UserError
from dpscaling.core.io import SIGMA_CACHE_ENV as CACHE_ENV
from dpscaling.core.io import sigma_cache_directory as cache_directory

EPSILON_PER_OCTAVE = 4
# Grid nodes beyond the queried range on each side (octaves): the cubic stencil needs a neighbour.
MARGIN_OCTAVES = 1
# The modules of dpscaling.accounting whose code computes a slab's σ (compute_chunk and what it calls): their
# source is part of every slab's key.
SLAB_CODE: tuple[str, ...] = ("calibration", "composition", "gaussian", "hockey_stick", "matched", "pld", "rdp",
                              "search", "sweep", "table", "table_spec", "user_level", "validation")
SLAB_LIBRARIES: tuple[str, ...] = ("dp-accounting", "numpy", "scipy")
SLAB_KEY_METADATA = b"dpscaling.accounting.slab_key"


def _octaves(low: float, high: float, ceiling: int | None = None) -> tuple[int, int]:
    """The powers of two that bracket [low, high], one more on each side (capped at 2^ceiling)."""
    first = math.floor(math.log2(low) + 1e-12) - MARGIN_OCTAVES
    last = math.ceil(math.log2(high) - 1e-12) + MARGIN_OCTAVES
    if ceiling is not None:
        last = min(last, ceiling)
    return first, max(last, first + 1)


@dataclass
class OnDemandSigma:
    """A :class:`dpscaling.law.noise.SigmaFunction` at ``delta``: σ under ``sampling`` (poisson,
    deterministic or min, the paper's rule) from per-ε tables built and cached as the module says.
    ``progress`` receives one line whenever slabs have to be computed."""

    delta: float
    sampling: str = "min"
    cache: Path | None = None
    progress: Callable[[str], None] | None = None
    bands: int = 1  # a mechanism's table (dpscaling.privacy.mechanisms): BandMF's events at b bands
    examples_per_user: int = 1  # ELS's table for a user of k sequences (dpscaling.accounting.user_level)
    # The step counts every table spans, whatever is queried (σ is NaN beyond them): a law's search range, so that
    # every query of that law at an ε shares one table (ELS's slabs cost seconds per σ); None: the queried ones
    steps_range: tuple[float, float] | None = None
    _tables: dict[tuple, SigmaTable] = field(default_factory=dict, repr=False)

    def __post_init__(self) -> None:
        self.delta = check_delta(self.delta)
        self.cache = Path(self.cache) if self.cache is not None else cache_directory()

    def __call__(self, epsilon, steps, q) -> np.ndarray:
        e, t, p = np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in (epsilon, steps, q)))
        sigma = np.full(e.shape, np.nan)
        valid = np.isfinite(e) & np.isfinite(t) & np.isfinite(p) & (e > 0) & (t >= 1) & (p > 0) & (p <= 1)
        if valid.any():  # one table for every ε of the call (a table's ε axis is nearly free)
            table = self.table_for(e[valid], t[valid], p[valid])
            sigma[valid] = table.sigma(e[valid], t[valid], p[valid], self.sampling, on_missing="nan")
        return sigma

    def spec_for(self, epsilon: np.ndarray, steps: np.ndarray, q: np.ndarray) -> TableSpec:
        """The table that answers these ε, steps and sampling rates (module docstring)."""
        e_low = math.floor(math.log2(float(np.min(epsilon))) * EPSILON_PER_OCTAVE) - EPSILON_PER_OCTAVE * MARGIN_OCTAVES
        e_high = math.ceil(math.log2(float(np.max(epsilon))) * EPSILON_PER_OCTAVE) + EPSILON_PER_OCTAVE * MARGIN_OCTAVES
        spanned = np.asarray(self.steps_range if self.steps_range is not None else np.ravel(steps), float)
        t_low, t_high = _octaves(max(float(np.min(spanned)), 1.0), max(float(np.max(spanned)), 2.0))
        q_low, _ = _octaves(float(np.min(q)), float(np.max(q)), ceiling=0)
        return TableSpec(epsilon_min=2.0 ** (e_low / EPSILON_PER_OCTAVE),
                         epsilon_max=2.0 ** (e_high / EPSILON_PER_OCTAVE), epsilon_per_octave=EPSILON_PER_OCTAVE,
                         steps_min=int(2 ** max(t_low, 0)), steps_max=int(2 ** max(t_high, 1)), steps_per_octave=1,
                         q_min_log2=min(q_low, -1), q_per_octave=1, delta=self.delta, bands=self.bands,
                         examples_per_user=self.examples_per_user)

    def table_for(self, epsilon: np.ndarray, steps: np.ndarray, q: np.ndarray) -> SigmaTable:
        spec = self.spec_for(np.atleast_1d(epsilon), steps, q)
        _, q_high = _octaves(float(np.min(q)), float(np.max(q)), ceiling=0)
        rates = [float(rate) for rate in spec.sampling_probabilities() if rate <= 2.0 ** q_high]
        key = (spec, tuple(rates))
        if key not in self._tables:
            self._tables[key] = SigmaTable(self._slabs(spec, rates), bands=self.bands,
                                           examples_per_user=self.examples_per_user)
        return self._tables[key]

    def _slab_path(self, spec: TableSpec, rate: float) -> Path:
        digest = hashlib.sha256(json.dumps(slab_key(spec, None), sort_keys=True).encode()).hexdigest()[:16]
        return self.cache / "sigma" / digest / f"q=2^{round(math.log2(rate))}.parquet"

    def _slabs(self, spec: TableSpec, rates: list[float]) -> pd.DataFrame:
        paths = {rate: self._slab_path(spec, rate) for rate in rates}
        frames = {rate: read_slab(path, slab_key(spec, rate)) for rate, path in paths.items()}
        missing = [rate for rate, frame in frames.items() if frame is None]
        if missing and self.progress is not None:
            self.progress(f"σ at δ = {self.delta:g} for ε in [{spec.epsilon_min:g}, {spec.epsilon_max:g}]: computing "
                          f"{len(missing)} of {len(rates)} sampling rates × {len(spec.steps())} step counts with "
                          f"dp-accounting (about a second each), cached in {paths[missing[0]].parent}")
        jobs = [(spec, index, rate, paths[rate]) for index, rate in enumerate(paths) if rate in missing]
        try:
            workers = _slab_workers(len(jobs))
            if workers > 1:  # the slabs are independent: one process per core
                with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
                    list(pool.map(build_slab, jobs))
            else:
                for job in jobs:
                    build_slab(job)
        except OSError as error:  # a read-only cache must not cost the answer
            raise UserError(f"cannot write the σ cache {self.cache} ({error}); set {CACHE_ENV} to a writable "
                            "directory") from error
        for rate in missing:
            frames[rate] = read_slab(paths[rate], slab_key(spec, rate))
            if frames[rate] is None:
                raise UserError(f"the σ cache {paths[rate]} does not hold the slab just built for it; set "
                                f"{CACHE_ENV} to a directory of its own")
        return pd.concat([frames[rate] for rate in rates], ignore_index=True)


@functools.cache
def code_fingerprint() -> dict[str, str]:
    """What a slab's values depend on besides its settings: a digest of :data:`SLAB_CODE`'s source, and the
    versions of :data:`SLAB_LIBRARIES`."""
    from importlib import import_module, metadata

    digest = hashlib.sha256()
    for name in SLAB_CODE:
        digest.update(name.encode() + b"\0" + Path(import_module(f"dpscaling.accounting.{name}").__file__).read_bytes())
    found = {"code_sha256": digest.hexdigest()}
    for library in SLAB_LIBRARIES:
        try:
            found[library] = metadata.version(library)
        except metadata.PackageNotFoundError:
            found[library] = "unknown"
    return found


def slab_key(spec: TableSpec, rate: float | None) -> dict[str, object]:
    """Everything a slab's σ depends on: the table's settings (the sampling-rate axis aside: a slab is one rate),
    its rate (None: the key of the slab's directory, shared by its rates) and :func:`code_fingerprint`."""
    grid = {name: value for name, value in spec.to_mapping().items() if name not in ("q_min_log2", "q_per_chunk")}
    key: dict[str, object] = {"grid": grid, **code_fingerprint()}
    if rate is not None:
        key["sampling_probability"] = float(rate)
    return key


def read_slab(path: Path, key: dict[str, object]) -> pd.DataFrame | None:
    """The slab at ``path`` if it is there, intact and recorded under exactly ``key``; else None (to build)."""
    from dpscaling.core.io import read_parquet_verified

    if not path.is_file():
        return None
    try:
        table = read_parquet_verified(path, "it is rebuilt")
    except UserError:  # damaged or altered: rebuilt under the lock
        return None
    recorded = (table.schema.metadata or {}).get(SLAB_KEY_METADATA)
    if recorded is None or json.loads(recorded) != json.loads(json.dumps(key)):
        return None
    return table.to_pandas()


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """Hold the slab's lock (an exclusive ``flock`` of ``<slab>.lock``), released however the holder ends."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a", encoding="utf-8") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _slab_workers(jobs: int) -> int:
    """Processes for ``jobs`` slabs: one per available core, forked (a spawned child would rerun a workflow
    script's ``__main__``); one, in this process, where fork is unavailable or JAX is loaded (its threads make a
    fork unsafe)."""
    if "fork" not in multiprocessing.get_all_start_methods() or "jax" in sys.modules:
        return 1
    return min(jobs, len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else 1)


def build_slab(job: tuple[TableSpec, int, float, Path]) -> None:
    """One σ slab (a sampling rate of the spec) computed and cached at its path with its key, unless another
    process built it while this one waited for the lock."""
    spec, index, rate, path = job
    key = slab_key(spec, rate)
    with _locked(path):
        if read_slab(path, key) is not None:
            return
        save_table(compute_chunk(spec, Chunk(index, (rate,))), path, spec,
                   metadata={SLAB_KEY_METADATA: json.dumps(key, sort_keys=True).encode()})
