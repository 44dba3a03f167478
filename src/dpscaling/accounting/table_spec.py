"""The accounting table's grid and settings (filled from config.yaml's ``accounting:`` block).

Paper §3.4 / the authors' analysis: σ(ε, T, q) is precomputed on a grid and
queried by linear interpolation of log σ in (log ε, log T, log q). Their grid
(ε 2^-7..2^7 by factors of 2, T 100..128000 by 100, q 2^-20..1 by 2) is up to
4.5% off between grid points and does not reach the ε the figures ask for
(up to 1e6). The defaults here: ε 2^-8..2^20 at 2^(1/4) steps (nearly free: one σ
walk serves every ε; an octave below the 2^-7 queried so that fixed-σ interpolation
near the knee has neighbouring columns), T and q at ~factor-2 steps (each (T, q)
pair costs a walk), queried by cubic interpolation at fixed σ
(:mod:`dpscaling.accounting.interpolation`), measured within 0.5% of direct
calibration off the grid (see README "Privacy accounting").

The grid's chunks (:func:`plan_table`: one Snakemake job each) live here, not in
:mod:`dpscaling.accounting.table`, so that planning them imports no accountant.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Any

import numpy as np

from dpscaling.config.schema import default as schema_default
from dpscaling.core.errors import UserError

if TYPE_CHECKING:  # the config's block, for the annotations only
    from dpscaling.config.analysis_blocks import AccountingBlock


def _table(key: str) -> Any:
    """The schema's default of ``accounting.table.<key>`` (``accounting.<key>`` for delta): declared once."""
    return schema_default(f"accounting.{key}" if key == "delta" else f"accounting.table.{key}")


@dataclass(frozen=True)
class TableSpec:
    """The σ table's grid and settings (their defaults, and why: the schema's ``accounting.table``)."""

    epsilon_min: float = _table("epsilon_min")
    epsilon_max: float = _table("epsilon_max")
    epsilon_per_octave: int = _table("epsilon_per_octave")
    steps_min: int = _table("steps_min")
    steps_max: int = _table("steps_max")
    steps_per_octave: int = _table("steps_per_octave")  # T grid evenly log-spaced, steps ≤ 2^(1/r), rounded
    q_min_log2: int = _table("q_min_log2")  # q from 2^q_min_log2 ...
    q_per_octave: int = _table("q_per_octave")  # ... to 1, step 2^(1/q_per_octave)
    delta: float = _table("delta")
    accountant: str = _table("accountant")  # "pld" (tight) or "rdp" (loose, explicit)
    sigma_per_octave: int = _table("sigma_per_octave")  # σ lattice of the sweep (not a table axis), refined locally
    discretisation_fraction: float = _table("discretisation_fraction")
    max_points: int = _table("max_points")  # single-step PLD bins before refusing a σ (cost of the corner)
    q_per_chunk: int = _table("q_per_chunk")  # q values per Snakemake job
    # A mechanism's table (dpscaling.privacy.mechanisms): amplified BandMF with b bands at (T, q) is Poisson DP-SGD at
    # (⌈T/b⌉, b·q) (jax-privacy's amplified_bandmf_event); b·q > 1 has no such run (σ NaN). 1 = DP-SGD.
    bands: int = 1
    # ELS's table (dpscaling.accounting.user_level): σ for a user of k sequences, each Poisson step a mixture of
    # Gaussians of sensitivity Binomial(k, q), at the run's mixture share of δ. 1 = one sequence (DP-SGD's).
    examples_per_user: int = 1

    def __post_init__(self) -> None:
        if not 0 < self.epsilon_min < self.epsilon_max:
            raise UserError("accounting: need 0 < epsilon_min < epsilon_max")
        if not 1 <= self.steps_min < self.steps_max:
            raise UserError("accounting: need 1 <= steps_min < steps_max")
        if self.q_min_log2 >= 0:
            raise UserError("accounting: q_min_log2 must be negative")
        if self.accountant not in ("pld", "rdp"):
            raise UserError(f"accounting: accountant must be pld or rdp, got {self.accountant!r}")
        for name in ("epsilon_per_octave", "steps_per_octave", "q_per_octave",
                     "sigma_per_octave", "q_per_chunk", "bands", "examples_per_user"):
            if int(getattr(self, name)) < 1:
                raise UserError(f"accounting: {name} must be a positive integer")
        if self.bands > 1 and self.examples_per_user > 1:
            raise UserError("accounting: ELS (examples_per_user > 1) is accounted for DP-SGD only, not BandMF's bands")

    @classmethod
    def from_mapping(cls, values: dict[str, Any]) -> TableSpec:
        known = {f.name for f in fields(cls)}
        unknown = set(values) - known
        if unknown:
            raise UserError(f"accounting: unknown table settings {sorted(unknown)}; known: {sorted(known)}")
        return cls(**values)

    def to_mapping(self) -> dict[str, Any]:
        """All settings; ``bands`` and ``examples_per_user`` only where not 1 (a DP-SGD table's params and metadata
        are as before them)."""
        values = asdict(self)
        for name in ("bands", "examples_per_user"):
            if values[name] == 1:
                del values[name]
        return values

    def epsilons(self) -> np.ndarray:
        r = self.epsilon_per_octave
        low = math.floor(math.log2(self.epsilon_min) * r + 1e-9)
        high = math.ceil(math.log2(self.epsilon_max) * r - 1e-9)
        return 2.0 ** (np.arange(low, high + 1) / r)

    def steps(self) -> np.ndarray:
        """Evenly log-spaced from steps_min to steps_max, steps of at most 2^(1/steps_per_octave)."""
        count = math.ceil(math.log2(self.steps_max / self.steps_min) * self.steps_per_octave - 1e-9)
        ratio = (self.steps_max / self.steps_min) ** (np.arange(count + 1) / count)
        values = np.round(self.steps_min * ratio).astype(np.int64)
        return np.unique(np.clip(values, self.steps_min, self.steps_max))

    def sampling_probabilities(self) -> np.ndarray:
        """Exact powers of two at integer octaves (the authors merge on q by float equality)."""
        r = self.q_per_octave
        return 2.0 ** (np.arange(self.q_min_log2 * r, 1) / r)

    def size(self) -> int:
        return len(self.epsilons()) * len(self.steps()) * len(self.sampling_probabilities())


@dataclass(frozen=True)
class Chunk:
    """One unit of work: all (ε, T) for a few sampling probabilities."""
    index: int
    sampling_probabilities: tuple[float, ...]


def plan_table(spec: TableSpec) -> list[Chunk]:
    """Consecutive runs of ``q_per_chunk`` sampling probabilities, smallest (slowest) first."""
    qs = spec.sampling_probabilities()
    size = spec.q_per_chunk
    return [Chunk(i, tuple(float(q) for q in qs[start:start + size]))
            for i, start in enumerate(range(0, len(qs), size))]


def table_spec_of(accounting: AccountingBlock) -> TableSpec:
    """The σ table the config's ``accounting`` block asks for (δ = ``accounting.delta``)."""
    return TableSpec.from_mapping({**accounting.table.to_mapping(), "delta": accounting.delta})
