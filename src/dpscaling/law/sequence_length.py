"""The law across sequence lengths: S as a fourth decision (not in the paper: its limitations section,
"Sequence Length", names it "yet another important knob"; the paper fixes S = 512).

Documented in docs/fit.md, "Sequence length".

**One law per measured length.** Each length S_i has its own fitted surface L_i(M, T, σ̄) (paper §3.3,
in whichever mode the laws were fitted). Its loss is the mean per-token cross entropy of sequences of
that length: each token predicted from the context its own length gives it. Comparing lengths by that
number assumes the model is used at the length it was trained at.

**Between measured lengths** the loss is interpolated linearly in log S at the same (M, T, σ̄):
L(S) = (1 − w)·L_i + w·L_{i+1}, w = ln(S/S_i) / ln(S_{i+1}/S_i). Outside [S_min, S_max] the law does not
answer: :class:`LawAcrossLengths` refuses, naming the measured range.

**Compute and privacy units.** Compute is C = 6·M·B·S·T (paper appendix, "FLOPs estimation"); a shorter
S buys a larger B or T at the same C. What a privacy unit is decides the data budget at each S
(:func:`privacy_units`):

- ``sequence``: one training sequence is the unit. A data budget of D tokens holds N = ⌊D / S⌋ units, so a
  shorter S means more units, a smaller sampling rate q = B/N and less noise for the same ε;
- ``user``: N users whatever S, each contributing one training sequence of length S (the paper's reading,
  appendix "Data budget and epochs": a user has data enough for any S). The unit a run protects is then
  still one sequence; a user of several sequences is user-level DP proper, which no run trains yet.

:func:`compute_optimal_across_lengths` answers a (C, ε, data budget) query with the best (M, S, B, T)
over candidate lengths (every measured length and ``lengths_per_octave`` log-spaced ones between),
or at one given S.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import pandas as pd

from dpscaling.core.errors import UserError
from dpscaling.law.bootstrap import (
    ANSWERING, NO_REPEATS, QUANTILES, REPLICATE, band, load_replicates)
from dpscaling.law.columns import (
    COMPUTE, CROSS_ENTROPY, DATA_BUDGET, ITERATIONS, MODEL_SIZE, NOISE_BATCH_RATIO, PRIVACY_BUDGET, REASON)
from dpscaling.law.interpolation import LossFunction, reason_counts
from dpscaling.law.noise import SigmaFunction
from dpscaling.law.queries import (
    DEFAULT_TOLERANCE, ComputeOptimal, compute_optimal, constant_compute_configurations, evaluate_configurations,
    model_size_grid)

if TYPE_CHECKING:
    from dpscaling.law.artifact import Law

PRIVACY_UNITS = ("sequence", "user")
SEQ_LEN = "Sequence Length"
DEFAULT_LENGTHS_PER_OCTAVE = 4


def privacy_units(unit: str, seq_len: float, tokens: float | None = None, users: float | None = None) -> float:
    """The data budget N in privacy units at sequence length ``seq_len``: ⌊tokens / S⌋ sequences under
    the ``sequence`` unit, ``users`` under the ``user`` unit. Refuses a missing or mismatched budget."""
    if unit not in PRIVACY_UNITS:
        raise UserError(f"privacy_unit: must be one of {PRIVACY_UNITS}, got {unit!r}")
    if not seq_len >= 1:
        raise UserError(f"sequence length must be >= 1, got {seq_len:g}")
    if unit == "sequence":
        if tokens is None or users is not None:
            raise UserError("privacy_unit sequence: give the data budget in tokens (--tokens), not users; "
                            "N = tokens / S sequences at each length S")
        if not tokens >= seq_len:
            raise UserError(f"--tokens: {tokens:g} tokens hold no sequence of length {seq_len:g}")
        return float(np.floor(tokens / seq_len))
    if users is None or tokens is not None:
        raise UserError("privacy_unit user: give the data budget in users (--users), not tokens; "
                        "N users whatever the sequence length")
    if not users >= 1:
        raise UserError(f"--users must be >= 1, got {users:g}")
    return float(users)


@dataclass(frozen=True)
class BlendedLoss:
    """The loss at a length between two measured ones: linear in log S between their laws."""

    lower: LossFunction
    upper: LossFunction
    weight: float  # w = ln(S / S_lower) / ln(S_upper / S_lower)

    def evaluate(self, model_size, iterations, noise_batch_ratio) -> tuple[np.ndarray, np.ndarray]:
        """(loss, reason): NaN with the first law's reason where either law cannot answer."""
        low, low_reasons = self.lower.evaluate(model_size, iterations, noise_batch_ratio)
        high, high_reasons = self.upper.evaluate(model_size, iterations, noise_batch_ratio)
        reasons = np.where(low_reasons != "", low_reasons, high_reasons)
        return (1 - self.weight) * low + self.weight * high, reasons

    def __call__(self, model_size, iterations, noise_batch_ratio) -> np.ndarray:
        low, high = (law(model_size, iterations, noise_batch_ratio) for law in (self.lower, self.upper))
        return (1 - self.weight) * low + self.weight * high


@dataclass(frozen=True)
class LawAcrossLengths:
    """Laws fitted at measured sequence lengths: their losses, iteration bounds and model-size ranges."""

    losses: Mapping[int, LossFunction]
    iteration_bounds: Mapping[int, tuple[float, float]]
    model_size_ranges: Mapping[int, tuple[float, float]]

    def __post_init__(self) -> None:
        if not self.losses:
            raise UserError("the law across sequence lengths has no length")
        if set(self.losses) != set(self.iteration_bounds) or set(self.losses) != set(self.model_size_ranges):
            raise UserError("the law across sequence lengths: every length needs its loss, iteration bounds "
                            "and model-size range")

    @property
    def lengths(self) -> list[int]:
        return sorted(self.losses)

    def _neighbours(self, seq_len: float) -> tuple[int, int]:
        lengths = self.lengths
        if not lengths[0] <= seq_len <= lengths[-1]:
            raise UserError(f"sequence length {seq_len:g} is outside the measured range [{lengths[0]}, "
                            f"{lengths[-1]}] (measured: {lengths}); the law does not extrapolate in S")
        upper = int(np.searchsorted(lengths, seq_len, side="left"))
        if lengths[upper] == seq_len:
            return lengths[upper], lengths[upper]
        return lengths[upper - 1], lengths[upper]

    def loss_at(self, seq_len: float) -> LossFunction | BlendedLoss:
        """L(·, ·, ·) at length S: a measured length's own law, or the log-S blend of its neighbours."""
        lower, upper = self._neighbours(seq_len)
        if lower == upper:
            return self.losses[lower]
        weight = float(np.log(seq_len / lower) / np.log(upper / lower))
        return BlendedLoss(self.losses[lower], self.losses[upper], weight)

    def bounds_at(self, seq_len: float) -> tuple[tuple[float, float], tuple[float, float]]:
        """(iteration bounds, model-size range) at S: the intersection of its neighbours'."""
        lower, upper = self._neighbours(seq_len)
        (t0, t1), (u0, u1) = self.iteration_bounds[lower], self.iteration_bounds[upper]
        (m0, m1), (n0, n1) = self.model_size_ranges[lower], self.model_size_ranges[upper]
        return (max(t0, u0), min(t1, u1)), (max(m0, n0), min(m1, n1))


def candidate_lengths(lengths: Sequence[int], per_octave: int = DEFAULT_LENGTHS_PER_OCTAVE) -> np.ndarray:
    """Every measured length and ``per_octave`` log-spaced whole lengths per octave between them."""
    lengths = sorted(int(s) for s in lengths)
    if per_octave < 1:
        raise UserError(f"lengths per octave must be >= 1, got {per_octave}")
    octaves = np.log2(lengths[-1] / lengths[0])
    between = np.exp2(np.linspace(np.log2(lengths[0]), np.log2(lengths[-1]), int(np.ceil(octaves * per_octave)) + 1))
    return np.unique(np.concatenate([lengths, np.round(between)])).astype(int)


@dataclass
class LengthAnswer:
    """The compute-optimal (M, S, B, T) of a query, and every candidate length's own optimum."""

    seq_len: int
    answer: ComputeOptimal
    per_length: pd.DataFrame
    privacy_unit: str
    unanswered_lengths: dict[int, str] = field(default_factory=dict)


def compute_optimal_across_lengths(compute: float, epsilon: float, law: LawAcrossLengths, sigma: SigmaFunction,
                                   privacy_unit: str, *, tokens: float | None = None, users: float | None = None,
                                   seq_len: float | None = None, model_size_count: int = 100,
                                   lengths_per_octave: int = DEFAULT_LENGTHS_PER_OCTAVE,
                                   tolerance: float = DEFAULT_TOLERANCE) -> LengthAnswer:
    """The best configuration over sequence lengths (or at ``seq_len``): at each candidate S the data
    budget in units (:func:`privacy_units`), then :func:`dpscaling.law.queries.compute_optimal` with the
    loss at S and C = 6·M·B·S·T; the lowest loss wins. Lengths the law cannot answer are listed, not
    dropped silently; none answering is a UserError."""
    lengths = [seq_len] if seq_len is not None else candidate_lengths(law.lengths, lengths_per_octave)
    answers: dict[int, ComputeOptimal] = {}
    unanswered: dict[int, str] = {}
    rows = []
    for length in lengths:
        units = privacy_units(privacy_unit, float(length), tokens, users)
        iteration_bounds, (smallest, largest) = law.bounds_at(float(length))
        try:
            answer = compute_optimal(compute, epsilon, units, law.loss_at(float(length)), sigma, float(length),
                                     model_size_grid(smallest, largest, model_size_count), iteration_bounds,
                                     tolerance)
        except UserError as error:
            unanswered[int(length)] = str(error)
            continue
        answers[int(length)] = answer
        rows.append({SEQ_LEN: int(length), DATA_BUDGET: units, **answer.optimum.drop(DATA_BUDGET).to_dict()})
    if not answers:
        reasons = "; ".join(f"S={length}: {reason}" for length, reason in unanswered.items())
        raise UserError(f"no sequence length answers compute {compute:.3g}, epsilon {epsilon:g} ({reasons})")
    per_length = pd.DataFrame(rows).sort_values(SEQ_LEN).reset_index(drop=True)
    best = int(per_length.loc[per_length[CROSS_ENTROPY].idxmin(), SEQ_LEN])
    return LengthAnswer(best, answers[best], per_length, privacy_unit, unanswered)


# ------------------------------------------------------------------------------ the trade-off over compute

PRIVACY_UNIT = "Privacy Unit"
LENGTHS_ANSWERING = "Lengths Answering"  # candidate lengths with an answer at the budget
# Every candidate length answered the budget: its optimum over S is a choice, not forced by the others
# falling outside the law's range (too many or too few iterations at that length).
ALL_LENGTHS_ANSWERED = "All Lengths Answered"


@dataclass(frozen=True)
class DataBudget:
    """A data budget and what one privacy unit is (:func:`privacy_units`): ``tokens`` under the ``sequence``
    unit, ``users`` under the ``user`` unit."""

    privacy_unit: str
    tokens: float | None = None
    users: float | None = None

    def __post_init__(self) -> None:
        privacy_units(self.privacy_unit, 1.0, self.tokens, self.users)  # the unit and its budget agree

    def units(self, seq_len: float) -> float:
        return privacy_units(self.privacy_unit, seq_len, self.tokens, self.users)

    def describe(self) -> str:
        if self.privacy_unit == "sequence":
            return f"privacy unit: one sequence; N = {self.tokens:.3g} tokens / S sequences"
        return f"privacy unit: one user; N = {self.users:.3g} users at every S"


def configurations_across_lengths(law: LawAcrossLengths, sigma: SigmaFunction, budgets: np.ndarray, epsilon: float,
                      data: DataBudget, batch_sizes: np.ndarray, *, lengths: Sequence[float] | None = None,
                      model_size_count: int = 100) -> pd.DataFrame:
    """Every constant-compute configuration (C, M, S, B, T) of ``budgets`` at each candidate length (default:
    :func:`candidate_lengths`), with its σ for (ε, T, q = B/N_S), σ̄ and the loss at S
    (:func:`dpscaling.law.queries.evaluate_configurations`); a ``Sequence Length`` column says which S."""
    frames = []
    for length in (candidate_lengths(law.lengths) if lengths is None else lengths):
        iteration_bounds, (smallest, largest) = law.bounds_at(float(length))
        configs = constant_compute_configurations(budgets, model_size_grid(smallest, largest, model_size_count),
                                                  float(length), iteration_bounds, batch_sizes)
        configs = configs.assign(**{PRIVACY_BUDGET: epsilon, DATA_BUDGET: data.units(float(length))})
        evaluated = evaluate_configurations(configs, law.loss_at(float(length)), sigma, float(length))
        frames.append(evaluated.assign(**{SEQ_LEN: int(length)}))
    return pd.concat(frames, ignore_index=True) if frames else pd.DataFrame()


def replicate_optima(candidates: pd.DataFrame, replicates: Sequence[LawAcrossLengths]) -> pd.DataFrame:
    """Per replicate and compute budget: the loss and length of the replicate law's optimum over ``candidates``
    (σ̄ does not depend on the law, so it is the candidates' own; only candidates the law itself answers are
    searched: the replicates share its grid)."""
    answered = candidates.dropna(subset=[CROSS_ENTROPY])
    optima = []
    for index, replicate in enumerate(replicates):
        losses = np.full(len(answered), np.nan)
        for length, rows in answered.groupby(SEQ_LEN).indices.items():
            part = answered.iloc[rows]
            losses[rows] = replicate.loss_at(float(length))(*(part[c].to_numpy(float) for c in
                                                              (MODEL_SIZE, ITERATIONS, NOISE_BATCH_RATIO)))
        frame = answered.assign(**{CROSS_ENTROPY: losses}).dropna(subset=[CROSS_ENTROPY])
        if frame.empty:
            continue
        best = frame.loc[frame.groupby(COMPUTE)[CROSS_ENTROPY].idxmin(), [COMPUTE, CROSS_ENTROPY, SEQ_LEN]]
        optima.append(best.assign(**{REPLICATE: index}))
    return pd.concat(optima, ignore_index=True) if optima else pd.DataFrame(columns=[COMPUTE, CROSS_ENTROPY,
                                                                                      SEQ_LEN, REPLICATE])


def length_tradeoff(law: LawAcrossLengths, sigma: SigmaFunction, budgets: np.ndarray, epsilon: float,
                    data: DataBudget, batch_sizes: np.ndarray, replicates: Sequence[LawAcrossLengths] = (), *,
                    lengths: Sequence[float] | None = None, model_size_count: int = 100) -> pd.DataFrame:
    """Per compute budget: the compute-optimal (M, S, B, T) over lengths and its loss, how many candidate
    lengths answered the budget (``All Lengths Answered``: every one did, so the optimum is a choice and not
    forced by the law's range), and with ``replicates`` the 5% / 95% band of the optimum's loss and length
    over them (the seed-only interval, :mod:`dpscaling.law.bootstrap`). Budgets no length answers are absent;
    ``attrs`` counts them and the unanswered candidates by reason."""
    lengths = candidate_lengths(law.lengths) if lengths is None else lengths
    candidates = configurations_across_lengths(law, sigma, budgets, epsilon, data, batch_sizes, lengths=lengths,
                                   model_size_count=model_size_count)
    unanswered = reason_counts(candidates[REASON].to_numpy()) if len(candidates) else {}
    answered = candidates.dropna(subset=[CROSS_ENTROPY]) if len(candidates) else candidates
    if answered.empty:
        best = pd.DataFrame(columns=[COMPUTE, SEQ_LEN, CROSS_ENTROPY])
    else:
        best = answered.loc[answered.groupby(COMPUTE)[CROSS_ENTROPY].idxmin()].sort_values(COMPUTE)
        lengths_answering = answered.groupby(COMPUTE)[SEQ_LEN].nunique().rename(LENGTHS_ANSWERING)
        best = best.join(lengths_answering, on=COMPUTE).reset_index(drop=True)
        best[ALL_LENGTHS_ANSWERED] = best[LENGTHS_ANSWERING] == len(lengths)
        if replicates:
            optima = replicate_optima(answered, replicates)
            grouped = optima.groupby(COMPUTE)[[CROSS_ENTROPY, SEQ_LEN]]
            low, high = grouped.quantile(QUANTILES[0]), grouped.quantile(QUANTILES[1])
            bands = pd.DataFrame({
                band(CROSS_ENTROPY)[0]: low[CROSS_ENTROPY], band(CROSS_ENTROPY)[1]: high[CROSS_ENTROPY],
                band(SEQ_LEN)[0]: low[SEQ_LEN], band(SEQ_LEN)[1]: high[SEQ_LEN],
                ANSWERING: optima.groupby(COMPUTE)[REPLICATE].nunique()})
            best = best.join(bands, on=COMPUTE)
    best = best.assign(**{PRIVACY_UNIT: data.privacy_unit})
    best.attrs["unanswered"] = unanswered
    best.attrs["budgets_without_answer"] = int(len(np.atleast_1d(budgets)) - best[COMPUTE].nunique())
    return best


def replicate_laws(laws: Mapping[int, Law], replicates: Mapping[int, str | os.PathLike[str]]
                   ) -> tuple[list[LawAcrossLengths], str]:
    """The bootstrap replicates of a law across lengths: replicate r of every length's law (each refitted on
    its own length's curves with its own seeds' residuals, :mod:`dpscaling.law.bootstrap`, read from that
    length's file in ``replicates``), paired by index, with the main laws' ranges. ([], why) when a length
    has no replicates (no file)."""
    per_length = {}
    for length, law in laws.items():
        found = load_replicates(replicates[length], law.settings) if length in replicates else None
        if found is None:
            return [], f"{NO_REPEATS} at S = {length} (no bootstrap replicates next to its law)"
        per_length[length] = found.losses
    count = min(len(losses) for losses in per_length.values())
    bounds = {s: law.iteration_bounds() for s, law in laws.items()}
    ranges = {s: law.model_size_range() for s, law in laws.items()}
    return [LawAcrossLengths({s: losses[r] for s, losses in per_length.items()}, bounds, ranges)
            for r in range(count)], f"90% band over {count} bootstrap replicates of every length's law"


# ------------------------------------------------------------------------------------------- on disk

LENGTHS_FILE = "lengths.json"
FORMAT_VERSION = 1


def write_lengths(directory: str | os.PathLike[str], laws: Mapping[int, str | os.PathLike[str]]) -> Path:
    """``directory``/lengths.json: which law directory (as a path relative to ``directory``, so the run's
    results can move) holds each measured length's law. That directory is then a law across lengths for
    ``dpscaling query --law``."""
    from dpscaling.core.io import write_json_atomic

    directory = Path(directory)
    entries = {str(int(length)): os.path.relpath(Path(path).resolve(), directory.resolve())
               for length, path in sorted(laws.items())}
    target = directory / LENGTHS_FILE
    write_json_atomic(target, {"format_version": FORMAT_VERSION, "lengths": entries})
    return target


def is_law_across_lengths(directory: str | os.PathLike[str]) -> bool:
    return (Path(directory) / LENGTHS_FILE).is_file()


def law_directories(directory: str | os.PathLike[str]) -> dict[int, Path]:
    """Each measured length's law directory, as ``directory``/lengths.json lists it."""
    directory = Path(directory)
    document = json.loads((directory / LENGTHS_FILE).read_text(encoding="utf-8"))
    if document.get("format_version") != FORMAT_VERSION or not document.get("lengths"):
        raise UserError(f"{directory / LENGTHS_FILE}: not a list of laws across sequence lengths")
    return {int(length): directory / path for length, path in document["lengths"].items()}


def load_law_across_lengths(directory: str | os.PathLike[str]) -> tuple[LawAcrossLengths, dict[int, Law]]:
    """The laws listed in ``directory``/lengths.json, checked: each was fitted at its listed length, and
    all in one mode (paper or reference-compatible)."""
    from dpscaling.law.artifact import read_law

    directory = Path(directory)
    laws = {length: read_law(path) for length, path in law_directories(directory).items()}
    for length, law in laws.items():
        if law.seq_len != length:
            raise UserError(f"{directory / LENGTHS_FILE}: the law listed for S = {length} was fitted at "
                            f"S = {law.seq_len}")
    if len({law.settings.reference_compatible for law in laws.values()}) > 1:
        raise UserError(f"{directory / LENGTHS_FILE}: the laws mix paper and reference-compatible mode")
    across = LawAcrossLengths({s: law.loss for s, law in laws.items()},
                              {s: law.iteration_bounds() for s, law in laws.items()},
                              {s: law.model_size_range() for s, law in laws.items()})
    return across, laws
