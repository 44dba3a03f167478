"""BERT model and family: parameter counts (paper Table 1 / throughput table), forward pass."""

from __future__ import annotations

import argparse
import json

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpscaling.commands import params as params_command
from dpscaling.errors import UserError
from dpscaling.models import FAMILY, PAPER_PARAMS, BertMlm, bert_config, count_params


@pytest.mark.parametrize("name", list(FAMILY))
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
    # The benchmark model of notes/dp-training.md: 1.51M parameters.
    assert count_params(config).total == 1_511_360
    with pytest.raises(UserError):
        bert_config("BertHuge")
    with pytest.raises(UserError):
        bert_config("custom", num_layers=2)
    with pytest.raises(UserError):
        bert_config("custom", num_layers=2, num_heads=3, hidden_size=128)


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
