"""A small packed dataset from the real corpus, for the model/DP/training tests.

Built with the project's own data stage functions (tokenize → pack → Parquet shards),
from the first documents of /work/shared/data/core.txt.xz.
"""

from __future__ import annotations

import itertools
from pathlib import Path

import numpy as np

from dpscaling.data.documents import read_blank_line_documents
from dpscaling.data.packing import (
    load_vocabulary,
    make_tokenizer,
    pack_sequences,
    tokenize_documents,
)
from dpscaling.data.shards import DatasetMeta, write_meta, write_split

CORPUS = Path("/work/shared/data/core.txt.xz")
VOCAB_CANDIDATES = (
    Path(__file__).resolve().parents[1] / "resources/vocab/wordpiece-core-8192/vocab.txt",
    Path("/work/shared/data/wordpiece-core-8192/vocab.txt"),
)


def vocab_path() -> Path:
    return next(p for p in VOCAB_CANDIDATES if p.is_file())


def build_packed_corpus(directory: Path, seq_len: int = 64, n_documents: int = 60) -> DatasetMeta:
    vocabulary = load_vocabulary(vocab_path())
    documents = list(itertools.islice(read_blank_line_documents(CORPUS), n_documents))
    ids = tokenize_documents(make_tokenizer(vocabulary), documents)
    rows = pack_sequences(ids, seq_len, vocabulary.cls_id, vocabulary.sep_id)
    n_heldout = max(1, rows.shape[0] // 20)
    write_split(rows[n_heldout:], directory / "train", shard_rows=512)
    write_split(rows[:n_heldout], directory / "heldout", shard_rows=512)
    meta = DatasetMeta(
        seq_len=seq_len,
        vocab_size=vocabulary.size,
        pad_id=vocabulary.pad_id,
        unk_id=vocabulary.unk_id,
        cls_id=vocabulary.cls_id,
        sep_id=vocabulary.sep_id,
        mask_id=vocabulary.mask_id,
        n_train=int(rows.shape[0] - n_heldout),
        n_heldout=int(n_heldout),
        tokenizer="wordpiece-core-8192",
        vocab_sha256=vocabulary.sha256,
    )
    write_meta(directory, meta)
    return meta


if __name__ == "__main__":
    import sys

    meta = build_packed_corpus(Path(sys.argv[1]))
    print(meta.n_train, meta.n_heldout, np.int32(meta.seq_len))
