"""One price for a configuration: (mechanism, sampling, ε, δ, N, B, T) → σ, σ̄ = σ/B and the accounting
event that proves the guarantee (docs/accounting.md, "Pricing a configuration"). Every σ or ε that a command,
the API or a file shows is computed here; every other module calls these functions.

**What a run pays** (:func:`price_run`, the default of ``dpscaling sigma``/``epsilon``; ``private_model``,
``savings``, the user-level budgets and the audit train and record exactly this): the sampler that runs, its
participations and its truncation, accounted by the matched accountant (:mod:`dpscaling.accounting.matched`):

* ``poisson`` — the private sampler: truncated Poisson at a priced L (jax-privacy's truncated DP-SGD event;
  cyclic Poisson for BandMF; over users for a user-level mechanism; ELS for DP-SGD protecting a user of k ≥ 2
  sequences: :func:`private_sampler`);
* ``deterministic`` — fixed batches of a shuffle (``shuffle``; ``cyclic`` for BandMF), each example in at most
  the sampler's ⌈T/⌊N/B⌋⌉ steps (:mod:`dpscaling.privacy.samplers`), one Gaussian of sensitivity √k, zero-out;
* ``min`` — the lower σ of the two, naming its sampler.

**The study's rules at a configuration** (:func:`price`: the query's runnable answer and its candidates, computed
directly, not interpolated), for every mechanism of :mod:`dpscaling.privacy.mechanisms`:

* ``poisson`` — each example joins each step independently. DP-SGD: T compositions of the
  Poisson-subsampled Gaussian at q = B/N on N examples, add/remove adjacency. DP-BandMF with b bands: cyclic
  Poisson with jax-privacy's equal split (what its private runs execute, :mod:`dpscaling.train.sampling`):
  ⌈T/b⌉ compositions at q_g = B/⌊N/b⌋ on ⌊N/b⌋ examples (:class:`dpscaling.accounting.matched.CyclicPoissonReduction`,
  jax-privacy's amplified BandMF event), zero-out adjacency (the equal split's). Untruncated: the private run
  truncates at a priced L and pays for it (:func:`price_run`: at most
  :data:`dpscaling.accounting.truncation.EPSILON_TOLERANCE` more ε at this σ), which the price says
  (``truncation``); pricing every candidate's L would cost seconds each.
* ``deterministic`` — as :func:`price_run`'s: the sampler's own participations (``shuffle``; for BandMF the
  ``cyclic`` sampler's, one permutation then the same order every epoch, participations exactly ⌊N/B⌋ ≥ b steps
  apart, so the b-banded strategy's columns of one example do not overlap and the sensitivity is √k; with the
  shuffled sampler two participations can be adjacent and it is larger: :mod:`dpscaling.accounting.matched`).
  ⌊N/B⌋ < b is no BandMF run: refused.
* ``min`` — the lower σ of the two, naming the branch and its sampler.

**The paper's rule at a rate** (:func:`paper_sigma`, :func:`paper_epsilon`; paper §3.1, §3.4 and appendix "Notes
on Generalized DP-SGD"): the lower σ of untruncated Poisson at q and fixed batches in which each example joins
⌈q·T⌉ steps (:func:`dpscaling.privacy.samplers.paper_participations`). No sampler runs it (a shuffle's fixed batches can
give more participations; Poisson batches are truncated): it prices the paper's hypothetical batches, what the
σ table (:class:`dpscaling.accounting.table.SigmaTable`) tabulates for the law's search and figures, and
``dpscaling sigma --rule paper`` prints, saying so. For BandMF at a rate the fixed batches are the ``cyclic``
sampler's (⌈T/⌊1/q⌋⌉ participations; NaN where ⌊1/q⌋ < b) and Poisson its cyclic reduction.

**At the user level** (not in the paper; docs/accounting.md, "Pricing a user"), a budget that protects a user
of up to k sequences:

* a user-level mechanism (``uls-m<m>``, :mod:`dpscaling.privacy.mechanisms`) — N and B count users and each user's m
  sequences are one clipped contribution, so a step is DP-SGD's release over users: the same events at
  N users, whatever k (trained by ``user_poisson``, or ``user_shuffle`` for the fixed batches);
* DP-SGD on sequences with ``examples_per_user`` k ≥ 2 (example-level sampling, ELS) — Poisson batches of
  sequences at q = B/N from N sequences, accounted for the user's k by jax-privacy's user-level DP-SGD
  accountant, its truncation charged in δ (:mod:`dpscaling.accounting.user_level`); Poisson only (no sampler
  trains fixed batches of it), trained by ``els_poisson``. k = 1 is the sequence-level price.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from dpscaling.accounting import gaussian
from dpscaling.accounting.branches import (
    ADD_REMOVE, DETERMINISTIC_BRANCH, MIN_RULE, POISSON_BRANCH, SAMPLINGS, ZERO_OUT)
from dpscaling.accounting.validation import (
    check_delta, check_epsilon, check_sampling_probability, check_sigma, check_steps)
from dpscaling.core.errors import UserError
from dpscaling.privacy.mechanisms import Mechanism, mechanism_named
from dpscaling.privacy.samplers import (
    CYCLIC, ELS_POISSON, SHUFFLE, TRUNCATED_POISSON, check_batch_fits, fixed_batch_participations,
    paper_participations, sampler_named, separation_at_rate)

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
    sampler: str  # the sampler (dpscaling.privacy.samplers) that trains it with this guarantee
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
                "privacy_unit": self.privacy_unit, "examples_per_user": self.examples_per_user,
                "truncation": self.truncation}

    @property
    def truncation(self) -> str | None:
        """What the price leaves to the run: a Poisson branch is untruncated Poisson's σ, and the private run
        truncating at a priced L pays for it (:func:`price_run`); None where nothing is left."""
        if self.branch != POISSON_BRANCH or self.sampler == ELS_POISSON.name:
            return None
        from dpscaling.accounting.truncation import EPSILON_TOLERANCE

        return (f"untruncated Poisson's sigma: the {self.sampler} run prices its truncation L and pays at most "
                f"{EPSILON_TOLERANCE:.0%} more epsilon at this sigma, so it calibrates sigma a little higher "
                "(dpscaling sigma prints the run's price; private_model trains it)")


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
    from dpscaling.privacy.samplers import sampler_named

    return sampler if mechanism.unit == "sequence" else str(sampler_named(sampler).user_level)


def deterministic_event(mechanism: Mechanism, dataset_size: int, batch_size: int, steps: int) -> AccountingEvent:
    """The deterministic branch's event (module docstring): the participations and separation of the sampler
    that trains fixed batches of ``mechanism`` (:func:`deterministic_sampler`), one Gaussian of sensitivity √k;
    refused for BandMF when ⌊N/B⌋ < b (its columns would overlap)."""
    sampler = sampler_named(deterministic_sampler(mechanism))
    participations = sampler.participation_bound(dataset_size, batch_size, steps)
    separation = sampler.min_separation(dataset_size, batch_size)
    if mechanism.correlated and separation < mechanism.bands:
        raise UserError(f"{mechanism.name}: fixed batches of {batch_size} from {dataset_size} examples repeat an "
                        f"example every {separation} steps, closer than its {mechanism.bands} bands")
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
                sigma = float(gaussian.fixed_batch_sigma(epsilon, delta, event.participations))
                sampler = deterministic_sampler(noise)
        except UserError as error:
            refused.append(f"{branch}: {error}")
            continue
        priced.append(Price(noise.name, noise.bands, rule, branch, noise_sampler(noise, sampler), epsilon, delta,
                            units, batch, steps, float(sigma), event, unit, k))
    if not priced:
        raise UserError(f"no {rule} price for B = {batch}, T = {steps}, N = {units}: " + "; ".join(refused))
    return min(priced, key=lambda found: found.sigma)


def paper_fixed_batch_participations(q, steps, bands: int = 1, examples_per_user: int = 1):
    """k of the paper's rule's fixed batches at rate q (module docstring), vectorised: DP-SGD's ⌈q·T⌉; for b ≥ 2
    bands (BandMF) the cyclic sampler's ⌈T/⌊1/q⌋⌉, NaN where ⌊1/q⌋ < b; NaN everywhere for ELS (k ≥ 2
    sequences per user: no sampler trains its fixed batches)."""
    q, steps = np.broadcast_arrays(np.asarray(q, float), np.asarray(steps, float))
    if examples_per_user > 1:
        return np.full(q.shape, np.nan)
    if bands == 1:
        return paper_participations(q, steps)
    separation = separation_at_rate(q)
    return np.where(separation >= bands, fixed_batch_participations(steps, np.maximum(separation, 1)), np.nan)


def paper_fixed_batch_sigma(epsilon, delta: float, q, steps, bands: int = 1, examples_per_user: int = 1):
    """σ of the paper's rule's fixed-batch branch at rate q, √k·s_AG(ε, δ) with
    :func:`paper_fixed_batch_participations`' k, vectorised over ε, q and T (NaN where it has no k)."""
    return gaussian.fixed_batch_sigma(epsilon, delta, paper_fixed_batch_participations(q, steps, bands,
                                                                                       examples_per_user))


def _paper_branches(rule: str) -> tuple[str, ...]:
    if rule not in SAMPLINGS:
        raise UserError(f"sampling rule: must be one of {SAMPLINGS}, got {rule!r}")
    return (POISSON_BRANCH, DETERMINISTIC_BRANCH) if rule == MIN_RULE else (rule,)


def _paper_rule(noise: Mechanism, rule: str, q: float, steps: int, poisson, fixed) -> tuple[float, str | None]:
    """The lower of ``poisson(rate, rounds)`` (at the Poisson event BandMF's cyclic reduction gives, where b·q ≤ 1)
    and ``fixed(k)`` (at the paper's fixed-batch participations, where any) over the branches of ``rule``, and the
    branch; (NaN, None) where no branch has a value."""
    from dpscaling.accounting.matched import CyclicPoissonReduction

    values: dict[str, float] = {}
    for branch in _paper_branches(rule):
        if branch == POISSON_BRANCH:
            rate, rounds = CyclicPoissonReduction.at_rate(q, steps, noise.bands)
            if rate <= 1 + 1e-12:
                values[branch] = float(poisson(min(1.0, float(rate)), int(rounds)))
        elif math.isfinite(participations := float(paper_fixed_batch_participations(q, steps, noise.bands))):
            values[branch] = float(fixed(participations))
    if not values:
        return math.nan, None
    branch = min(values, key=values.__getitem__)
    return values[branch], branch


def paper_sigma(mechanism: str | Mechanism, rule: str, epsilon: float, delta: float, q: float,
                steps: int) -> tuple[float, str | None]:
    """(σ, branch) of the paper's rule at rate q over T steps (module docstring) for ``mechanism``: untruncated
    Poisson (dp-accounting PLD; BandMF's cyclic reduction) and the fixed batches of ⌈q·T⌉ participations, the
    lower of the two under ``min``. (NaN, None) where no branch prices it. Prices no sampler that runs."""
    from dpscaling.accounting.calibration import calibrate_poisson

    noise = mechanism if isinstance(mechanism, Mechanism) else mechanism_named(mechanism)
    epsilon, delta = check_epsilon(epsilon), check_delta(delta)
    q, steps = check_sampling_probability(q), check_steps(steps)
    return _paper_rule(noise, rule, q, steps, lambda rate, rounds: calibrate_poisson(epsilon, rate, rounds, delta),
                       lambda participations: gaussian.fixed_batch_sigma(epsilon, delta, participations))


def paper_epsilon(mechanism: str | Mechanism, rule: str, sigma: float, delta: float, q: float,
                  steps: int) -> tuple[float, str | None]:
    """(ε, branch) spent by noise σ under the paper's rule at rate q (:func:`paper_sigma`'s inverse): the lower ε
    of its branches under ``min``; (NaN, None) where none prices it."""
    from dpscaling.accounting.calibration import poisson_epsilon

    noise = mechanism if isinstance(mechanism, Mechanism) else mechanism_named(mechanism)
    sigma, delta = check_sigma(sigma), check_delta(delta)
    q, steps = check_sampling_probability(q), check_steps(steps)
    return _paper_rule(noise, rule, q, steps, lambda rate, rounds: poisson_epsilon(sigma, rate, rounds, delta),
                       lambda participations: gaussian.fixed_batch_epsilon(sigma, delta, participations))


def private_sampler(mechanism: str | Mechanism, examples_per_user: int | None = None) -> str:
    """The sampler a private run of ``mechanism`` trains with: truncated Poisson over its unit (``user_poisson``
    for a user-level mechanism), or, for DP-SGD protecting a user of k ≥ 2 sequences, ``els_poisson``."""
    noise = mechanism if isinstance(mechanism, Mechanism) else mechanism_named(mechanism)
    if noise.unit == "sequence" and examples_per_user is not None and int(examples_per_user) > 1:
        return ELS_POISSON.name
    return noise_sampler(noise, TRUNCATED_POISSON.name)


def run_sampler(mechanism: str | Mechanism, sampling: str = POISSON_BRANCH, examples_per_user: int | None = None) -> str:
    """The sampler that trains ``mechanism`` under ``sampling``: ``poisson``, the private sampler
    (:func:`private_sampler`); ``deterministic``, fixed batches (``shuffle``, ``cyclic`` for BandMF, their user-level
    forms for a user-level mechanism; refused for ELS, which no sampler trains in fixed batches)."""
    noise = mechanism if isinstance(mechanism, Mechanism) else mechanism_named(mechanism)
    if sampling == POISSON_BRANCH:
        return private_sampler(noise, examples_per_user)
    if sampling != DETERMINISTIC_BRANCH:
        raise UserError(f"sampling: a run trains poisson or deterministic batches, got {sampling!r}")
    if noise.unit == "sequence" and examples_per_user is not None and int(examples_per_user) > 1:
        raise UserError("sampling: ELS (examples_per_user >= 2) is trained by Poisson sampling only: no sampler "
                        "trains fixed batches of it; use poisson")
    return noise_sampler(noise, deterministic_sampler(noise))


def price_run(mechanism: str | Mechanism, epsilon: float | None, delta: float, dataset_size: int, batch_size: int,
              steps: int, multiple: int = 1, examples_per_user: int | None = None, *, sigma: float | None = None,
              truncated_batch_size: int | None = None, sampling: str = POISSON_BRANCH):
    """What a run pays (module docstring): σ calibrated for (``epsilon``, δ), or ε spent by ``sigma`` (give one),
    by the matched accountant of the sampler that trains it (:func:`run_sampler`;
    :func:`dpscaling.accounting.matched.account_run`), as the run itself will. ``sampling`` ``poisson`` (default:
    truncated Poisson at ``truncated_batch_size`` L, else L priced, a multiple of ``multiple``), ``deterministic``
    (fixed batches), or ``min``: the lower σ (or ε) of the two. ``dataset_size`` counts the sampler's units
    (users, or the users' sequences for ELS). Returns the run's
    :class:`~dpscaling.accounting.matched.RunPrivacy`."""
    from dpscaling.accounting.matched import account_run

    noise = mechanism if isinstance(mechanism, Mechanism) else mechanism_named(mechanism)
    if (epsilon is None) == (sigma is None):
        raise ValueError("give exactly one of epsilon and sigma")
    if sampling == MIN_RULE:
        found, refused = [], []
        for branch in (POISSON_BRANCH, DETERMINISTIC_BRANCH):
            try:
                found.append(price_run(noise, epsilon, delta, dataset_size, batch_size, steps, multiple,
                                       examples_per_user, sigma=sigma, truncated_batch_size=truncated_batch_size,
                                       sampling=branch))
            except UserError as error:
                refused.append(f"{branch}: {error}")
        if not found:
            raise UserError("no runnable price: " + "; ".join(refused))
        return min(found, key=lambda run: run.sigma if epsilon is not None else run.epsilon)
    sampler = run_sampler(noise, sampling, examples_per_user)
    if sigma is not None:
        sigma = check_sigma(sigma)
    if sampling == DETERMINISTIC_BRANCH and noise.correlated:  # refuses fixed batches closer than its bands
        deterministic_event(noise, int(dataset_size), int(batch_size), int(steps))
    return account_run(sampler, None, dataset_size=int(dataset_size), expected_batch_size=int(batch_size),
                       steps=int(steps), delta=delta, target_epsilon=epsilon,
                       noise_batch_ratio=0.0 if sigma is None else sigma / int(batch_size),
                       truncated_batch_size=truncated_batch_size, multiple=int(multiple or 1), mechanism=noise.name,
                       examples_per_user=int(examples_per_user) if sampler == ELS_POISSON.name else None)
