"""Atomic file output: a reader never sees a half-written result.

Everything dpscaling writes goes to a temporary sibling first and is moved into
place with :func:`os.replace`, which is atomic on POSIX file systems, so an
interrupted job leaves either the old file or none — never a truncated one.
"""

from __future__ import annotations

import errno
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from dpscaling.core.errors import UserError


@contextmanager
def atomic_path(target: str | os.PathLike[str], *, directory: bool = False) -> Iterator[Path]:
    """Yield a temporary path next to ``target``; move it onto ``target`` on success.

    On an exception (SIGTERM included, inside :func:`dpscaling.core.logs.log_to_file`) the temporary file or
    directory is removed and ``target`` is left untouched. A writer killed outright (SIGKILL, power loss)
    cannot clean up: its temporary is removed when ``target`` is next written, since only one writer of a
    target runs at a time (Snakemake's lock on its outputs).
    """
    target = Path(target)
    prefix = f".{target.name}.tmp-"
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(target)
        if directory:
            tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=target.parent))
        else:
            handle, name = tempfile.mkstemp(prefix=prefix, dir=target.parent)
            os.close(handle)
            tmp = Path(name)
        _apply_umask(tmp, directory)
    except OSError as error:
        raise_if_storage_full_or_read_only(error, f"cannot write {target}")
        raise
    try:
        yield tmp
        if directory and target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    except BaseException as error:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.unlink(missing_ok=True)
        raise_if_storage_full_or_read_only(error, f"cannot write {target}")
        raise


def remove_stale_temporaries(target: str | os.PathLike[str]) -> list[Path]:
    """Remove the temporaries a killed writer of ``target`` left behind (``.<name>.tmp-*``); return them."""
    target = Path(target)
    stale = sorted(target.parent.glob(f".{target.name}.tmp-*")) if target.parent.is_dir() else []
    for path in stale:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    return stale


# Failures of the storage, not of the program: the user frees space or fixes permissions and reruns.
_STORAGE_ERRORS = {
    errno.ENOSPC: "No space left on device",
    errno.EDQUOT: "Disk quota exceeded",
    errno.EROFS: "Read-only file system",
    errno.EACCES: "Permission denied",
}


def storage_problem(error: BaseException) -> str | None:
    """The reason when ``error`` is a full, read-only or unwritable file system; else None.

    Also recognises the reason inside the messages of libraries that wrap the OS error
    (pyarrow, orbax/tensorstore) instead of raising it.
    """
    if isinstance(error, OSError) and error.errno in _STORAGE_ERRORS:
        return _STORAGE_ERRORS[error.errno]
    text = str(error)
    return next((reason for reason in _STORAGE_ERRORS.values() if reason in text), None)


def raise_if_storage_full_or_read_only(error: BaseException, doing: str) -> None:
    """Re-raise a storage failure as one clear UserError (``doing``: reason; what to do)."""
    reason = None if isinstance(error, UserError) else storage_problem(error)
    if reason is not None:
        raise UserError(
            f"{doing}: {reason}; free space or make the results directory writable, then rerun "
            "(earlier outputs are unchanged; an interrupted run resumes from its last verified checkpoint)"
        ) from error


def _apply_umask(path: Path, directory: bool) -> None:
    """Give a temp path the permissions a plain ``open``/``mkdir`` would have.

    ``mkstemp``/``mkdtemp`` create private (0600/0700) paths; results are meant
    to be shared like any other output.
    """
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(path, (0o777 if directory else 0o666) & ~umask)


def write_text_atomic(target: str | os.PathLike[str], text: str) -> None:
    with atomic_path(target) as tmp:
        tmp.write_text(text, encoding="utf-8")


def write_json_atomic(target: str | os.PathLike[str], obj: Any) -> None:
    write_text_atomic(target, json.dumps(obj, indent=2, sort_keys=True) + "\n")


# --- Parquet files that prove their content on read --------------------------------------

DIGEST_KEY = b"dpscaling.digest"


def table_digest(table: Any) -> str:
    """SHA-256 of a pyarrow table's column names, types and values (not its metadata)."""
    import hashlib

    import numpy as np
    import pyarrow as pa

    digest = hashlib.sha256()
    for name, column in zip(table.column_names, table.columns):
        column = column.combine_chunks() if column.num_chunks != 1 else column.chunk(0)
        digest.update(f"{name}|{column.type}|{len(column)}|".encode())
        if pa.types.is_integer(column.type) or pa.types.is_floating(column.type):
            digest.update(np.ascontiguousarray(column.is_null().to_numpy(zero_copy_only=False)).tobytes())
            digest.update(np.ascontiguousarray(column.fill_null(0).to_numpy(zero_copy_only=False)).tobytes())
        else:
            digest.update("\x1f".join(map(repr, column.to_pylist())).encode())
    return digest.hexdigest()


def write_parquet_atomic(table: Any, target: str | os.PathLike[str]) -> None:
    """Write a pyarrow table atomically, with page checksums and a digest of its content in the
    metadata, so :func:`read_parquet_verified` detects a truncated or overwritten file."""
    import pyarrow.parquet as pq

    metadata = dict(table.schema.metadata or {}) | {DIGEST_KEY: table_digest(table).encode()}
    with atomic_path(target) as tmp:
        pq.write_table(table.replace_schema_metadata(metadata), tmp, write_page_checksum=True)


def read_parquet_verified(path: str | os.PathLike[str], remedy: str) -> Any:
    """Read a Parquet file, refusing it (a UserError naming the file and ``remedy``) when it cannot be
    read, a page fails its checksum, or the content does not match its recorded digest. Files
    without a digest (written elsewhere) are only checked for readability."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    try:
        table = pq.read_table(path, page_checksum_verification=True)
    except (pa.ArrowException, OSError) as error:
        raise UserError(f"{path}: damaged or truncated Parquet file ({type(error).__name__}: "
                        f"{str(error).strip()[:200]}); {remedy}") from error
    recorded = (table.schema.metadata or {}).get(DIGEST_KEY)
    if recorded is not None and recorded.decode(errors="replace") != table_digest(table):
        raise UserError(f"{path}: content does not match the digest recorded when it was written "
                        f"(the file was altered); {remedy}")
    return table


# ---------------------------------------------------------------------------- the σ cache's place

SIGMA_CACHE_ENV = "DPSCALING_CACHE"


def sigma_cache_directory() -> Path:
    """Where on-demand σ slabs are kept (:mod:`dpscaling.accounting.on_demand`): ``$DPSCALING_CACHE`` (the
    workflow sets it to its run's ``accounting/sigma_cache``), else the user's cache directory."""
    if os.environ.get(SIGMA_CACHE_ENV):
        return Path(os.environ[SIGMA_CACHE_ENV])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "dpscaling"


# ---------------------------------------------------------------------------- one snakemake per results directory

RESULTS_LOCK = ".snakemake-running"
_HELD_LOCKS: dict[str, Any] = {}  # open lock files, held until this process exits


def lock_results(root: str | Path) -> None:
    """Claim ``root`` (``results/<run_name>``) for this Snakemake process, or refuse.

    Snakemake only locks the files of its own DAG, so two invocations with different targets
    could both write one results directory (e.g. retrain and collect curves at once). The
    workflow's ``onstart`` hook calls this: an exclusive ``flock`` on ``root/.snakemake-running``,
    released by the kernel when the process ends, however it ends (no stale lock after kill -9).
    """
    import fcntl
    import os
    import socket
    import time

    root = Path(root)
    key = str(root.resolve())
    if key in _HELD_LOCKS:
        return
    try:
        root.mkdir(parents=True, exist_ok=True)
        handle = open(root / RESULTS_LOCK, "a+", encoding="utf-8")  # noqa: SIM115 - held open on purpose
    except OSError as error:
        raise_if_storage_full_or_read_only(error, f"cannot lock {root}")
        raise
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "another process"
        handle.close()
        raise UserError(
            f"run_name: {root} is in use by another snakemake ({holder}); wait for it to finish, "
            "or use another run_name (two invocations writing one results directory would mix their outputs)"
        ) from None
    handle.seek(0)
    handle.truncate()
    handle.write(f"pid {os.getpid()} on {socket.gethostname()}, since {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
    handle.flush()
    _HELD_LOCKS[key] = handle
