"""DP-BandMF's correlated noise as an optax transformation, built from jax-privacy's parts (docs/mechanisms.md).

The strategy C is b-banded lower-triangular Toeplitz with coefficients c (``c[0] ≥ c[1] ≥ … > 0``,
‖c‖₂ = 1), optimised by jax-privacy's ``matrix_factorization.toeplitz.optimize_banded_toeplitz`` for the
run's T steps. Step t adds σ̄·(C⁻¹z)_t to the clipped mean gradient: jax-privacy's
``noise_addition.matrix_factorization_privatizer`` with C⁻¹ as its streaming matrix
(``toeplitz.inverse_as_streaming_matrix``), whose state is the b − 1 previous outputs (C⁻¹z)_{t−1..t−b+1},
one parameter-sized float32 array each: memory O(b·M).

C is *not* column-normalised: its every column has norm ≤ ‖c‖ = 1, which is what the amplified BandMF
event assumes, and the sensitivity of any participation pattern is then jax-privacy's
``minsep_sensitivity_squared`` of c, exactly (the study's shuffled runs account with it).

The noise state is training state: :class:`CorrelatedNoiseState` holds the step count, the stream key and
the history, all checkpointed, so a resumed run draws the noise of an uninterrupted one. The key is fixed
for the run (step t draws with ``fold_in(key, t)``), never advanced: a private run's key is also its
batch-sampling secret, read back from the state on resume.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from dpscaling.dp.layers import in_unrolled_order
from dpscaling.core.errors import UserError
from dpscaling.privacy.mechanisms import STRATEGIES, Mechanism

__all__ = ["CorrelatedNoiseState", "add_correlated_noise", "correlated_noise", "sensitivity_squared",
           "strategy_coefficients"]


class CorrelatedNoiseState(NamedTuple):
    count: jnp.ndarray  # steps noised so far; step t draws z_t with fold_in(noise_key, t)
    noise_key: jax.Array  # the stream's key (the seed's study stream, or a private run's secret)
    history: jnp.ndarray | object  # jax-privacy's streaming state: the b − 1 previous (C⁻¹z) per leaf


def _toeplitz():
    from jax_privacy.matrix_factorization import toeplitz

    return toeplitz


@functools.lru_cache(maxsize=32)
def _optimised(steps: int, bands: int, strategy: str) -> tuple[float, ...]:
    reductions = {"mean_error": jnp.mean, "max_error": jnp.max, "last_iterate": lambda errors: errors[-1]}
    with jax.default_device(jax.devices("cpu")[0]), jax.default_matmul_precision("highest"):
        coefs = _toeplitz().optimize_banded_toeplitz(steps, bands, reduction_fn=reductions[strategy])
    # Exactly unit norm in float64, so the sensitivity bound ‖c‖ ≤ 1 holds after rounding too.
    coefs = np.asarray(coefs, np.float64)
    return tuple(float(c) for c in coefs / np.linalg.norm(coefs))


def strategy_coefficients(mechanism: Mechanism, steps: int, strategy: str = "mean_error") -> np.ndarray:
    """The b Toeplitz coefficients of ``mechanism``'s strategy for a T = ``steps`` run, unit L2 norm
    ([1.0] for DP-SGD). A pure function of (T, b, strategy): resume and every σ̄ of a grid reuse it."""
    if strategy not in STRATEGIES:
        raise UserError(f"training.bandmf_strategy: must be one of {STRATEGIES}, got {strategy!r}")
    if mechanism.bands > steps:
        raise UserError(f"training.mechanisms: {mechanism.name} has {mechanism.bands} bands, more than the "
                        f"run's {steps} steps")
    if not mechanism.correlated:
        return np.ones(1)
    return np.asarray(_optimised(int(steps), mechanism.bands, strategy))


def sensitivity_squared(coefficients: np.ndarray, steps: int, participations: int, min_separation: int) -> float:
    """Squared L2 sensitivity of C (sum clipped to 1) for an example in at most ``participations`` of ``steps``
    steps, any two at least ``min_separation`` apart (jax-privacy, arXiv 2405.13763 Thm 2); k for DP-SGD."""
    with jax.default_device(jax.devices("cpu")[0]):
        return float(_toeplitz().minsep_sensitivity_squared(
            jnp.asarray(coefficients, jnp.float32), min_sep=min_separation, max_participations=participations,
            n=steps))


def add_correlated_noise(coefficients: np.ndarray, stddev: float | jax.Array, key: jax.Array
                         ) -> optax.GradientTransformation:
    """Add σ̄·(C⁻¹z)_t, z_t ~ N(0, I), to update t (C: the b-banded Toeplitz strategy of ``coefficients``).

    ``stddev`` may be traced (one compiled step serves every σ̄). ``key`` is the default stream; a key set
    in the state (:func:`dpscaling.dp.noise.replace_noise_key`) overrides it. Noise is drawn in float32.
    """
    from jax_privacy import noise_addition

    inverse = _toeplitz().inverse_as_streaming_matrix(jnp.asarray(coefficients, jnp.float32))

    def privatizer(step_key):
        return noise_addition.matrix_factorization_privatizer(inverse, stddev=stddev, prng_key=step_key,
                                                              dtype=jnp.float32)

    def init_fn(params):
        _, history = privatizer(key).init(params)
        return CorrelatedNoiseState(jnp.zeros([], jnp.int32), key, history)

    def update_fn(updates, state, params=None):
        del params
        step_key = jax.random.fold_in(state.noise_key, state.count)
        noised, (_, history) = privatizer(step_key).update(updates, (step_key, state.history))
        return noised, CorrelatedNoiseState(state.count + 1, state.noise_key, history)

    return optax.GradientTransformation(init_fn, update_fn)


def correlated_noise(mechanism: Mechanism, stddev: float | jax.Array, key: jax.Array, steps: int,
                     strategy: str, layer_prefix: str | None = None) -> optax.GradientTransformation:
    """``mechanism``'s noise for a T = ``steps`` run (its :attr:`~dpscaling.privacy.mechanisms.Mechanism.noise_builder`);
    with ``layer_prefix``, a scanned model's noise drawn for its unrolled view (jax-privacy draws per leaf)."""
    noise = add_correlated_noise(strategy_coefficients(mechanism, steps, strategy), stddev, key)
    return noise if layer_prefix is None else in_unrolled_order(noise, layer_prefix)
