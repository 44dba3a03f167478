"""The vendored offline corpus and vocabularies under ``resources/`` (no network)."""

from __future__ import annotations

import importlib.util
import json
import lzma
import re
import struct
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from tokenizers import Tokenizer
from tokenizers.implementations import BertWordPieceTokenizer

RESOURCES = Path(__file__).resolve().parents[1] / "resources"
BUILD_SCRIPT = RESOURCES / "build_corpus.py"
BERT_VOCAB = RESOURCES / "vocab" / "bert-base-uncased" / "vocab.txt"
WORDPIECE_8192 = RESOURCES / "vocab" / "wordpiece-core-8192"


def load_builder() -> ModuleType:
    """Import ``resources/build_corpus.py`` (a standalone script, not a package module)."""
    spec = importlib.util.spec_from_file_location("build_corpus", BUILD_SCRIPT)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules.setdefault("build_corpus", module)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def builder() -> ModuleType:
    return load_builder()


@pytest.fixture(scope="module")
def corpus() -> str:
    with lzma.open(RESOURCES / "corpus" / "core.txt.xz", "rt", encoding="utf-8", newline="") as handle:
        return handle.read()


@pytest.fixture(scope="module")
def stats() -> dict[str, Any]:
    return json.loads((RESOURCES / "corpus" / "stats.json").read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def plain_sentence(corpus: str) -> str:
    """A real sentence of the corpus made of plain lower/upper-case words only."""
    match = re.search(r"(?<=\. )[A-Z][a-z]+(?: [a-z]+){9,}(?=\.)", corpus)
    assert match, "no plain sentence found in the corpus"
    return match.group(0)


# --------------------------------------------------------------------------- checksums


def test_check_mode_passes_on_vendored_files() -> None:
    result = subprocess.run([sys.executable, str(BUILD_SCRIPT), "--check"], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "FAILED" not in result.stdout
    assert "corpus/core.txt: OK" in result.stdout


def test_sha256sums_covers_every_vendored_data_file(builder: ModuleType) -> None:
    listed = set(builder.read_sums(RESOURCES))
    data_files = {
        str(path.relative_to(RESOURCES))
        for folder in ("corpus", "vocab", "samples")
        for path in (RESOURCES / folder).rglob("*")
        if path.is_file()
    }
    assert data_files <= listed
    assert "corpus/core.txt" in listed  # the decompressed text itself


def test_check_detects_a_modified_file(builder: ModuleType, tmp_path: Path) -> None:
    (tmp_path / "vocab.txt").write_text("[PAD]\n", encoding="utf-8")
    (tmp_path / "SHA256SUMS").write_text(f"{'0' * 64}  vocab.txt\n", encoding="utf-8")
    assert builder.check(tmp_path) == builder.EXIT_MISMATCH


# --------------------------------------------------------------------------- vocabularies


def test_bert_vocab_has_30522_unique_entries() -> None:
    tokens = BERT_VOCAB.read_text(encoding="utf-8").split("\n")
    assert tokens[-1] == ""  # newline-terminated
    tokens = tokens[:-1]
    assert len(tokens) == 30522
    assert len(set(tokens)) == 30522
    assert [tokens[i] for i in (0, 100, 101, 102, 103)] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    assert tokens.count("\\") == 1 and "##\\" in tokens  # the backslash tokens survived


def test_bert_uncased_round_trips_a_corpus_sentence(plain_sentence: str) -> None:
    tokenizer = BertWordPieceTokenizer(str(BERT_VOCAB), lowercase=True)
    encoding = tokenizer.encode(plain_sentence)
    assert encoding.tokens[0] == "[CLS]" and encoding.tokens[-1] == "[SEP]"
    assert "[UNK]" not in encoding.tokens
    assert tokenizer.decode(encoding.ids) == " ".join(plain_sentence.lower().split())


def test_wordpiece_8192_matches_its_vocab_file_and_round_trips(plain_sentence: str) -> None:
    tokenizer = Tokenizer.from_file(str(WORDPIECE_8192 / "tokenizer.json"))
    assert tokenizer.get_vocab_size() == 8192
    by_id = sorted(tokenizer.get_vocab().items(), key=lambda item: item[1])
    assert [token for token, _ in by_id] == (WORDPIECE_8192 / "vocab.txt").read_text(encoding="utf-8").splitlines()
    assert tokenizer.decode(tokenizer.encode(plain_sentence).ids) == " ".join(plain_sentence.lower().split())


# --------------------------------------------------------------------------- corpus


def test_corpus_format(corpus: str) -> None:
    assert corpus.endswith("\n") and not corpus.endswith("\n\n")
    assert "\n\n\n" not in corpus and "\r" not in corpus and "\t" not in corpus
    lines = corpus.rstrip("\n").split("\n")
    assert all(line == line.strip() for line in lines)
    assert all(line or (lines[i - 1] and lines[i + 1]) for i, line in enumerate(lines))


def test_corpus_counts_equal_stats_json(builder: ModuleType, corpus: str, stats: dict[str, Any]) -> None:
    counted = builder.text_stats(corpus)
    assert {key: stats[key] for key in counted} == counted
    assert counted["docs"] == len(corpus.rstrip("\n").split("\n\n"))
    assert counted["words"] == len(corpus.split())
    for key in ("docs", "paragraphs", "words"):
        assert sum(source[key] for source in stats["sources"]) == stats[key]


def test_corpus_sources_are_contiguous_blocks(corpus: str, stats: dict[str, Any]) -> None:
    docs = corpus.rstrip("\n").split("\n\n")
    start = 0
    for source in stats["sources"]:
        block = docs[start : start + source["docs"]]
        assert len(" ".join(block).split()) == source["words"], source["source"]
        start += source["docs"]
    assert start == len(docs)
    assert docs[0].startswith("Anarchism\n") and "Call me Ishmael." in corpus


def test_corpus_size_is_in_the_expected_range(stats: dict[str, Any]) -> None:
    assert 900 <= stats["docs"] <= 1200
    assert 3_000_000 <= stats["words"] <= 4_000_000
    assert [source["source"] for source in stats["sources"]] == [
        "wikipedia_sample",
        "cia_factbook",
        "sotu",
        "moby_dick",
        "jane_austen",
    ]


# --------------------------------------------------------------------------- cleaning rules (unit)


def test_sentence_split_and_grouping(builder: ModuleType) -> None:
    text = 'One two. "Three four." (1) Five six. No. 7 and 8. e.g. lower case stays, joined! Last'
    assert builder.SOTU_SENTENCE_END.split(text) == [
        "One two.",
        '"Three four."',
        "(1) Five six.",
        "No.",
        "7 and 8. e.g. lower case stays, joined!",
        "Last",
    ]
    assert builder.sentence_paragraphs(text, min_words=4) == [
        'One two. "Three four."',
        "(1) Five six. No.",
        "7 and 8. e.g. lower case stays, joined!",
        "Last",
    ]
    assert builder.SOTU_STAGE_DIRECTION.sub(" ", "Thanks.(Applause.) Next (laughter) one") == "Thanks.  Next   one"


def test_chapters_split_at_headings_and_drop_short_paragraphs(builder: ModuleType) -> None:
    lines = ["EMMA", "", "By Jane Austen", "", "CHAPTER I", "", "It was a truth", "told in two lines.", "", '"Yes."']
    lines += ["", "Chapter 2", "", "The second chapter starts here."]
    assert builder.chapters(lines) == ["It was a truth told in two lines.", "The second chapter starts here."]


def test_wiki_paragraphs_tidy_and_filter_lines(builder: ModuleType) -> None:
    plain = "Alabama (; ) is a state , located in the south of the US .\nHistory\n| a | b | c | d | e | f | g | h |"
    assert builder.wiki_paragraphs(plain) == ["Alabama is a state, located in the south of the US."]


def test_wiki_plain_text_strips_markup(builder: ModuleType) -> None:
    pytest.importorskip("mwparserfromhell")
    wikitext = (
        "{{Infobox|x=1}}'''Foo''' is a [[bar|baz]] of the [[wikt:qux|qux]] kind.<ref>{{cite|a}}</ref>"
        " [[File:F.jpg|thumb|A caption]]\n==See also==\n* [[Other]]"
    )
    assert builder.wiki_plain_text(wikitext).strip() == "Foo is a baz of the  kind."


def test_json_text_fields_in_file_order(builder: ModuleType) -> None:
    profile = {"Intro": {"Background": {"text": "a"}}, "Geo": [{"text": "b"}, {"note": {"text": "c"}}]}
    assert list(builder.json_text_fields(profile)) == ["a", "b", "c"]


def test_r_reader_decodes_a_named_list(builder: ModuleType) -> None:
    def chars(text: str) -> bytes:
        return struct.pack(">ii", 0x00040009, len(text)) + text.encode()

    blob = b"X\n" + struct.pack(">iii", 2, 0x040201, 0x020300)
    blob += struct.pack(">ii", 0x00000213, 2)  # VECSXP with attributes, length 2
    blob += struct.pack(">ii", 16, 1) + chars("line one")  # character vector
    blob += struct.pack(">iii", 13, 2, 0) + struct.pack(">i", 7)  # integer vector c(0, 7)
    blob += struct.pack(">i", 0x00000402) + struct.pack(">i", 1) + chars("names")  # pairlist tag: symbol
    blob += struct.pack(">ii", 16, 2) + chars("text") + chars("offsets") + struct.pack(">i", 254)
    assert builder.RReader(blob).read() == {"text": ["line one"], "offsets": [0, 7]}
