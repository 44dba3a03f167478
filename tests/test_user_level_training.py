"""User-level sampling (ULS, docs/private-training.md): a user's sequences clipped as one, users drawn by
truncated Poisson sampling, each run's ε recomputed with dp-accounting from the run's own record."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import dp_accounting
import jax
import jax.numpy as jnp
import numpy as np
import pyarrow.parquet as pq
import pytest

from dp_training_data import build_packed_corpus, resume_from_midpoint
from dpscaling.data.shards import load_meta, load_users
from dpscaling.data.users import UserSpec, users_of_contributions
from dpscaling.dp import clipped_mean_grad, vmap_clipped_sum
from dpscaling.core.errors import UserError
from dpscaling.train import TrainConfig, run_training
from dpscaling.train.sampling import PADDING_INDEX, UserExamples, UserPoissonStepBatches, secret_key
from dpscaling.train.units import UserUnit
from test_dp import BATCH, _setup
from test_private_training import PRIVATE, TARGET_EPSILON

pytestmark = pytest.mark.slow(minutes=2)

# The private runs' small model and schedule, sampling users: B = 16 expected users of 3 sequences each.
USER_LEVEL = PRIVATE | dict(sampling="user_poisson", examples_per_user_per_batch=3)


def test_a_users_sequences_are_clipped_as_one_contribution() -> None:
    loss_fn, params, batch = _setup()
    per_user = 2
    grouped = jax.tree.map(lambda leaf: leaf.reshape((BATCH // per_user, per_user) + leaf.shape[1:]), batch)
    clip = 0.05
    found = clipped_mean_grad(UserUnit().losses(loss_fn), params, grouped, clipped_sum=vmap_clipped_sum,
                              clip_norm=clip, microbatch_size=2)
    # independently: each user's gradient of its mean loss, clipped to C then divided by C, averaged over users
    wanted = jax.tree.map(jnp.zeros_like, params)
    user_grad = jax.jit(jax.grad(lambda p, rows: jnp.mean(loss_fn(p, rows))))  # one program for every user
    for user in range(BATCH // per_user):
        grad = user_grad(params, jax.tree.map(lambda leaf: leaf[user], grouped))
        norm = jnp.sqrt(sum(jnp.sum(g**2) for g in jax.tree.leaves(grad)))
        wanted = jax.tree.map(lambda w, g: w + g / jnp.maximum(norm, clip) / (BATCH // per_user), wanted, grad)
    for got, want in zip(jax.tree.leaves(found.grad), jax.tree.leaves(wanted)):
        np.testing.assert_allclose(got, want, rtol=2e-4, atol=1e-7)
    # not the sequence-level clipped mean: grouping changes what is bounded
    sequence = clipped_mean_grad(loss_fn, params, batch, clipped_sum=vmap_clipped_sum, clip_norm=clip)
    assert not np.allclose(jax.tree.leaves(sequence.grad)[0], jax.tree.leaves(found.grad)[0], rtol=1e-3)
    assert found.losses.shape == (BATCH // per_user,)


def test_a_selected_user_contributes_m_of_its_own_sequences_cycled_when_it_has_fewer() -> None:
    users = users_of_contributions([1, 5, 2, 40])
    examples = UserExamples(users, 3, [7])
    rows = examples.rows(4, np.array([3, 0, PADDING_INDEX, 1, 2]))
    assert rows.shape == (5, 3) and (rows[2] == PADDING_INDEX).all()
    for slot, user in zip((0, 1, 3, 4), (3, 0, 1, 2)):
        assert (users[rows[slot]] == user).all()
    assert len(set(rows[0])) == 3 and len(set(rows[3])) == 3  # without replacement where it has 3 or more
    assert set(rows[1]) == {0} and set(rows[4]) == {6, 7}  # cycled where it has fewer
    np.testing.assert_array_equal(rows, examples.rows(4, np.array([3, 0, PADDING_INDEX, 1, 2])))  # per step
    assert not np.array_equal(rows[0], examples.rows(5, np.array([3]))[0])
    # an id that holds no sequence has no row to give (it would read its neighbour's): refused, naming data.users
    with pytest.raises(UserError, match=r"data.users: user ids run 0..4, each holding a sequence, but 1 hold none "
                                        r"\(ids 2\)"):
        UserExamples(np.array([0, 1, 1, 3, 4, 4]), 3, [7])


def test_users_are_sampled_at_the_user_rate_whatever_they_contributed() -> None:
    users = users_of_contributions([1] * 300 + [50] * 100)  # a quarter of the users write 94% of the text
    rows = np.zeros((len(users), 4), np.int32)
    batches = UserPoissonStepBatches(rows, 0, 40, 64, seed=0, key=secret_key(), users=users, examples_per_user=2)
    counts = np.zeros(400)
    for step in range(400):
        selected = batches.users(step)
        counts[selected[selected != PADDING_INDEX]] += 1
    rate = counts / 400
    assert rate.mean() == pytest.approx(40 / 400, rel=0.05)
    assert rate[:300].mean() == pytest.approx(rate[300:].mean(), rel=0.15)  # the rate is per user, not per sequence


def test_bad_user_level_configs_are_refused_naming_the_key(tmp_path: Path) -> None:
    with pytest.raises(UserError, match="train.clipping"):
        TrainConfig(**(USER_LEVEL | dict(clipping="ghost")))
    with pytest.raises(UserError, match="train.examples_per_user_per_batch"):
        TrainConfig(**(USER_LEVEL | dict(sampling="truncated_poisson")))
    for sampling in ("user_poisson", "els_poisson"):  # a subset of sequences would split users: train_users
        with pytest.raises(UserError, match=f"train.train_sequences: draws sequences and splits users; {sampling}"):
            TrainConfig(**(USER_LEVEL | dict(sampling=sampling, examples_per_user_per_batch=1, train_sequences=100)))
    plain = tmp_path / "plain"
    build_packed_corpus(plain, seq_len=64, n_documents=8)
    for sampling in ("user_poisson", "els_poisson"):  # both protect users: the data must name them
        asked = TrainConfig(**(USER_LEVEL | dict(sampling=sampling, examples_per_user_per_batch=1)))
        with pytest.raises(UserError, match="data.users"):
            run_training(asked, plain, tmp_path / "m.parquet", tmp_path / sampling)


@pytest.fixture(scope="module")
def user_corpus(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("users")
    build_packed_corpus(directory, seq_len=64, n_documents=60,
                        users=UserSpec("synthetic", mean_examples=4.0, max_examples=12))
    return directory


@pytest.fixture(scope="module")
def user_run(user_corpus, tmp_path_factory):
    out = tmp_path_factory.mktemp("uls")
    config = TrainConfig(**USER_LEVEL)
    return config, run_training(config, user_corpus, out / "metrics.parquet", out / "ckpt"), out


def test_a_user_level_runs_epsilon_is_recomputed_with_the_users_as_the_unit(user_run, user_corpus) -> None:
    config, summary, out = user_run
    row = pq.read_table(out / "metrics.parquet").to_pandas().iloc[-1]
    users = load_users(user_corpus)
    assert (row["sampler"], row["accountant"], row["privacy_unit"]) == ("user_poisson", "truncated_poisson", "user")
    # N is the number of users, not of sequences, and q = B / N over users
    n_users = len(np.unique(users))
    assert int(row["dataset_size"]) == int(row["users"]) == n_users < load_meta(user_corpus).n_train
    assert int(row["examples_per_user"]) == np.bincount(users).max() <= 12
    assert row["sampling_probability"] == pytest.approx(config.batch_size / n_users, rel=1e-12)
    assert np.isfinite(row["loss"]) and summary.privacy["epsilon"] == pytest.approx(row["epsilon"])

    # dp-accounting alone, from the run's recorded parameters
    def epsilon_at(sigma: float) -> float:
        event = dp_accounting.SelfComposedDpEvent(
            dp_accounting.TruncatedSubsampledGaussianDpEvent(
                dataset_size=n_users, sampling_probability=float(row["sampling_probability"]),
                truncated_batch_size=int(row["truncated_batch_size"]), noise_multiplier=sigma),
            int(row["accounted_steps"]))
        return dp_accounting.pld.PLDAccountant(value_discretization_interval=3e-4).compose(event).get_epsilon(
            float(row["delta"]))

    assert epsilon_at(float(row["sigma"])) == pytest.approx(TARGET_EPSILON, rel=0.01)
    assert epsilon_at(0.97 * float(row["sigma"])) > TARGET_EPSILON


def test_a_user_level_run_resumes_exactly(user_run, user_corpus, tmp_path: Path) -> None:
    config, _, out = user_run
    resume_from_midpoint(config, user_corpus, out, tmp_path / "resumed")


def test_a_user_level_run_computing_its_padding_users_too_gives_the_identical_curve(user_run, user_corpus,
                                                                                  tmp_path: Path) -> None:
    """ULS: the second half computed with every microbatch of padding user slots logs, bit for bit, the curve of
    the run that skipped them."""
    config, _, out = user_run
    resume_from_midpoint(config, user_corpus, out, tmp_path / "unskipped",
                         dataclasses.replace(config, skip_padding=False))


def test_an_els_runs_user_level_epsilon_and_truncation_delta_are_recomputed(user_corpus, tmp_path: Path) -> None:
    """Example-level sampling accounted per user: the mixture of Gaussians over how many of a user's k
    sequences a step drew, rebuilt with dp-accounting alone; the truncation's δ from SciPy's binomial tail."""
    from scipy import stats

    config = TrainConfig(**(USER_LEVEL | dict(sampling="els_poisson", examples_per_user_per_batch=1,
                                              clipping="ghost")))
    run_training(config, user_corpus, tmp_path / "metrics.parquet", tmp_path / "ckpt")
    # ELS with ghost clipping: computing every microbatch of padding too gives, bit for bit, the same curve
    resume_from_midpoint(config, user_corpus, tmp_path, tmp_path / "unskipped",
                         dataclasses.replace(config, skip_padding=False))
    row = pq.read_table(tmp_path / "metrics.parquet").to_pandas().iloc[-1]
    users = load_users(user_corpus)
    k, n = int(np.bincount(users).max()), len(users)
    assert (row["sampler"], row["accountant"], row["privacy_unit"]) == ("els_poisson", "user_level_poisson", "user")
    assert int(row["examples_per_user"]) == k and int(row["dataset_size"]) == n  # N counts sequences under ELS
    q, steps, sigma, size = (float(row["sampling_probability"]), int(row["accounted_steps"]), float(row["sigma"]),
                             int(row["truncated_batch_size"]))
    assert q == pytest.approx(config.batch_size / n, rel=1e-12)
    delta = float(row["delta"])

    def epsilon_at(noise: float, mixture_delta: float) -> float:
        event = dp_accounting.dp_event.MixtureOfGaussiansDpEvent(
            noise, list(range(k + 1)), [float(stats.binom.pmf(j, k, q)) for j in range(k + 1)])
        return dp_accounting.pld.PLDAccountant(value_discretization_interval=2e-3).compose(event, steps).get_epsilon(
            mixture_delta)

    truncation = (1 + np.exp(float(row["epsilon"]))) * steps * stats.binom.sf(size, n + k, q)
    assert float(row["truncation_delta"]) == pytest.approx(truncation, rel=1e-6)
    assert truncation <= 0.1 * delta  # the truncation's share of δ, so the rest is the mixture's
    assert epsilon_at(sigma, 0.9 * delta) == pytest.approx(TARGET_EPSILON, rel=0.01)
    assert epsilon_at(0.97 * sigma, 0.9 * delta) > TARGET_EPSILON
    # a user of k sequences costs more noise than one sequence does at the same (ε, q, T)
    assert sigma > 1.2 * float(account_sequence_level(n, config, delta))


def account_sequence_level(n: int, config: TrainConfig, delta: float) -> float:
    from dpscaling.accounting.calibration import calibrate_poisson

    return calibrate_poisson(TARGET_EPSILON, config.batch_size / n, config.num_steps, delta)


def test_a_run_on_a_subset_of_users_draws_them_by_their_own_rows_with_all_their_sequences(user_corpus,
                                                                                        tmp_path) -> None:
    """``train_users`` N: the N users of smallest key (a hash of their own rows under the run's seed), every
    sequence of each, renumbered 0..N-1; the run accounts for N users."""
    from dpscaling.data.shards import load_split
    from dpscaling.data.users import subset_of_users
    from dpscaling.train.run_privacy import users_subset

    users, data = load_users(user_corpus), load_split(user_corpus, "train")
    config = TrainConfig(**(USER_LEVEL | dict(train_users=48)))
    kept_rows, kept_users = users_subset(data, users, config)
    mask, _ = subset_of_users(data, users, 48, config.seed)
    chosen = np.unique(users[mask])
    assert len(chosen) == 48 and set(kept_users) == set(range(48))
    np.testing.assert_array_equal(kept_rows, data[mask])
    assert mask.sum() == np.isin(users, chosen).sum()  # all of each chosen user's sequences
    np.testing.assert_array_equal(kept_users, np.searchsorted(chosen, users[mask]))
    # keyed by what the users wrote, not by their ids: the same users renumbered are the same users chosen
    renamed = np.random.default_rng(1).permutation(int(users.max()) + 1)
    np.testing.assert_array_equal(users_subset(data, renamed[users], config)[0], kept_rows)
    other = users_subset(data, users, TrainConfig(**(USER_LEVEL | dict(train_users=48, seed=1))))[0]
    assert not np.array_equal(other, kept_rows)
    with pytest.raises(UserError, match="train.train_users: 100,000 exceeds"):
        users_subset(data, users, TrainConfig(**(USER_LEVEL | dict(train_users=100_000))))
    with pytest.raises(UserError, match="train.train_users"):
        TrainConfig(**(PRIVATE | dict(train_users=48, train_sequences=100)))  # a subset of users, or of sequences
    summary = run_training(config, user_corpus, tmp_path / "metrics.parquet", tmp_path / "ckpt")
    row = pq.read_table(tmp_path / "metrics.parquet").to_pandas().iloc[-1]
    assert int(row["dataset_size"]) == int(row["users"]) == 48
    assert row["sampling_probability"] == pytest.approx(config.batch_size / 48, rel=1e-12)
    assert summary.privacy["epsilon"] == pytest.approx(TARGET_EPSILON, rel=0.01)


def test_a_run_protecting_fewer_sequences_than_a_user_has_is_refused(user_corpus, tmp_path: Path) -> None:
    """A budget's k below what a user of the data contributes would leave that user unprotected: refused, naming
    the key, before anything trains; at the data's own k the run accounts for it."""
    k = int(np.bincount(load_users(user_corpus)).max())
    config = TrainConfig(**(USER_LEVEL | dict(sampling="els_poisson", examples_per_user_per_batch=1,
                                              examples_per_user=k - 1)))
    with pytest.raises(UserError, match=rf"train.examples_per_user: a user of the training data has {k} sequences"):
        run_training(config, user_corpus, tmp_path / "metrics.parquet", tmp_path / "ckpt")
    assert not (tmp_path / "metrics.parquet").exists()
    with pytest.raises(UserError, match="train.examples_per_user"):  # k is a user-level sampler's
        TrainConfig(**(PRIVATE | dict(examples_per_user=4)))
