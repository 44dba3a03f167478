"""Where the output bias starts (dpscaling.data.public_unigram, training.output_bias): the public domain's
unigram, counted independently here, is exactly where a run's bias starts; what cannot start from it is
refused naming the key."""

from __future__ import annotations

import dataclasses
import json

import jax
import numpy as np
import pyarrow.parquet as pq
import pytest

from dp_training_data import CORPUS, VOCAB
from dpscaling.config.checks import check_config, public_corpus_spec
from dpscaling.data.documents import CorpusSpec
from dpscaling.data.public_unigram import (
    FILE, PUBLIC_UNIGRAM, ZEROS, count_public_unigram, load_public_unigram, write_public_unigram)
from dpscaling.data.shards import load_meta, load_split, write_meta
from dpscaling.data.stage import pack_documents, prepare_documents
from dpscaling.core.errors import UserError
from dpscaling.train import TrainConfig, run_training
from dpscaling.train.evaluate import restore_params
from dpscaling.train.objectives import run_objective
from test_config_schema import validated
from test_finetune_data import FINETUNE, SMOKE

pytestmark = pytest.mark.slow(minutes=1)

BERT = TrainConfig(model="custom", family="bert", model_name="BertTiny1",
                   model_overrides=dict(num_layers=1, num_heads=2, hidden_size=32), batch_size=8, num_steps=1,
                   warmup_steps=0, learning_rate=1e-12, log_every=1, checkpoint_every=1)


def _pack(directory, sources, n_documents):
    spec = CorpusSpec(source="core", paths=(str(CORPUS),), max_documents=n_documents, sources=sources)
    prepare_documents(spec, heldout_fraction=0.1, seed=0, output=directory / "documents.parquet")
    pack_documents(directory / "documents.parquet", VOCAB, "wordpiece-core-8192", 32, shard_rows=512,
                   output_dir=directory / "packed", source=spec.record())
    return directory / "packed"


@pytest.fixture(scope="module")
def domains(tmp_path_factory):
    """(public, private) packed directories of two sources of the corpus, one vocabulary; the public unigram
    written beside the private shards as the data stage does."""
    root = tmp_path_factory.mktemp("domains")
    public = _pack(root / "public", ("cia_factbook",), 40)
    private = _pack(root / "private", ("jane_austen",), 12)
    write_public_unigram(public, private, "masked_lm")
    return public, private


def test_the_public_unigram_is_the_public_train_splits_centred_add_one_log_frequencies(domains) -> None:
    public, private = domains
    meta = load_meta(public)
    ids = load_split(public, "train").ravel()
    ids = ids[~np.isin(ids, meta.special_ids)]  # never a masked-LM target
    expected = np.log(np.bincount(ids, minlength=meta.vocab_size) + 1.0)
    expected -= expected.mean()
    written = json.loads((private / FILE).read_text())
    assert written["tokens"] == ids.size and written["sources"] == ["cia_factbook"]
    assert written["vocab_sha256"] == load_meta(private).vocab_sha256
    np.testing.assert_allclose(load_public_unigram(private), expected, atol=1e-6)
    # the specials keep only their pseudo-count: the lowest start of all
    start = load_public_unigram(private)
    assert np.allclose(start[list(meta.special_ids)], start.min())
    # it is a statistic of the public domain only: the private split's own counts differ
    assert count_public_unigram(private, "masked_lm").log_frequencies != written["log_frequencies"]


def test_a_run_starts_its_output_bias_there_and_nothing_else_changes(domains, tmp_path) -> None:
    _, private = domains
    meta = load_meta(private)
    starts = {}
    for name in (ZEROS, PUBLIC_UNIGRAM):
        config = dataclasses.replace(BERT, output_bias=name)
        run_training(config, private, tmp_path / f"{name}.parquet", tmp_path / name)
        model = config.model_family.module_class()(config.model_config(meta.vocab_size))
        params, _ = restore_params(tmp_path / name, model, run_objective(config, meta), config, meta.seq_len)
        starts[name] = (params, pq.read_table(tmp_path / f"{name}.parquet").to_pandas())
    (zeros, zero_curve), (public, public_curve) = starts[ZEROS], starts[PUBLIC_UNIGRAM]
    # at a rate of 1e-12 one step moves nothing: the checkpoint holds the start
    np.testing.assert_allclose(np.asarray(public["mlm_output_bias"]["bias"]), load_public_unigram(private), atol=1e-6)
    np.testing.assert_allclose(np.asarray(zeros["mlm_output_bias"]["bias"]), 0.0, atol=1e-6)
    others = [(path, a, b) for (path, a), (_, b) in zip(jax.tree_util.tree_leaves_with_path(public),
                                                        jax.tree_util.tree_leaves_with_path(zeros), strict=True)
              if "mlm_output_bias" not in jax.tree_util.keystr(path)]
    assert len(others) > 5 and all(np.allclose(a, b) for _, a, b in others)  # the same seed's weights
    # the start is worth nats before any step (log 8192 = 9.0 for the uniform start) and the curve says so
    assert public_curve["loss"].iloc[0] < zero_curve["loss"].iloc[0] - 0.5
    assert set(public_curve["output_bias"]) == {PUBLIC_UNIGRAM} and "output_bias" not in zero_curve.columns


def test_what_cannot_start_there_is_refused_naming_the_key(domains, tmp_path) -> None:
    public, private = domains
    with pytest.raises(UserError, match=r"training.output_bias: public_unigram needs .*public_unigram.json.*"
                                        r"data.public_sources"):
        load_public_unigram(public)  # the public shards have no public unigram beside them
    # a unigram counted under another vocabulary
    other = tmp_path / "other"
    other.mkdir()
    meta = load_meta(private)
    write_meta(other, dataclasses.replace(meta, vocab_sha256="0" * 64))
    (other / FILE).write_text((private / FILE).read_text())
    with pytest.raises(UserError, match=r"training.output_bias: .* was counted under the vocabulary sha256 "):
        load_public_unigram(other)
    decoder = dict(model="custom", family="decoder", model_name="DecoderTiny",
                   model_overrides=dict(num_layers=1, num_heads=2, hidden_size=32))
    with pytest.raises(UserError, match=r"train.output_bias: 'public_unigram' starts the output bias, which the "
                                        r"decoder family does not have; set it to 'zeros'"):
        TrainConfig(**decoder, output_bias=PUBLIC_UNIGRAM)
    with pytest.raises(UserError, match=r"train.output_bias: a start from init_checkpoint takes the checkpoint's"):
        dataclasses.replace(BERT, output_bias=PUBLIC_UNIGRAM, init_checkpoint=str(tmp_path))
    # in a config: without a public domain, and for a family without an output bias
    config = validated({**SMOKE, "data": {**SMOKE["data"], "public_sources": None},
                        "training": {**SMOKE["training"], "output_bias": PUBLIC_UNIGRAM}})
    with pytest.raises(UserError, match=r"training.output_bias: public_unigram starts from the public domain's "
                                        r"unigram; name it in data.public_sources"):
        public_corpus_spec(config)
    decoders = {**config, "data": {**config["data"], **FINETUNE["data"]},
                "models": {**config["models"], "names": ["DecoderNano"]}}
    with pytest.raises(UserError, match=r"training.output_bias: 'public_unigram' starts the output bias, which the "
                                        r"decoder family does not have; set it to 'zeros'"):
        check_config(decoders)
