"""The per-length results layout and the move of a one-length results directory into it (dpscaling.layout, dpscaling.layout_migration)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest

from dpscaling.layout_migration import _keys, legacy_moves, migrate_one_length_layout, path_mapper, Move

RUN = "model=BertNano/batch=8/seed=0/nbr=0.25/lr=0.5"
OTHER = "model=BertMicro/batch=8/seed=0/nbr=0/lr=0.5"


def _old_layout(root: Path, data_seq_len: int = 64, curve_seq_len: int | None = 32) -> None:
    """A results directory as the one-length code wrote it: packed data, a finished run whose curve records
    ``curve_seq_len``, a run with only a checkpoint, and their logs."""
    packed = root / "data" / "packed"
    (packed / "train").mkdir(parents=True)
    (packed / "heldout").mkdir()
    (packed / "train" / "part-00000.parquet").write_bytes(b"shard")
    (packed / "meta.json").write_text(json.dumps({"seq_len": data_seq_len}))
    (root / "logs" / "data").mkdir(parents=True)
    (root / "logs" / "data" / "pack_sequences.log").write_text("packed\n")
    (root / "runs" / RUN).mkdir(parents=True)
    curve = {"step": [10, 20], "loss": [5.0, 4.0]}
    if curve_seq_len is not None:
        curve["seq_len"] = [curve_seq_len] * 2
    pd.DataFrame(curve).to_parquet(root / "runs" / RUN / "metrics.parquet")
    for run in (RUN, OTHER):
        (root / "checkpoints" / run / "20").mkdir(parents=True)
        log = root / "logs" / "train" / f"{run}.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        log.write_text(f"training {run}\n")


def test_each_run_moves_under_the_length_it_was_trained_at(tmp_path: Path) -> None:
    root = tmp_path / "results" / "old"
    _old_layout(root)
    before = os.stat(root / "runs" / RUN / "metrics.parquet").st_mtime_ns
    migration = migrate_one_length_layout(root, default_seq_len=512, metadata=tmp_path / ".snakemake")
    assert migration is not None and not migration.conflicts and migration.records == 0
    # The finished run's curve says S = 32; the checkpoint-only run takes the old data's 64.
    assert (root / "runs" / "seq=32" / RUN / "metrics.parquet").is_file()
    assert os.stat(root / "runs" / "seq=32" / RUN / "metrics.parquet").st_mtime_ns == before  # renamed, not copied
    assert (root / "checkpoints" / "seq=32" / RUN / "20").is_dir()
    assert (root / "checkpoints" / "seq=64" / OTHER / "20").is_dir()
    assert (root / "logs" / "train" / "seq=64" / f"{OTHER}.log").read_text() == f"training {OTHER}\n"
    assert (root / "data" / "packed" / "seq=64" / "train" / "part-00000.parquet").read_bytes() == b"shard"
    assert json.loads((root / "data" / "packed" / "seq=64" / "meta.json").read_text())["seq_len"] == 64
    assert (root / "logs" / "data" / "pack_sequences" / "seq=64.log").is_file()
    # Nothing of the old layout is left, and a second pass finds nothing to move.
    assert not list((root / "runs").glob("model=*")) and not list((root / "checkpoints").glob("model=*"))
    assert not (root / "data" / "packed" / "meta.json").exists()
    assert legacy_moves(root, 512) == [] and migrate_one_length_layout(root, 512) is None


def test_without_a_recorded_length_the_config_decides_and_a_taken_path_is_left_alone(tmp_path: Path) -> None:
    root = tmp_path / "results" / "old"
    _old_layout(root, curve_seq_len=None)
    (root / "data" / "packed" / "meta.json").unlink()  # no old manifest: the config's data.seq_len
    (root / "runs" / "seq=128" / RUN).mkdir(parents=True)  # already there (e.g. retrained by new code)
    migration = migrate_one_length_layout(root, default_seq_len=128, metadata=tmp_path / ".snakemake")
    assert [move.old for move in migration.conflicts] == [str(root / "runs" / RUN)]
    assert (root / "runs" / RUN / "metrics.parquet").is_file()  # left in place, named in the summary
    assert "left 1 in place" in migration.summary()
    assert (root / "checkpoints" / "seq=128" / OTHER).is_dir()


def test_moved_paths_are_rewritten_inside_records_only_at_path_boundaries() -> None:
    rename = path_mapper([Move("results/r/runs/model=A/lr=0.1", "results/r/runs/seq=64/model=A/lr=0.1"),
                          Move("results/r/data/packed/train", "results/r/data/packed/seq=64/train")])
    assert rename("results/r/runs/model=A/lr=0.1/metrics.parquet") == \
        "results/r/runs/seq=64/model=A/lr=0.1/metrics.parquet"
    assert rename("'results/r/runs/model=A/lr=0.1'") == "'results/r/runs/seq=64/model=A/lr=0.1'"
    assert rename("results/r/runs/model=A/lr=0.15/metrics.parquet") == \
        "results/r/runs/model=A/lr=0.15/metrics.parquet"  # another run whose path starts the same
    assert rename("results/r/data/packed/train") == "results/r/data/packed/seq=64/train"


@pytest.mark.parametrize("length", [40, 400])
def test_record_keys_decode_snakemakes_own_file_names(tmp_path: Path, length: int) -> None:
    """The keys read back from Snakemake's file store are the paths it stored, long ones (split into
    directories) included."""
    from snakemake.persistence import MetadataRecord
    from snakemake.persistence.file import FilePersistence

    store = FilePersistence(path=tmp_path / ".snakemake")
    key = "results/r/runs/" + "x" * length + "/metrics.parquet"
    store._write_record(key, MetadataRecord(rule="train_run", input=["a"], params=["'b'"]))
    assert _keys(tmp_path / ".snakemake" / "metadata") == {key}
