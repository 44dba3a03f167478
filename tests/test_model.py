"""BERT model and family: parameter counts (paper Table 1 / throughput table), forward pass."""

from __future__ import annotations

import argparse
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpscaling.cli import params as params_command
from dpscaling.core.errors import UserError
from dpscaling.models.bert import BertMlm, count_params
from dpscaling.models.family import BERT_PRESETS, PAPER_PARAMS, bert_config


@pytest.mark.parametrize("name", list(BERT_PRESETS))
def test_family_param_counts_within_3_percent_of_paper(name):
    counts = count_params(bert_config(name))
    assert abs(counts.total / PAPER_PARAMS[name] - 1) < 0.03, counts


def test_family_shapes_follow_table_1():
    config = bert_config("BertLarge")
    assert (config.num_layers, config.num_heads, config.hidden_size) == (24, 16, 1024)
    assert config.intermediate_size == 4 * 1024
    assert (config.vocab_size, config.max_positions) == (30522, 512)


def test_non_embedding_count_excludes_exactly_the_embedding_tables():
    config = bert_config("BertTiny")
    counts = count_params(config)
    tables = (
        config.vocab_size + config.max_positions + config.type_vocab_size
    ) * config.hidden_size
    assert counts.embedding == tables
    assert counts.non_embedding == counts.total - tables


def test_custom_size_and_errors():
    config = bert_config("custom", vocab_size=8000, num_layers=2, num_heads=2, hidden_size=128)
    assert config.intermediate_size == 512
    # The DP-step benchmark's model (docs/train.md, "The DP step on this CPU"): 1.51M parameters.
    assert count_params(config).total == 1_511_360
    with pytest.raises(UserError):
        bert_config("BertHuge")
    with pytest.raises(UserError):
        bert_config("custom", num_layers=2)
    with pytest.raises(UserError):
        bert_config("custom", num_layers=2, num_heads=3, hidden_size=128)


def test_pre_ln_layers_normalise_the_branch_input_and_the_stream_once_at_the_end():
    from dpscaling.models.family import configured_model

    post = bert_config("custom", vocab_size=50, max_positions=16, num_layers=2, num_heads=2, hidden_size=8)
    pre = post.replace(layer_norm="pre")
    ids = jax.random.randint(jax.random.PRNGKey(0), (3, 12), 5, 50)
    positions = jnp.array([[1, 2], [3, 4], [5, 6]])
    params = {}
    for config in (post, pre):
        params[config.layer_norm] = BertMlm(config).init(jax.random.PRNGKey(1), ids, positions)["params"]
        assert count_params(config).total == config.param_count().total
    # One LayerNorm more (after the last layer); the rest is the same tree, started alike.
    assert set(params["pre"]) - set(params["post"]) == {"final_norm"}
    assert count_params(pre).total - count_params(post).total == 2 * 8
    same = jax.tree.map(np.array_equal, params["post"], {k: v for k, v in params["pre"].items() if k != "final_norm"})
    assert all(jax.tree.leaves(same))
    # The two placements compute different functions of the same parameters.
    out = {name: BertMlm(c).apply({"params": params[name]}, ids, positions) for name, c in (("post", post), ("pre", pre))}
    assert not np.allclose(out["post"], out["pre"])
    with pytest.raises(UserError, match="model.layer_norm"):
        post.replace(layer_norm="sandwich")
    # A models.custom entry reaches the shape; a decoder entry is refused, naming the key.
    entry = {"layers": 1, "heads": 2, "hidden": 8}
    assert configured_model("M", {"M": entry}, 50, 16).layer_norm == "post"
    assert configured_model("M", {"M": {**entry, "layer_norm": "pre"}}, 50, 16).layer_norm == "pre"
    with pytest.raises(UserError, match="layer_norm"):
        configured_model("M", {"M": {**entry, "layer_norm": "pre", "family": "decoder"}}, 50, 16)


def _small_model():
    config = bert_config(
        "custom", vocab_size=50, max_positions=16, num_layers=2, num_heads=2, hidden_size=8
    )
    model = BertMlm(config)
    ids = jax.random.randint(jax.random.PRNGKey(0), (3, 12), 5, 50)
    positions = jnp.array([[1, 2], [3, 4], [5, 6]])
    params = model.init(jax.random.PRNGKey(1), ids, positions)["params"]
    return model, params, ids, positions


def test_forward_shapes_and_tied_output_embedding():
    model, params, ids, positions = _small_model()
    logits = model.apply({"params": params}, ids, positions)
    assert logits.shape == (3, 2, 50) and logits.dtype == jnp.float32
    # The output projection is the word embedding: no separate decoder kernel exists,
    # and changing the embedding table changes the logits through it.
    assert set(params["mlm_output_bias"]) == {"bias"}
    assert "decoder" not in params
    names = [
        "/".join(str(k.key) for k in path)
        for path, _ in jax.tree_util.tree_leaves_with_path(params)
    ]
    assert not any("pooler" in n for n in names)


def test_padding_does_not_change_real_token_outputs():
    model, params, ids, positions = _small_model()
    pad = jnp.arange(12)[None, :] >= 9  # last 3 positions are padding
    mask = ~jnp.broadcast_to(pad, ids.shape)
    a = model.apply({"params": params}, ids, positions, mask)
    b = model.apply({"params": params}, jnp.where(mask, ids, 0), positions, mask)
    np.testing.assert_allclose(a, b, atol=1e-6)


def test_params_command_json(capsys):
    parser = argparse.ArgumentParser()
    params_command.register(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["params", "--model", "BertBase", "--json"])
    assert args.func(args) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["params"] == count_params(bert_config("BertBase")).total
    assert 0 < result["non_embedding_params"] < result["params"]
    assert abs(result["params"] / result["paper_params"] - 1) < 0.03


# --- model size counts what is trained (docs/models.md) --------------------------------------------------


def _grid_point(model: str) -> dict[str, str]:
    return {"model": model, "nbr": "0.0", "lr": "0.01", "batch": "4", "seed": "0"}


TRAINING = {"microbatch_size": None, "steps": 10, "warmup_steps": 1, "decay_steps": 10, "decay_factor": 10.0,
            "clip_norm": 1.0, "clipping": "vmap", "mask_rate": 0.15, "log_every": 5, "checkpoint_every": 5}


def _trained_entries(config, seq_len: int) -> tuple[int, int, int]:
    """Of one MLM loss's gradient on a batch: (entries of the parameter tree, entries with a non-zero data
    gradient outside the attention key biases, entries of the key biases).

    The key bias adds q·b to every score of a query, and softmax over keys ignores such a shift: its gradient
    is 0 analytically (rounding noise numerically), whatever the data. It is part of BERT and of every count
    convention (L·H parameters), so it is counted and set apart here (docs/models.md)."""
    from dpscaling.train.mlm import MaskingSpec, mask_tokens, sequence_losses

    model = BertMlm(config)
    ids = jax.random.randint(jax.random.PRNGKey(1), (8, seq_len), 5, config.vocab_size)
    ids = ids.at[:, 0].set(2).at[:, -1].set(3)  # [CLS] … [SEP], as packed
    batch = mask_tokens(jax.random.PRNGKey(2), ids, MaskingSpec(config.vocab_size, 4, (0, 1, 2, 3, 4), 0, 0.5))
    # Compiled, not op by op: eager dispatch of a BERT's forward and backward took ~50 s here.
    params = jax.jit(model.init)(jax.random.PRNGKey(0), ids, batch["masked_positions"])["params"]

    def loss(p):
        logits = model.apply({"params": p}, batch["input_ids"], batch["masked_positions"], batch["padding_mask"])
        return sequence_losses(logits, batch).mean()

    leaves = jax.tree_util.tree_leaves_with_path(jax.jit(jax.grad(loss))(params))
    scale = max(float(jnp.abs(leaf).max()) for _, leaf in leaves)
    key_bias = [leaf for path, leaf in leaves if "/".join(str(k.key) for k in path).endswith("attention/key/bias")]
    assert len(key_bias) == config.num_layers and all(float(jnp.abs(b).max()) < 1e-5 * scale for b in key_bias)
    trained = sum(int(jnp.count_nonzero(leaf)) for path, leaf in leaves
                  if not "/".join(str(k.key) for k in path).endswith("attention/key/bias"))
    return sum(leaf.size for _, leaf in leaves), trained, sum(b.size for b in key_bias)


def test_custom_model_count_is_the_parameters_that_receive_data_gradient():
    from dpscaling.train.config import job_train_config

    seq_len = 12
    custom = {"layers": 1, "heads": 2, "hidden": 16}
    config = job_train_config(custom, TRAINING, _grid_point("Nano"), seq_len).model_config(vocab_size=40)
    assert (config.max_positions, config.type_vocab_size) == (seq_len, 1)
    entries, trained, key_bias = _trained_entries(config, seq_len)
    assert count_params(config).total == entries == trained + key_bias


def test_family_model_keeps_512_positions_of_which_only_seq_len_are_trained():
    from dpscaling.train.config import job_train_config

    seq_len = 12
    config = job_train_config("BertTiny", TRAINING, _grid_point("BertTiny"), seq_len).model_config(vocab_size=40)
    assert (config.max_positions, config.type_vocab_size) == (512, 2)  # paper Table 1 counts them
    entries, trained, key_bias = _trained_entries(config, seq_len)
    assert count_params(config).total == entries
    # untrained: positions seq_len … 511 and token type 1, exactly
    assert entries - trained - key_bias == (512 - seq_len + 1) * config.hidden_size


def test_model_param_reruns_custom_jobs_and_outdated_checkpoints_are_discarded(tmp_path):
    from test_config_schema import validated

    from dpscaling.train.checkpoint import CONFIG_FILE, discard_outdated_checkpoints
    from dpscaling.train.config import job_train_config
    from dpscaling.workflow.params import model_param

    run = validated({"models": {"custom": {"Nano": {"layers": 1, "heads": 2, "hidden": 16}}}, "data": {"seq_len": 64}})
    assert model_param(run, "BertTiny") == "BertTiny"
    param = model_param(run, "Nano")
    # the validated entry (intermediate filled by the schema) and the rows it trains
    assert param == {"layers": 1, "heads": 2, "hidden": 16, "intermediate": None, "max_positions": 64,
                     "type_vocab_size": 1}
    config = job_train_config(param, TRAINING, _grid_point("Nano"), 64)
    assert config.max_positions == 64 and config.model_overrides["type_vocab_size"] == 1
    # A checkpoint of the same run written when custom models had BERT's 512 positions and 2 token types is
    # discarded ...
    before = config.to_dict()
    before["max_positions"] = 512
    before["model_overrides"] = {k: v for k, v in before["model_overrides"].items() if k != "type_vocab_size"}
    old = tmp_path / "old"
    old.mkdir()
    (old / CONFIG_FILE).write_text(json.dumps(before))
    assert discard_outdated_checkpoints(old, config) and not old.exists()
    # ... any other difference, or the same configuration, is kept (the loop resumes or refuses it)
    for name, saved in (("other", {**before, "learning_rate": 0.5}), ("same", config.to_dict())):
        (tmp_path / name).mkdir()
        (tmp_path / name / CONFIG_FILE).write_text(json.dumps(saved))
        assert not discard_outdated_checkpoints(tmp_path / name, config) and (tmp_path / name).exists()


def test_one_check_says_whether_a_checkpoint_belongs_to_this_run(tmp_path):
    """The loop refuses a checkpoint of another configuration; a private budget's other plan is removed."""
    from dpscaling.core.errors import UserError
    from dpscaling.private.jobs import discard_other_plans_checkpoint
    from types import SimpleNamespace

    from dpscaling.train.checkpoint import CONFIG_FILE, config_differences, recorded_vocabulary
    from dpscaling.train.config import job_train_config
    from dpscaling.train.checkpoint import check_same_config

    config = job_train_config("BertTiny", TRAINING, _grid_point("BertTiny"), 64)
    empty = tmp_path / "empty"
    empty.mkdir()
    assert config_differences(empty, config) is None
    meta = SimpleNamespace(vocab_size=1024, vocab_sha256="a" * 64, tokenizer="train")
    check_same_config(empty, config, writer=True, meta=meta)  # the first writer records its config and vocabulary
    assert config_differences(empty, config) == [] and (empty / CONFIG_FILE).is_file()
    assert recorded_vocabulary(empty) == {"vocab_size": 1024, "vocab_sha256": "a" * 64, "tokenizer": "train"}
    other = {**json.loads((empty / CONFIG_FILE).read_text()), "learning_rate": 0.5, "steps": 3}
    changed = tmp_path / "changed"
    changed.mkdir()
    (changed / CONFIG_FILE).write_text(json.dumps(other))
    assert config_differences(changed, config) == ["learning_rate", "steps"]
    with pytest.raises(UserError, match=r"differs in \['learning_rate', 'steps'\]"):
        check_same_config(changed, config, writer=True, meta=meta)
    assert not discard_other_plans_checkpoint(empty, config) and empty.exists()
    assert discard_other_plans_checkpoint(changed, config) and not changed.exists()
