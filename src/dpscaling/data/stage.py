"""The two steps of the data stage, as the workflow's rules call them.

1. :func:`prepare_documents` — read the configured corpus, split it by document
   into train / held-out, and store the documents (``documents.parquet``).
1b. :func:`train_vocabulary` — with ``data.tokenizer: train`` only: train a WordPiece
   vocabulary on the train split (:mod:`dpscaling.data.wordpiece`, ``vocab.txt``).
2. :func:`pack_documents` — tokenize each split and pack it into fixed-length
   sequences (Parquet shards + ``meta.json``, see :mod:`dpscaling.data.shards`); with ``data.users``, each
   train sequence's user beside it (:mod:`dpscaling.data.users`).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pandas as pd

from dpscaling.data import SPLITS
from dpscaling.data.documents import CorpusSpec, documents_of_split, load_user_documents, split_documents
from dpscaling.data.packing import Vocabulary, load_vocabulary, make_tokenizer, pack_sequences, tokenize_documents
from dpscaling.data.shards import DatasetMeta, write_meta, write_split
from dpscaling.data.users import (
    UserSpec, cap_examples, synthetic_contributions, users_of_contributions, users_record)
from dpscaling.data.wordpiece import train_wordpiece, write_vocabulary
from dpscaling.core.errors import UserError
from dpscaling.core.io import atomic_path


def prepare_documents(
    spec: CorpusSpec, heldout_fraction: float, seed: int, output: str | Path
) -> pd.DataFrame:
    """Read and split the corpus (by user where it has a user column); write ``output`` (Parquet) atomically."""
    documents = load_user_documents(spec)
    users = [user for _, user in documents] if spec.user_column is not None else None
    frame = split_documents([text for text, _ in documents], heldout_fraction, seed, users)
    with atomic_path(output) as tmp:
        frame.to_parquet(tmp, index=False)
    return frame


def train_vocabulary(documents: str | Path, vocab_size: int, output: str | Path) -> Vocabulary:
    """Train a ``vocab_size`` WordPiece vocabulary on ``documents``' train split; write ``output``."""
    frame = pd.read_parquet(documents)
    return write_vocabulary(train_wordpiece(documents_of_split(frame, "train"), vocab_size), output)


def pack_documents(
    documents: str | Path,
    vocab: str | Path,
    tokenizer_name: str,
    seq_len: int,
    shard_rows: int,
    output_dir: str | Path,
    source: dict | None = None,
    users: UserSpec | None = None,
) -> DatasetMeta:
    """Tokenize and pack each split of ``documents`` into ``output_dir``; with ``users``, the train split's
    sequences carry their users, capped at ``users.max_examples`` each."""
    frame = pd.read_parquet(documents)
    vocabulary = load_vocabulary(vocab)
    tokenizer = make_tokenizer(vocabulary)
    output_dir = Path(output_dir)
    counts = {}
    for split in SPLITS:
        ids = tokenize_documents(tokenizer, documents_of_split(frame, split))
        owners = None
        if users is not None and split == "train":
            authors = frame.loc[frame["split"] == split, "user"] if users.unit == "column" else None
            rows, owners, record = _pack_users(ids, seq_len, vocabulary, users, authors)
        else:
            rows = pack_sequences(ids, seq_len, vocabulary.cls_id, vocabulary.sep_id)
        if rows.shape[0] == 0:
            raise UserError(
                f"data.seq_len: the {split} split has too few tokens for one sequence of {seq_len}"
            )
        write_split(rows, output_dir / split, shard_rows, users=owners)
        counts[split] = int(rows.shape[0])
    meta = DatasetMeta(
        seq_len=seq_len,
        vocab_size=vocabulary.size,
        pad_id=vocabulary.pad_id,
        unk_id=vocabulary.unk_id,
        cls_id=vocabulary.cls_id,
        sep_id=vocabulary.sep_id,
        mask_id=vocabulary.mask_id,
        n_train=counts["train"],
        n_heldout=counts["heldout"],
        tokenizer=tokenizer_name,
        vocab_sha256=vocabulary.sha256,
        source=dict(source or {}),
        users=record if users is not None else {},
    )
    write_meta(output_dir, meta)
    return meta


def _pack_users(ids: list[np.ndarray], seq_len: int, vocabulary: Vocabulary, users: UserSpec,
                authors: pd.Series | None = None) -> tuple[np.ndarray, np.ndarray, dict]:
    """The train split's rows, each row's user, and the users' record, capped (:mod:`dpscaling.data.users`).
    ``authors``: each train document's user (unit column)."""
    if users.unit in ("document", "column"):  # each user packed alone: no sequence holds two users' text
        if users.unit == "document":
            own = [[doc] for doc in ids]
        else:
            order = pd.unique(authors.to_numpy())  # users in the order they first appear
            index = {user: position for position, user in enumerate(order)}
            own = [[] for _ in order]
            for doc, user in zip(ids, authors):
                own[index[user]].append(doc)
        per_user = [pack_sequences(docs, seq_len, vocabulary.cls_id, vocabulary.sep_id) for docs in own]
        per_user = [rows for rows in per_user if len(rows)]
        rows = np.concatenate(per_user) if per_user else np.zeros((0, seq_len), np.int32)
        owners = users_of_contributions([len(block) for block in per_user])
    else:
        rows = pack_sequences(ids, seq_len, vocabulary.cls_id, vocabulary.sep_id)
        owners = users_of_contributions(synthetic_contributions(len(rows), users))
    kept = cap_examples(rows, owners, users.max_examples, users.seed)
    return rows[kept], owners[kept], users_record(users, owners, owners[kept])

