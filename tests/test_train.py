"""Training job (paper §3.2): MLM masking, schedule, the loop, divergence, resume, data parallelism."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import jax
import numpy as np
import pyarrow.parquet as pq
import pytest

from dp_training_data import build_packed_corpus
from dpscaling.data.shards import load_meta
from dpscaling.core.errors import UserError
from dpscaling.train import TrainConfig, learning_rate_schedule, run_training
from dpscaling.train.data import BatchSampler
from dpscaling.train.loop import CompiledSteps
from dpscaling.train.metrics import CONFIG_KEY, SUMMARY_KEY
from dpscaling.train.mlm import MaskingSpec, mask_tokens

pytestmark = pytest.mark.slow(minutes=4)  # orders this module among the long ones (tests/conftest.py)

JOB = Path(__file__).with_name("train_job.py")
CURVE = ["step", "loss", "grad_norm", "clipped_fraction", "lr"]
# A one-layer model keeps compile time (the dominant cost here) down.
SMALL = dict(
    model="custom",
    model_overrides=dict(num_layers=1, num_heads=2, hidden_size=32),
    batch_size=16,
    microbatch_size=8,
    warmup_steps=5,
    noise_batch_ratio=0.01,
    learning_rate=2.0**-8,
    log_every=5,
)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory) -> Path:
    directory = tmp_path_factory.mktemp("packed")
    build_packed_corpus(directory, seq_len=64, n_documents=60)
    return directory


def _job(config: TrainConfig, corpus: Path, out: Path) -> list[str]:
    return [
        sys.executable,
        str(JOB),
        json.dumps(config.to_dict()),
        str(corpus),
        str(out / "metrics.parquet"),
        str(out / "ckpt"),
    ]


def _run_job(config, corpus, out, env) -> dict:
    result = subprocess.run(
        _job(config, corpus, out), env=env, capture_output=True, text=True, timeout=300
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def _curve(path: Path) -> dict[str, np.ndarray]:
    table = pq.read_table(path, columns=CURVE)
    return {name: table.column(name).to_numpy() for name in CURVE}


# --- masking, schedule, sampling -------------------------------------------------------


def test_masking_follows_bert_rule_and_spares_special_tokens():
    spec = MaskingSpec(vocab_size=1000, mask_id=4, special_ids=(0, 1, 2, 3, 4), pad_id=0)
    ids = jax.random.randint(jax.random.PRNGKey(0), (512, 128), 5, 1000)
    ids = (
        ids.at[:, 0].set(2).at[:, -1].set(3).at[:, 60].set(3).at[:256, 100:].set(0)
    )  # [CLS] [SEP] pads
    out = mask_tokens(jax.random.PRNGKey(1), ids, spec)
    positions, weights = np.asarray(out["masked_positions"]), np.asarray(out["label_weights"]) > 0
    original = np.asarray(ids)
    chosen = np.take_along_axis(original, positions, axis=1)[weights]
    assert not np.isin(chosen, spec.special_ids).any()  # never [CLS]/[SEP]/[PAD]
    np.testing.assert_array_equal(np.asarray(out["labels"])[weights], chosen)
    n_real = (~np.isin(original, spec.special_ids)).sum(axis=1)
    np.testing.assert_array_equal(weights.sum(axis=1), np.clip(np.round(0.15 * n_real), 1, 20))
    # 80% [MASK] / 10% random / 10% unchanged, over ~12,000 masked tokens (±5σ bands).
    new = np.take_along_axis(np.asarray(out["input_ids"]), positions, axis=1)[weights]
    n = chosen.size
    is_mask, unchanged = new == spec.mask_id, new == chosen
    assert abs(is_mask.mean() - 0.8) < 5 * np.sqrt(0.16 / n)
    assert (
        abs(unchanged.mean() - 0.1) < 5 * np.sqrt(0.09 / n) + 0.001
    )  # random can hit the original
    untouched = np.ones_like(original, bool)
    np.put_along_axis(untouched, positions, ~weights, axis=1)
    np.testing.assert_array_equal(np.asarray(out["input_ids"])[untouched], original[untouched])


def test_learning_rate_schedule_matches_paper():
    config = TrainConfig(learning_rate=2.0**-7)
    lr = learning_rate_schedule(config)
    assert float(lr(0)) == 0.0
    np.testing.assert_allclose(float(lr(500)), 2.0**-8, rtol=1e-6)  # linear warm-up
    np.testing.assert_allclose(float(lr(1000)), 2.0**-7, rtol=1e-6)
    np.testing.assert_allclose(float(lr(1000 + 128_000)), 2.0**-7 / 10, rtol=1e-5)
    np.testing.assert_allclose(float(lr(1000 + 64_000)), 2.0**-7 / np.sqrt(10), rtol=1e-5)



def test_constant_cooldown_holds_the_peak_then_cools_to_zero_over_its_horizons_last_fraction():
    config = TrainConfig(learning_rate=2.0**-7, num_steps=10_000, warmup_steps=1000, log_every=100,
                         schedule="constant_cooldown", cooldown_fraction=0.2)
    lr = learning_rate_schedule(config)
    np.testing.assert_allclose(float(lr(500)), 2.0**-8, rtol=1e-6)  # the paper's warm-up
    for step in (1000, 5000, 8000):  # the peak, held until the cooldown starts at 80% of the horizon
        np.testing.assert_allclose(float(lr(step)), 2.0**-7, rtol=1e-6)
    assert config.branch_step == 8000
    np.testing.assert_allclose(float(lr(8500)), 2.0**-7 * (1 - np.sqrt(0.25)), rtol=1e-5)  # 1 - sqrt(progress)
    assert float(lr(10_000)) == 0.0
    # the cooldown's start is rounded down to a logged step, and must come after the warm-up
    assert dataclasses.replace(config, num_steps=10_050).branch_step == 8000
    with pytest.raises(UserError, match=r"train\.cooldown_fraction: .* before the warm-up ends"):
        dataclasses.replace(config, num_steps=1200)
    with pytest.raises(UserError, match=r"train\.schedule: must be one of \('paper', 'constant_cooldown'\)"):
        dataclasses.replace(config, schedule="cosine")
    # the paper's schedule is the same at every horizon: its branch step is the whole run
    assert TrainConfig(num_steps=300, log_every=100).branch_step == 300

def test_batch_sampler_is_a_seeded_per_epoch_permutation():
    sampler = BatchSampler(n_rows=10, batch_size=3, seed=7)
    epoch0 = np.concatenate([sampler.indices(s) for s in range(3)])
    assert len(set(epoch0)) == 9  # without replacement within an epoch
    again = BatchSampler(10, 3, 7)
    for step in (4, 0, 5):  # stateless in the step: any order gives the same batches
        np.testing.assert_array_equal(again.indices(step), sampler.indices(step))
    assert not np.array_equal(BatchSampler(10, 3, 8).indices(0), sampler.indices(0))


# --- the training loop -----------------------------------------------------------------


def test_fifty_steps_on_real_corpus_reduce_the_loss(corpus, tmp_path):
    config = TrainConfig(
        model="custom",
        model_overrides=dict(num_layers=2, num_heads=2, hidden_size=64),
        batch_size=32,
        microbatch_size=16,
        num_steps=50,
        warmup_steps=5,
        learning_rate=2.0**-9,
        log_every=10,
        checkpoint_every=50,
        clipping="ghost",
    )
    summary = run_training(config, corpus, tmp_path / "metrics.parquet", tmp_path / "ckpt")
    assert summary.status == "finished" and summary.steps == 50
    table = pq.read_table(tmp_path / "metrics.parquet")
    frame = table.to_pandas()
    assert list(frame["step"]) == [10, 20, 30, 40, 50]
    assert frame["loss"].iloc[-1] < frame["loss"].iloc[0] - 0.5
    assert (frame["clipped_fraction"] > 0.9).all()  # C = 1 clips (almost) every example
    assert (frame["examples_per_s"] > 0).all()
    row = frame.iloc[0]
    assert row["n_params"] == summary.n_params and row["status"] == "finished"
    assert row["n_devices"] == jax.device_count() and row["device_kind"] == jax.devices()[0].device_kind
    assert (row["noise_batch_ratio"], row["batch_size"], row["seq_len"], row["seed"]) == (
        0.0,
        32,
        64,
        0,
    )
    assert row["code_version"].startswith("0.")
    assert row["epochs"] == pytest.approx(50 * 32 / load_meta(corpus).n_train)
    stored = json.loads(table.schema.metadata[CONFIG_KEY])
    assert TrainConfig.from_dict(stored) == config
    assert json.loads(table.schema.metadata[SUMMARY_KEY])["status"] == "finished"


def test_noise_levels_trained_in_one_process_are_the_runs_each_trains_alone(corpus, tmp_path):
    """training.runs_per_job: shape -- runs of one shape that share their compiled step (one job) give
    bit for bit the curves each gives with its own, and trace and compile it once."""
    from dpscaling.train.distributed import DataParallel

    configs = [TrainConfig(**(SMALL | dict(num_steps=10, checkpoint_every=10, noise_batch_ratio=ratio)))
               for ratio in (0.0, 0.04)]
    shared = CompiledSteps()
    for index, config in enumerate(configs):
        run_training(config, corpus, tmp_path / f"alone{index}.parquet", tmp_path / f"alone{index}")
        run_training(config, corpus, tmp_path / f"shared{index}.parquet", tmp_path / f"shared{index}", shared)
    assert len(shared) == 1
    curves = [_curve(tmp_path / f"shared{index}.parquet") for index in range(len(configs))]
    for index, curve in enumerate(curves):
        alone = _curve(tmp_path / f"alone{index}.parquet")
        for name in CURVE:
            np.testing.assert_array_equal(curve[name], alone[name], err_msg=f"σ̄ {configs[index].noise_batch_ratio}: {name}")
    assert len({tuple(curve["loss"]) for curve in curves}) == len(configs)  # the noise levels did differ
    # The seed and learning rate are the step's data too; the batch, the data and the devices are its shape.
    meta, parallel = load_meta(corpus), DataParallel()
    same = TrainConfig(**(SMALL | dict(num_steps=10, checkpoint_every=10, seed=5, learning_rate=0.1)))
    compiled = shared.get(configs[0], meta, parallel, lambda: "another program")
    assert not isinstance(compiled, str) and len(shared) == 1
    assert shared.get(same, meta, parallel, lambda: "another program") is compiled and len(shared) == 1
    for other in (TrainConfig(**(SMALL | dict(num_steps=10, checkpoint_every=10, batch_size=8))),
                  TrainConfig(**(SMALL | dict(num_steps=10, checkpoint_every=10, clip_norm=0.5)))):
        assert shared.get(other, meta, parallel, lambda: "another program") == "another program"
    assert shared.get(configs[0], dataclasses.replace(meta, seq_len=32), parallel, lambda: "short") == "short"
    assert len(shared) == 4


def test_divergence_is_recorded_and_returns_normally(corpus, tmp_path):
    config = TrainConfig(**(SMALL | dict(learning_rate=1e30, warmup_steps=0, num_steps=20)))
    summary = run_training(config, corpus, tmp_path / "metrics.parquet", tmp_path / "ckpt")
    assert summary.status == "diverged" and summary.steps < 20
    frame = pq.read_table(tmp_path / "metrics.parquet").to_pandas()
    assert (frame["status"] == "diverged").all()
    assert not np.isfinite(frame["loss"].iloc[-1])  # the interval that diverged
    assert not (tmp_path / "ckpt" / "state" / str(summary.steps)).exists()


# Data parallelism is family-agnostic; ghost clipping over sharded microbatches is test_private_training's
# two-device test, and kill -9 and resume test_faults'.
def test_one_and_four_devices_give_the_same_curve(corpus, tmp_path, job_env):
    config = TrainConfig(**(SMALL | dict(num_steps=10, checkpoint_every=10)))
    # host-platform devices: both runs on the CPU, also on a machine with an accelerator
    cpu_env = job_env | {"JAX_PLATFORMS": "cpu"}
    _run_job(config, corpus, tmp_path / "one", cpu_env)
    four_env = cpu_env | {"XLA_FLAGS": f"{job_env['XLA_FLAGS']} --xla_force_host_platform_device_count=4"}
    _run_job(config, corpus, tmp_path / "four", four_env)
    one, four = _curve(tmp_path / "one" / "metrics.parquet"), _curve(
        tmp_path / "four" / "metrics.parquet"
    )
    # the curve records the data-parallel devices that trained it
    assert set(pq.read_table(tmp_path / "four" / "metrics.parquet").column("n_devices").to_pylist()) == {4}
    assert set(pq.read_table(tmp_path / "one" / "metrics.parquet").column("n_devices").to_pylist()) == {1}
    np.testing.assert_array_equal(four["step"], one["step"])
    # Only the order of float32 summation across devices differs.
    for name in ("loss", "grad_norm"):
        np.testing.assert_allclose(four[name], one[name], rtol=2e-5, err_msg=name)


def test_host_threads_follow_the_job_unless_xla_flags_say_otherwise(monkeypatch) -> None:
    from dpscaling.train.distributed import limit_host_threads

    monkeypatch.setenv("XLA_FLAGS", "--xla_force_host_platform_device_count=2")
    limit_host_threads(1)
    flags = os.environ["XLA_FLAGS"]
    assert flags == "--xla_force_host_platform_device_count=2 --xla_cpu_multi_thread_eigen=false"
    limit_host_threads(1)  # idempotent
    assert os.environ["XLA_FLAGS"] == flags
    monkeypatch.delenv("XLA_FLAGS")
    limit_host_threads(2)  # several cores: XLA's default pools
    assert "XLA_FLAGS" not in os.environ
    limit_host_threads(1)
    assert os.environ["XLA_FLAGS"].startswith("--")  # XLA reads a value not starting with -- as a file
    # and a JAX process really starts with it
    result = subprocess.run([sys.executable, "-c", "import jax; print(jax.device_count())"],
                            capture_output=True, text=True, env=dict(os.environ), timeout=120)
    assert result.returncode == 0 and result.stdout.strip() == "1", result.stderr[-2000:]


_FAULTS_OF_REALLOCATION = """
import resource, sys
import numpy as np
from dpscaling.train.distributed import keep_freed_memory
kept = keep_freed_memory() if sys.argv[1] == "keep" else None
def steps():
    for _ in range(50):  # a step's buffers: four of 16 MiB live at once, then all freed
        buffers = [np.ones(2**21) for _ in range(4)]
        del buffers
steps()  # the first time, faulted in either way
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
steps()
print(kept, resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def test_a_job_keeps_the_memory_it_frees_unless_the_environment_tunes_malloc() -> None:
    """glibc returns the freed top of its heap to the system and faults those pages in again when the next
    step allocates them; a job (configure_job) keeps them: 50 more steps fault almost no page in."""
    def faults(mode: str, **environment: str) -> tuple[str, int]:
        env = {key: value for key, value in os.environ.items() if not key.startswith("MALLOC_")} | environment
        result = subprocess.run([sys.executable, "-c", _FAULTS_OF_REALLOCATION, mode], capture_output=True, text=True,
                                env=env, timeout=120)
        assert result.returncode == 0, result.stderr[-2000:]
        kept, count = result.stdout.split()
        return kept, int(count)

    kept, default = faults("default")
    assert default > 20_000  # glibc's default: ~100,000 pages (400 MiB) faulted in again
    kept, reused = faults("keep")
    assert kept == "True" and reused < default / 20
    kept, tuned = faults("keep", MALLOC_TRIM_THRESHOLD_="131072")  # the user's own setting wins
    assert kept == "False" and tuned > default / 2


def test_jobs_ask_for_deterministic_gpu_kernels_when_configured_unless_xla_flags_say_otherwise(monkeypatch) -> None:
    """On an H100 two processes of one job differed in the 7th digit of the first loss without them; on an
    H200 a DP step took 2.8 times as long with them, so they are the config's choice (off by default)."""
    from dpscaling.config.schema import validate_config
    from dpscaling.train.distributed import DETERMINISTIC_GPU_FLAG, configure_job, deterministic_accelerators

    config: dict = {}
    validate_config(config)
    assert config["deterministic_gpu_ops"] is False
    monkeypatch.delenv("XLA_FLAGS", raising=False)
    configure_job(2, config | {"compilation_cache": None})
    assert "XLA_FLAGS" not in os.environ
    configure_job(2, config | {"compilation_cache": None, "deterministic_gpu_ops": True})
    assert os.environ["XLA_FLAGS"] == DETERMINISTIC_GPU_FLAG
    deterministic_accelerators()  # idempotent
    assert os.environ["XLA_FLAGS"] == DETERMINISTIC_GPU_FLAG
    monkeypatch.setenv("XLA_FLAGS", "--xla_gpu_deterministic_ops=false")
    deterministic_accelerators()
    assert os.environ["XLA_FLAGS"] == "--xla_gpu_deterministic_ops=false"
    # XLA knows the flag on every platform (an unknown one aborts the process)
    result = subprocess.run([sys.executable, "-c", "import jax; print(jax.numpy.ones(2).sum())"],
                            capture_output=True, text=True, timeout=120,
                            env=dict(os.environ, XLA_FLAGS=DETERMINISTIC_GPU_FLAG))
    assert result.returncode == 0 and result.stdout.strip() == "2.0", result.stderr[-2000:]


def test_more_than_one_epoch_stops_before_step_one_unless_repeats_are_allowed(corpus, tmp_path):
    n_train = load_meta(corpus).n_train
    steps = n_train // 16 + 1  # one batch of 16 more than one epoch
    config = TrainConfig(**(SMALL | dict(num_steps=steps, checkpoint_every=5, allow_repeats=False)))
    with pytest.raises(UserError) as caught:
        run_training(config, corpus, tmp_path / "metrics.parquet", tmp_path / "ckpt")
    text = str(caught.value)
    assert f"{steps * 16:,} sequences exceed the {n_train:,} training sequences" in text
    assert "training.allow_repeats" in text
    assert not (tmp_path / "metrics.parquet").exists() and not (tmp_path / "ckpt").exists()
    # allow_repeats is a policy, not part of the curve's config: checkpoints and metadata compare as before.
    assert "allow_repeats" not in config.to_dict()


@pytest.mark.parametrize("eps", [1e-8, 1.0])
def test_adam_settings_reach_the_optimizer(eps):
    """training.adam_eps (b1, b2 alike) → TrainConfig → optax.adam: Adam's first step is −lr·g/(|g| + ε)."""
    import jax.numpy as jnp

    from dpscaling.train.step import make_optimizer
    from dpscaling.train.config import job_train_config

    training = {"microbatch_size": None, "steps": 10, "warmup_steps": 0, "decay_steps": 10, "decay_factor": 1.0,
                "clip_norm": 1.0, "clipping": "vmap", "mask_rate": 0.15, "log_every": 1, "checkpoint_every": 1,
                "adam_eps": eps, "adam_b1": 0.5, "adam_b2": 0.75}
    config = job_train_config("BertTiny", training, {"model": "BertTiny", "nbr": "0.0", "lr": "0.5", "batch": "4",
                                                 "seed": "0"}, seq_len=64)
    assert (config.adam_eps, config.adam_b1, config.adam_b2, config.allow_repeats) == (eps, 0.5, 0.75, False)
    optimizer = make_optimizer(config)
    params = {"w": jnp.zeros(1)}
    updates, _ = optimizer.update({"w": jnp.array([1.0])}, optimizer.init(params), params)
    np.testing.assert_allclose(updates["w"], [-0.5 / (1.0 + eps)], rtol=1e-6)


# --- one compiled step per shape ---------------------------------------------------------


def _step_setup(config: TrainConfig, vocab: int = 120, seq: int = 16):
    from dpscaling.models.bert import BertMlm
    from dpscaling.train.objectives import MaskedLM
    from dpscaling.train.step import init_state, make_optimizer, make_train_step

    model = BertMlm(config.model_config(vocab))
    masking = MaskingSpec(vocab_size=vocab, mask_id=4, special_ids=(0, 1, 2, 3, 4), pad_id=0)
    objective = MaskedLM(masking)
    state = init_state(model, objective, make_optimizer(config), config, seq)
    tokens = jax.random.randint(jax.random.PRNGKey(7), (config.batch_size, seq), 5, vocab)
    return model, masking, jax.jit(make_train_step(model, objective, config)), state, tokens


def test_grid_points_of_one_shape_lower_to_one_program():
    """σ̄, learning rate and seed are data of the step: two grid points of one shape give the same
    program text, so JAX's persistent cache compiles it once for all of them."""
    from dpscaling.train.step import step_hyperparams

    texts = []
    for changes in (dict(), dict(noise_batch_ratio=0.0, learning_rate=2.0**-6, seed=3)):
        config = TrainConfig(**(SMALL | dict(batch_size=8, microbatch_size=4) | changes))
        _, _, step, state, tokens = _step_setup(config)
        texts.append(step.lower(state, step_hyperparams(config), tokens).as_text())
    assert texts[0] == texts[1]
    assert "0.01" not in texts[0]  # σ̄ is not a constant of the program


@pytest.mark.parametrize("ratio", [0.0, 0.3])
def test_traced_step_is_dp_adam_with_the_configured_noise_and_learning_rate(ratio):
    """One traced step, against DP-Adam recomputed from its parts with σ̄ and the peak as Python
    constants: clipped mean gradient + σ̄·N(0, I) from the seed's noise stream, then Adam's first
    step −lr·g/(|g| + ε) (no warm-up)."""
    import jax.numpy as jnp

    from dpscaling.dp import add_gaussian_noise, clipped_mean_grad, vmap_clipped_sum
    from dpscaling.core.streams import Stream
    from dpscaling.train.objectives import MaskedLM, loss_fn
    from dpscaling.train.step import step_hyperparams, study_noise_key

    config = TrainConfig(**(SMALL | dict(batch_size=8, microbatch_size=4, warmup_steps=0,
                                         noise_batch_ratio=ratio, learning_rate=0.05, seed=2)))
    model, masking, step, state, tokens = _step_setup(config)
    after, _ = step(state, step_hyperparams(config), tokens)

    @jax.jit  # compiled, with σ̄ and the peak as constants (eagerly this took ~25 s)
    def reference(params, tokens):
        mask_key = jax.random.fold_in(jax.random.fold_in(jax.random.PRNGKey(config.seed), Stream.MASK), 0)
        batch = mask_tokens(mask_key, tokens, masking)
        grad, _, _ = clipped_mean_grad(loss_fn(MaskedLM(masking), model), params, batch, clip_norm=1.0,
                                       microbatch_size=4,
                                    clipped_sum=vmap_clipped_sum)
        noise = add_gaussian_noise(ratio, study_noise_key(config.seed))
        noisy, _ = noise.update(grad, noise.init(grad))
        return jax.tree.map(lambda p, g: p - 0.05 * g / (jnp.abs(g) + config.adam_eps), params, noisy)

    expected = reference(state.params, tokens)
    for got, want in zip(jax.tree.leaves(after.params), jax.tree.leaves(expected), strict=True):
        np.testing.assert_allclose(np.asarray(got), np.asarray(want), rtol=2e-5, atol=2e-6)
