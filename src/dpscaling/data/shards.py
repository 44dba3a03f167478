"""Packed sequences on disk: Parquet shards plus ``meta.json``.

Layout of a packed data directory::

    meta.json                      sequence length, vocabulary, special ids, counts
    train/part-00000.parquet …     column ``input_ids``: fixed_size_list<int32>[seq_len]; with data.users
                                   also ``user``: int32, the sequence's user (dpscaling.data.users)
    heldout/part-00000.parquet …

This module is the one reader and writer of that layout; training and the
analysis load data only through :func:`load_meta` and :func:`load_split`.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from dpscaling.data import check_split
from dpscaling.core.errors import UserError
from dpscaling.core.io import atomic_path, write_json_atomic

COLUMN = "input_ids"
USER_COLUMN = "user"
META_FILE = "meta.json"


@dataclass(frozen=True)
class DatasetMeta:
    """What a training job needs to know about a packed data directory."""

    seq_len: int
    vocab_size: int
    pad_id: int
    unk_id: int
    cls_id: int
    sep_id: int
    mask_id: int
    n_train: int
    n_heldout: int
    tokenizer: str
    vocab_sha256: str
    source: dict = field(default_factory=dict)
    # With data.users: dpscaling.data.users.users_record (unit, cap k, users, contributions); {} without.
    users: dict = field(default_factory=dict)

    @property
    def special_ids(self) -> tuple[int, ...]:
        return (self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id)


def write_split(rows: np.ndarray, directory: str | Path, shard_rows: int,
                users: np.ndarray | None = None) -> list[Path]:
    """Write ``rows`` (n, seq_len) as Parquet shards of at most ``shard_rows`` rows, with each row's user
    where ``users`` (n,) is given."""
    if rows.ndim != 2:
        raise ValueError(f"rows must be 2-D (n, seq_len), got shape {rows.shape}")
    if users is not None and len(users) != len(rows):
        raise ValueError(f"users must have one entry per row: {len(users)} for {len(rows)} rows")
    seq_len = rows.shape[1]
    written = []
    with atomic_path(directory, directory=True) as tmp:
        n_shards = max(1, -(-rows.shape[0] // shard_rows))
        for shard in range(n_shards):
            block = np.ascontiguousarray(rows[shard * shard_rows : (shard + 1) * shard_rows])
            values = pa.array(block.reshape(-1), type=pa.int32())
            columns = {COLUMN: pa.FixedSizeListArray.from_arrays(values, seq_len)}
            if users is not None:
                columns[USER_COLUMN] = pa.array(users[shard * shard_rows : (shard + 1) * shard_rows], pa.int32())
            name = f"part-{shard:05d}.parquet"
            pq.write_table(pa.table(columns), tmp / name)
            written.append(Path(directory) / name)
    return written


def _read_column(shard: Path, name: str):
    """One column of a shard, read as a single file: ``pq.read_table`` would import pyarrow's dataset layer (a
    quarter of a second of every training job's start-up) to read what is always one file."""
    return pq.ParquetFile(shard).read(columns=[name]).column(name)


def load_split(data_dir: str | Path, split: str) -> np.ndarray:
    """All sequences of ``split`` as an (n, seq_len) int32 array, in shard order."""
    check_split(split)
    directory = Path(data_dir) / split
    shards = sorted(directory.glob("part-*.parquet"))
    if not shards:
        raise UserError(f"data: no shards in {str(directory)!r}; run the data stage first")
    blocks = []
    for shard in shards:
        column = _read_column(shard, COLUMN).combine_chunks()
        width = column.type.list_size
        blocks.append(column.values.to_numpy(zero_copy_only=False).reshape(-1, width))
    return np.concatenate(blocks).astype(np.int32, copy=False)


def load_users(data_dir: str | Path) -> np.ndarray:
    """Each train sequence's user (int32, aligned with :func:`load_split`'s rows), for data packed with
    ``data.users``."""
    shards = sorted((Path(data_dir) / "train").glob("part-*.parquet"))
    if not shards:
        raise UserError(f"data: no shards in {str(Path(data_dir) / 'train')!r}; run the data stage first")
    if USER_COLUMN not in pq.read_schema(shards[0]).names:
        raise UserError(f"data.users: the data in {str(data_dir)!r} was packed without users; set data.users "
                        "(unit: document, synthetic or column) to give each sequence its user")
    return np.concatenate([_read_column(shard, USER_COLUMN).to_numpy()
                           for shard in shards]).astype(np.int32, copy=False)


def write_meta(data_dir: str | Path, meta: DatasetMeta) -> None:
    record = asdict(meta)
    if not record["users"]:  # data without users: meta.json as before users existed
        del record["users"]
    write_json_atomic(Path(data_dir) / META_FILE, record)


def load_meta(data_dir: str | Path) -> DatasetMeta:
    path = Path(data_dir) / META_FILE
    if not path.is_file():
        raise UserError(f"data: {str(path)!r} is missing; run the data stage first")
    return DatasetMeta(**json.loads(path.read_text(encoding="utf-8")))
