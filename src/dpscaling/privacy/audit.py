"""One-run privacy audit of the private training step with gradient canaries (docs/private-training.md, "Audit").

Steinke, Nasr & Jagielski 2023 ("Privacy Auditing with One (1) Training Run", arXiv 2305.08846):
m canaries, each included in the training set independently with probability 1/2; after training
an attacker scores every canary; the fraction of confident correct guesses of "included" gives an
ε lower bound that holds with probability ≥ 1 − significance if the mechanism is (ε, δ)-DP.
``jax_privacy.auditing.CanaryScoreAuditor.epsilon_one_run`` computes it.

Canary design: *gradient* (Dirac) canaries in the white-box setting. Canary i's per-example
gradient is a huge multiple of the unit vector of its own coordinate, so after normalized
clipping it contributes exactly e_i; the auditor sees every step's noisy clipped mean (what Adam
receives) and scores canary i by Σ_t ĝ_t[i]. Why not input-space canaries: one sequence inserted
into a small BERT trained for minutes on a CPU moves its own loss by far less than the run's
noise, so an audit built on them has no power (its negative control would not be flagged).
Gradient canaries are the worst case the DP-SGD analysis covers, and they give the audit power
with thousands of canaries in seconds.

At the user level (a budget per user) the canaries are users: a user-level mechanism's canary user is one
sampled unit whose m sequences all carry its canary gradient, clipped as one to e_i, so the audit is the one
above over users; an ELS canary user holds k canary sequences, each drawn independently by Poisson sampling and
each contributing e_i, and is scored by the same Σ_t ĝ_t[i]: the audit tests the guarantee for a user of k.

What runs is the private training code itself, minus the BERT forward pass: the truncated
Poisson sampler with its padding (:class:`dpscaling.train.sampling.PoissonBatches`; the canaries
are the dataset), :func:`dpscaling.dp.clipped_mean_grad` with ``example_weights`` and the
expected-batch ``normaliser``, the noise transformation :func:`dpscaling.dp.add_gaussian_noise`
with a secret key, and σ calibrated by the matched accountant
(:func:`dpscaling.accounting.pricing.price_run`); a correlated mechanism's strategy is optimised by the
run's own criterion (``training.bandmf_strategy``). The negative control runs the same with the
noise switched off while claiming the same ε; the audit must flag it (audited ε above the claim).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

import os
from collections.abc import Mapping

import numpy as np
import pandas as pd

from dpscaling.accounting.pricing import price_run
from dpscaling.core.errors import UserError
from dpscaling.core.io import atomic_path, write_json_atomic
from dpscaling.privacy.mechanisms import DPSGD, mechanism_named
from dpscaling.core.streams import Stream

# Canary gradients are this many times the clip norm, so clipping always acts on them.
CANARY_GRADIENT_SCALE = 1e3


@dataclass(frozen=True)
class AuditSettings:
    n_canaries: int = 2000  # m; each is included with probability 1/2
    expected_batch_size: int = 100
    steps: int = 100
    epsilon: float = 2.0  # the claimed guarantee the run is calibrated for
    delta: float = 1e-8
    significance: float = 0.05  # the audit bound holds with probability ≥ 1 − significance
    microbatch_size: int = 32
    seed: int = 0  # which canaries are included (public: the audit's own randomness)
    mechanism: str = DPSGD.name  # the noise mechanism audited (docs/mechanisms.md): its batches, noise and accountant
    strategy: str = "mean_error"  # a correlated mechanism's strategy criterion: the run's training.bandmf_strategy
    # ELS (a budget per user on DP-SGD): each canary is a user of k sequences, each a gradient canary of the
    # user's own coordinate, drawn independently by Poisson sampling; None: a canary is one sampled unit.
    examples_per_user: int | None = None

    def __post_init__(self) -> None:
        if self.n_canaries < 4:
            raise UserError(f"audit.n_canaries: must be >= 4, got {self.n_canaries}")
        if not 0 < self.significance < 1:
            raise UserError(f"audit.significance: must be in (0, 1), got {self.significance}")
        if self.examples_per_user is not None and self.examples_per_user < 1:
            raise UserError(f"audit.examples_per_user: must be >= 1, got {self.examples_per_user}")

    @property
    def sequences_per_canary(self) -> int:
        return int(self.examples_per_user or 1)


@dataclass(frozen=True)
class AuditResult:
    run: str  # "private" | "negative_control"
    claimed_epsilon: float
    audited_epsilon: float  # one-run lower bound at confidence 1 − significance
    flagged: bool  # audited ε above the claim: the run does not deliver what it claims
    sigma: float
    noise_batch_ratio: float
    sampling_probability: float
    steps: int
    truncated_batch_size: int  # L, priced as a private run's (dpscaling.accounting.truncation)
    untruncated_sigma: float  # the σ untruncated Poisson needs for the claimed ε
    n_canaries: int
    n_included: int
    significance: float
    delta: float
    examples_per_user: int | None = None  # ELS: the k canary sequences of each canary user

    def record(self) -> dict[str, Any]:
        return asdict(self)


def canary_scores(settings: AuditSettings, noise_batch_ratio: float, included: np.ndarray,
                  truncated_batch_size: int, key: np.ndarray) -> np.ndarray:
    """Σ_t ĝ_t[i] for every canary i, from ``settings.steps`` real private steps over the
    included canaries (the training set), with noise σ̄ on the clipped mean."""
    import jax
    import jax.numpy as jnp

    from dpscaling.dp import clipped_mean_grad, vmap_clipped_sum
    from dpscaling.train.sampling import PADDING_INDEX, PoissonBatches

    # the training set's rows: each included canary's own (k of them for an ELS canary user)
    members = np.repeat(np.flatnonzero(included), settings.sequences_per_canary)
    mechanism = mechanism_named(settings.mechanism, "audit.mechanism")
    sampler = PoissonBatches(len(members), settings.expected_batch_size, truncated_batch_size, key,
                             mechanism.cycle_length, settings.microbatch_size)
    params = jnp.zeros(settings.n_canaries, jnp.float32)

    def loss_fn(p, batch):  # canary c's gradient: CANARY_GRADIENT_SCALE · e_c
        return CANARY_GRADIENT_SCALE * p[batch["coordinate"]]

    # The run's own noise (for BandMF, correlated across steps: the score is then the noisy prefix sum).
    noise = mechanism.noise_transform(noise_batch_ratio, jnp.asarray(key, jnp.uint32), settings.steps,
                                      settings.strategy)

    @jax.jit
    def step(noise_state, coordinates, weights):
        clipped = clipped_mean_grad(loss_fn, params, {"coordinate": coordinates}, clip_norm=1.0,
                                    clipped_sum=vmap_clipped_sum,
                                    microbatch_size=settings.microbatch_size,
                                    example_weights=weights,
                                    normaliser=settings.expected_batch_size)
        noisy, noise_state = noise.update(clipped.grad, noise_state)
        return noise_state, noisy

    state, total = noise.init(params), np.zeros(settings.n_canaries, np.float64)
    for t in range(settings.steps):
        rows = sampler.indices(t)
        real = rows != PADDING_INDEX
        coordinates = np.where(real, members[np.where(real, rows, 0)], 0).astype(np.int32)
        state, noisy = step(state, coordinates, real.astype(np.float32))
        total += np.asarray(noisy, np.float64)
    return total


def run_audit(settings: AuditSettings) -> list[AuditResult]:
    """The private run and its negative control, each audited against the claimed ε."""
    from jax_privacy.auditing import CanaryScoreAuditor

    from dpscaling.train.sampling import secret_key

    rng = np.random.default_rng([settings.seed, Stream.AUDIT_CANARIES])
    included = rng.random(settings.n_canaries) < 0.5
    n_in = int(included.sum())
    # Priced as a private training run is, L included (dpscaling.accounting.pricing).
    privacy = price_run(settings.mechanism, settings.epsilon, settings.delta, n_in * settings.sequences_per_canary,
                        settings.expected_batch_size, settings.steps, settings.microbatch_size,
                        examples_per_user=settings.examples_per_user)
    truncated = privacy.truncated_batch_size
    results = []
    for run, ratio in (("private", privacy.noise_batch_ratio), ("negative_control", 0.0)):
        scores = canary_scores(settings, ratio, included, truncated, secret_key())
        auditor = CanaryScoreAuditor(scores[included], scores[~included])
        audited = float(auditor.epsilon_one_run(settings.significance, settings.delta))
        results.append(AuditResult(
            run=run, claimed_epsilon=settings.epsilon, audited_epsilon=audited,
            flagged=audited > settings.epsilon, sigma=ratio * settings.expected_batch_size,
            noise_batch_ratio=ratio, sampling_probability=privacy.sampling_probability,
            steps=settings.steps, truncated_batch_size=truncated, untruncated_sigma=privacy.untruncated_sigma,
            n_canaries=settings.n_canaries, n_included=n_in, significance=settings.significance,
            delta=settings.delta, examples_per_user=settings.examples_per_user))
    return results


def audit_summary(results: list[AuditResult]) -> dict[str, Any]:
    """JSON-ready: every run's record, and whether the audit has power and the run passes."""
    by_run = {r.run: r for r in results}
    private, control = by_run["private"], by_run["negative_control"]
    return {
        "runs": [r.record() for r in results],
        "audit_has_power": control.flagged,  # the negative control must be caught
        "private_run_passes": not private.flagged,
        "audited_epsilon": private.audited_epsilon,
        "accounted_epsilon": private.claimed_epsilon,
        "canary_design": "gradient (Dirac) canaries, white-box, one-run (Steinke et al. 2023)",
    }


def write_audit(settings: Mapping[str, Any], delta: float, summary_path: str | os.PathLike[str],
                table_path: str | os.PathLike[str], epsilon_covers: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """Run the audit of the ``audit`` config block; write its summary (JSON) and table (CSV). The summary says
    what the ε it audits covers: ``epsilon_covers``, the audited private run's (its plan's record), or the
    step's alone (:data:`dpscaling.privacy.epsilon_scope.AUDIT_SCOPE`: the audit target trains no model on data)."""
    from dpscaling.privacy.epsilon_scope import AUDIT_SCOPE

    results = run_audit(AuditSettings(**settings, delta=delta))
    summary = {**audit_summary(results), "epsilon_covers": dict(epsilon_covers or AUDIT_SCOPE)}
    with atomic_path(table_path) as tmp:
        pd.DataFrame([r.record() for r in results]).to_csv(tmp, index=False)
    write_json_atomic(summary_path, summary)
    return summary
