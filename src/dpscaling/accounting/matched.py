"""Accounting matched to the mechanism a training run actually executed (docs/private-training.md).

The study's accounting (paper §3.1, "Decoupling Noise Calibration") prices hypothetical
Poisson batches after the fact. A run that claims a guarantee must instead be accounted
for the sampler it ran:

Each sampler's record (:mod:`dpscaling.privacy.samplers`) names its accountant:

* ``shuffle`` (:class:`dpscaling.train.data.BatchSampler`) → ``deterministic``: fixed
  batches without amplification; an example taking part in k steps is k compositions of a
  sensitivity-1 Gaussian with noise σ on the sum, i.e. one Gaussian with noise σ/√k
  (:mod:`dpscaling.accounting.gaussian`). k is the sampler's TRUE maximum participation
  ⌈T/⌊N/B⌋⌉, not ⌈q·T⌉ (which it exceeds when an epoch's remainder is dropped).
* ``poisson`` (:mod:`dpscaling.train.sampling`, truncated Poisson at L) →
  ``truncated_poisson``: jax-privacy's ``truncated_dpsgd_event`` (Chua et al. 2024,
  arXiv 2411.04205) composed by dp-accounting's PLD accountant, add/remove adjacency,
  with L chosen by its privacy price unless the run fixes it
  (:mod:`dpscaling.accounting.truncation`). A BandMF run's cyclic Poisson splits the data into b
  equal groups, which jax-privacy supports under zero-out adjacency only: its record says so
  (``adjacency``), and the PLD of its event is the same under either relation (a test checks it).
* ``cyclic`` → ``deterministic`` as ``shuffle``, its participations ⌊N/B⌋ apart (the
  sensitivity a correlated mechanism's strategy has at that separation).

``poisson`` (untruncated Poisson PLD, the study table's accountant) describes no sampler
a run executes here, so a run asking for it is refused, as is any other pairing of a
sampler with an accountant for a different mechanism.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from dpscaling.accounting import gaussian
from dpscaling.accounting.branches import ADD_REMOVE, ZERO_OUT
from dpscaling.accounting.validation import check_delta, check_epsilon
from dpscaling.core.errors import UserError
from dpscaling.privacy.mechanisms import DPSGD, mechanism_named
from dpscaling.privacy.samplers import SAMPLERS, Sampler, check_batch_fits, sampler_named

# The accountant that describes each sampler (its registry record), and what each accountant assumes.
MATCHED_ACCOUNTANT: dict[str, str] = {name: sampler.accountant for name, sampler in SAMPLERS.items()}
ACCOUNTANT_ASSUMES: dict[str, str] = {
    "deterministic": "fixed (shuffled) batches, each example in at most k steps, no amplification",
    "truncated_poisson": "truncated Poisson sampling (jax-privacy truncated_dpsgd_event, PLD)",
    "untruncated_poisson": "untruncated Poisson sampling (dp-accounting PLD), which no training run executes",
    "user_level_poisson": "truncated Poisson sampling of sequences, accounted for a user of up to k of them "
                          "(jax-privacy DpsgdTrainingUserLevelAccountant, PLD)",
}
ACCOUNTANTS: tuple[str, ...] = tuple(ACCOUNTANT_ASSUMES)


def matched_accountant(sampling: str, accountant: str | None = None, block: str = "train") -> str:
    """The accountant for ``sampling``; refuses an ``accountant`` that describes another mechanism.

    ``block`` names the keys in messages (``train`` for a TrainConfig, ``training`` in a config).
    """
    wanted = sampler_named(sampling, block).accountant
    if accountant is None or accountant == wanted:
        return wanted
    if accountant not in ACCOUNTANT_ASSUMES:
        raise UserError(f"{block}.accountant: must be one of {ACCOUNTANTS} or null, got {accountant!r}")
    raise UserError(
        f"{block}.accountant {accountant!r} assumes {ACCOUNTANT_ASSUMES[accountant]}, but "
        f"{block}.sampling {sampling!r} runs a different mechanism: the sampler and the accountant "
        f"disagree, so the run is refused before it starts (use accountant {wanted!r} or null)"
    )


@dataclass(frozen=True)
class RunPrivacy:
    """The guarantee of one run, with every parameter needed to recompute it."""

    sampler: str  # a name in dpscaling.privacy.samplers.SAMPLERS
    accountant: str  # "deterministic" | "truncated_poisson"
    epsilon: float  # inf when σ = 0
    delta: float
    sigma: float  # noise multiplier on the SUM of clipped gradients (sensitivity 1)
    noise_batch_ratio: float  # σ̄ = σ / expected batch size: the noise std on the mean
    sampling_probability: float  # q = B / N
    steps: int  # T
    dataset_size: int  # N, in sequences (the privacy unit)
    expected_batch_size: int  # B
    truncated_batch_size: int | None  # L (poisson)
    max_participations: int | None  # k (shuffle): the sampler's true maximum
    calibrated: bool  # σ solved for a target ε (else ε accounted for the configured σ̄)
    # poisson: what truncating at L costs (dpscaling.accounting.truncation)
    truncation_priced: bool | None = None  # L chosen by its privacy price (else the user's)
    truncation_probability: float | None = None  # P(batch > L) per step
    padding_share: float | None = None  # expected share of a step's L slots that are padding
    untruncated_epsilon: float | None = None  # ε of untruncated Poisson at the run's σ
    untruncated_sigma: float | None = None  # σ untruncated Poisson needs for the run's ε
    # The noise mechanism (dpscaling.privacy.mechanisms); a DP-SGD run's record leaves these out (as it had them not).
    mechanism: str = DPSGD.name
    bands: int = 1
    group_size: int | None = None  # poisson + BandMF: examples per cyclic group, N // b (N mod b never sampled)
    accounted_rounds: int | None = None  # poisson + BandMF: ⌈T/b⌉, the steps one group (one example) can join
    sensitivity: float | None = None  # shuffle + BandMF: L2 sensitivity of C over the k participations
    # The neighbouring relation of the guarantee: add/remove for Poisson DP-SGD; zero-out for fixed batches and
    # for BandMF's cyclic Poisson, whose equal split into b groups jax-privacy supports under zero-out only.
    adjacency: str = ADD_REMOVE
    # ELS (user_level_poisson): k, the most sequences of one user, and the δ its truncation spends (of δ)
    examples_per_user: int | None = None
    truncation_delta: float | None = None

    def record(self) -> dict[str, Any]:
        values = asdict(self)
        if self.mechanism == DPSGD.name:
            for name in _MECHANISM_FIELDS:
                del values[name]
        if self.examples_per_user is None:  # a sequence-level record, as it was before users existed
            for name in _USER_FIELDS:
                del values[name]
        return values


_MECHANISM_FIELDS = ("mechanism", "bands", "group_size", "accounted_rounds", "sensitivity")
_USER_FIELDS = ("examples_per_user", "truncation_delta")


@dataclass(frozen=True)
class CyclicPoissonReduction:
    """Cyclic Poisson sampling in b groups, as the Poisson-subsampled DP-SGD it reduces to: amplified BandMF
    (b ≥ 2), and DP-SGD itself at b = 1 (Choquette-Choo et al. 2023, arXiv 2306.08153; the
    reduction of jax-privacy's ``truncated_amplified_bandmf_event``): the data split into b groups of
    ⌊N/b⌋ (jax-privacy's ``EQUAL_SPLIT``, which drops N mod b examples), step t samples group t mod b
    with probability q_g = B/⌊N/b⌋, so an example can join ⌈T/b⌉ steps."""

    group_size: int
    sampling_probability: float
    rounds: int

    @staticmethod
    def at_rate(q, steps, bands: int):
        """(b·q, ⌈T/b⌉): the rate and steps of the Poisson DP-SGD event that b bands at rate q over T steps reduce to
        (one group of N/b sampled at b·q; the σ table's coordinates; b·q > 1 is no run). Vectorised in T."""
        return q * bands, -(-np.asarray(steps, np.int64) // bands)

    @classmethod
    def of(cls, dataset_size: int, expected_batch_size: int, steps: int, bands: int) -> CyclicPoissonReduction:
        group = dataset_size // bands
        if group < expected_batch_size:
            raise UserError(f"training.mechanisms: {bands} bands split the {dataset_size} training sequences "
                            f"into groups of {group}, smaller than the expected batch {expected_batch_size}")
        return cls(group, expected_batch_size / group, int(cls.at_rate(1.0, steps, bands)[1]))


def account_run(sampling: str, accountant: str | None, *, dataset_size: int,
                expected_batch_size: int, steps: int, delta: float,
                noise_batch_ratio: float = 0.0, target_epsilon: float | None = None,
                truncated_batch_size: int | None = None, multiple: int = 1, mechanism: str = DPSGD.name,
                coefficients: Any = None, examples_per_user: int | None = None) -> RunPrivacy:
    """Calibrate σ for ``target_epsilon`` (if given) or account ε for ``noise_batch_ratio``,
    with the accountant that matches ``sampling`` (refusing a mismatched ``accountant``).

    Truncating samplers run at ``truncated_batch_size``; None chooses it by its privacy price, a
    multiple of ``multiple`` (:func:`dpscaling.accounting.truncation.truncated_poisson_run`).
    ``mechanism`` is the noise's (:mod:`dpscaling.privacy.mechanisms`); a correlated one accounted as deterministic
    batches needs its strategy's ``coefficients`` (the sensitivity of C over the participations). A sampler
    that protects users accounted per sequence of theirs (ELS) needs ``examples_per_user``, k.
    """
    sampler = sampler_named(sampling)
    accountant = matched_accountant(sampling, accountant)
    delta = check_delta(delta)
    check_batch_fits(dataset_size, expected_batch_size)
    epsilon = None if target_epsilon is None else check_epsilon(target_epsilon)
    noise = mechanism_named(mechanism)
    common = dict(sampler=sampling, accountant=accountant, delta=delta,
                  sampling_probability=expected_batch_size / dataset_size, steps=steps,
                  dataset_size=dataset_size, expected_batch_size=expected_batch_size,
                  calibrated=epsilon is not None, mechanism=noise.name, bands=noise.bands)
    return _ACCOUNTED_BY[accountant](sampler, common, epsilon=epsilon, noise_batch_ratio=noise_batch_ratio,
                                     truncated_batch_size=truncated_batch_size, multiple=multiple,
                                     coefficients=coefficients, examples_per_user=examples_per_user)


def _user_level_poisson(sampler: Sampler, common: dict[str, Any], *, epsilon: float | None,
                        noise_batch_ratio: float, truncated_batch_size: int | None, multiple: int,
                        coefficients: Any, examples_per_user: int | None) -> RunPrivacy:
    """ELS: jax-privacy's user-level DP-SGD accountant for a user of k sequences, truncation priced in δ
    (:mod:`dpscaling.accounting.user_level`)."""
    from dpscaling.accounting.user_level import els_run

    if examples_per_user is None:
        raise UserError(f"data.users: training.sampling {sampler.name!r} protects users, and the data names none")
    if common["bands"] != 1:
        raise UserError(f"training.mechanisms: {sampler.name!r} is accounted for DP-SGD only")
    batch = common["expected_batch_size"]
    run = els_run(q=common["sampling_probability"], steps=common["steps"], dataset_size=common["dataset_size"],
                  examples_per_user=examples_per_user, delta=common["delta"], multiple=multiple,
                  truncated_batch_size=truncated_batch_size, target_epsilon=epsilon,
                  sigma=None if epsilon is not None else noise_batch_ratio * batch)
    return RunPrivacy(**common, epsilon=run.epsilon, sigma=run.sigma, noise_batch_ratio=run.sigma / batch,
                      truncated_batch_size=run.truncated_batch_size, max_participations=None,
                      truncation_priced=truncated_batch_size is None, padding_share=run.padding_share,
                      examples_per_user=examples_per_user, truncation_delta=run.truncation_delta)


def _truncated_poisson(sampler: Sampler, common: dict[str, Any], *, epsilon: float | None,
                       noise_batch_ratio: float, truncated_batch_size: int | None, multiple: int,
                       coefficients: Any, examples_per_user: int | None = None) -> RunPrivacy:
    """jax-privacy's truncated DP-SGD event at L (priced unless given), composed by PLD; a BandMF run's
    is its truncated amplified BandMF event, i.e. that of its :class:`CyclicPoissonReduction` (one group)."""
    # Here, not at the top: its accountants (dp-accounting, SciPy) cost a study run's start-up a second.
    from dpscaling.accounting.truncation import truncated_poisson_run

    batch, bands = common["expected_batch_size"], common["bands"]
    if bands == 1:
        q, rounds, population, extra = common["sampling_probability"], common["steps"], common["dataset_size"], {}
    else:
        reduced = CyclicPoissonReduction.of(common["dataset_size"], batch, common["steps"], bands)
        q, rounds, population = reduced.sampling_probability, reduced.rounds, reduced.group_size
        extra = {"group_size": reduced.group_size, "accounted_rounds": reduced.rounds, "adjacency": ZERO_OUT}
        common = common | {"sampling_probability": q}
    run = truncated_poisson_run(
        q=q, steps=rounds, dataset_size=population, delta=common["delta"], multiple=multiple,
        truncated_batch_size=truncated_batch_size, target_epsilon=epsilon,
        sigma=None if epsilon is not None else noise_batch_ratio * batch)
    price = run.price
    return RunPrivacy(
        **common, epsilon=run.epsilon, sigma=run.sigma, noise_batch_ratio=run.sigma / batch,
        truncated_batch_size=price.truncated_batch_size, max_participations=None,
        truncation_priced=run.truncation_priced, truncation_probability=price.truncation_probability,
        padding_share=price.padding_share, untruncated_epsilon=price.untruncated_epsilon,
        untruncated_sigma=run.untruncated_sigma, **extra)


def _deterministic(sampler: Sampler, common: dict[str, Any], *, epsilon: float | None, noise_batch_ratio: float,
                   truncated_batch_size: int | None, multiple: int, coefficients: Any,
                   examples_per_user: int | None = None) -> RunPrivacy:
    """One Gaussian mechanism of sensitivity Δ over the k participations the sampler allows: Δ² = k for
    DP-SGD; for BandMF the strategy's sensitivity with k participations at the sampler's minimum separation
    (shuffled epochs can place two one step apart; the cyclic sampler keeps them ⌊N/B⌋ apart),
    jax-privacy's ``minsep_sensitivity_squared``."""
    batch, delta = common["expected_batch_size"], common["delta"]
    participations = sampler.participation_bound(common["dataset_size"], batch, common["steps"])
    separation = sampler.min_separation(common["dataset_size"], batch)
    extra = {}
    if common["bands"] == 1:
        sensitivity = math.sqrt(participations)
    elif coefficients is not None:
        from dpscaling.dp.correlated import sensitivity_squared

        sensitivity = math.sqrt(sensitivity_squared(coefficients, common["steps"], participations, separation))
        extra = {"sensitivity": sensitivity}
    elif separation >= common["bands"]:  # a price before the strategy exists: the b-banded columns of one
        sensitivity = math.sqrt(participations)  # example never overlap, each of norm ≤ ‖c‖ = 1, so Δ² ≤ k
        extra = {"sensitivity": sensitivity}
    else:
        raise ValueError("a correlated mechanism's deterministic accounting needs its strategy coefficients")
    if epsilon is not None:
        sigma = float(gaussian.fixed_batch_sigma(epsilon, delta, sensitivity ** 2))
    else:
        sigma = noise_batch_ratio * batch
    spent = math.inf if sigma == 0 else gaussian.fixed_batch_epsilon(sigma, delta, sensitivity ** 2)
    return RunPrivacy(**common, epsilon=spent, sigma=sigma, noise_batch_ratio=sigma / batch,
                      truncated_batch_size=None, max_participations=participations, adjacency=ZERO_OUT, **extra)


# How a run is accounted, by the accountant its sampler names.
_ACCOUNTED_BY = {"deterministic": _deterministic, "truncated_poisson": _truncated_poisson,
                 "user_level_poisson": _user_level_poisson}
