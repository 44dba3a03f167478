"""The results layout and the moves of results written by older layouts into it (dpscaling.workflow.layout,
dpscaling.workflow.migration)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest

from dpscaling.workflow.migration import (
    Move, _keys, legacy_moves, mechanism_moves, migrate_older_layouts, older_layout_moves, path_mapper)

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
    migration = migrate_older_layouts(root, default_seq_len=512, metadata=tmp_path / ".snakemake")
    assert migration is not None and not migration.conflicts and migration.records == 0
    # The finished run's curve says S = 32; the checkpoint-only run takes the old data's 64.
    assert (root / "runs" / "mech=dpsgd" / "seq=32" / RUN / "metrics.parquet").is_file()
    assert os.stat(root / "runs" / "mech=dpsgd" / "seq=32" / RUN / "metrics.parquet").st_mtime_ns == before  # renamed, not copied
    assert (root / "checkpoints" / "mech=dpsgd" / "seq=32" / RUN / "20").is_dir()
    assert (root / "checkpoints" / "mech=dpsgd" / "seq=64" / OTHER / "20").is_dir()
    assert (root / "logs" / "train" / "mech=dpsgd" / "seq=64" / f"{OTHER}.log").read_text() == f"training {OTHER}\n"
    assert (root / "data" / "packed" / "seq=64" / "train" / "part-00000.parquet").read_bytes() == b"shard"
    assert json.loads((root / "data" / "packed" / "seq=64" / "meta.json").read_text())["seq_len"] == 64
    assert (root / "logs" / "data" / "pack_sequences" / "seq=64.log").is_file()
    # Nothing of the old layout is left, and a second pass finds nothing to move.
    assert not list((root / "runs").glob("model=*")) and not list((root / "checkpoints").glob("model=*"))
    assert not (root / "data" / "packed" / "meta.json").exists()
    assert older_layout_moves(root, 512) == [] and migrate_older_layouts(root, 512) is None


def test_without_a_recorded_length_the_config_decides_and_a_taken_path_is_left_alone(tmp_path: Path) -> None:
    root = tmp_path / "results" / "old"
    _old_layout(root, curve_seq_len=None)
    (root / "data" / "packed" / "meta.json").unlink()  # no old manifest: the config's data.seq_len
    (root / "runs" / "mech=dpsgd" / "seq=128" / RUN).mkdir(parents=True)  # already there (e.g. retrained by new code)
    migration = migrate_older_layouts(root, default_seq_len=128, metadata=tmp_path / ".snakemake")
    assert [move.old for move in migration.conflicts] == [str(root / "runs" / RUN)]
    assert (root / "runs" / RUN / "metrics.parquet").is_file()  # left in place, named in the summary
    assert "left 1 in place" in migration.summary()
    assert (root / "checkpoints" / "mech=dpsgd" / "seq=128" / OTHER).is_dir()


def test_run_ids_without_a_mechanism_move_under_dpsgd_with_their_records(tmp_path: Path) -> None:
    """Results of the per-length layout before every id named its mechanism: each tree's runs, checkpoints and
    logs go under mech=dpsgd/, Snakemake's records follow, and ids that have a mechanism stay."""
    from snakemake.persistence import MetadataRecord
    from snakemake.persistence.file import FilePersistence

    root = tmp_path / "results" / "r"
    grid_run, bandmf_run = f"seq=64/{RUN}", f"mech=bandmf-b4/seq=64/{RUN}"
    for run in (grid_run, bandmf_run):
        (root / "runs" / run).mkdir(parents=True)
        (root / "runs" / run / "metrics.parquet").write_bytes(b"curve")
        (root / "checkpoints" / run / "20").mkdir(parents=True)
    (root / "logs" / "train" / grid_run).parent.mkdir(parents=True)
    (root / "logs" / "train" / f"{grid_run}.log").write_text("log\n")
    (root / "ablation" / "runs" / RUN).mkdir(parents=True)
    (root / "logs" / "learning_rates" / "train" / RUN).parent.mkdir(parents=True)
    (root / "logs" / "learning_rates" / "train" / f"{RUN}.log").write_text("protocol\n")
    (root / "design" / "runs" / RUN).mkdir(parents=True)  # a design's ids have no mechanism level
    metadata = tmp_path / ".snakemake"
    store = FilePersistence(path=metadata)
    key = str(root / "runs" / grid_run / "metrics.parquet")
    store._write_record(key, MetadataRecord(rule="train_run", input=["a"], params=["'b'"]))
    (metadata / "metadata").mkdir(exist_ok=True)

    assert legacy_moves(root, 64) == []  # nothing of the one-length layout
    assert len(mechanism_moves(root)) == 5
    migration = migrate_older_layouts(root, 64, metadata=metadata)
    assert migration is not None and not migration.conflicts and migration.records == 1
    assert (root / "runs" / "mech=dpsgd" / grid_run / "metrics.parquet").read_bytes() == b"curve"
    assert (root / "checkpoints" / "mech=dpsgd" / grid_run / "20").is_dir()
    assert (root / "logs" / "train" / "mech=dpsgd" / f"{grid_run}.log").read_text() == "log\n"
    assert (root / "runs" / bandmf_run / "metrics.parquet").is_file()
    assert (root / "ablation" / "runs" / "mech=dpsgd" / RUN).is_dir()
    assert (root / "logs" / "learning_rates" / "train" / "mech=dpsgd" / f"{RUN}.log").is_file()
    assert (root / "design" / "runs" / RUN).is_dir()
    assert _keys(metadata / "metadata") == {str(root / "runs" / "mech=dpsgd" / grid_run / "metrics.parquet")}
    assert older_layout_moves(root, 64) == []


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
