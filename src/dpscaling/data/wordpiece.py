"""A WordPiece vocabulary trained on the run's own training split (data stage; docs/data.md).

The paper tokenizes with BERT's uncased 30,522-entry vocabulary (§3.2). At CPU scale such
a vocabulary makes the models mostly embedding tables; ``data.tokenizer: train`` instead
trains a BERT WordPiece vocabulary of ``data.vocab_size`` entries on the **train** split's
documents only — the held-out documents never influence it, so the held-out floor and
losses stay out-of-sample.

The training is the one of ``tokenizers``' ``WordPieceTrainer`` (BPE merges over words with
``##``-prefixed continuation symbols), written out here because that trainer is not
deterministic: it numbers the ``##`` symbols in hash order and breaks ties between pairs
of equal count by those numbers, so two builds on a small corpus gave different
vocabularies. Here:

1. text is normalised and split into words exactly as BERT-uncased WordPiece encodes it
   (``tokenizers``' ``BertNormalizer(lowercase=True)`` and ``BertPreTokenizer``);
2. the alphabet is the ``ALPHABET_LIMIT`` most frequent characters (ties by code point);
   a word with another character is left out (it encodes as ``[UNK]``; none of the vendored
   corpus's held-out words at 100 characters);
3. each word starts as ``c1 ##c2 ##c3 …``; the vocabulary starts as the special tokens
   ``[PAD] [UNK] [CLS] [SEP] [MASK]`` (ids 0–4) and the initial symbols in code-point order;
4. the most frequent adjacent pair (count ≥ ``MIN_FREQUENCY``, ties by the pair's strings)
   is merged into one symbol and added, until the vocabulary has ``vocab_size`` entries.

So the file is a function of the train documents and the size alone.
"""

from __future__ import annotations

import heapq
from collections import Counter, defaultdict
from collections.abc import Iterable
from pathlib import Path

from tokenizers.normalizers import BertNormalizer
from tokenizers.pre_tokenizers import BertPreTokenizer

from dpscaling.data.packing import SPECIAL_TOKENS, Vocabulary, load_vocabulary
from dpscaling.core.errors import UserError
from dpscaling.core.io import atomic_path

ALPHABET_LIMIT = 100  # most frequent characters kept in the initial alphabet
MIN_FREQUENCY = 2  # a merge must occur at least twice in the training split

Pair = tuple[str, str]


def word_counts(documents: Iterable[str]) -> Counter[str]:
    """Occurrences of each word as BERT-uncased WordPiece splits the text."""
    normalizer, pre_tokenizer = BertNormalizer(lowercase=True), BertPreTokenizer()
    counts: Counter[str] = Counter()
    for document in documents:
        counts.update(word for word, _ in pre_tokenizer.pre_tokenize_str(normalizer.normalize_str(document)))
    return counts


def _merge(symbols: list[str], a: str, b: str, merged: str) -> list[str]:
    out, i = [], 0
    while i < len(symbols):
        if i + 1 < len(symbols) and symbols[i] == a and symbols[i + 1] == b:
            out.append(merged)
            i += 2
        else:
            out.append(symbols[i])
            i += 1
    return out


def _initial_words(counts: Counter[str]) -> list[tuple[list[str], int]]:
    chars: Counter[str] = Counter()
    for word, count in counts.items():
        for char in word:
            chars[char] += count
    ranked = sorted(chars.items(), key=lambda item: (-item[1], item[0]))
    alphabet = {char for char, _ in ranked[:ALPHABET_LIMIT]}
    return [([word[0], *(f"##{char}" for char in word[1:])], count)
            for word, count in sorted(counts.items()) if set(word) <= alphabet]


def train_wordpiece(documents: Iterable[str], vocab_size: int) -> list[str]:
    """The entries of a WordPiece vocabulary of exactly ``vocab_size`` entries, in id order."""
    if not isinstance(vocab_size, int) or isinstance(vocab_size, bool) or vocab_size < 1:
        raise UserError(f"data.vocab_size: {vocab_size!r} is not a positive integer")
    words = _initial_words(word_counts(documents))
    vocab = list(SPECIAL_TOKENS) + sorted({symbol for symbols, _ in words for symbol in symbols})
    if len(vocab) > vocab_size:
        raise UserError(f"data.vocab_size: {vocab_size} is below the {len(vocab)} special tokens and alphabet "
                        f"symbols of this train split; accepted: at least {len(vocab)}")
    known = set(vocab)
    pairs: defaultdict[Pair, int] = defaultdict(int)
    where: defaultdict[Pair, set[int]] = defaultdict(set)  # the words each pair occurs in
    for index, (symbols, count) in enumerate(words):
        for pair in zip(symbols, symbols[1:]):
            pairs[pair] += count
            where[pair].add(index)
    heap = [(-count, pair) for pair, count in pairs.items()]
    heapq.heapify(heap)
    while len(vocab) < vocab_size:
        while heap and pairs.get(heap[0][1], 0) != -heap[0][0]:
            heapq.heappop(heap)  # stale: the pair's count changed since it was pushed
        if not heap or -heap[0][0] < MIN_FREQUENCY:
            break
        _, (a, b) = heapq.heappop(heap)
        merged = a + b[2:]  # b is a continuation symbol: "##…"
        changed: set[Pair] = set()
        for index in sorted(where.pop((a, b))):
            symbols, count = words[index]
            new = _merge(symbols, a, b, merged)
            old_pairs, new_pairs = Counter(zip(symbols, symbols[1:])), Counter(zip(new, new[1:]))
            for pair, n in old_pairs.items():
                pairs[pair] -= n * count
            for pair, n in new_pairs.items():
                pairs[pair] += n * count
            for pair in old_pairs.keys() - new_pairs.keys() - {(a, b)}:
                where[pair].discard(index)
            for pair in new_pairs.keys() - old_pairs.keys():
                where[pair].add(index)
            changed.update(old_pairs.keys() | new_pairs.keys())
            words[index] = (new, count)
        for pair in changed:
            if pairs.get(pair, 0) > 0:
                heapq.heappush(heap, (-pairs[pair], pair))
            else:
                pairs.pop(pair, None)
        if merged not in known:
            vocab.append(merged)
            known.add(merged)
    if len(vocab) != vocab_size:
        raise UserError(
            f"data.vocab_size: {vocab_size} cannot be trained on this corpus's train split (only "
            f"{len(vocab)} entries: no pair occurs {MIN_FREQUENCY}+ times any more); accepted: at most {len(vocab)}"
        )
    return vocab


def write_vocabulary(tokens: list[str], output: str | Path) -> Vocabulary:
    """Write ``tokens`` one per line (BERT's ``vocab.txt``) atomically; return it loaded."""
    with atomic_path(output) as tmp:
        Path(tmp).write_text("".join(f"{token}\n" for token in tokens), encoding="utf-8")
    return load_vocabulary(output)
