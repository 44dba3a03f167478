"""Starting a run from a pretrained checkpoint (dpscaling.train.init): the run's first step is taken from
exactly the pretrained weights, and a checkpoint of another family or shape is refused naming both."""

from __future__ import annotations

import dataclasses

import jax
import jax.numpy as jnp
import pyarrow.parquet as pq
import pytest

from dpscaling.data.shards import load_meta, load_split
from dpscaling.core.errors import UserError
from dpscaling.privacy.samplers import SHUFFLE
from dpscaling.train import TrainConfig, run_training
from dpscaling.train.evaluate import restore_params
from dpscaling.train.objectives import loss_fn, run_objective
from dp_training_data import packed_corpus

pytestmark = pytest.mark.slow(minutes=1)

DECODER = dict(model="custom", family="decoder", model_name="DecoderTiny",
               model_overrides=dict(num_layers=1, num_heads=2, hidden_size=32))
PRETRAIN = TrainConfig(**DECODER, batch_size=8, num_steps=20, warmup_steps=2, learning_rate=2.0**-6,
                       log_every=10, checkpoint_every=10)


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    return packed_corpus(tmp_path_factory, seq_len=32, n_documents=40)


@pytest.fixture(scope="module")
def pretrained(corpus, tmp_path_factory):
    root = tmp_path_factory.mktemp("pretrain")
    run_training(PRETRAIN, corpus, root / "metrics.parquet", root / "ckpt")
    return root / "ckpt"


def _step_zero_loss(checkpoint, config: TrainConfig, corpus) -> float:
    """The mean loss of ``checkpoint``'s parameters on the batch ``config``'s run draws at step 0."""
    meta = load_meta(corpus)
    model = config.model_family.module_class()(config.model_config(meta.vocab_size))
    objective = run_objective(config, meta)
    params, _ = restore_params(checkpoint, model, objective, PRETRAIN, meta.seq_len)
    rows = load_split(corpus, "train")
    batch = SHUFFLE.batch_source()(rows, meta.pad_id, config.batch_size, config.batch_size, config.seed).indices(0)
    prepared = objective.batch(jax.random.PRNGKey(0), jnp.asarray(rows[batch]))  # next-token: the key is unused
    return float(jnp.mean(loss_fn(objective, model)(params, prepared)))


def test_a_run_from_a_checkpoint_takes_its_first_step_from_the_pretrained_weights(corpus, pretrained, tmp_path):
    finetune = dataclasses.replace(PRETRAIN, init_checkpoint=str(pretrained), num_steps=3, log_every=1,
                                   checkpoint_every=3, seed=5, learning_rate=2.0**-8)
    run_training(finetune, corpus, tmp_path / "ft.parquet", tmp_path / "ft")
    curve = pq.read_table(tmp_path / "ft.parquet").to_pandas()
    expected = _step_zero_loss(pretrained, finetune, corpus)
    assert curve["loss"].iloc[0] == pytest.approx(expected, rel=1e-5)
    assert set(curve["init_checkpoint"]) == {str(pretrained)}
    # From random weights the same batch costs far more: the start really is the pretrained model.
    scratch = dataclasses.replace(finetune, init_checkpoint=None)
    run_training(scratch, corpus, tmp_path / "scratch.parquet", tmp_path / "scratch")
    first = pq.read_table(tmp_path / "scratch.parquet").to_pandas()["loss"].iloc[0]
    assert first > expected + 0.5 and "init_checkpoint" not in pq.read_table(tmp_path / "scratch.parquet").schema.names


def test_a_checkpoint_of_either_layer_layout_starts_a_run_and_resumes_only_in_its_own(corpus, pretrained, tmp_path):
    """The unrolled pretraining starts a scanned fine-tuning run from exactly its weights (the layouts compared
    and converted unrolled: dpscaling.models.stacking); the scanned run's checkpoint, asked to resume unrolled,
    is refused naming scan_layers."""
    finetune = dataclasses.replace(PRETRAIN, init_checkpoint=str(pretrained), num_steps=3, log_every=1,
                                   checkpoint_every=3, seed=5, learning_rate=2.0**-8, scan_layers=True)
    run_training(finetune, corpus, tmp_path / "ft.parquet", tmp_path / "ft")
    curve = pq.read_table(tmp_path / "ft.parquet").to_pandas()
    unrolled = dataclasses.replace(finetune, scan_layers=False)
    assert curve["loss"].iloc[0] == pytest.approx(_step_zero_loss(pretrained, unrolled, corpus), rel=1e-5)
    with pytest.raises(UserError, match="scan_layers"):
        run_training(unrolled, corpus, tmp_path / "ft2.parquet", tmp_path / "ft")


def test_a_checkpoint_of_another_shape_or_family_is_refused_naming_both(corpus, pretrained, tmp_path):
    wider = dataclasses.replace(PRETRAIN, model_name="DecoderWide", init_checkpoint=str(pretrained),
                                model_overrides=dict(num_layers=1, num_heads=2, hidden_size=64))
    with pytest.raises(UserError) as caught:
        run_training(wider, corpus, tmp_path / "w.parquet", tmp_path / "w")
    message = str(caught.value)
    assert message.startswith(f"train.init_checkpoint: {pretrained} holds DecoderTiny (decoder, ")
    assert "this run trains DecoderWide (decoder, " in message and "checkpoint (" in message
    assert not (tmp_path / "w.parquet").exists()
    bert = TrainConfig(model="custom", family="bert", model_name="BertTiny1",
                       model_overrides=dict(num_layers=1, num_heads=2, hidden_size=32), batch_size=8, num_steps=2,
                       warmup_steps=1, log_every=1, checkpoint_every=2, init_checkpoint=str(pretrained))
    with pytest.raises(UserError, match=r"holds DecoderTiny \(decoder, .*this run trains BertTiny1 \(bert, .*another "
                                        r"family"):
        run_training(bert, corpus, tmp_path / "b.parquet", tmp_path / "b")


def test_a_checkpoint_of_another_vocabulary_is_refused_naming_both_hashes(corpus, pretrained, tmp_path):
    """Same size, other tokens: the shapes agree, so only the vocabulary's sha256 (recorded with the checkpoint)
    tells; a checkpoint that records none is refused too."""
    import json
    import shutil

    from dpscaling.train.checkpoint import VOCABULARY_FILE

    recorded = json.loads((pretrained / VOCABULARY_FILE).read_text())
    ours = load_meta(corpus).vocab_sha256
    assert recorded["vocab_sha256"] == ours and recorded["vocab_size"] == load_meta(corpus).vocab_size
    other = tmp_path / "other"
    shutil.copytree(pretrained, other)
    (other / VOCABULARY_FILE).write_text(json.dumps({**recorded, "vocab_sha256": "0" * 64}))
    finetune = dataclasses.replace(PRETRAIN, init_checkpoint=str(other), num_steps=2, log_every=1, checkpoint_every=2)
    with pytest.raises(UserError) as caught:
        run_training(finetune, corpus, tmp_path / "v.parquet", tmp_path / "v")
    assert "0" * 64 in str(caught.value) and ours in str(caught.value)
    (other / VOCABULARY_FILE).unlink()
    with pytest.raises(UserError, match=f"records no vocabulary .*{ours}"):
        run_training(finetune, corpus, tmp_path / "v.parquet", tmp_path / "v")
    assert not (tmp_path / "v.parquet").exists()


def test_a_study_run_s_checkpoint_record_is_unchanged_by_the_new_field() -> None:
    assert "init_checkpoint" not in PRETRAIN.to_dict()
    assert dataclasses.replace(PRETRAIN, init_checkpoint="x").to_dict()["init_checkpoint"] == "x"


def test_a_pretrained_private_budget_starts_from_its_checkpoint_with_the_private_n_and_unchanged_dp(
        corpus, pretrained, tmp_path):
    """private_model's pretrained budget (docs/finetune.md): the run starts from its model's checkpoint and
    its accounting is that of the same plan trained from scratch: N = the budget's private sequences, the same
    σ, q and L; ε of the recorded σ, q, T recomputed independently with dp_accounting."""
    import dp_accounting

    from dpscaling.core.io import write_json_atomic
    from dpscaling.private.plans import Budget, PrivatePlan
    from dpscaling.private.jobs import train_plan

    units = min(120, load_meta(corpus).n_train)
    model = {"layers": 1, "heads": 2, "hidden": 32, "intermediate": None, "family": "decoder", "max_positions": 512}
    training = {"seed": 0, "learning_rate": 2.0**-8, "warmup_steps": 1, "decay_steps": 4, "decay_factor": 10.0,
                "log_every": 2, "checkpoint_every": 4, "clip_norm": 1.0, "physical_batch": 8}
    curves = {}
    for pretrained_budget in (True, False):
        budget = Budget(8.0, 1e-6, units, 1e9, pretrained=pretrained_budget)
        plan = PrivatePlan(budget, "DecoderTiny", 1.0, 16, 4, 2.0**-8, 32, 1.0, 1.0, 1.0 / 16, 1.0, 16, 0.0, 0.0,
                           5.0, 5.0, None, {"kind": "test"})
        write_json_atomic(tmp_path / f"plan-{pretrained_budget}.json", plan.to_json())
        checkpoints = {"DecoderTiny": str(pretrained)} if pretrained_budget else {}
        out = tmp_path / f"run-{pretrained_budget}"
        train_plan(tmp_path / f"plan-{pretrained_budget}.json", {"DecoderTiny": model},
                   {**training, "init_checkpoints": checkpoints}, corpus, out / "metrics.parquet", out / "ckpt")
        curves[pretrained_budget] = pq.read_table(out / "metrics.parquet").to_pandas()
    tuned, scratch = curves[True], curves[False]
    assert set(tuned["init_checkpoint"]) == {str(pretrained)} and "init_checkpoint" not in scratch
    assert tuned["loss"].iloc[0] < scratch["loss"].iloc[0] - 0.5  # it really starts pretrained
    accounting = ["epsilon", "delta", "sigma", "sampling_probability", "dataset_size", "expected_batch_size",
                  "truncated_batch_size", "accounted_steps"]
    assert tuned[accounting].iloc[-1].to_dict() == scratch[accounting].iloc[-1].to_dict()
    last = tuned.iloc[-1]
    assert last["dataset_size"] == units and last["sampling_probability"] == pytest.approx(16 / units)
    accountant = dp_accounting.pld.PLDAccountant()
    accountant.compose(dp_accounting.PoissonSampledDpEvent(
        float(last["sampling_probability"]), dp_accounting.GaussianDpEvent(float(last["sigma"]))),
        int(last["accounted_steps"]))
    assert accountant.get_epsilon(1e-6) == pytest.approx(float(last["untruncated_epsilon"]), rel=1e-3)
    assert last["untruncated_epsilon"] <= last["epsilon"] <= 8.0 + 1e-6
