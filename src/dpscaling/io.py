"""Atomic file output: a reader never sees a half-written result.

Everything dpscaling writes goes to a temporary sibling first and is moved into
place with :func:`os.replace`, which is atomic on POSIX file systems, so an
interrupted job leaves either the old file or none — never a truncated one.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any


@contextmanager
def atomic_path(target: str | os.PathLike[str], *, directory: bool = False) -> Iterator[Path]:
    """Yield a temporary path next to ``target``; move it onto ``target`` on success.

    On an exception the temporary file or directory is removed and ``target``
    is left untouched.
    """
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    prefix = f".{target.name}.tmp-"
    if directory:
        tmp = Path(tempfile.mkdtemp(prefix=prefix, dir=target.parent))
    else:
        handle, name = tempfile.mkstemp(prefix=prefix, dir=target.parent)
        os.close(handle)
        tmp = Path(name)
    _apply_umask(tmp, directory)
    try:
        yield tmp
        if directory and target.exists():
            shutil.rmtree(target)
        os.replace(tmp, target)
    except BaseException:
        if tmp.is_dir():
            shutil.rmtree(tmp, ignore_errors=True)
        else:
            tmp.unlink(missing_ok=True)
        raise


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
