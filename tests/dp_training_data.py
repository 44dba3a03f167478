"""A small packed dataset from the real corpus, for the model/DP/training tests.

Built by the project's own data stage (document split → tokenize → pack →
Parquet shards) from the first documents of the vendored corpus.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq

from dpscaling.data.documents import CorpusSpec
from dpscaling.data.shards import DatasetMeta
from dpscaling.data.stage import pack_documents, prepare_documents
from dpscaling.data.users import UserSpec

REPO = Path(__file__).resolve().parents[1]
CORPUS = REPO / "resources" / "corpus" / "core.txt.xz"
VOCAB = REPO / "resources" / "vocab" / "wordpiece-core-8192" / "vocab.txt"


def build_packed_corpus(directory: Path, seq_len: int = 64, n_documents: int = 60,
                        users: UserSpec | None = None) -> DatasetMeta:
    spec = CorpusSpec(source="core", paths=(str(CORPUS),), max_documents=n_documents)
    documents = directory / "documents.parquet"
    prepare_documents(spec, heldout_fraction=0.05, seed=0, output=documents)
    return pack_documents(documents, VOCAB, "wordpiece-core-8192", seq_len, shard_rows=512, output_dir=directory,
                          users=users)


CURVE = ["step", "loss", "grad_norm", "clipped_fraction", "lr"]


def resume_from_midpoint(config, corpus: Path, out: Path, resumed: Path, resumed_config=None):
    """Run ``config`` again from the checkpoint at ``config.checkpoint_every`` of the finished run in ``out``
    (a copy in ``resumed``, its last step deleted); assert it resumed there and logged the identical curve.
    ``resumed_config``: the second half's config instead (one that computes the same curve another way)."""
    from dpscaling.train import run_training

    shutil.copytree(out / "ckpt", resumed / "ckpt")
    shutil.rmtree(resumed / "ckpt" / "state" / str(config.num_steps))
    summary = run_training(resumed_config or config, corpus, resumed / "metrics.parquet", resumed / "ckpt")
    assert summary.resumed_from_step == config.checkpoint_every
    reference = pq.read_table(out / "metrics.parquet", columns=CURVE).to_pydict()
    again = pq.read_table(resumed / "metrics.parquet", columns=CURVE).to_pydict()
    for name in CURVE:
        np.testing.assert_array_equal(again[name], reference[name], err_msg=name)
    return summary


def packed_corpus(tmp_path_factory, seq_len: int, n_documents: int) -> Path:
    """A module fixture's packed corpus in a fresh temporary directory."""
    directory = tmp_path_factory.mktemp("packed")
    build_packed_corpus(directory, seq_len=seq_len, n_documents=n_documents)
    return directory


if __name__ == "__main__":
    import sys

    meta = build_packed_corpus(Path(sys.argv[1]))
    print(meta.n_train, meta.n_heldout, meta.seq_len)
