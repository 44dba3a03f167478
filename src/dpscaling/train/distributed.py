"""Data parallelism over all devices, and multi-host start-up (paper appendix "Training Throughput":
pure data parallelism, more cores for larger models)."""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from typing import Any

import jax
import numpy as np
from dpscaling.workflow.launch import launch_environment
from jax.sharding import Mesh, NamedSharding, PartitionSpec

logger = logging.getLogger(__name__)

DATA_AXIS = "data"


def limit_host_threads(threads: int) -> None:
    """Run XLA's CPU matrix kernels on one thread when the scheduler gave this job one core.

    XLA otherwise sizes its thread pools by every core of the machine, so two one-core jobs
    on a 2-core laptop would fight over both. Only XLA's own, documented flag is used
    (``XLA_FLAGS`` must start with ``--`` or XLA reads it as a file name). Takes effect only
    before JAX creates its CPU backend; a setting already in ``XLA_FLAGS`` wins; accelerator
    devices are unaffected.
    """
    flags = os.environ.get("XLA_FLAGS", "")
    if threads != 1 or "xla_cpu_multi_thread_eigen" in flags:
        return
    os.environ["XLA_FLAGS"] = f"{flags} --xla_cpu_multi_thread_eigen=false".strip()


# XLA's switch for run-to-run determinism on GPUs (sorted scatter instead of atomics, deterministic
# autotuning). Without it, two processes training the same job on an H100 differed in the 7th digit
# of the first logged loss, so a resumed run did not repeat its curve; with it, a BertMini DP step
# took 2.8 times as long on an H200 (docs/runs.md). CPUs and TPUs ignore it.
DETERMINISTIC_GPU_FLAG = "--xla_gpu_deterministic_ops=true"


def deterministic_accelerators() -> None:
    """Make GPU training bit-reproducible across processes (:data:`DETERMINISTIC_GPU_FLAG`), the basis
    of exact resume. Takes effect only before JAX creates its backend; a setting of the flag already in
    ``XLA_FLAGS`` wins."""
    flags = os.environ.get("XLA_FLAGS", "")
    if "xla_gpu_deterministic_ops" not in flags:
        os.environ["XLA_FLAGS"] = f"{flags} {DETERMINISTIC_GPU_FLAG}".strip()


# glibc's mallopt parameters (malloc.h), and the values a job sets: freed blocks below 256 MiB stay in the process
# for the next allocation, and up to 1 GiB of free heap is kept. By default glibc hands every freed block above
# 128 KiB back to the system and faults it in again on the next allocation of its size: a smoke training job
# took 510,000 page faults and 1.4 s of system time for 40 steps; with these, 165,000 and 0.7 s, and 15% less CPU
# in all (docs/runs.md).
_M_TRIM_THRESHOLD, _M_TOP_PAD, _M_MMAP_THRESHOLD = -1, -2, -3
_KEPT_FREE_MEMORY = {_M_MMAP_THRESHOLD: 256 * 2**20, _M_TRIM_THRESHOLD: 2**30, _M_TOP_PAD: 256 * 2**20}
_MALLOC_ENVIRONMENT = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "MALLOC_TOP_PAD_")


def keep_freed_memory() -> bool:
    """Let glibc's allocator keep the memory a job frees, for its next step's buffers (:data:`_KEPT_FREE_MEMORY`).
    Whether it was set: not where the C library is not glibc, nor where the environment already tunes glibc's
    allocator (``MALLOC_MMAP_THRESHOLD_`` and its siblings win). Changes no result, only where memory comes from."""
    import ctypes

    if any(name in os.environ for name in _MALLOC_ENVIRONMENT):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):  # not glibc (macOS, musl without it): its allocator as it is
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return all(mallopt(parameter, value) == 1 for parameter, value in _KEPT_FREE_MEMORY.items())


def configure_job(threads: int, config: Mapping[str, Any]) -> None:
    """A training or evaluation job's start-up, before JAX creates its backend: the cores it was
    given (:func:`limit_host_threads`), and the run config's job settings, which never change what a
    job computes: deterministic GPU kernels if ``deterministic_gpu_ops`` asks for them
    (:func:`deterministic_accelerators`) and the shared ``compilation_cache``
    (:func:`use_compilation_cache`); and freed memory kept for reuse (:func:`keep_freed_memory`)."""
    keep_freed_memory()
    limit_host_threads(threads)
    if config["deterministic_gpu_ops"]:
        deterministic_accelerators()
    use_compilation_cache(config["compilation_cache"])


def use_compilation_cache(directory: str | os.PathLike | None) -> None:
    """Keep compiled XLA programs in ``directory`` (JAX's persistent compilation cache), so the
    jobs of one model and batch shape compile their train step once between them: σ̄, learning
    rate and seed are data of that step (:class:`dpscaling.train.step.StepHyperparams`).

    A cache set in the environment (``JAX_COMPILATION_CACHE_DIR``) wins; ``None`` leaves it off.
    A size limit turns on JAX's file lock, so parallel jobs never read a half-written entry.
    Entries hold programs, never data: a private run's key is an argument, not a constant.
    """
    if directory is None or os.environ.get("JAX_COMPILATION_CACHE_DIR"):
        return
    jax.config.update("jax_compilation_cache_dir", os.fspath(directory))
    jax.config.update("jax_compilation_cache_max_size", 4 * 2**30)


def maybe_initialize_distributed(requested: bool | None) -> None:
    """Call ``jax.distributed.initialize()`` (which reads Slurm / TPU-pod settings itself)
    if requested, or if ``requested is None`` and the environment is multi-host."""
    if requested is False or (requested is None and not launch_environment().multiprocess):
        return
    if jax.distributed.is_initialized():
        return
    jax.distributed.initialize()
    logger.info(
        "jax.distributed: process %d of %d, %d global devices",
        jax.process_index(),
        jax.process_count(),
        jax.device_count(),
    )


class DataParallel:
    """A 1-D mesh over every device: batch split along ``data``, parameters replicated."""

    def __init__(self) -> None:
        self.mesh = Mesh(jax.devices(), (DATA_AXIS,))
        self.n_devices = self.mesh.size
        self.batch = NamedSharding(self.mesh, PartitionSpec(DATA_AXIS))
        self.microbatch = NamedSharding(self.mesh, PartitionSpec(None, DATA_AXIS))
        self.replicated = NamedSharding(self.mesh, PartitionSpec())

    def global_batch(self, rows, indices):
        """The global ``(B, seq)`` array (``(B, m, seq)`` for ``(B, m)`` user-level indices) from every process's
        share of ``rows[indices]``."""
        per_process = len(indices) // jax.process_count()
        start = jax.process_index() * per_process
        local = rows[indices[start : start + per_process]]
        return jax.make_array_from_process_local_data(
            self.batch, local, np.shape(indices) + rows.shape[1:]
        )
