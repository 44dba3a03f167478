"""Reading a corpus into documents and splitting it into train / held-out.

The embedded default is the vendored real-English corpus
(``resources/corpus/core.txt.xz``: one paragraph per line, a blank line between
documents). Users may instead point the config at local text files in the same
layout, at Parquet files with one document per row, or — with network access
and the optional ``datasets`` package — at a HuggingFace dataset name.

The split is by *document*, so no document contributes sequences to both
sides: the held-out sequences are text the model never trained on. With a user
column (``data.users: {unit: column}``) each document carries its user and the
split is by *user* (:func:`dpscaling.data.users.heldout_users`).
"""

from __future__ import annotations

import bz2
import dataclasses
import gzip
import json
import lzma
import itertools
import math
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from dpscaling.core.errors import UserError
from dpscaling.data import check_split
from dpscaling.data.users import heldout_users

SOURCES = ("core", "text", "parquet", "huggingface")
USER_COLUMN_SOURCES = ("parquet", "huggingface")  # the sources with columns (data.users unit column)

_OPENERS = {".xz": lzma.open, ".gz": gzip.open, ".bz2": bz2.open}


@dataclass(frozen=True)
class CorpusSpec:
    """Where the documents come from (the config's ``data`` block)."""

    source: str = "core"
    paths: tuple[str, ...] = ()
    text_column: str = "text"
    hf_dataset: str | None = None
    hf_config: str | None = None
    hf_split: str = "train"
    max_documents: int | None = None
    # Named sources of a corpus with a stats.json beside it (the vendored one): only their documents.
    # Empty = all. Added after results existed: left out of record() when empty.
    sources: tuple[str, ...] = ()
    # data.users.column (unit column): the column of each document's user; None = documents have no user.
    # Added after results existed: left out of record() when None.
    user_column: str | None = None

    def record(self) -> dict[str, Any]:
        """The spec as the data rules' params and the packed data's manifest hold it (``sources`` and
        ``user_column`` only when set, so data packed before they existed is still this spec's)."""
        values = dataclasses.asdict(self)
        if not self.sources:
            del values["sources"]
        if self.user_column is None:
            del values["user_column"]
        return values

    @classmethod
    def from_record(cls, record: Mapping[str, Any]) -> CorpusSpec:
        """The spec :meth:`record` wrote."""
        return cls(**{**record, "paths": tuple(record["paths"]), "sources": tuple(record.get("sources", ()))})

    def __post_init__(self) -> None:
        if self.source not in SOURCES:
            raise UserError(f"data.source: {self.source!r} is not one of {list(SOURCES)}")
        if self.source in ("text", "parquet", "core") and not self.paths:
            raise UserError(f"data.paths: source {self.source!r} needs at least one file")
        if self.source == "huggingface" and not self.hf_dataset:
            raise UserError("data.hf_dataset: source 'huggingface' needs a dataset name")
        if self.max_documents is not None and self.max_documents < 2:
            raise UserError(f"data.max_documents: {self.max_documents} must be >= 2 (or null)")
        if self.sources and self.source != "core":
            raise UserError(f"data.sources: only used with data.source 'core', got source {self.source!r}")
        if self.user_column is not None and self.source not in USER_COLUMN_SOURCES:
            raise UserError(f"data.users: unit 'column' reads users from a column of data.source "
                            f"{list(USER_COLUMN_SOURCES)}, got source {self.source!r} (text has no columns: use unit "
                            "'document' or 'synthetic', or give the documents as Parquet with a user column)")


def _open_text(path: Path):
    opener = _OPENERS.get(path.suffix, open)
    return opener(path, "rt", encoding="utf-8")


def read_blank_line_documents(path: str | Path) -> Iterator[str]:
    """Yield documents of a text file where a blank line separates documents.

    Paragraphs (lines) inside a document are joined with a newline.
    """
    path = Path(path)
    if not path.is_file():
        raise UserError(f"data.paths: no such file {str(path)!r}")
    paragraphs: list[str] = []
    try:
        with _open_text(path) as handle:
            for line in handle:
                line = line.strip()
                if line:
                    paragraphs.append(line)
                elif paragraphs:
                    yield "\n".join(paragraphs)
                    paragraphs = []
    except UnicodeDecodeError as error:
        raise UserError(
            f"data.paths: {str(path)!r} is not UTF-8 text (byte 0x{error.object[error.start]:02x}: "
            f"{error.reason}); give text files (optionally .xz/.gz/.bz2) for data.source 'text', "
            "or use data.source 'parquet'"
        ) from error
    except (EOFError, OSError, lzma.LZMAError) as error:  # truncated or not really .xz/.gz/.bz2
        raise UserError(
            f"data.paths: {str(path)!r} cannot be read as {path.suffix or 'plain'} text "
            f"({type(error).__name__}: {error})"
        ) from error
    if paragraphs:
        yield "\n".join(paragraphs)


def _checked_column(names: Sequence[str], column: str, key: str, where: str) -> None:
    if column not in names:
        raise UserError(f"{key}: {column!r} is not a column of {where} (columns: {list(names)})")


def _rows(texts: Iterable[Any], users: Iterable[Any] | None, user_column: str | None,
          where: str) -> Iterator[tuple[str, str | None]]:
    """(text, user) of every non-empty document; a document without a user is refused by name."""
    for index, (text, user) in enumerate(zip(texts, users if users is not None else itertools.repeat(None))):
        if not (text and text.strip()):
            continue
        if user_column is not None and (user is None or str(user) == ""):
            raise UserError(f"data.users.column: document {index} of {where} has no user in {user_column!r}; "
                            "every document of a user column needs its user")
        yield text.strip(), (None if user_column is None else str(user))


def _read_parquet_documents(path: str | Path, column: str,
                            user_column: str | None = None) -> Iterator[tuple[str, str | None]]:
    if not Path(path).is_file():
        raise UserError(f"data.paths: no such file {str(path)!r}")
    try:
        schema = pq.read_schema(path)
    except (pa.ArrowException, OSError) as error:
        raise UserError(
            f"data.paths: {str(path)!r} is not a readable Parquet file ({type(error).__name__}: {error})"
        ) from error
    _checked_column(schema.names, column, "data.text_column", repr(str(path)))
    if user_column is not None:
        _checked_column(schema.names, user_column, "data.users.column", repr(str(path)))
    field = schema.field(column)
    if not (pa.types.is_string(field.type) or pa.types.is_large_string(field.type)):
        raise UserError(
            f"data.text_column: {column!r} is a column of {str(path)!r} that holds {field.type}, not text"
        )
    columns = [column] if user_column is None else [column, user_column]
    try:
        table = pq.read_table(path, columns=columns)
    except (pa.ArrowException, OSError) as error:
        raise UserError(
            f"data.paths: {str(path)!r} is a damaged Parquet file ({type(error).__name__}: {error})"
        ) from error
    users = table.column(user_column).to_pylist() if user_column is not None else None
    yield from _rows(table.column(column).to_pylist(), users, user_column, repr(str(path)))


def _read_huggingface_documents(spec: CorpusSpec) -> Iterator[tuple[str, str | None]]:
    try:
        import datasets  # optional: only for users with network access
    except ImportError as error:
        raise UserError(
            "data.source: 'huggingface' needs the optional package `datasets` "
            "(pip install datasets); the default corpus needs no network"
        ) from error
    where = f"dataset {spec.hf_dataset!r} (config {spec.hf_config!r}, split {spec.hf_split!r})"
    try:
        dataset = datasets.load_dataset(spec.hf_dataset, spec.hf_config, split=spec.hf_split)
    except Exception as error:  # noqa: BLE001 - network, unknown name/config/split: all the user's to fix
        raise UserError(
            f"data.hf_dataset: cannot load {where} ({type(error).__name__}: {error})"
        ) from error
    _checked_column(dataset.column_names, spec.text_column, "data.text_column", where)
    if spec.user_column is not None:
        _checked_column(dataset.column_names, spec.user_column, "data.users.column", where)
    found = 0
    users = (row[spec.user_column] for row in dataset) if spec.user_column is not None else None
    for document in _rows((row[spec.text_column] for row in dataset), users, spec.user_column, where):
        found += 1
        yield document
    if not found:
        raise UserError(f"data.hf_split: {where} has no non-empty {spec.text_column!r} documents")


def iter_documents(spec: CorpusSpec) -> Iterator[str]:
    """Yield the corpus's documents in file order (of ``spec.sources`` only, when given)."""
    for text, _ in iter_user_documents(spec):
        yield text


def iter_user_documents(spec: CorpusSpec) -> Iterator[tuple[str, str | None]]:
    """Yield (document, its user) in file order: the user from ``spec.user_column``, None without one."""
    if spec.source == "huggingface":
        yield from _read_huggingface_documents(spec)
        return
    for path in spec.paths:
        if spec.source == "parquet":
            yield from _read_parquet_documents(path, spec.text_column, spec.user_column)
        else:
            yield from ((text, None) for text in _text_documents(spec, path))


def _text_documents(spec: CorpusSpec, path: str) -> Iterator[str]:
    """The documents of one text file (of ``spec.sources`` only, when given)."""
    if spec.sources:
        kept = set(source_of_documents(path, spec.sources))
        yield from (document for index, document in enumerate(read_blank_line_documents(path)) if index in kept)
    else:
        yield from read_blank_line_documents(path)


def source_of_documents(path: str | Path, sources: Sequence[str]) -> dict[int, str]:
    """Document index → source name for the documents of ``sources`` in the corpus at ``path``, from the
    ``stats.json`` beside it (its ``sources``, in file order, each with its document count)."""
    stats_path = Path(path).parent / "stats.json"
    if not stats_path.is_file():
        raise UserError(f"data.sources: {path} has no stats.json beside it naming its sources")
    stats = json.loads(stats_path.read_text(encoding="utf-8"))
    names = [entry["source"] for entry in stats["sources"]]
    unknown = [name for name in sources if name not in names]
    if unknown:
        raise UserError(f"data.sources: {unknown} not among the corpus's sources {names}")
    owner: dict[int, str] = {}
    start = 0
    for entry in stats["sources"]:
        if entry["source"] in sources:
            owner.update(dict.fromkeys(range(start, start + int(entry["docs"])), entry["source"]))
        start += int(entry["docs"])
    return owner


def load_documents(spec: CorpusSpec) -> list[str]:
    """All documents (or the first ``max_documents``), failing if there are too few."""
    return [text for text, _ in load_user_documents(spec)]


def load_user_documents(spec: CorpusSpec) -> list[tuple[str, str | None]]:
    """All (document, user) pairs (or the first ``max_documents``; the user None without a user column),
    failing if there are too few documents."""
    documents: list[tuple[str, str | None]] = []
    for document in iter_user_documents(spec):
        documents.append(document)
        if spec.max_documents is not None and len(documents) >= spec.max_documents:
            break
    if len(documents) < 2:
        raise UserError(
            f"data: the corpus has {len(documents)} document(s); a train/held-out split needs >= 2"
        )
    return documents


def split_documents(
    documents: Sequence[str], heldout_fraction: float, seed: int, users: Sequence[str] | None = None
) -> pd.DataFrame:
    """Assign each document to ``train`` or ``heldout`` by a seeded permutation, or, given each document's
    user, each *user* by :func:`~dpscaling.data.users.heldout_users` (all of a user's documents on one side).

    At least one document lands on each side. Returns a frame with columns
    ``doc_id`` (position in the corpus), ``split`` and ``text`` (and ``user``), in corpus order.
    """
    if not 0.0 < heldout_fraction < 1.0:
        raise UserError(f"data.heldout_fraction: {heldout_fraction} must be in (0, 1)")
    n = len(documents)
    if users is None:
        n_heldout = min(n - 1, max(1, math.ceil(heldout_fraction * n)))
        heldout = np.zeros(n, dtype=bool)
        heldout[np.random.default_rng(seed).permutation(n)[:n_heldout]] = True
    else:
        users = [str(user) for user in users]
        ids, of_document = np.unique(np.asarray(users, dtype=object), return_inverse=True)
        heldout = heldout_users(ids, heldout_fraction, seed)[of_document]
        if heldout.all() or not heldout.any():
            raise UserError(f"data.heldout_fraction: {heldout_fraction} puts all {len(ids)} users of "
                            f"data.users.column on one side; a split by user needs more users or another fraction")
    return pd.DataFrame(
        {
            "doc_id": np.arange(n, dtype=np.int64),
            "split": np.where(heldout, "heldout", "train"),
            "text": list(documents),
            **({"user": users} if users is not None else {}),
        }
    )


def documents_of_split(frame: pd.DataFrame, split: str) -> Iterable[str]:
    check_split(split)
    return frame.loc[frame["split"] == split, "text"]
