"""WordPiece tokenization and packing into fixed-length sequences (paper §3.2).

Documents of one split are tokenized (lower-cased WordPiece, BERT uncased
rules) and their tokens streamed into sequences of exactly ``seq_len`` tokens,
``[CLS] t1 … t_{S-2} [SEP]``, with ``[SEP]`` also marking document boundaries
inside the stream (RoBERTa's "full-sentences" packing). The tail that does not
fill a whole sequence is dropped, so no sequence needs padding. Each packed
sequence is one privacy unit.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from tokenizers.implementations import BertWordPieceTokenizer

from dpscaling.core.errors import UserError

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
_ENCODE_CHUNK = 2048  # paragraphs per encode_batch call: bounded memory, full parallelism


@dataclass(frozen=True)
class Vocabulary:
    """A WordPiece vocabulary file and the ids of BERT's special tokens."""

    path: Path
    size: int
    sha256: str
    pad_id: int
    unk_id: int
    cls_id: int
    sep_id: int
    mask_id: int


def load_vocabulary(path: str | Path) -> Vocabulary:
    path = Path(path)
    if not path.is_file():
        raise UserError(f"data.tokenizer: vocabulary file {str(path)!r} does not exist")
    raw = path.read_bytes()
    tokens = raw.decode("utf-8").split("\n")
    if tokens and tokens[-1] == "":
        tokens.pop()
    index = {token: i for i, token in enumerate(tokens)}
    missing = [token for token in SPECIAL_TOKENS if token not in index]
    if missing:
        raise UserError(f"data.tokenizer: {str(path)!r} lacks the special tokens {missing}")
    return Vocabulary(
        path=path,
        size=len(tokens),
        sha256=hashlib.sha256(raw).hexdigest(),
        pad_id=index["[PAD]"],
        unk_id=index["[UNK]"],
        cls_id=index["[CLS]"],
        sep_id=index["[SEP]"],
        mask_id=index["[MASK]"],
    )


def make_tokenizer(vocabulary: Vocabulary) -> BertWordPieceTokenizer:
    """BERT-uncased WordPiece (lower-casing, accent stripping, Chinese-char splitting)."""
    return BertWordPieceTokenizer(str(vocabulary.path), lowercase=True)


def tokenize_documents(
    tokenizer: BertWordPieceTokenizer, documents: Iterable[str]
) -> list[np.ndarray]:
    """Token ids of each document (no special tokens), paragraphs concatenated."""
    paragraphs: list[str] = []
    owners: list[int] = []
    n_documents = 0
    for doc_index, document in enumerate(documents):
        n_documents = doc_index + 1
        for paragraph in document.split("\n"):
            paragraphs.append(paragraph)
            owners.append(doc_index)
    pieces: list[list[np.ndarray]] = [[] for _ in range(n_documents)]
    for start in range(0, len(paragraphs), _ENCODE_CHUNK):
        chunk = paragraphs[start : start + _ENCODE_CHUNK]
        encodings = tokenizer.encode_batch(chunk, add_special_tokens=False)
        for offset, encoding in enumerate(encodings):
            pieces[owners[start + offset]].append(np.asarray(encoding.ids, dtype=np.int32))
    return [
        np.concatenate(parts) if parts else np.zeros(0, dtype=np.int32) for parts in pieces
    ]


def pack_sequences(
    documents_ids: Iterable[np.ndarray], seq_len: int, cls_id: int, sep_id: int
) -> np.ndarray:
    """Pack token streams into ``(n, seq_len)`` int32 rows ``[CLS] … [SEP]``.

    Documents are joined with ``[SEP]``; the final partial row is dropped.
    """
    if seq_len < 8:
        raise UserError(f"data.seq_len: {seq_len} is too short (minimum 8)")
    body = seq_len - 2
    stream_parts: list[np.ndarray] = []
    separator = np.asarray([sep_id], dtype=np.int32)
    for ids in documents_ids:
        if ids.size:
            stream_parts.extend((ids, separator))
    if not stream_parts:
        return np.zeros((0, seq_len), dtype=np.int32)
    stream = np.concatenate(stream_parts[:-1])  # no separator after the last document
    n = stream.size // body
    rows = stream[: n * body].reshape(n, body)
    packed = np.empty((n, seq_len), dtype=np.int32)
    packed[:, 0] = cls_id
    packed[:, 1:-1] = rows
    packed[:, -1] = sep_id
    return packed
