"""The decoder-only family: a causal model, its exact parameter counts, next-token losses, and DP training
exactly as BERT's (clipping paths agree, both samplers, the train step)."""

from __future__ import annotations

import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpscaling.dp import CLIPPED_SUMS, clipped_mean_grad
from dpscaling.core.errors import UserError
from dpscaling.models.decoder import DecoderLM, count_params
from dpscaling.models.family import DECODER, PRESETS, configured_model, family_of
from dpscaling.models.shapes import DecoderConfig
from dpscaling.train.objectives import CausalLM, loss_fn

VOCAB, SEQ, BATCH = 97, 16, 6


def small(use_bias: bool = True, layers: int = 2, hidden: int = 16) -> DecoderConfig:
    return DecoderConfig(num_layers=layers, num_heads=2, hidden_size=hidden, vocab_size=VOCAB, max_positions=SEQ,
                         use_bias=use_bias)


def tokens(seed: int = 1) -> jnp.ndarray:
    ids = jax.random.randint(jax.random.PRNGKey(seed), (BATCH, SEQ), 5, 30)  # repeats: the tied table's cross term
    return ids.at[:, 0].set(2).at[0, -3:].set(0)  # [CLS] first; one sequence ends in padding


def gpt2_count(layers: int, hidden: int, vocab: int = 50257, positions: int = 1024) -> int:
    """GPT-2 from first principles: wte + wpe; per block ln_1, attn (c_attn: H×3H + 3H, c_proj: H×H + H),
    ln_2, mlp (c_fc: H×4H + 4H, c_proj: 4H×H + H); ln_f. No separate output layer (tied to wte)."""
    block = 2 * hidden + (hidden * 3 * hidden + 3 * hidden) + (hidden * hidden + hidden) + 2 * hidden \
        + (hidden * 4 * hidden + 4 * hidden) + (4 * hidden * hidden + hidden)
    return vocab * hidden + positions * hidden + layers * block + 2 * hidden


@pytest.mark.parametrize("name, layers, hidden, published", [
    ("GPT2Small", 12, 768, 124_439_808), ("GPT2Medium", 24, 1024, 354_823_168), ("GPT2Large", 36, 1280, 774_030_080)])
def test_gpt2_presets_have_gpt2s_exact_parameter_count(name, layers, hidden, published):
    config = DECODER.config(name, vocab_size=50257)
    assert config.param_count().total == gpt2_count(layers, hidden) == published
    assert config.max_positions == 1024 and config.use_bias
    assert config.param_count().non_embedding == published - (50257 + 1024) * hidden


@pytest.mark.parametrize("config", [small(), small(use_bias=False, layers=1, hidden=24),
                                    DECODER.config("NanoDO30M", vocab_size=512)], ids=["bias", "no-bias", "nanodo"])
def test_closed_form_count_is_the_built_model(config):
    assert config.param_count() == count_params(config)


def test_nanodo30m_is_nanodos_width_without_biases_at_about_30m_parameters():
    config = DECODER.config("NanoDO30M", vocab_size=32101)  # NanoDO's SentencePiece vocabulary
    assert (config.hidden_size, config.num_heads, config.intermediate_size, config.max_positions) == (512, 8, 2048, 512)
    assert not config.use_bias and 28e6 < config.param_count().total < 31e6


def test_the_decoder_is_causal():
    config = small()
    model = DecoderLM(config)
    ids = tokens()[1:2]
    params = model.init(jax.random.PRNGKey(0), ids)["params"]
    logits = model.apply({"params": params}, ids)
    for j in (3, 9, SEQ - 1):
        changed = ids.at[0, j].set((ids[0, j] + 7) % VOCAB)
        other = model.apply({"params": params}, changed)
        np.testing.assert_array_equal(other[0, :j], logits[0, :j])  # no position before j sees token j
        assert float(jnp.max(jnp.abs(other[0, j:] - logits[0, j:]))) > 1e-4  # and position j does


def test_initial_loss_is_about_log_vocabulary():
    config = DecoderConfig(num_layers=2, num_heads=2, hidden_size=32, vocab_size=1024, max_positions=SEQ)
    model = DecoderLM(config)
    ids = jax.random.randint(jax.random.PRNGKey(3), (BATCH, SEQ), 5, 1024)
    params = model.init(jax.random.PRNGKey(0), ids)["params"]
    objective = CausalLM(pad_id=0)
    losses = loss_fn(objective, model)(params, objective.batch(None, ids))
    assert float(jnp.mean(losses)) == pytest.approx(math.log(1024), abs=0.05)


def test_next_token_targets_skip_padding_and_the_last_position():
    objective = CausalLM(pad_id=0)
    ids = jnp.array([[2, 7, 8, 3, 0, 0], [2, 9, 9, 9, 9, 3]])
    batch = objective.batch(None, ids)
    np.testing.assert_array_equal(batch["targets"][0, :3], [7, 8, 3])
    np.testing.assert_array_equal(batch["target_weights"], [[1, 1, 1, 0, 0, 0], [1, 1, 1, 1, 1, 0]])


@pytest.mark.parametrize("use_bias", [True, False])
def test_ghost_clipping_equals_vmap_for_the_decoder(use_bias):
    config = small(use_bias)
    model = DecoderLM(config)
    ids = tokens()
    params = model.init(jax.random.PRNGKey(0), ids)["params"]
    objective = CausalLM(pad_id=0)
    batch = objective.batch(None, ids)
    results = {method: jax.jit(lambda p, b, m=method: clipped_mean_grad(
        loss_fn(objective, model), p, b, clipped_sum=CLIPPED_SUMS[m], clip_norm=0.1, microbatch_size=3))(params, batch)
        for method in CLIPPED_SUMS}
    vmap, ghost = results["vmap"], results["ghost"]
    np.testing.assert_allclose(vmap.norms, ghost.norms, rtol=1e-5)
    assert (vmap.norms > 0.1).all()  # every example clipped: the factors matter
    difference = max(float(jnp.max(jnp.abs(a - b))) for a, b in zip(jax.tree.leaves(vmap.grad),
                                                                     jax.tree.leaves(ghost.grad)))
    assert difference < 1e-6


def test_families_are_looked_up_not_branched_on():
    assert PRESETS["GPT2Small"] is DECODER and family_of("BertTiny").name == "bert"
    custom = {"Tiny": {"layers": 1, "heads": 2, "hidden": 32, "family": "decoder"}}
    assert family_of("Tiny", custom) is DECODER
    config = configured_model("Tiny", custom, vocab_size=1024, seq_len=64)
    assert isinstance(config, DecoderConfig) and config.max_positions == 64  # only the rows it trains
    with pytest.raises(UserError, match="models.custom.Tiny.family"):
        family_of("Tiny", {"Tiny": {**custom["Tiny"], "family": "rnn"}})


# --- training and the law: the decoder goes through the same code as BERT -----------------------------


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    from dp_training_data import build_packed_corpus

    directory = tmp_path_factory.mktemp("packed")
    build_packed_corpus(directory, seq_len=32, n_documents=60)
    return directory


def test_a_private_decoder_run_records_its_family_and_its_guarantee(corpus, tmp_path):
    import pyarrow.parquet as pq

    from dpscaling.train import TrainConfig, run_training

    config = TrainConfig(model="custom", family="decoder", model_overrides=dict(num_layers=1, num_heads=2, hidden_size=32),
                         batch_size=16, microbatch_size=8, num_steps=20, warmup_steps=2, learning_rate=2.0**-7,
                         log_every=10, checkpoint_every=10, sampling="truncated_poisson", target_epsilon=8.0, clipping="ghost")
    summary = run_training(config, corpus, tmp_path / "metrics.parquet", tmp_path / "ckpt")
    curve = pq.read_table(tmp_path / "metrics.parquet").to_pandas()
    assert summary.status == "finished" and set(curve["family"]) == {"decoder"}
    assert curve["epsilon"].iloc[-1] <= 8.0 and curve["accountant"].iloc[-1] == "truncated_poisson"
    assert summary.n_params == config.model_config(_vocab(corpus)).param_count().total
    first, last = curve["loss"].iloc[0], curve["loss"].iloc[-1]
    assert last < first  # it learns something in 20 private steps


def _vocab(corpus) -> int:
    from dpscaling.data.shards import load_meta

    return load_meta(corpus).vocab_size


def test_a_law_refuses_curves_of_two_families():
    from dpscaling.law import fit_law
    from dpscaling.law.columns import FAMILY, MODEL
    from dpscaling.law.synthetic import synthetic_results

    results = synthetic_results()
    decoder_model = sorted(results[MODEL].unique())[-1]
    mixed = results.assign(**{FAMILY: np.where(results[MODEL] == decoder_model, "decoder", "bert")})
    with pytest.raises(UserError, match=rf"mix model families \(bert: .*; decoder: {decoder_model}\)"):
        fit_law(mixed)


def test_a_run_of_two_families_is_refused_naming_the_models():
    from test_config_schema import validated

    from dpscaling.config.checks import check_config

    config = validated({"models": {"names": ["BertTiny", "GPT2Small"]}})
    with pytest.raises(UserError, match=r"models.names: .*bert: BertTiny; decoder: GPT2Small"):
        check_config(config)
