"""Accounting matched to the mechanism a training run actually executed (issue 16).

The study's accounting (paper §3.1, "Decoupling Noise Calibration") prices hypothetical
Poisson batches after the fact. A run that claims a guarantee must instead be accounted
for the sampler it ran:

* ``shuffle`` (:class:`dpscaling.train.data.BatchSampler`) → ``deterministic``: fixed
  batches without amplification; an example taking part in k steps is k compositions of a
  sensitivity-1 Gaussian with noise σ on the sum, i.e. one Gaussian with noise σ/√k
  (:mod:`dpscaling.accounting.gaussian`). k is the sampler's TRUE maximum participation
  ⌈T/⌊N/B⌋⌉, not ⌈q·T⌉ (which it exceeds when an epoch's remainder is dropped).
* ``poisson`` (:mod:`dpscaling.train.sampling`, truncated Poisson at L) →
  ``truncated_poisson``: jax-privacy's ``truncated_dpsgd_event`` (Chua et al. 2024,
  arXiv 2411.04205) composed by dp-accounting's PLD accountant, add/remove adjacency.

``poisson`` (untruncated Poisson PLD, the study table's accountant) describes no sampler
a run executes here, so a run asking for it is refused, as is any other pairing of a
sampler with an accountant for a different mechanism.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import dp_accounting

from dpscaling.accounting import gaussian, pld
from dpscaling.accounting.calibration import poisson_warm_start
from dpscaling.accounting.search import solve_decreasing
from dpscaling.accounting.validation import check_delta, check_epsilon
from dpscaling.errors import UserError

# The accountant that describes each sampler, and what each accountant assumes.
MATCHED_ACCOUNTANT: dict[str, str] = {"shuffle": "deterministic", "poisson": "truncated_poisson"}
ACCOUNTANT_ASSUMES: dict[str, str] = {
    "deterministic": "fixed (shuffled) batches, each example in at most k steps, no amplification",
    "truncated_poisson": "truncated Poisson sampling (jax-privacy truncated_dpsgd_event, PLD)",
    "poisson": "untruncated Poisson sampling (dp-accounting PLD), which no training run executes",
}
ACCOUNTANTS: tuple[str, ...] = tuple(ACCOUNTANT_ASSUMES)
# Calibration tolerance on σ (relative): ε(σ) ≤ target always holds, σ is at most this much high.
RELATIVE_TOLERANCE = 1e-3


def matched_accountant(sampling: str, accountant: str | None = None, block: str = "train") -> str:
    """The accountant for ``sampling``; refuses an ``accountant`` that describes another mechanism.

    ``block`` names the keys in messages (``train`` for a TrainConfig, ``training`` in a config).
    """
    if sampling not in MATCHED_ACCOUNTANT:
        raise UserError(f"{block}.sampling: must be one of {tuple(MATCHED_ACCOUNTANT)}, got {sampling!r}")
    wanted = MATCHED_ACCOUNTANT[sampling]
    if accountant is None or accountant == wanted:
        return wanted
    if accountant not in ACCOUNTANT_ASSUMES:
        raise UserError(f"{block}.accountant: must be one of {ACCOUNTANTS} or null, got {accountant!r}")
    raise UserError(
        f"{block}.accountant {accountant!r} assumes {ACCOUNTANT_ASSUMES[accountant]}, but "
        f"{block}.sampling {sampling!r} runs a different mechanism: the sampler and the accountant "
        f"disagree, so the run is refused before it starts (use accountant {wanted!r} or null)"
    )


def shuffle_max_participations(n_rows: int, batch_size: int, steps: int) -> int:
    """Most steps any example takes part in under the shuffled sampler (per-epoch permutations,
    remainder dropped): one per epoch started, ⌈T / ⌊N/B⌋⌉."""
    if n_rows < batch_size:
        raise UserError(f"train.batch_size: {batch_size} exceeds the {n_rows} training sequences")
    return math.ceil(steps / (n_rows // batch_size))


def _discretisation(sigma: float, q: float, steps: int, epsilon: float | None, delta: float) -> float:
    step_mu = None if epsilon is None else gaussian.gdp_mu(epsilon, delta) / math.sqrt(steps)
    return pld.choose_discretisation(sigma, q, gdp_step_mu=step_mu).interval


def truncated_poisson_epsilon(sigma: float, q: float, steps: int, dataset_size: int,
                              truncated_batch_size: int, delta: float,
                              interval: float | None = None) -> float:
    """ε(δ) of T steps of truncated-Poisson DP-SGD with noise σ on the sum (jax-privacy event,
    dp-accounting PLD; the discretisation follows :mod:`dpscaling.accounting.pld`'s rule)."""
    # jax_privacy imports JAX (seconds): only when a Poisson run is accounted.
    from jax_privacy.experimental.accounting import truncated_dpsgd_event

    if sigma == 0:
        return math.inf
    if interval is None:
        interval = _discretisation(sigma, q, steps, None, delta)
    event = truncated_dpsgd_event(sigma, steps, sampling_prob=q, num_examples=dataset_size,
                                  truncated_batch_size=truncated_batch_size)
    accountant = dp_accounting.pld.PLDAccountant(value_discretization_interval=interval)
    return float(accountant.compose(event).get_epsilon(delta))


def calibrate_truncated_poisson(epsilon: float, delta: float, q: float, steps: int,
                                dataset_size: int, truncated_batch_size: int) -> float:
    """Smallest σ (within :data:`RELATIVE_TOLERANCE`) with truncated-Poisson DP-SGD (ε, δ)-DP."""
    start = poisson_warm_start(epsilon, delta, q, steps)
    interval = _discretisation(start, q, steps, epsilon, delta)
    return solve_decreasing(
        lambda s: truncated_poisson_epsilon(s, q, steps, dataset_size, truncated_batch_size,
                                            delta, interval),
        epsilon, start=start, relative_tolerance=RELATIVE_TOLERANCE)


@dataclass(frozen=True)
class RunPrivacy:
    """The guarantee of one run, with every parameter needed to recompute it."""

    sampler: str  # "shuffle" | "poisson"
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

    def record(self) -> dict[str, Any]:
        return asdict(self)


def account_run(sampling: str, accountant: str | None, *, dataset_size: int,
                expected_batch_size: int, physical_batch_size: int, steps: int, delta: float,
                noise_batch_ratio: float = 0.0, target_epsilon: float | None = None) -> RunPrivacy:
    """Calibrate σ for ``target_epsilon`` (if given) or account ε for ``noise_batch_ratio``,
    with the accountant that matches ``sampling`` (refusing a mismatched ``accountant``)."""
    accountant = matched_accountant(sampling, accountant)
    delta = check_delta(delta)
    participations = shuffle_max_participations(dataset_size, expected_batch_size, steps)
    q = expected_batch_size / dataset_size
    truncated = physical_batch_size if sampling == "poisson" else None
    if sampling != "shuffle":
        participations = None
    if target_epsilon is not None:
        epsilon = check_epsilon(target_epsilon)
        if sampling == "shuffle":
            sigma = math.sqrt(participations) * gaussian.analytic_gaussian_sigma(epsilon, delta)
        else:
            sigma = calibrate_truncated_poisson(epsilon, delta, q, steps, dataset_size, truncated)
    else:
        sigma = noise_batch_ratio * expected_batch_size
    if sigma == 0:
        spent = math.inf
    elif sampling == "shuffle":
        spent = gaussian.gaussian_epsilon(sigma / math.sqrt(participations), delta)
    else:
        spent = truncated_poisson_epsilon(sigma, q, steps, dataset_size, truncated, delta)
    return RunPrivacy(
        sampler=sampling, accountant=accountant, epsilon=spent, delta=delta, sigma=sigma,
        noise_batch_ratio=sigma / expected_batch_size, sampling_probability=q, steps=steps,
        dataset_size=dataset_size, expected_batch_size=expected_batch_size,
        truncated_batch_size=truncated, max_participations=participations,
        calibrated=target_epsilon is not None)
