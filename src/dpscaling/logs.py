"""Routing a workflow step's output into its Snakemake ``log:`` file."""

from __future__ import annotations

import contextlib
import logging
import sys
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def log_to_file(path: str | Path) -> Iterator[logging.Logger]:
    """Send logging, stdout and stderr of the enclosed block to ``path``.

    Exceptions are logged with their traceback and re-raised, so the job still
    fails and the reason is in the log Snakemake points to.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8", buffering=1) as handle:
        handler = logging.StreamHandler(handle)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
        root = logging.getLogger()
        previous_level = root.level
        root.addHandler(handler)
        root.setLevel(logging.INFO)
        try:
            with contextlib.redirect_stdout(handle), contextlib.redirect_stderr(handle):
                yield logging.getLogger("dpscaling")
        except BaseException:
            logging.getLogger("dpscaling").exception("step failed")
            raise
        finally:
            root.removeHandler(handler)
            root.setLevel(previous_level)
            sys.stdout.flush()
