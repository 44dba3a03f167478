"""Verified checkpoints of a training job (paper §3.2: restartable runs of up to 128K steps).

A checkpoint is one orbax step directory holding two items, committed together by orbax's
atomic rename: ``state`` (parameters, Adam moments, step, noise counter) and ``record``, a
JSON object with the step, the partial training curve up to it and a SHA-256 digest of
every saved array. A restore recomputes the digest of what it read; only a state whose
digest matches is ever trained on. A checkpoint that fails to restore or to verify (a
corrupted file, one written by another version) is discarded and the previous one tried,
then a fresh start: storage corruption can cost recomputation, never a wrong curve.
"""

from __future__ import annotations

import errno
import gc
import hashlib
import json
import logging
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import jax
import numpy as np
import orbax.checkpoint as ocp

from dpscaling.core.errors import UserError
from dpscaling.core.io import raise_if_storage_full_or_read_only, write_json_atomic
from dpscaling.models.family import BERT_MAX_POSITIONS

if TYPE_CHECKING:
    from dpscaling.data.shards import DatasetMeta
    from dpscaling.train.config import TrainConfig

# A run's checkpoint directory: orbax's state, the curve so far, and the config it was written for.
STATE_DIR = "state"
PARTIAL_METRICS = "metrics.partial.parquet"
CONFIG_FILE = "config.json"
# The vocabulary the run trains on (its size and sha256): a fine-tuning start from this checkpoint checks it.
VOCABULARY_FILE = "vocabulary.json"

logger = logging.getLogger(__name__)

STATE_ITEM, RECORD_ITEM = "state", "record"
DIGEST = "sha256"


@dataclass(frozen=True)
class Restored:
    """A checkpoint whose arrays were proven to be the ones saved."""

    step: int
    state: Any
    curve: list[dict[str, Any]]
    discarded: tuple[int, ...]  # newer checkpoints that failed verification and were deleted


def open_manager(state_dir: Path, *, read_only: bool = False, keep: Sequence[int] = ()) -> ocp.CheckpointManager:
    """The orbax manager of a job's ``state`` directory (synchronous saves; the latest two kept, and the steps in
    ``keep``: a run's branch step, :attr:`dpscaling.train.config.TrainConfig.branch_step`).

    Synchronous saves keep "partial curve written, then state saved" in order. Leftover
    temporaries of a save cut short by a kill are removed, so the same step can be saved again.
    """
    policies = ocp.checkpoint_managers
    options = (
        ocp.CheckpointManagerOptions(read_only=True)
        if read_only
        else ocp.CheckpointManagerOptions(
            preservation_policy=policies.AnyPreservationPolicy(
                [policies.LatestN(2), policies.CustomSteps(list(keep))]),
            enable_async_checkpointing=False,
            cleanup_tmp_directories=True,
        )
    )
    return ocp.CheckpointManager(Path(state_dir).absolute(), options=options)


def state_digest(state: Any) -> str:
    """SHA-256 over every array of ``state``: its tree path, dtype, shape and bytes."""
    digest = hashlib.sha256()
    for path, leaf in jax.tree_util.tree_leaves_with_path(state):
        if isinstance(leaf, jax.Array) and leaf.is_fully_replicated:
            leaf = leaf.addressable_data(0)  # each host holds a full copy of a replicated array
        array = np.ascontiguousarray(np.asarray(leaf))
        digest.update(f"{jax.tree_util.keystr(path)}|{array.dtype.str}|{array.shape}|".encode())
        digest.update(array.tobytes())
    return digest.hexdigest()


def save_checkpoint(
    manager: ocp.CheckpointManager, step: int, state: Any, curve: list[dict[str, Any]]
) -> None:
    """Save ``state`` with its curve and digest as checkpoint ``step``, and wait for the commit."""
    record = {"step": int(step), DIGEST: state_digest(state), "curve": curve}
    try:
        _check_room(Path(manager.directory), state)
        manager.save(
            step,
            args=ocp.args.Composite(
                **{STATE_ITEM: ocp.args.StandardSave(state), RECORD_ITEM: ocp.args.JsonSave(record)}
            ),
        )
        manager.wait_until_finished()
    except Exception as error:  # orbax wraps a full disk in a ValueError: make it one clear line
        raise_if_storage_full_or_read_only(error, f"cannot save checkpoint step {step} in {manager.directory}")
        raise


def _check_room(directory: Path, state: Any) -> None:
    """Refuse a save the file system has no room for before orbax starts writing: orbax's own failure
    on a full disk leaves write callbacks to an event loop it has closed. Room = the state's array
    bytes, uncompressed (a checkpoint is never larger)."""
    needed = sum(leaf.nbytes for leaf in jax.tree.leaves(state))
    existing = next(path for path in (directory, *directory.parents) if path.exists())
    free = shutil.disk_usage(existing).free
    if free < needed:
        raise OSError(errno.ENOSPC, f"{needed} bytes needed, {free} free")


def _restore_step(manager: ocp.CheckpointManager, step: int, template: Any) -> tuple[Any, dict]:
    """Restore checkpoint ``step``; raise ValueError unless its arrays match the recorded digest."""
    restored = manager.restore(
        step,
        args=ocp.args.Composite(
            **{STATE_ITEM: ocp.args.StandardRestore(template), RECORD_ITEM: ocp.args.JsonRestore()}
        ),
    )
    state, record = restored[STATE_ITEM], restored[RECORD_ITEM]
    if not isinstance(record, dict) or record.get("step") != step or DIGEST not in record:
        raise ValueError("its integrity record is missing or names another step")
    found = state_digest(state)
    if found != record[DIGEST]:
        raise ValueError(
            f"digest mismatch: the arrays read hash to {found[:12]}…, saved as {record[DIGEST][:12]}…"
        )
    return state, record


def restore_latest_verified(manager: ocp.CheckpointManager, template: Any) -> Restored | None:
    """The newest checkpoint that restores and verifies; ``None`` when there is none (start over).

    Checkpoints newer than it that fail are deleted (so their steps can be saved again), each
    with a warning naming the step and the reason. Any restore error counts as a failure.
    """
    discarded: list[int] = []
    for step in sorted(manager.all_steps(), reverse=True):
        try:
            state, record = _restore_step(manager, step, template)
        except Exception as error:  # noqa: BLE001 - any unreadable checkpoint is discarded, never used
            reason = str(error).strip().splitlines()[0] if str(error).strip() else ""
            logger.warning(
                "checkpoint step %d is not the state that was saved (%s: %s); discarding it",
                step,
                type(error).__name__,
                reason[:300],
            )
            manager.delete(step)
            discarded.append(step)
            # orbax abandons its other read coroutines when one read fails; finalising them here puts
            # their "Exception ignored" report next to this warning, not at a random later point.
            gc.collect()
            continue
        if discarded:
            logger.warning(
                "falling back to the previous good checkpoint: step %d (discarded %s)", step, discarded
            )
        logger.info("checkpoint step %d verified (%s %s…)", step, DIGEST, record[DIGEST][:12])
        return Restored(step, state, list(record["curve"]), tuple(discarded))
    if discarded:
        logger.warning("no checkpoint verified (discarded %s): starting over from step 0", discarded)
    return None


def restore_verified_read_only(manager: ocp.CheckpointManager, template: Any, where: Path,
                               step: int | None = None) -> Restored:
    """Checkpoint ``step`` (default the latest), verified, without modifying anything (for evaluation)."""
    step = manager.latest_step() if step is None else step
    if step is None:
        raise UserError(f"{where}: no finished checkpoint")
    try:
        state, record = _restore_step(manager, step, template)
    except Exception as error:  # noqa: BLE001 - reported as the user's problem to fix: rerun training
        raise UserError(
            f"{where}: checkpoint step {step} is not the state that was saved ({type(error).__name__}: "
            f"{str(error).strip()[:300]}); delete the run's metrics.parquet and rerun snakemake to retrain it"
        ) from error
    return Restored(step, state, list(record["curve"]), ())


def config_record(config: TrainConfig) -> dict[str, Any]:
    """``config`` as its checkpoint records it (``config.json``: JSON types, so a read-back compares equal)."""
    return json.loads(json.dumps(config.to_dict(), sort_keys=True))


def vocabulary_record(meta: Any) -> dict[str, Any]:
    """The vocabulary of a run's data (:class:`dpscaling.data.shards.DatasetMeta`) as its checkpoint records it."""
    return {"vocab_size": int(meta.vocab_size), "vocab_sha256": str(meta.vocab_sha256), "tokenizer": meta.tokenizer}


def recorded_vocabulary(checkpoint_dir: str | Path) -> dict[str, Any] | None:
    """The vocabulary a checkpoint directory's run trained on, or None when it records none."""
    path = Path(checkpoint_dir) / VOCABULARY_FILE
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def recorded_config(checkpoint_dir: str | Path) -> dict[str, Any] | None:
    """The config a checkpoint directory was written for, or None when it records none."""
    path = Path(checkpoint_dir) / CONFIG_FILE
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else None


def config_differences(checkpoint_dir: str | Path, config: TrainConfig) -> list[str] | None:
    """The keys in which the checkpoint's recorded config differs from ``config`` ([] when it is the same),
    or None when the directory records no config: the one check of "this checkpoint belongs to this run"."""
    found = recorded_config(checkpoint_dir)
    if found is None:
        return None
    wanted = config_record(config)
    return sorted(key for key in set(found) | set(wanted) if found.get(key) != wanted.get(key))


def discard_outdated_checkpoints(checkpoint_dir: str | Path, config: TrainConfig) -> bool:
    """Remove ``checkpoint_dir`` when it was written for the same run with the embedding rows custom models had
    before they trained only their own rows (BERT's 512 positions and 2 token types, now
    :meth:`~dpscaling.models.family.Family.rows_trained_at`; docs/models.md):
    such a run retrains from scratch. Any other difference is left to the training loop, which refuses it."""
    import shutil

    found = recorded_config(checkpoint_dir)
    if config.model != "custom" or found is None:
        return False
    wanted = config_record(config)
    old_overrides = {k: v for k, v in wanted["model_overrides"].items() if k != "type_vocab_size"}
    old = {**wanted, "max_positions": max(BERT_MAX_POSITIONS, wanted["max_positions"]),
           "model_overrides": old_overrides}
    if found == wanted or found != old:
        return False
    shutil.rmtree(checkpoint_dir)
    return True


def check_same_config(checkpoint_dir: Path, config: TrainConfig, writer: bool, meta: DatasetMeta) -> None:
    """Refuse to resume a checkpoint written for a different configuration; a new one records the config and
    the vocabulary it trains on (what a fine-tuning start checks: :mod:`dpscaling.train.init`)."""
    changed = config_differences(checkpoint_dir, config)
    if changed:
        raise UserError(
            f"checkpoint {str(checkpoint_dir)!r} was written for a different configuration "
            f"(differs in {changed}); delete it to start over"
        )
    if writer and not (checkpoint_dir / VOCABULARY_FILE).is_file():
        write_json_atomic(checkpoint_dir / VOCABULARY_FILE, vocabulary_record(meta))
    if changed is None and writer:
        write_json_atomic(checkpoint_dir / CONFIG_FILE, config_record(config))
