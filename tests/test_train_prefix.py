"""A run continues a shorter run of its config (dpscaling.train.prefix): the curve it writes is the one it would
have trained from step 0, bit for bit; the shorter run's checkpoint is left as it was; and a checkpoint that is not
this run's prefix is refused with a warning naming why, the run training from step 0."""

from __future__ import annotations

import dataclasses
import logging
import re
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from dp_training_data import build_packed_corpus
from dpscaling.data.shards import load_meta
from dpscaling.train import TrainConfig, run_training
from dpscaling.train.metrics import SUMMARY_KEY
from dpscaling.train.prefix import prefix_refusal

pytestmark = pytest.mark.slow(minutes=1)

CURVE = ["step", "loss", "grad_norm", "clipped_fraction", "lr"]
# A noisy study run of 20 steps (noise, masks and batches all in play), a row every 5 steps.
LONG = TrainConfig(
    model="custom",
    model_overrides=dict(num_layers=1, num_heads=2, hidden_size=32),
    batch_size=8,
    warmup_steps=4,
    decay_steps=20,
    noise_batch_ratio=0.01,
    learning_rate=2.0**-7,
    num_steps=20,
    log_every=5,
    checkpoint_every=10,
)
# Its first 10 steps, saved once at the end (as the learning-rate protocol's runs are).
SHORT = dataclasses.replace(LONG, num_steps=10, checkpoint_every=10)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("packed")
    build_packed_corpus(directory, seq_len=32, n_documents=30)
    return directory


@pytest.fixture(scope="module")
def from_scratch(corpus, compile_cache, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("scratch")
    run_training(LONG, corpus, out / "metrics.parquet", out / "ckpt")
    return out / "metrics.parquet"


@pytest.fixture(scope="module")
def prefix(corpus, compile_cache, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("prefix")
    run_training(SHORT, corpus, out / "metrics.parquet", out / "ckpt")
    return out / "ckpt"


def _curve(path: Path) -> dict[str, np.ndarray]:
    table = pq.read_table(path, columns=CURVE)
    return {name: table.column(name).to_numpy() for name in CURVE}


def _files(directory: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(directory)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in directory.rglob("*") if p.is_file()}


def test_a_run_continuing_its_prefix_writes_the_curve_it_would_train_from_step_0(corpus, from_scratch, prefix,
                                                                                  tmp_path) -> None:
    before = _files(prefix)
    summary = run_training(LONG, corpus, tmp_path / "metrics.parquet", tmp_path / "ckpt", prefix_dir=prefix)
    assert (summary.resumed_from_step, summary.prefix_dir, summary.steps) == (10, str(prefix), 20)
    found, wanted = _curve(tmp_path / "metrics.parquet"), _curve(from_scratch)
    for name in CURVE:
        np.testing.assert_array_equal(found[name], wanted[name], err_msg=name)
    assert _files(prefix) == before  # read, never written
    recorded = pq.read_schema(tmp_path / "metrics.parquet").metadata[SUMMARY_KEY].decode()
    assert str(prefix) in recorded
    # Its own checkpoints carry on: a rerun resumes from its own last step, not from the prefix.
    again = run_training(LONG, corpus, tmp_path / "again.parquet", tmp_path / "ckpt", prefix_dir=prefix)
    assert (again.resumed_from_step, again.prefix_dir) == (20, None)


@pytest.mark.parametrize("change, reason", [
    (dict(learning_rate=2.0**-6), r"config differs in \['learning_rate'\]"),
    (dict(log_every=10), r"config differs in \['log_every'\]"),
    (dict(num_steps=8), r"horizon, 10 steps, is past this run's 8"),
])
def test_a_checkpoint_that_is_not_the_runs_prefix_is_refused_naming_why(corpus, prefix, tmp_path, caplog, change,
                                                                       reason) -> None:
    config = dataclasses.replace(LONG, **change)
    with caplog.at_level(logging.WARNING, logger="dpscaling.train.prefix"):
        summary = run_training(config, corpus, tmp_path / "metrics.parquet", tmp_path / "ckpt", prefix_dir=prefix)
    assert (summary.resumed_from_step, summary.prefix_dir) == (0, None)
    assert any("training from step 0" in r.message and re.search(reason, r.message)
               for r in caplog.records), [r.message for r in caplog.records]


def test_a_prefix_ending_between_two_logged_steps_is_refused(corpus, compile_cache, tmp_path, caplog) -> None:
    odd = tmp_path / "odd"
    run_training(dataclasses.replace(SHORT, num_steps=12), corpus, odd / "metrics.parquet", odd / "ckpt")
    with caplog.at_level(logging.WARNING, logger="dpscaling.train.prefix"):
        summary = run_training(LONG, corpus, tmp_path / "metrics.parquet", tmp_path / "ckpt",
                               prefix_dir=odd / "ckpt")
    assert summary.resumed_from_step == 0
    assert any("step 12 is not a multiple of log_every=5" in r.message for r in caplog.records)


def test_private_and_correlated_runs_never_continue_another_run(corpus, prefix) -> None:
    meta = load_meta(corpus)
    private = dataclasses.replace(LONG, sampling="truncated_poisson", target_epsilon=8.0,
                                  noise_batch_ratio=0.0)
    assert "calibrated to its own horizon" in prefix_refusal(prefix, private, meta)
    correlated = dataclasses.replace(LONG, mechanism="bandmf-b4")
    assert "strategy is built for the run's horizon" in prefix_refusal(prefix, correlated, meta)
    assert prefix_refusal(prefix, LONG, meta) is None


# constant_cooldown: 20 steps cool down from step 10, 10 steps from step 5 (each saved and kept there).
LONG_COOLED = dataclasses.replace(LONG, schedule="constant_cooldown", cooldown_fraction=0.5, checkpoint_every=5)
SHORT_COOLED = dataclasses.replace(LONG_COOLED, num_steps=10, checkpoint_every=10)


@pytest.fixture(scope="module")
def cooled_prefix(corpus, compile_cache, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("cooled")
    run_training(SHORT_COOLED, corpus, out / "metrics.parquet", out / "ckpt")
    return out / "ckpt"


def _steps(checkpoint_dir: Path) -> set[int]:
    return {int(p.name) for p in (checkpoint_dir / "state").iterdir() if p.name.isdigit()}


def test_a_cooldown_branches_from_the_shorter_runs_cooldown_start_and_matches_a_run_from_step_0(
        corpus, cooled_prefix, tmp_path) -> None:
    assert (SHORT_COOLED.branch_step, LONG_COOLED.branch_step) == (5, 10)
    assert _steps(cooled_prefix) == {5, 10}  # the branch step is kept beside the last
    scratch = tmp_path / "scratch"
    run_training(LONG_COOLED, corpus, scratch / "metrics.parquet", scratch / "ckpt")
    assert _steps(scratch / "ckpt") == {10, 15, 20}  # saved every 5 steps: the latest two, and the branch step
    summary = run_training(LONG_COOLED, corpus, tmp_path / "metrics.parquet", tmp_path / "ckpt",
                           prefix_dir=cooled_prefix)
    assert (summary.resumed_from_step, summary.prefix_dir) == (5, str(cooled_prefix))
    found, wanted = _curve(tmp_path / "metrics.parquet"), _curve(scratch / "metrics.parquet")
    for name in CURVE:
        np.testing.assert_array_equal(found[name], wanted[name], err_msg=name)
    # the shorter run cooled down over steps 5..10; the longer one was still at its peak there
    short = _curve(cooled_prefix.parent / "metrics.parquet")
    assert short["lr"][1] < found["lr"][1] == pytest.approx(LONG.learning_rate)


def test_a_cooldown_without_its_branch_checkpoint_is_refused(corpus, cooled_prefix, tmp_path, caplog) -> None:
    import shutil

    copy = tmp_path / "prefix"
    shutil.copytree(cooled_prefix, copy)
    shutil.rmtree(copy / "state" / "5")
    with caplog.at_level(logging.WARNING, logger="dpscaling.train.prefix"):
        summary = run_training(LONG_COOLED, corpus, tmp_path / "metrics.parquet", tmp_path / "ckpt",
                               prefix_dir=copy)
    assert summary.resumed_from_step == 0
    assert any("no checkpoint at or before step 5" in r.message for r in caplog.records)
