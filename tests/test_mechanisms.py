"""Noise mechanisms (docs/mechanisms.md): DP-BandMF's correlated noise, its cyclic Poisson batches, its
accounting, and its noise state as checkpointed training state."""

from __future__ import annotations

import dataclasses
import json
import math
import shutil
import subprocess
import sys
from pathlib import Path

import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np
import orbax.checkpoint as ocp
import pyarrow.parquet as pq
import pytest

from dp_training_data import build_packed_corpus, resume_from_midpoint
from dpscaling.accounting.matched import CyclicPoissonReduction, account_run
from dpscaling.workflow.cluster import train_resources
from dpscaling.data.shards import load_meta
from dpscaling.dp.correlated import add_correlated_noise, sensitivity_squared, strategy_coefficients
from dpscaling.core.errors import UserError
from dpscaling.privacy.mechanisms import DPSGD, mechanism_named, state_copies
from dpscaling.train import TrainConfig, run_training
from dpscaling.train.sampling import PADDING_INDEX, PoissonBatches

pytestmark = pytest.mark.slow(minutes=1)  # orders this module among the long ones (tests/conftest.py)

CURVE = ["step", "loss", "grad_norm", "clipped_fraction", "lr"]
JOB = Path(__file__).with_name("fault_job.py")


def _toeplitz():
    from jax_privacy.matrix_factorization import toeplitz

    return toeplitz


# --- names ----------------------------------------------------------------------------------------


def test_mechanism_names_and_their_errors():
    assert mechanism_named("dpsgd") is DPSGD and not DPSGD.correlated
    four = mechanism_named("bandmf-b4")
    assert (four.bands, four.cycle_length, four.noise_history(), four.correlated) == (4, 4, 3, True)
    for bad in ("bandmf-b1", "bandmf", "bandmf-b0", "dp-sgd", "BandMF-b4"):
        with pytest.raises(UserError, match=r"training\.mechanisms: must be 'dpsgd', 'bandmf-b<b>'.*b = 1 is dpsgd"):
            mechanism_named(bad)
    with pytest.raises(UserError, match=r"train\.mechanism"):
        TrainConfig(mechanism="bandmf-b1")
    with pytest.raises(UserError, match=r"train\.bandmf_strategy: must be one of"):
        TrainConfig(bandmf_strategy="rmse")
    with pytest.raises(UserError, match=r"train\.num_steps: must be >= the 8 bands"):
        TrainConfig(mechanism="bandmf-b8", num_steps=4)
    # A DP-SGD run's recorded config is the one it had before mechanisms existed (nothing retrains).
    assert "mechanism" not in TrainConfig().to_dict() and "bandmf_strategy" not in TrainConfig().to_dict()
    assert TrainConfig(mechanism="bandmf-b4").to_dict()["mechanism"] == "bandmf-b4"


# --- the noise ------------------------------------------------------------------------------------


def _noise_draws(coefficients, stddev: float, steps: int, seeds: int, width: int = 3) -> np.ndarray:
    """``seeds`` independent runs of the transform on zero updates: (seeds · width) × steps draws."""
    transform = add_correlated_noise(np.asarray(coefficients), jnp.float32(stddev), jax.random.PRNGKey(0))
    zeros = {"w": jnp.zeros(width)}

    def run(key):
        state = transform.init(zeros)._replace(noise_key=key)
        draws = []
        for _ in range(steps):
            noised, state = transform.update(zeros, state)
            draws.append(noised["w"])
        return jnp.stack(draws, axis=-1)  # width × steps

    draws = jax.jit(jax.vmap(run))(jax.random.split(jax.random.PRNGKey(7), seeds))
    return np.asarray(draws, np.float64).reshape(-1, steps)


def _assert_covariance(draws: np.ndarray, wanted: np.ndarray) -> None:
    """Every entry of the empirical covariance within 5 standard errors of ``wanted`` (Gaussian: the
    variance of a sample covariance entry is (Σ_ii Σ_jj + Σ_ij²)/n)."""
    n = len(draws)
    found = draws.T @ draws / n  # the mean is zero by construction
    error = np.sqrt((np.outer(np.diag(wanted), np.diag(wanted)) + wanted**2) / n)
    worst = np.max(np.abs(found - wanted) / error)
    assert worst < 5.0, f"covariance off by {worst:.1f} standard errors"


def test_one_band_is_exactly_dpsgd_noise_and_epsilon():
    """The correlated path at b = 1 draws i.i.d. N(0, σ̄²), and its accounting event is DP-SGD's."""
    stddev, steps = 0.6, 6
    _assert_covariance(_noise_draws([1.0], stddev, steps, seeds=3000), stddev**2 * np.eye(steps))
    from jax_privacy.experimental import accounting

    for truncated in (False, True):
        common = dict(noise_multiplier=1.3, iterations=50)
        if truncated:
            bandmf = accounting.truncated_amplified_bandmf_event(
                **common, num_bands=1, sampling_prob=0.01, largest_group_size=5000, truncated_batch_size=80)
            dpsgd = accounting.truncated_dpsgd_event(**common, sampling_prob=0.01, num_examples=5000,
                                                     truncated_batch_size=80)
        else:
            bandmf = accounting.amplified_bandmf_event(**common, num_bands=1, sampling_prob=0.01)
            dpsgd = accounting.dpsgd_event(**common, sampling_prob=0.01)
        assert bandmf == dpsgd
        epsilons = [dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-3).compose(e).get_epsilon(1e-6)
                    for e in (bandmf, dpsgd)]
        assert epsilons[0] == epsilons[1]


@pytest.mark.parametrize("bands", [2, 4])
def test_bandmf_noise_covariance_across_steps_is_the_strategys(bands):
    """Over many seeds on a tiny parameter vector, Cov(noise_s, noise_t) = σ̄² (C⁻¹C⁻ᵀ)_st."""
    stddev, steps = 0.7, 10
    coefficients = strategy_coefficients(mechanism_named(f"bandmf-b{bands}"), steps)
    assert np.linalg.norm(coefficients) == pytest.approx(1.0, abs=1e-12)  # every column of C at norm ≤ 1
    strategy = np.asarray(_toeplitz().materialize_lower_triangular(jnp.asarray(coefficients), steps), np.float64)
    assert np.count_nonzero(strategy[:, 0]) == bands  # b-banded
    inverse = np.linalg.inv(strategy)
    wanted = stddev**2 * inverse @ inverse.T
    draws = _noise_draws(coefficients, stddev, steps, seeds=4000)
    _assert_covariance(draws, wanted)
    # Not DP-SGD's: neighbouring steps are anti-correlated, and the noise of the sum of all updates is
    # below the i.i.d. σ̄²·T.
    assert wanted[1, 0] < 0 and np.sum(wanted) < stddev**2 * steps
    assert np.var(draws.sum(axis=1)) < 0.8 * stddev**2 * steps


def test_strategy_is_optimised_per_horizon_and_refuses_bad_settings():
    four = mechanism_named("bandmf-b4")
    a, b = strategy_coefficients(four, 40), strategy_coefficients(four, 40)
    np.testing.assert_array_equal(a, b)  # a pure function of (T, b, strategy): resume and every σ̄ reuse it
    assert np.all(np.diff(a) < 0) and np.all(a > 0)
    assert not np.allclose(strategy_coefficients(four, 40, "max_error"), a)
    np.testing.assert_array_equal(strategy_coefficients(DPSGD, 40), [1.0])
    with pytest.raises(UserError, match="training.bandmf_strategy"):
        strategy_coefficients(four, 40, "rmse")
    with pytest.raises(UserError, match="more than the run's 3 steps"):
        strategy_coefficients(four, 3)


# --- accounting -----------------------------------------------------------------------------------


def test_bandmf_reduction_is_jax_privacys_event():
    """The private run's accounting goes through CyclicPoissonReduction: the same dp-accounting event as
    jax-privacy's truncated amplified BandMF event of (σ, T, b, q_g, ⌊N/b⌋, L)."""
    from jax_privacy.experimental import accounting

    reduced = CyclicPoissonReduction.of(dataset_size=10_003, expected_batch_size=40, steps=101, bands=4)
    assert (reduced.group_size, reduced.rounds) == (2500, 26)
    assert reduced.sampling_probability == pytest.approx(40 / 2500)
    theirs = accounting.truncated_amplified_bandmf_event(
        1.1, 101, num_bands=4, sampling_prob=reduced.sampling_probability, largest_group_size=2500,
        truncated_batch_size=64)
    ours = accounting.truncated_dpsgd_event(1.1, reduced.rounds, sampling_prob=reduced.sampling_probability,
                                            num_examples=reduced.group_size, truncated_batch_size=64)
    assert theirs == ours
    with pytest.raises(UserError, match="groups of 9, smaller than the expected batch 10"):
        CyclicPoissonReduction.of(dataset_size=36, expected_batch_size=10, steps=8, bands=4)


def test_study_accounting_of_a_correlated_mechanism_uses_the_strategys_sensitivity():
    """A shuffled study run can place two participations one step apart: its ε is that of one Gaussian
    with jax-privacy's min-separation-1 sensitivity, which for C ≠ I exceeds DP-SGD's √k."""
    coefficients = strategy_coefficients(mechanism_named("bandmf-b4"), 30)
    common = dict(dataset_size=100, expected_batch_size=20, steps=30, delta=1e-6, noise_batch_ratio=0.5)
    dpsgd = account_run("shuffle", None, **common)
    bandmf = account_run("shuffle", None, **common, mechanism="bandmf-b4", coefficients=coefficients)
    assert dpsgd.max_participations == bandmf.max_participations == 6
    squared = sensitivity_squared(coefficients, 30, 6, 1)
    assert bandmf.sensitivity == pytest.approx(math.sqrt(squared)) and squared > 6
    # Worst case by brute force: k participations, any placement, C's columns summed.
    strategy = np.asarray(_toeplitz().materialize_lower_triangular(jnp.asarray(coefficients), 30), np.float64)
    consecutive = np.linalg.norm(strategy[:, :6].sum(axis=1))
    assert bandmf.sensitivity == pytest.approx(consecutive, rel=1e-5)
    from dpscaling.accounting.gaussian import gaussian_epsilon

    assert bandmf.epsilon == pytest.approx(gaussian_epsilon(0.5 * 20 / bandmf.sensitivity, 1e-6))
    assert bandmf.epsilon > dpsgd.epsilon
    assert "mechanism" not in dpsgd.record() and bandmf.record()["bands"] == 4
    assert dpsgd.adjacency == bandmf.adjacency == "zero-out"  # fixed batches: an example replaced by a null one
    # The cyclic sampler keeps participations N // B = 5 ≥ b apart: the strategy's columns do not overlap, √k.
    cyclic = account_run("cyclic", None, **common, mechanism="bandmf-b4", coefficients=coefficients)
    assert cyclic.max_participations == 6 and cyclic.sensitivity == pytest.approx(math.sqrt(6), rel=1e-5)
    assert cyclic.epsilon == pytest.approx(dpsgd.epsilon, rel=1e-5) and cyclic.epsilon < bandmf.epsilon
    with pytest.raises(ValueError, match="needs its strategy coefficients"):
        account_run("shuffle", None, **common, mechanism="bandmf-b4")


# --- cyclic Poisson batches -----------------------------------------------------------------------


@pytest.mark.parametrize("n_rows,bands", [(1003, 4), (600, 3)])
def test_cyclic_poisson_never_lets_an_example_join_more_steps_than_accounted(n_rows, bands):
    steps, batch, size = 37, 30, 64
    key = np.array([11, 22], np.uint32)
    sampler = PoissonBatches(n_rows, batch, size, key, cycle_length=bands)
    reduced = CyclicPoissonReduction.of(n_rows, batch, steps, bands)
    assert sampler.sampling_probability == pytest.approx(reduced.sampling_probability)
    seen: dict[int, list[int]] = {}
    sizes = []
    for step in range(steps):
        indices = sampler.indices(step)
        assert len(indices) == size
        real = indices[indices != PADDING_INDEX]
        assert len(set(real.tolist())) == len(real)
        sizes.append(len(real))
        for index in real.tolist():
            seen.setdefault(index, []).append(step)
    assert max(len(s) for s in seen.values()) <= reduced.rounds
    for taken in seen.values():  # one group each: every step of an example is ≡ its group mod b, b apart
        assert len({step % bands for step in taken}) == 1 and np.all(np.diff(taken) >= bands)
    groups = [{i for i, taken in seen.items() if taken[0] % bands == g} for g in range(bands)]
    assert sum(len(g) for g in groups) <= bands * reduced.group_size
    assert abs(np.mean(sizes) - batch) < 4 * math.sqrt(batch / len(sizes)) + 1
    # Random access (a resume) replays the one generator: the same batches, in any order.
    again = PoissonBatches(n_rows, batch, size, key, cycle_length=bands)
    for step in (30, 5, 36, 0):
        np.testing.assert_array_equal(again.indices(step), sampler.indices(step))


# --- real runs: the private guarantee, the state, resume ------------------------------------------


PRIVATE = dict(
    model="custom",
    model_overrides=dict(num_layers=1, num_heads=2, hidden_size=32),
    batch_size=16,
    microbatch_size=8,
    num_steps=20,
    warmup_steps=5,
    learning_rate=2.0**-8,
    log_every=5,
    checkpoint_every=10,
    sampling="truncated_poisson",
    target_epsilon=4.0,
    mechanism="bandmf-b4",
)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("packed")
    build_packed_corpus(directory, seq_len=32, n_documents=40)
    return directory


@pytest.fixture(scope="module")
def private_bandmf(corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("bandmf")
    config = TrainConfig(**PRIVATE)
    summary = run_training(config, corpus, out / "metrics.parquet", out / "ckpt")
    return config, summary, out


def _restored_state(checkpoint_dir: Path, step: int):
    from dpscaling.train.checkpoint import STATE_ITEM

    return ocp.StandardCheckpointer().restore((checkpoint_dir / "state" / str(step) / STATE_ITEM).absolute())


def test_private_bandmf_epsilon_recomputed_independently(private_bandmf, corpus):
    """ε from the run's recorded σ, q, T, b and L with jax-privacy's truncated amplified BandMF event
    (not dpscaling's reduction), composed by dp-accounting's PLD at a fixed discretisation (not dpscaling's rule)."""
    from jax_privacy.experimental import accounting

    config, summary, out = private_bandmf
    row = pq.read_table(out / "metrics.parquet").to_pandas().iloc[-1]
    assert (row["mechanism"], int(row["bands"]), row["accountant"]) == ("bandmf-b4", 4, "truncated_poisson")
    n = load_meta(corpus).n_train
    assert int(row["dataset_size"]) == n and int(row["group_size"]) == n // 4
    assert row["sampling_probability"] == pytest.approx(config.batch_size / (n // 4), rel=1e-12)
    assert int(row["accounted_steps"]) == config.num_steps and int(row["accounted_rounds"]) == 5

    interval = 3e-4  # fixed (not dpscaling's rule): ε within 1e-6 of 1e-4's here, at a third of the cost

    def event(sigma: float):
        return accounting.truncated_amplified_bandmf_event(
            sigma, int(row["accounted_steps"]), num_bands=int(row["bands"]),
            sampling_prob=float(row["sampling_probability"]), largest_group_size=n // int(row["bands"]),
            truncated_batch_size=int(row["truncated_batch_size"]))

    def epsilon(sigma: float) -> float:
        return dp_accounting.pld.PLDAccountant(value_discretization_interval=interval).compose(
            event(sigma)).get_epsilon(float(row["delta"]))

    spent = epsilon(float(row["sigma"]))
    assert row["epsilon"] == pytest.approx(spent, rel=0.01)
    assert row["epsilon"] <= 4.0 * (1 + 1e-9) and spent == pytest.approx(4.0, rel=0.01)
    # The equal split into b groups is jax-privacy's under zero-out adjacency only: the record says so, and the
    # same event under zero-out (dp-accounting's REPLACE_SPECIAL) spends the same ε as under add/remove.
    assert row["adjacency"] == "zero-out"
    zero_out = dp_accounting.pld.PLDAccountant(dp_accounting.NeighboringRelation.REPLACE_SPECIAL,
                                               value_discretization_interval=interval).compose(event(float(row["sigma"])))
    assert zero_out.get_epsilon(float(row["delta"])) == pytest.approx(spent, rel=1e-9)
    assert epsilon(0.97 * float(row["sigma"])) > 4.0  # calibrated, not merely below
    assert summary.privacy["epsilon"] == pytest.approx(row["epsilon"])
    assert json.loads(row["bandmf_coefficients"]) == pytest.approx(
        strategy_coefficients(config.noise_mechanism, config.num_steps).tolist())


def test_bandmf_state_holds_b_minus_1_draws_and_resumes_exactly(private_bandmf, corpus, tmp_path):
    config, _, out = private_bandmf
    state = _restored_state(out / "ckpt", config.num_steps)
    history = [np.asarray(leaf) for path, leaf in jax.tree_util.tree_leaves_with_path(state)
               if any(getattr(k, "key", getattr(k, "name", None)) == "history" for k in path)]
    n_params = sum(np.asarray(leaf).size for leaf in jax.tree.leaves(state["params"]))
    assert history and all(h.shape[0] == 3 for h in history)  # b − 1 = 3 past draws per parameter array
    assert sum(h.size for h in history) == 3 * n_params and np.any(np.concatenate([h.ravel() for h in history]))
    # Resume from the mid-run checkpoint (the secret key and the noise history come back with it).
    resumed = tmp_path / "resumed"
    resume_from_midpoint(config, corpus, out, resumed)
    for a, b in zip(jax.tree.leaves(_restored_state(resumed / "ckpt", config.num_steps)), jax.tree.leaves(state)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_a_bandmf_run_computing_its_padding_microbatches_too_gives_the_identical_curve(private_bandmf, corpus,
                                                                                      tmp_path):
    """BandMF's cyclic Poisson batches: the second half computed with every microbatch of padding logs, bit for
    bit, the curve of the run that skipped them."""
    config, _, out = private_bandmf
    resume_from_midpoint(config, corpus, out, tmp_path / "unskipped", dataclasses.replace(config, skip_padding=False))


def test_bandmf_study_run_killed_mid_run_resumes_to_the_identical_curve(corpus, tmp_path, job_env):
    """kill -9 after step 15 (checkpoints at 5 and 10), rerun: the uninterrupted curve, bit for bit."""
    config = TrainConfig(model="custom", model_overrides=dict(num_layers=1, num_heads=2, hidden_size=32),
                         batch_size=8, warmup_steps=2, noise_batch_ratio=0.05, learning_rate=2.0**-8, num_steps=20,
                         log_every=5, checkpoint_every=5, mechanism="bandmf-b3")
    reference = tmp_path / "reference"
    run_training(config, corpus, reference / "metrics.parquet", reference / "ckpt")
    killed = tmp_path / "killed"
    result = subprocess.run([sys.executable, str(JOB), json.dumps(config.to_dict()), str(corpus),
                             str(killed / "metrics.parquet"), str(killed / "ckpt"), "after-step=15"],
                            env=job_env, capture_output=True, text=True, timeout=600)
    assert result.returncode == -9, result.stderr[-3000:]
    summary = run_training(config, corpus, killed / "metrics.parquet", killed / "ckpt")
    assert summary.resumed_from_step == 10
    found = pq.read_table(killed / "metrics.parquet", columns=CURVE).to_pydict()
    wanted = pq.read_table(reference / "metrics.parquet", columns=CURVE).to_pydict()
    for name in CURVE:
        np.testing.assert_array_equal(found[name], wanted[name], err_msg=name)


def test_job_memory_counts_the_noise_history():
    """O(b·M): each past draw is one more float32 copy of the parameters (and orbax's host copy)."""
    assert state_copies("dpsgd") == 2 and state_copies("bandmf-b8") == 9
    common = dict(steps=1000, batch=64, seq_len=128)
    dpsgd = train_resources(100_000_000, **common)
    bandmf = train_resources(100_000_000, **common, mechanism="bandmf-b8")
    assert bandmf.mem_mb - dpsgd.mem_mb == math.ceil(7 * 8 * 100_000_000 / 2**20)


# --- the grid ---------------------------------------------------------------------------------------


def test_the_grid_trains_sigma_zero_once_and_every_law_shares_it():
    from dpscaling.workflow.grid import law_points, main_grid, mechanisms
    from test_config_schema import validated

    config = validated({"training": {"mechanisms": ["dpsgd", "bandmf-b4"], "noise_batch_ratios": [0.0, 0.5],
                                     "learning_rates": [0.5]}, "models": {"names": ["BertTiny"]}})
    grid = main_grid(config)
    assert sorted((p.mechanism, p.noise_batch_ratio) for p in grid) == [
        ("bandmf-b4", 0.5), ("dpsgd", 0.0), ("dpsgd", 0.5)]
    shared = law_points(grid, "bandmf-b4", mechanisms(config))
    assert sorted((p.mechanism, p.noise_batch_ratio) for p in shared) == [("bandmf-b4", 0.5), ("dpsgd", 0.0)]
    both = validated({"training": {"mechanisms": ["dpsgd", "bandmf-b4"], "seq_lens": [64, 128]}})
    with pytest.raises(UserError, match=r"training\.mechanisms: .* with training\.seq_lens"):
        main_grid(both)


def test_a_mechanism_trains_its_noisy_runs_at_its_own_learning_rates():
    """``training.mechanism_learning_rates``: BandMF's noisy runs at its rates, DP-SGD's (and the shared σ̄ = 0
    runs) at ``training.learning_rates``; a repeat point repeats in the mechanisms whose rates hold it."""
    from dpscaling.workflow.grid import main_grid, repeat_grid
    from test_config_schema import validated

    training = {"mechanisms": ["dpsgd", "bandmf-b4"], "noise_batch_ratios": [0.0, 0.5], "learning_rates": [0.5],
                "mechanism_learning_rates": {"bandmf-b4": [0.25, 0.125]}, "repeat_seeds": [1],
                "repeat_points": [{"model": "BertTiny", "noise_batch_ratio": 0.5, "learning_rate": 0.25}]}
    config = validated({"training": training, "models": {"names": ["BertTiny"]}})
    assert sorted((p.mechanism, p.noise_batch_ratio, p.learning_rate) for p in main_grid(config)) == [
        ("bandmf-b4", 0.5, 0.125), ("bandmf-b4", 0.5, 0.25), ("dpsgd", 0.0, 0.5), ("dpsgd", 0.5, 0.5)]
    assert [(p.mechanism, p.learning_rate, p.seed) for p in repeat_grid(config)] == [("bandmf-b4", 0.25, 1)]
    nowhere = {**training, "repeat_points": [{"model": "BertTiny", "noise_batch_ratio": 0.5, "learning_rate": 0.75}]}
    with pytest.raises(UserError, match=r"repeat_points\[0\]\.learning_rate: 0\.75 is not in training\.learning_rates "
                                        r"or training\.mechanism_learning_rates \(\[0\.5, 0\.25, 0\.125\]\)"):
        repeat_grid(validated({"training": nowhere, "models": {"names": ["BertTiny"]}}))
    public = {**training, "repeat_points": [{"model": "BertTiny", "noise_batch_ratio": 0.0, "learning_rate": 0.25}]}
    with pytest.raises(UserError, match=r"repeat_points\[0\]: .* is in no mechanism's grid \(sigma-bar = 0 trains at "
                                        r"dpsgd's learning rates only: \[0\.5\]\)"):
        repeat_grid(validated({"training": public, "models": {"names": ["BertTiny"]}}))
    stray = {**training, "mechanism_learning_rates": {"bandmf-b16": [0.25]}}
    with pytest.raises(UserError, match=r"training\.mechanism_learning_rates: \['bandmf-b16'\] not in "
                                        r"training\.mechanisms \(\['dpsgd', 'bandmf-b4'\]\)"):
        main_grid(validated({"training": stray, "models": {"names": ["BertTiny"]}}))


def test_a_mechanism_trains_at_a_multiple_of_each_models_tuned_rate():
    """``{tuned_doublings: k}``: BandMF's noisy runs at each model's chosen rate times 2^k alone, DP-SGD's at the
    protocol's rates (the chosen one and a doubling above), σ̄ = 0 once at the chosen rate; a ``tuned`` repeat
    point repeats in each mechanism at its own tuned rate; refused without the protocol, naming the key."""
    from dpscaling.workflow.grid import correction_grid, main_grid, possible_grid, repeat_grid
    from test_config_schema import validated

    training = {"mechanisms": ["dpsgd", "bandmf-b4"], "noise_batch_ratios": [0.0, 0.5], "learning_rates": "tuned",
                "mechanism_learning_rates": {"bandmf-b4": {"tuned_doublings": 2}}, "repeat_seeds": [1],
                "repeat_points": [{"model": "A", "noise_batch_ratio": 0.5, "learning_rate": "tuned"},
                                  {"model": "B", "noise_batch_ratio": 0.0, "learning_rate": "tuned"}]}
    config = validated({"training": training, "models": {"names": ["A", "B"]},
                        "learning_rate_protocol": {"ladder": [0.02, 0.01, 0.005], "rates_below": 0, "rates_above": 1}})
    chosen = {"A": 0.01, "B": 0.005}
    assert sorted((p.mechanism, p.model, p.noise_batch_ratio, p.learning_rate) for p in main_grid(config, chosen)) == [
        ("bandmf-b4", "A", 0.5, 0.04), ("bandmf-b4", "B", 0.5, 0.02),
        ("dpsgd", "A", 0.0, 0.01), ("dpsgd", "A", 0.5, 0.01), ("dpsgd", "A", 0.5, 0.02),
        ("dpsgd", "B", 0.0, 0.005), ("dpsgd", "B", 0.5, 0.005), ("dpsgd", "B", 0.5, 0.01)]
    assert sorted((p.mechanism, p.model, p.noise_batch_ratio, p.learning_rate) for p in repeat_grid(config, chosen)) == [
        ("bandmf-b4", "A", 0.5, 0.04), ("dpsgd", "A", 0.5, 0.01), ("dpsgd", "B", 0.0, 0.005)]
    assert {p.learning_rate for p in possible_grid(config) if p.mechanism == "bandmf-b4"} == {0.08, 0.04, 0.02}
    correction = {"enabled": True, "physical_batch": 4096, "points": [{"model": "A", "noise_batch_ratio": 0.5,
                                                                     "learning_rate": "tuned"}]}
    assert {(p.mechanism, p.learning_rate) for p in correction_grid(
        validated({**config, "fit": {"physical_batch_correction": correction}}), chosen)} == {("dpsgd", 0.01)}
    given = {**training, "learning_rates": [0.01], "repeat_points": []}
    with pytest.raises(UserError, match=r"training\.mechanism_learning_rates\.bandmf-b4: tuned_doublings multiplies "
                                        r"the learning-rate protocol's chosen rate: set training\.learning_rates: tuned"):
        main_grid(validated({"training": given, "models": {"names": ["A"]}}))


def test_a_bandmf_audit_samples_cyclically_and_calibrates_with_the_bandmf_accountant():
    """private_model's matched audit of a BandMF plan: the canaries sampled by cyclic Poisson at the group's
    rate, BandMF's correlated noise at the σ its accountant calibrates; the negative control (no noise,
    the same claim) is caught, the private run is not."""
    from dpscaling.privacy.audit import AuditSettings, audit_summary, run_audit

    settings = AuditSettings(n_canaries=400, expected_batch_size=20, steps=40, epsilon=2.0, delta=1e-5,
                             microbatch_size=20, mechanism="bandmf-b4")
    results = run_audit(settings)
    private = next(result for result in results if result.run == "private")
    assert private.sampling_probability == pytest.approx(20 / (private.n_included // 4))
    dpsgd = account_run("truncated_poisson", None, dataset_size=private.n_included, expected_batch_size=20, steps=40,
                        delta=1e-5, target_epsilon=2.0, multiple=20)
    assert private.sigma != pytest.approx(dpsgd.sigma, rel=1e-3)  # BandMF's own calibration, not DP-SGD's
    summary = audit_summary(results)
    assert summary["audit_has_power"] and summary["private_run_passes"]


def test_a_new_mechanism_is_one_entry_in_the_registry(tmp_path) -> None:
    """A throw-away mechanism added to a copy of the library's tree by one edit of dpscaling/privacy/mechanisms.py (its
    name, bands and noise builder) is accepted by the config, trained as a grid axis, priced and accounted as
    what its bands reduce to, and builds its noise; the config names it, and no other file is edited. An
    unregistered name is refused, naming the key."""
    import os

    import yaml

    from conftest import REPO
    from dpscaling.config.schema import validate_config
    from dpscaling.config.checks import check_config

    shutil.copytree(REPO / "src", tmp_path / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    shutil.copytree(REPO / "workflow" / "schemas", tmp_path / "workflow" / "schemas")
    module = tmp_path / "src" / "dpscaling" / "privacy" / "mechanisms.py"
    text = module.read_text(encoding="utf-8")
    anchor = "REGISTERED: dict[str, Mechanism] = {DPSGD.name: DPSGD}\n"
    assert text.count(anchor) == 1
    module.write_text(text.replace(anchor, anchor + 'REGISTERED["throwaway"] = Mechanism(\n    "throwaway", 1, '
                                   'noise_builder="dpscaling.dp.noise:gaussian_noise")\n'), encoding="utf-8")
    changed = [path.relative_to(tmp_path).as_posix() for path in tmp_path.rglob("*") if path.is_file()
               and path.read_bytes() != (REPO / path.relative_to(tmp_path)).read_bytes()]
    assert changed == ["src/dpscaling/privacy/mechanisms.py"]
    script = """
import json, sys, yaml
import jax, jax.numpy as jnp
from dpscaling.accounting.matched import account_run
from dpscaling.accounting.pricing import price
from dpscaling.config.schema import validate_config
from dpscaling.workflow.grid import main_grid
from dpscaling.privacy.mechanisms import mechanism_named
from dpscaling.config.checks import check_config
from dpscaling.train.config import TrainConfig
config = yaml.safe_load(open(sys.argv[1]))
config["training"]["mechanisms"] = ["dpsgd", "throwaway"]
config["training"]["learning_rates"] = [0.0078125]  # not tuned: the grid needs no protocol's choice
config["training"]["repeat_points"] = config["fit"]["physical_batch_correction"]["points"] = []
validate_config(config)
check_config(config)
grid = main_grid(config)
new, old = (price(name, "poisson", 4.0, 1e-6, 20000, 256, 300).sigma for name in ("throwaway", "dpsgd"))
run = account_run("truncated_poisson", None, dataset_size=20000, expected_batch_size=256, steps=300, delta=1e-6,
                  target_epsilon=4.0, mechanism="throwaway", truncated_batch_size=320)
noise = mechanism_named("throwaway").noise_transform(jnp.float32(0.5), jax.random.PRNGKey(0), 10, "mean_error")
update, _ = noise.update({"w": jnp.zeros(3)}, noise.init({"w": jnp.zeros(3)}))
print(json.dumps({"jobs": sum(point.mechanism == "throwaway" for point in grid),
                  "noisy": len({point.noise_batch_ratio for point in grid if point.mechanism == "dpsgd"}) - 1,
                  "sigma": [new, old], "run_sigma": run.sigma, "run_mechanism": run.mechanism,
                  "trains": TrainConfig(mechanism="throwaway").mechanism, "noise": float(jnp.std(update["w"]))}))
"""
    done = subprocess.run([sys.executable, "-c", script, str(REPO / "config" / "config.yaml")], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(tmp_path / "src")}, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout)
    assert seen["jobs"] == seen["noisy"] * 4 > 0  # its noisy runs, one per model × σ̄ > 0 (σ̄ = 0 is shared)
    assert seen["sigma"][0] == seen["sigma"][1] and seen["run_mechanism"] == "throwaway"  # one band: DP-SGD's price
    assert seen["run_sigma"] >= seen["sigma"][0] and seen["trains"] == "throwaway" and seen["noise"] > 0
    # The repository's registry does not know it: the config check refuses it by name.
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    config["training"]["mechanisms"] = ["dpsgd", "throwaway"]
    validate_config(config)
    with pytest.raises(UserError, match=r"training\.mechanisms: must be 'dpsgd', 'bandmf-b<b>'.*'throwaway'"):
        check_config(config)
