"""Routing a workflow step's output into its Snakemake ``log:`` file."""

from __future__ import annotations

import contextlib
import logging
import signal
import sys
import threading
from collections.abc import Iterator
from pathlib import Path


@contextlib.contextmanager
def log_to_file(path: str | Path) -> Iterator[logging.Logger]:
    """Send logging, stdout and stderr of the enclosed block to ``path``.

    Exceptions are logged with their traceback and re-raised, so the job still
    fails and the reason is in the log Snakemake points to. SIGTERM (Snakemake cancelling the
    job, Slurm's time limit) becomes :class:`Terminated` inside the block, so its cleanup runs:
    half-written outputs are removed (:func:`dpscaling.core.io.atomic_path`) before the job exits.
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
        previous_handler = _terminate_with_an_exception()
        try:
            with contextlib.redirect_stdout(handle), contextlib.redirect_stderr(handle):
                yield logging.getLogger("dpscaling")
        except BaseException:
            logging.getLogger("dpscaling").exception("step failed")
            raise
        finally:
            if previous_handler is not None:
                signal.signal(signal.SIGTERM, previous_handler)
            root.removeHandler(handler)
            root.setLevel(previous_level)
            sys.stdout.flush()


class Terminated(SystemExit):
    """The job received SIGTERM; exits with status 143 (128 + 15) like an unhandled SIGTERM."""

    def __init__(self) -> None:
        super().__init__(128 + signal.SIGTERM)


def _raise_terminated(signum, frame) -> None:
    raise Terminated()


def _terminate_with_an_exception():
    """Install the SIGTERM handler (main thread only: Python delivers signals there); the previous one."""
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, _raise_terminated)
