"""Run one training job in its own process and kill it with SIGKILL at a chosen point.

Usage: python tests/fault_job.py CONFIG_JSON DATA_DIR OUTPUT CHECKPOINT_DIR [FAULT]

FAULT (optional) is where the process kills itself with ``kill -9`` (no cleanup, no
``finally``), to make the fault tests deterministic instead of racing a timer:

- ``after-step=N``: right after the partial curve of the interval ending at step N is
  written (mid-training, before that step's checkpoint, if any, is saved);
- ``in-save=N``: inside orbax's save of step N, after all its data is written to the
  temporary directory and before the commit (the rename onto ``state/N``);
- ``in-metrics-write``: while writing the final ``metrics.parquet``: half of its bytes are
  on disk (in the temporary file) when the process dies.

The job's training code is the real one; only the kill point is injected.
"""

import io
import json
import os
import signal
import sys
from pathlib import Path

import pyarrow.parquet as pq
from orbax.checkpoint._src.path import atomicity

import dpscaling.train.loop as loop
from dpscaling.train import TrainConfig, run_training


def _die() -> None:
    sys.stdout.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def inject(fault: str, output: Path) -> None:
    kind, _, value = fault.partition("=")
    if kind == "after-step":
        real_write = loop.write_metrics

        def write_then_die(path, rows, *args, **kwargs):
            real_write(path, rows, *args, **kwargs)
            if rows and rows[-1]["step"] == int(value):
                _die()

        loop.write_metrics = write_then_die
    elif kind == "in-save":
        real_finalize = atomicity.AtomicRenameTemporaryPath.finalize

        async def finalize_or_die(self):
            if self.get_final().name == value:
                _die()
            await real_finalize(self)

        atomicity.AtomicRenameTemporaryPath.finalize = finalize_or_die
    elif kind == "in-metrics-write":
        real_write_table = pq.write_table

        def half_then_die(table, where, *args, **kwargs):
            if Path(where).name.startswith(f".{output.name}.tmp-"):
                buffer = io.BytesIO()
                real_write_table(table, buffer, *args, **kwargs)
                data = buffer.getvalue()
                Path(where).write_bytes(data[: len(data) // 2])
                _die()
            real_write_table(table, where, *args, **kwargs)

        pq.write_table = half_then_die  # dpscaling.core.io's write_parquet_atomic calls it through the module
    else:
        raise SystemExit(f"unknown fault {fault!r}")


if __name__ == "__main__":
    config_json, data_dir, output, checkpoint_dir = sys.argv[1:5]
    if len(sys.argv) > 5:
        inject(sys.argv[5], Path(output))
    config = TrainConfig.from_dict(json.loads(config_json))
    summary = run_training(config, Path(data_dir), Path(output), Path(checkpoint_dir))
    print(json.dumps({"status": summary.status, "resumed_from_step": summary.resumed_from_step}))
