"""The moves of a results directory written by an older layout into the current one, done once when the workflow
loads (workflow/rules/common.smk), so that finished runs stay finished.

Documented in docs/failure-modes.md, "Results written by an older layout".

A grid point's curve is ``runs/mech=M/seq=S/model=…/batch=…/seed=…/nbr=…/lr=…/metrics.parquet`` and its data
``data/packed/seq=S/`` (:mod:`dpscaling.workflow.layout`). Two older layouts are moved into it:

- **one length** (before sequence length was an axis): ``runs/model=…``, ``checkpoints/model=…``,
  ``logs/train/model=….log``, ``data/packed/{meta.json,train,heldout}`` (and ``public_unigram.json``, where the
  pack step wrote one). Each run goes under the length its own curve records (``seq_len``), a run without a
  curve yet (its checkpoints only) under the length of the old packed data (:func:`legacy_moves`);
- **no mechanism level** (before every run's id named its mechanism): a run's ``mech=`` level was left out
  unless its grid held a mechanism other than DP-SGD, so a run id without one is a DP-SGD run's. Its runs,
  checkpoints and logs, in the main grid's tree and in the ablation's, fine-tuning's and the learning-rate
  protocol's, go under ``mech=dpsgd/`` (:func:`mechanism_moves`).

Files are renamed, never rewritten, so their modification times, and with them Snakemake's view of what is up
to date, are kept. Snakemake's records of the moved outputs (params, inputs, logs, and which jobs were left
incomplete) are moved with them (its default file store under ``.snakemake/``), so a later change of a training
key still reruns those jobs, and the analysis jobs that read them see the same inputs as before.
"""

from __future__ import annotations

import json
import os
import re
from base64 import urlsafe_b64decode
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from dpscaling.privacy.mechanisms import DPSGD
from dpscaling.workflow.grid import canonical
from dpscaling.workflow.layout import (
    ABLATION, CHECKPOINTS, FINETUNE, LENGTH, LOGS, LR_PROTOCOL, MECHANISM, PACK_LOG, PACKED, PACKED_HELDOUT,
    PACKED_META, PACKED_TRAIN, PRETRAIN, PUBLIC_UNIGRAM_FILE, RUNS, TRAIN)

# What the pack step writes into a packed directory (the public domain's unigram only with one: moved where it is).
PACKED_FILES = (PACKED_META, PACKED_TRAIN, PACKED_HELDOUT, PUBLIC_UNIGRAM_FILE)
LEGACY_PACK_LOG = "logs/data/pack_sequences.log"
# A run directory of the one-length layout, relative to runs/ or checkpoints/ (the log adds ".log").
_LEGACY_RUN_GLOB = "model=*/batch=*/seed=*/nbr=*/lr=*"
_RUN_TREES = (RUNS, CHECKPOINTS)
_TRAIN_LOGS = f"{LOGS}/{TRAIN}"


def length_part(seq_len: int) -> str:
    """The length's level of a run's id: ``seq=S``."""
    return LENGTH.level.format(**{LENGTH.wildcard: canonical(int(seq_len))})


# The level a run id without one had: DP-SGD's (module docstring).
DPSGD_PART = MECHANISM.level.format(**{MECHANISM.wildcard: DPSGD.name})
# The trees of run ids, by the prefix of run_paths, and the first level their ids had before the mechanism's:
# the main grid's length, the one-length trees' model (the protocol's on another domain under domain=*/).
_MECHANISM_TREES = (("", "seq=*"), (ABLATION, "model=*"), (PRETRAIN, "model=*"), (FINETUNE, "model=*"),
                    (LR_PROTOCOL, "model=*"), (f"{LR_PROTOCOL}domain=*/", "model=*"))


@dataclass(frozen=True)
class Move:
    """One path of the old layout and where it goes (both relative to the working directory)."""

    old: str
    new: str


def legacy_moves(root: str | os.PathLike[str], default_seq_len: int) -> list[Move]:
    """The moves that bring ``root`` (``results/<run>``) from the one-length layout into the current one (its
    runs under ``mech=dpsgd/seq=S/``); [] when it has nothing of the old layout. ``default_seq_len``: the length of a run whose curve and data
    say none (the config's ``data.seq_len``)."""
    root = Path(root)
    moves: list[Move] = []
    packed = root / "data" / "packed"
    data_seq_len = _recorded_seq_len(packed / "meta.json") or int(default_seq_len)
    if (packed / "meta.json").is_file():
        target = root / PACKED.format(seq=canonical(data_seq_len))
        moves += [Move(str(packed / name), str(target / name)) for name in PACKED_FILES if (packed / name).exists()]
        if (root / LEGACY_PACK_LOG).is_file():
            moves.append(Move(str(root / LEGACY_PACK_LOG), str(root / PACK_LOG.format(seq=canonical(data_seq_len)))))
    runs = {path.relative_to(root / tree) for tree in _RUN_TREES for path in (root / tree).glob(_LEGACY_RUN_GLOB)
            if path.is_dir()}
    runs |= {path.relative_to(root / _TRAIN_LOGS).with_suffix("")
             for path in (root / _TRAIN_LOGS).glob(_LEGACY_RUN_GLOB + ".log")}
    for run in sorted(runs):
        seq = f"{DPSGD_PART}/{length_part(_recorded_seq_len(root / RUNS / run / 'metrics.parquet') or data_seq_len)}"
        for tree in _RUN_TREES:
            if (root / tree / run).is_dir():
                moves.append(Move(str(root / tree / run), str(root / tree / seq / run)))
        log = root / _TRAIN_LOGS / f"{run}.log"
        if log.is_file():
            moves.append(Move(str(log), str(root / _TRAIN_LOGS / seq / f"{run}.log")))
    return moves


def mechanism_moves(root: str | os.PathLike[str]) -> list[Move]:
    """The moves that put each run id of ``root`` without a mechanism level under ``mech=dpsgd/`` (module
    docstring); [] when every id has one."""
    root = Path(root)
    moves = []
    for prefix, first_level in _MECHANISM_TREES:
        for tree in (f"{prefix}{RUNS}", f"{prefix}{CHECKPOINTS}", f"{LOGS}/{prefix}{TRAIN}"):
            for path in sorted(root.glob(f"{tree}/{first_level}")):
                moves.append(Move(str(path), str(path.parent / DPSGD_PART / path.name)))
    return moves


def older_layout_moves(root: str | os.PathLike[str], default_seq_len: int) -> list[Move]:
    """Every move that brings ``root`` into the current layout (:func:`legacy_moves`, :func:`mechanism_moves`;
    the two never touch the same path)."""
    return legacy_moves(root, default_seq_len) + mechanism_moves(root)


def _recorded_seq_len(path: Path) -> int | None:
    """The sequence length a packed-data manifest or a training curve records (None: no such file or field)."""
    if not path.is_file():
        return None
    if path.suffix == ".json":
        return int(json.loads(path.read_text(encoding="utf-8"))["seq_len"])
    import pyarrow.parquet as pq

    try:
        column = pq.read_table(path, columns=["seq_len"]).column("seq_len")
    except (KeyError, OSError, ValueError):  # an old curve without the column, or an unreadable file
        return None
    return int(column[0].as_py()) if len(column) else None


@dataclass
class Migration:
    """What :func:`migrate_older_layouts` did: the paths moved, those left because their new place was
    taken, and how many Snakemake records it carried over."""

    moved: list[Move]
    conflicts: list[Move]
    records: int

    def summary(self) -> str:
        runs = sum(1 for move in self.moved if f"/{RUNS}/" in move.old)
        text = (f"moved {len(self.moved)} paths of an older layout into the current one "
                f"({runs} runs, their checkpoints, logs and packed data; {self.records} Snakemake records)")
        if self.conflicts:
            text += (f"; left {len(self.conflicts)} in place whose new path already exists, e.g. "
                     f"{self.conflicts[0].old} (remove one of the two)")
        return text


def migrate_older_layouts(root: str | os.PathLike[str], default_seq_len: int,
                          metadata: str | os.PathLike[str] = ".snakemake",
                          moves: list[Move] | None = None) -> Migration | None:
    """Move ``root`` from the older layouts into the current one (module docstring); None when there is
    nothing to move. ``metadata``: Snakemake's directory of the working directory, whose records of moved
    outputs are moved with them (absent: nothing to carry). ``moves``: :func:`older_layout_moves` already
    computed for ``root`` (None: computed here)."""
    moves = older_layout_moves(root, default_seq_len) if moves is None else moves
    if not moves:
        return None
    moved, conflicts = [], []
    for move in moves:
        old, new = Path(move.old), Path(move.new)
        if new.exists():
            conflicts.append(move)
            continue
        new.parent.mkdir(parents=True, exist_ok=True)
        os.replace(old, new)  # a rename: contents and modification times as they were
        moved.append(move)
    for tree in (*_RUN_TREES, _TRAIN_LOGS):
        for top in (Path(root) / tree).glob("model=*"):
            _remove_empty_directories(top)
    records = move_snakemake_records(Path(metadata), moved) if moved else 0
    return Migration(moved, conflicts, records)


def _remove_empty_directories(top: Path) -> None:
    """``top`` and the directories under it that the moves left empty (deepest first)."""
    for directory, _, _ in sorted(os.walk(top), key=lambda entry: -len(entry[0])):
        if not os.listdir(directory):
            os.rmdir(directory)


def path_mapper(moves: Iterable[Move]) -> Callable[[str], str]:
    """A function that rewrites every moved path inside a string (an output key, an input, a param's repr):
    a moved path followed by the end, a ``/`` or a quote becomes its new path."""
    table = {move.old: move.new for move in moves}
    if not table:
        return lambda text: text
    pattern = re.compile("(" + "|".join(re.escape(old) for old in sorted(table, key=len, reverse=True))
                         + r")(?=$|/|'|\")")
    return lambda text: pattern.sub(lambda match: table[match.group(1)], text)


def move_snakemake_records(metadata: Path, moves: Iterable[Move]) -> int:
    """Carry Snakemake's records over to the moved paths (its default file store, ``metadata``): a moved
    output's record goes to the new path's key, every record's inputs, logs and params name the new paths,
    and an incomplete mark (a job that was interrupted) moves with its output. Returns the records written."""
    if not (metadata / "metadata").is_dir():
        return 0
    from snakemake.persistence.file import FilePersistence

    store = FilePersistence(path=metadata.resolve())
    rename = path_mapper(moves)
    incomplete = _keys(metadata / "incomplete")
    written = 0
    for key in _keys(metadata / "metadata"):
        record = store._read_record(key)  # noqa: SLF001 - the store's own reader: its format, its version
        if record is None:
            continue
        new_key = rename(key)
        changed = {field: [rename(str(value)) for value in values]
                   for field in ("input", "log", "params") if (values := getattr(record, field)) is not None}
        if new_key == key and all(changed[field] == getattr(record, field) for field in changed):
            continue
        for field, values in changed.items():
            setattr(record, field, values)
        store._write_record(new_key, record)  # noqa: SLF001
        if new_key != key:
            store._delete_record(key)  # noqa: SLF001
            if key in incomplete:
                store._mark_incomplete(new_key, None)  # noqa: SLF001
                store._unmark_incomplete(key)  # noqa: SLF001
        written += 1
    return written


def _keys(directory: Path) -> set[str]:
    """The keys (output paths) of a Snakemake file store's records: each file's path under ``directory`` is
    the key's URL-safe base64, split into ``@``-prefixed directories where it is longer than a file name."""
    if not directory.is_dir():
        return set()
    keys = set()
    for path in directory.rglob("*"):
        if path.is_file():
            parts = path.relative_to(directory).parts
            encoded = "".join(part.removeprefix("@") for part in parts[:-1]) + parts[-1]
            try:
                keys.add(urlsafe_b64decode(encoded).decode())
            except (ValueError, UnicodeDecodeError):  # not a record (e.g. an editor's file)
                continue
    return keys
