"""A deterministic synthetic "true law" and noisy training curves drawn from it (for tests and smoke runs).

L(M, T, σ̄) = E + A·M^(−α) + B·(1 + C·sigmoid((log σ̄ − s₀)/w))·T^(−β)  (sigmoid term 0 at σ̄ = 0):
noise slows convergence but every σ̄ shares the model's asymptote, the
assumption behind the authors' tying E to the noise-free E* in the
extrapolation (the paper fits E per curve). It is
monotone in the directions the paper's smoothing assumes: decreasing in M
and T, increasing in σ̄. Curves are sampled like the training job's logs (one
value per logging interval, at the interval's end) with Gaussian noise from a
seeded generator, in the tidy columns of :mod:`dpscaling.law.collect`.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pandas as pd
from scipy.special import expit

from dpscaling.law.collect import REFERENCE_RESULTS_COLUMNS, TIDY_COLUMNS
from dpscaling.law.columns import (
    BERT_MODEL_SIZES, CROSS_ENTROPY, FAMILY, ITERATIONS, LEARNING_RATE, MODEL, MODEL_SIZE, NOISE_BATCH_RATIO, SEED,
    STATUS)
from dpscaling.models.family import BERT

# The paper's grid (§3.2): BertTiny … BertLarge, σ̄ ∈ {0} ∪ {2^-k, k = 6..23}, LR 2^-7, 2^-8, 2^-9, 128K steps.
PAPER_MODELS = ("BertTiny", "BertMini", "BertSmall", "BertMedium", "BertBase", "BertLarge")
PAPER_NOISE_BATCH_RATIOS = (0.0, *(2.0**-k for k in range(6, 24)))
PAPER_LEARNING_RATES = (2.0**-7, 2.0**-8, 2.0**-9)


@dataclass(frozen=True)
class TrueLaw:
    E: float = 1.8
    A: float = 40.0
    alpha: float = 0.3
    B: float = 12.0
    beta: float = 0.4
    C: float = 4.0
    midpoint: float = np.log(2.0**-9)
    width: float = 1.5

    def __call__(self, model_size, iterations, nbr) -> np.ndarray:
        m, t, s = (np.asarray(v, dtype=float) for v in (model_size, iterations, nbr))
        with np.errstate(divide="ignore"):
            slowdown = np.where(s > 0, self.C * expit((np.log(np.where(s > 0, s, 1.0)) - self.midpoint)
                                                      / self.width), 0.0)
        return self.E + self.A * m ** (-self.alpha) + self.B * (1 + slowdown) * t ** (-self.beta)


def synthetic_results(law: TrueLaw = TrueLaw(), model_sizes=(1e5, 4e5, 1.6e6),
                      noise_batch_ratios=(0.0, 2.0**-12, 2.0**-10, 2.0**-8, 2.0**-6),
                      learning_rates=(2.0**-7, 2.0**-8), steps: int = 2000, log_every: int = 20,
                      noise: float = 0.02, seed: int = 0) -> pd.DataFrame:
    """Tidy measurements of every (model, σ̄, learning rate) run; the worse learning rate is 2% worse."""
    rng = np.random.default_rng(seed)
    iterations = np.arange(log_every, steps + 1, log_every, dtype=float)
    frames = []
    for index, size in enumerate(model_sizes):
        for rate_rank, rate in enumerate(learning_rates):
            for nbr in noise_batch_ratios:
                clean = law(size, iterations, nbr) * (1 + 0.02 * rate_rank)
                frames.append(pd.DataFrame({
                    MODEL: f"Synthetic{index}", MODEL_SIZE: float(size), LEARNING_RATE: rate,
                    ITERATIONS: iterations, NOISE_BATCH_RATIO: float(nbr),
                    CROSS_ENTROPY: clean + rng.normal(0.0, noise, len(iterations)), STATUS: "finished", SEED: 0,
                    FAMILY: BERT.name}))
    return pd.concat(frames, ignore_index=True)[TIDY_COLUMNS]


def seeded_results(law: TrueLaw = TrueLaw(), model_sizes=(1e5, 4e5, 1.6e6),
                   noise_batch_ratios=(0.0, 2.0**-12, 2.0**-10, 2.0**-8, 2.0**-6),
                   learning_rates=(2.0**-7, 2.0**-8), steps: int = 2000, log_every: int = 50,
                   seed_noise: float = 0.03, measurement_noise: float = 0.005, repeat_seeds=(1, 2),
                   repeat_points: int = 3, repeat_models: int = 1, seed: int = 0) -> pd.DataFrame:
    """Curves with seed-to-seed noise: each run's curve is offset by N(0, seed_noise²) as a whole, plus
    N(0, measurement_noise²) per measurement; the first ``repeat_points`` σ̄ of the ``repeat_models``
    smallest models at the best learning rate are also trained with ``repeat_seeds`` (fresh offsets).
    Primary seed 0."""
    rng = np.random.default_rng(seed)
    iterations = np.arange(log_every, steps + 1, log_every, dtype=float)
    repeated = {(m, 0, nbr) for m in range(repeat_models) for nbr in noise_batch_ratios[:repeat_points]}
    frames = []
    for index, size in enumerate(model_sizes):
        for rate_rank, rate in enumerate(learning_rates):
            for nbr in noise_batch_ratios:
                clean = law(size, iterations, nbr) * (1 + 0.02 * rate_rank)
                for run_seed in (0, *(repeat_seeds if (index, rate_rank, nbr) in repeated else ())):
                    loss = clean + rng.normal(0.0, seed_noise) + rng.normal(0.0, measurement_noise, len(iterations))
                    frames.append(pd.DataFrame({
                        MODEL: f"Synthetic{index}", MODEL_SIZE: float(size), LEARNING_RATE: rate,
                        ITERATIONS: iterations, NOISE_BATCH_RATIO: float(nbr), CROSS_ENTROPY: loss,
                        STATUS: "finished", SEED: run_seed, FAMILY: BERT.name}))
    return pd.concat(frames, ignore_index=True)[TIDY_COLUMNS]


def paper_reference_results(log_every: int = 100, steps: int = 128_000, law: TrueLaw = TrueLaw(),
                            seed: int = 0) -> pd.DataFrame:
    """Synthetic curves on the paper's whole grid in the authors' ``results.csv`` layout.

    The models take the authors' sizes (``BERT_MODEL_SIZES``); write with ``to_csv(index=False)``
    and read back with :func:`dpscaling.law.collect.read_reference_results`.
    """
    sizes = tuple(BERT_MODEL_SIZES[name] for name in PAPER_MODELS)
    results = synthetic_results(law, model_sizes=sizes, noise_batch_ratios=PAPER_NOISE_BATCH_RATIOS,
                                learning_rates=PAPER_LEARNING_RATES, steps=steps, log_every=log_every, seed=seed)
    names = {f"Synthetic{index}": name for index, name in enumerate(PAPER_MODELS)}
    return results.assign(**{MODEL: results[MODEL].map(names)})[list(REFERENCE_RESULTS_COLUMNS)]


@dataclass(frozen=True)
class DeterministicGaussianSigma:
    """Closed-form σ for unamplified DP-SGD: each example in k = max(1, q·T) steps → σ = √k · s_AG(ε, δ).

    s_AG is the analytic Gaussian mechanism (``dp_accounting.get_sigma_gaussian``).
    A real, if loose, calibration — handy where a full PLD accountant is too slow (tests, smoke runs).
    k is not rounded up, so σ is smooth in T and q.
    """
    delta: float = 1e-8

    def __call__(self, epsilon, steps, q) -> np.ndarray:
        import dp_accounting

        e, t, p = np.broadcast_arrays(*(np.asarray(v, dtype=float) for v in (epsilon, steps, q)))
        unique, inverse = np.unique(e, return_inverse=True)
        single = np.array([dp_accounting.get_sigma_gaussian(float(u), self.delta) for u in unique])
        return single[inverse].reshape(e.shape) * np.sqrt(np.maximum(p * t, 1.0))


def accounting_table(sigma: DeterministicGaussianSigma, epsilons, iterations, sampling_probabilities) -> pd.DataFrame:
    """A complete grid in the authors' accounting-table layout (write with ``to_csv(header=False, index=False)``)."""
    e, t, q = (a.ravel() for a in np.meshgrid(epsilons, iterations, sampling_probabilities, indexing="ij"))
    return pd.DataFrame({"Iterations": t, "Sampling Probability": q, "Epsilon": e, "Delta": sigma.delta,
                         "Noise Multiplier": sigma(e, t, q)})
