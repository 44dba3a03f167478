"""One price for a configuration: (mechanism, sampling, ε, δ, N, B, T) → σ, σ̄ = σ/B and the accounting
event that proves the guarantee (docs/accounting.md, "Pricing a configuration"). Not in the paper, which
prices hypothetical batches in a table (§3.1, §3.4); this is what a configuration someone will train costs.

Every caller that turns a budget into noise prices here: ``dpscaling query`` and ``load_law(...).query``
(the runnable answer), the explorer (through the query), ``private_model`` and ``savings`` (through the
query, then :func:`price_run` for the truncated sampler they train with) and the audit (:func:`price_run`).

**The study's rules** (:func:`price`, the paper's ``poisson``, ``deterministic`` and ``min``, computed
directly, not interpolated), for every mechanism of :mod:`dpscaling.mechanisms`:

* ``poisson`` — each example joins each step independently. DP-SGD: T compositions of the
  Poisson-subsampled Gaussian at q = B/N on N examples, add/remove adjacency. DP-BandMF with b bands: cyclic
  Poisson with jax-privacy's equal split (what its private runs execute, :mod:`dpscaling.train.sampling`):
  ⌈T/b⌉ compositions at q_g = B/⌊N/b⌋ on ⌊N/b⌋ examples (:class:`dpscaling.accounting.matched.CyclicPoissonReduction`,
  jax-privacy's amplified BandMF event), zero-out adjacency (the equal split's). Trained by the ``poisson``
  sampler (truncated at a priced L: :func:`price_run`).
* ``deterministic`` — fixed batches, each example in at most k steps, one Gaussian of sensitivity √k
  (zero-out adjacency: an example replaced by a null one). k is that of a sampler that exists: the shuffled
  sampler's ⌈T/⌊N/B⌋⌉ for DP-SGD; for BandMF the ``cyclic`` sampler's (one permutation, then the same order
  every epoch), whose participations lie exactly ⌊N/B⌋ ≥ b steps apart, so the b-banded strategy's columns
  of one example do not overlap and the sensitivity is √k (with the shuffled sampler two participations can
  be adjacent and it is larger: :mod:`dpscaling.accounting.matched`). ⌊N/B⌋ < b is no BandMF run: refused.
* ``min`` — the lower σ of the two (the paper's rule), naming the branch and its sampler.

**At the user level** (not in the paper; docs/accounting.md, "Pricing a user"), a budget that protects a user
of up to k sequences:

* a user-level mechanism (``uls-m<m>``, :mod:`dpscaling.mechanisms`) — N and B count users and each user's m
  sequences are one clipped contribution, so a step is DP-SGD's release over users: the same events at
  N users, whatever k (trained by ``user_poisson``, or ``user_shuffle`` for the fixed batches);
* DP-SGD on sequences with ``examples_per_user`` k ≥ 2 (example-level sampling, ELS) — Poisson batches of
  sequences at q = B/N from N sequences, accounted for the user's k by jax-privacy's user-level DP-SGD
  accountant, its truncation charged in δ (:mod:`dpscaling.accounting.user_level`); Poisson only (no sampler
  trains fixed batches of it), trained by ``els_poisson``. k = 1 is the sequence-level price.

The σ table (:class:`dpscaling.accounting.table.SigmaTable`) interpolates the same events for the law's
search; a runnable answer is then re-priced here, exactly.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

from dpscaling.accounting import gaussian
from dpscaling.accounting.branches import (
    ADD_REMOVE, DETERMINISTIC_BRANCH, MIN_RULE, POISSON_BRANCH, SAMPLINGS, ZERO_OUT)
from dpscaling.accounting.validation import check_delta, check_epsilon
from dpscaling.errors import UserError
from dpscaling.mechanisms import Mechanism, mechanism_named
from dpscaling.samplers import CYCLIC, ELS_POISSON, SHUFFLE, TRUNCATED_POISSON, check_batch_fits

POISSON_EVENT, GAUSSIAN_EVENT = "poisson_subsampled_gaussian", "gaussian"
# ELS's step: a mixture of Gaussians of sensitivity Binomial(k, q) (dpscaling.accounting.user_level).
USER_LEVEL_EVENT = "user_level_poisson_mixture"


@dataclass(frozen=True)
class AccountingEvent:
    """What the guarantee composes: ``compositions`` releases of a Gaussian of ``sensitivity`` (in clip norms)
    with noise σ, each Poisson-subsampled at ``sampling_probability`` from ``population`` examples (None: not
    subsampled), under ``adjacency``."""

    kind: str
    compositions: int
    sensitivity: float
    adjacency: str
    sampling_probability: float | None = None
    population: int | None = None
    participations: int | None = None  # deterministic: the most steps one example joins
    min_separation: int | None = None  # deterministic: the fewest steps between two of them
    examples_per_user: int | None = None  # ELS: the user's k sequences the mixture counts

    def to_json(self) -> dict[str, Any]:
        return {key: value for key, value in asdict(self).items() if value is not None}


@dataclass(frozen=True)
class Price:
    """σ of one configuration, how it was priced and the event that proves it."""

    mechanism: str
    bands: int
    rule: str  # asked: poisson | deterministic | min
    branch: str  # what priced it: poisson | deterministic
    sampler: str  # the sampler (dpscaling.samplers) that trains it with this guarantee
    epsilon: float
    delta: float
    dataset_size: int  # N, privacy units
    batch_size: int  # B (expected under Poisson)
    steps: int  # T
    sigma: float  # on the summed clipped gradients
    event: AccountingEvent
    privacy_unit: str = "sequence"  # whom it protects: a sequence, or a user
    examples_per_user: int | None = None  # k of a user-level budget (None: a sequence-level one)

    @property
    def noise_batch_ratio(self) -> float:
        return self.sigma / self.batch_size

    @property
    def adjacency(self) -> str:
        return self.event.adjacency

    def to_json(self) -> dict[str, Any]:
        return {"mechanism": self.mechanism, "bands": self.bands, "rule": self.rule, "branch": self.branch,
                "sampler": self.sampler, "adjacency": self.adjacency, "epsilon": self.epsilon, "delta": self.delta,
                "dataset_size": self.dataset_size, "batch_size": self.batch_size, "steps": self.steps,
                "sigma": self.sigma, "noise_batch_ratio": self.noise_batch_ratio, "event": self.event.to_json(),
                "privacy_unit": self.privacy_unit, "examples_per_user": self.examples_per_user}


def poisson_event(mechanism: Mechanism, dataset_size: int, batch_size: int, steps: int) -> AccountingEvent:
    """The Poisson branch's event (module docstring): plain for DP-SGD, the cyclic reduction for BandMF."""
    from dpscaling.accounting.matched import CyclicPoissonReduction

    reduced = CyclicPoissonReduction.of(dataset_size, batch_size, steps, mechanism.bands)
    return AccountingEvent(POISSON_EVENT, reduced.rounds, 1.0, ZERO_OUT if mechanism.correlated else ADD_REMOVE,
                           reduced.sampling_probability, reduced.group_size)


def deterministic_sampler(mechanism: Mechanism) -> str:
    """The sampler whose fixed batches the deterministic branch prices: ``cyclic`` for a correlated mechanism
    (participations ⌊N/B⌋ apart), ``shuffle`` for DP-SGD (the same k)."""
    return CYCLIC.name if mechanism.correlated else SHUFFLE.name


def noise_sampler(mechanism: Mechanism, sampler: str) -> str:
    """The sampler that trains ``sampler``'s batches with ``mechanism``: its user-level form for a user-level one."""
    from dpscaling.samplers import sampler_named

    return sampler if mechanism.unit == "sequence" else str(sampler_named(sampler).user_level)


def deterministic_event(mechanism: Mechanism, dataset_size: int, batch_size: int, steps: int) -> AccountingEvent:
    """The deterministic branch's event (module docstring): k = ⌈T/⌊N/B⌋⌉ participations ⌊N/B⌋ apart, one
    Gaussian of sensitivity √k; refused for BandMF when ⌊N/B⌋ < b (its columns would overlap)."""
    check_batch_fits(dataset_size, batch_size)
    separation = dataset_size // batch_size
    if separation < mechanism.bands:
        raise UserError(f"{mechanism.name}: fixed batches of {batch_size} from {dataset_size} examples repeat an "
                        f"example every {separation} steps, closer than its {mechanism.bands} bands")
    participations = math.ceil(steps / separation)
    return AccountingEvent(GAUSSIAN_EVENT, 1, math.sqrt(participations), ZERO_OUT,
                           participations=participations, min_separation=separation)


def els_event(dataset_size: int, batch_size: int, steps: int, examples_per_user: int) -> AccountingEvent:
    """ELS's event: T Poisson steps at q = B/N of N sequences, each a mixture over the user's k
    (:mod:`dpscaling.accounting.user_level`), add/remove of one user."""
    check_batch_fits(dataset_size, batch_size)
    return AccountingEvent(USER_LEVEL_EVENT, steps, 1.0, ADD_REMOVE, batch_size / dataset_size, dataset_size,
                           examples_per_user=examples_per_user)


def _els_price(noise: Mechanism, rule: str, epsilon: float, delta: float, units: int, batch: int, steps: int,
               examples_per_user: int) -> Price:
    """ELS's price (module docstring): Poisson only, DP-SGD only; σ as the ``els_poisson`` run calibrates it."""
    from dpscaling.accounting.user_level import els_run

    if noise.bands != 1:
        raise UserError(f"examples_per_user: {noise.name} has no user-level accountant here (ELS prices DP-SGD's "
                        "Poisson steps); protect sequences, or ask DP-SGD's law")
    if rule == DETERMINISTIC_BRANCH:
        raise UserError("sampling rule: ELS (examples_per_user >= 2) is priced for Poisson sampling only: no "
                        "sampler trains fixed batches of it; use poisson or min")
    event = els_event(units, batch, steps, examples_per_user)
    sigma = els_run(q=event.sampling_probability, steps=steps, dataset_size=units, examples_per_user=examples_per_user,
                    delta=delta, target_epsilon=epsilon).sigma
    return Price(noise.name, noise.bands, rule, POISSON_BRANCH, ELS_POISSON.name, epsilon, delta, units, batch, steps,
                 float(sigma), event, "user", examples_per_user)


def price(mechanism: str | Mechanism, rule: str, epsilon: float, delta: float, dataset_size: float,
          batch_size: int, steps: int, examples_per_user: int | None = None) -> Price:
    """σ for (ε, δ) of ``batch_size`` of ``dataset_size`` units over ``steps`` steps under the study's ``rule``
    (poisson, deterministic or min), for ``mechanism``: a direct calibration (dp-accounting PLD for Poisson,
    the analytic Gaussian for fixed batches). ``examples_per_user`` k: the budget protects a user of up to k
    sequences (module docstring: a user-level mechanism's units are users whatever k; DP-SGD's are sequences,
    priced by ELS for k ≥ 2). Raises UserError where no branch can price it."""
    from dpscaling.accounting.calibration import calibrate_poisson

    noise = mechanism if isinstance(mechanism, Mechanism) else mechanism_named(mechanism)
    epsilon, delta = check_epsilon(epsilon), check_delta(delta)
    if rule not in SAMPLINGS:
        raise UserError(f"sampling rule: must be one of {SAMPLINGS}, got {rule!r}")
    if examples_per_user is not None and int(examples_per_user) < 1:
        raise UserError(f"examples_per_user: must be >= 1, got {examples_per_user!r}")
    units, batch, steps = int(dataset_size), int(batch_size), int(steps)
    k = None if examples_per_user is None else int(examples_per_user)
    if noise.unit == "sequence" and k is not None and k > 1:
        return _els_price(noise, rule, epsilon, delta, units, batch, steps, k)
    # a user-level mechanism protects its unit, a user; DP-SGD at k = 1 a user of one sequence
    unit = "user" if noise.unit == "user" or k is not None else "sequence"
    branches = (POISSON_BRANCH, DETERMINISTIC_BRANCH) if rule == MIN_RULE else (rule,)
    priced: list[Price] = []
    refused: list[str] = []
    for branch in branches:
        try:
            if branch == POISSON_BRANCH:
                event = poisson_event(noise, units, batch, steps)
                sigma = calibrate_poisson(epsilon, event.sampling_probability, event.compositions, delta)
                sampler = TRUNCATED_POISSON.name
            else:
                event = deterministic_event(noise, units, batch, steps)
                sigma = event.sensitivity * gaussian.analytic_gaussian_sigma(epsilon, delta)
                sampler = deterministic_sampler(noise)
        except UserError as error:
            refused.append(f"{branch}: {error}")
            continue
        priced.append(Price(noise.name, noise.bands, rule, branch, noise_sampler(noise, sampler), epsilon, delta,
                            units, batch, steps, float(sigma), event, unit, k))
    if not priced:
        raise UserError(f"no {rule} price for B = {batch}, T = {steps}, N = {units}: " + "; ".join(refused))
    return min(priced, key=lambda found: found.sigma)


def sigma_at_rate(mechanism: str | Mechanism, rule: str, epsilon: float, delta: float, q: float, steps: int) -> float:
    """σ with only the rate q = B/N known, in the σ table's coordinates (the law's ``evaluate`` of a few
    rows): :func:`price`'s events at N/B = 1/q, with the paper's k = ⌈qT⌉ for DP-SGD's fixed batches. NaN
    where no branch prices it."""
    from dpscaling.accounting.calibration import calibrate_poisson

    noise = mechanism if isinstance(mechanism, Mechanism) else mechanism_named(mechanism)
    bands, candidates = noise.bands, []
    if rule in (POISSON_BRANCH, MIN_RULE) and bands * q <= 1 + 1e-12:
        candidates.append(calibrate_poisson(epsilon, min(1.0, bands * q), math.ceil(steps / bands), delta))
    if rule in (DETERMINISTIC_BRANCH, MIN_RULE):
        if bands == 1:
            candidates.append(gaussian.sigma_deterministic(epsilon, delta, q, steps))
        elif (separation := math.floor(1.0 / q * (1 + 1e-9))) >= bands:
            candidates.append(math.sqrt(math.ceil(steps / separation)) * gaussian.analytic_gaussian_sigma(epsilon, delta))
    return float(min(candidates)) if candidates else math.nan


def private_sampler(mechanism: str | Mechanism, examples_per_user: int | None = None) -> str:
    """The sampler a private run of ``mechanism`` trains with: truncated Poisson over its unit (``user_poisson``
    for a user-level mechanism), or, for DP-SGD protecting a user of k ≥ 2 sequences, ``els_poisson``."""
    noise = mechanism if isinstance(mechanism, Mechanism) else mechanism_named(mechanism)
    if noise.unit == "sequence" and examples_per_user is not None and int(examples_per_user) > 1:
        return ELS_POISSON.name
    return noise_sampler(noise, TRUNCATED_POISSON.name)


def price_run(mechanism: str, epsilon: float, delta: float, dataset_size: int, batch_size: int, steps: int,
              multiple: int = 1, examples_per_user: int | None = None):
    """The private run's price: truncated Poisson (cyclic for BandMF; over users for a user-level mechanism;
    ELS for a user of ``examples_per_user`` k ≥ 2 sequences: :func:`private_sampler`) at its priced L, σ
    calibrated for (ε, δ) by the run's matched accountant (:func:`dpscaling.accounting.matched.account_run`), as
    the run itself will. ``dataset_size`` counts the sampler's units (users, or the users' sequences for ELS)."""
    from dpscaling.accounting.matched import account_run

    sampler = private_sampler(mechanism, examples_per_user)
    return account_run(sampler, None, dataset_size=int(dataset_size), expected_batch_size=int(batch_size),
                       steps=int(steps), delta=delta, target_epsilon=epsilon, multiple=int(multiple or 1),
                       mechanism=mechanism,
                       examples_per_user=int(examples_per_user) if sampler == ELS_POISSON.name else None)
