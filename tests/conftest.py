"""Shared fixtures: the repository root and a runner for the real Snakemake CLI."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

# Every program the tests compile -- in this process and in every subprocess job (Snakemake, training,
# Slurm), which inherit XLA_FLAGS -- is compiled with LLVM at -O1: it compiles a smoke DP step about 30%
# faster than XLA's default and runs it as fast, and runs it 3x faster than -O0 (which compiles fastest of
# all). Since the noise is one draw per step, compiling is no longer most of a smoke run, and -O1 took the
# whole suite 8% less CPU than -O0 (docs/runs.md). The same flags everywhere also let a job load a program
# this process compiled (the flags are part of the compilation cache's key), and keep a job killed
# and resumed in this process bit-identical to the run it repeats. Users' jobs keep XLA's default.
# On a GPU, every test process and job (subprocesses inherit both settings): deterministic kernels, as
# a workflow job has them with deterministic_gpu_ops: true (dpscaling.train.distributed.configure_job),
# so runs repeat bit for bit; and exact float32 products, so that two algorithms of one result (vmap and
# ghost clipping, one device and four) agree to float32 rounding, not to TF32's. A CPU multiplies exactly either way.
os.environ.setdefault("JAX_DEFAULT_MATMUL_PRECISION", "highest")
# With no accelerator's device file (GPU: /dev/nvidia0; TPU: /dev/accel0 or /dev/vfio) JAX would still probe for
# its TPU and GPU plugins in every process: 0.2 s of each training job's start-up, of which the suite runs hundreds.
if not any(next(Path("/dev").glob(pattern), None) for pattern in ("nvidia[0-9]*", "accel[0-9]*", "vfio/[0-9]*")):
    os.environ.setdefault("JAX_PLATFORMS", "cpu")
if "xla_gpu_deterministic_ops" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} --xla_gpu_deterministic_ops=true".strip()
if "xla_backend_optimization_level" not in os.environ["XLA_FLAGS"]:
    os.environ["XLA_FLAGS"] += " --xla_backend_optimization_level=1"
import jax  # noqa: E402

import pytest  # noqa: E402

REPO = Path(__file__).resolve().parents[1]
SNAKEMAKE = [sys.executable, "-m", "snakemake"]


def run_snakemake(*args: str, cwd: Path = REPO, check: bool = True, timeout: int = 900) -> subprocess.CompletedProcess:
    """Run ``snakemake`` on this repository's Snakefile; return the completed process."""
    command = [*SNAKEMAKE, "--snakefile", str(REPO / "Snakefile"), *args]
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    result = subprocess.run(command, cwd=cwd, capture_output=True, text=True, timeout=timeout, env=env)
    if check and result.returncode != 0:
        raise AssertionError(
            f"snakemake {' '.join(args)} failed ({result.returncode}):\n{result.stdout[-4000:]}\n{result.stderr[-4000:]}"
        )
    return result


@pytest.fixture(scope="session")
def repo() -> Path:
    return REPO


# jax.config option -> the environment variable a subprocess reads it from.
_PERSISTENT_CACHE = {
    "jax_compilation_cache_dir": "JAX_COMPILATION_CACHE_DIR",
    "jax_persistent_cache_min_compile_time_secs": "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS",
    "jax_persistent_cache_min_entry_size_bytes": "JAX_PERSISTENT_CACHE_MIN_ENTRY_SIZE_BYTES",
    "jax_compilation_cache_max_size": "JAX_COMPILATION_CACHE_MAX_SIZE",
}


@pytest.fixture(scope="session", autouse=True)
def compile_cache(tmp_path_factory) -> Iterator[Path]:
    """One persistent XLA compilation cache for the whole session, in this process and in every
    subprocess (Snakemake and its jobs, training jobs, Slurm jobs, which inherit the environment):
    a program compiled by one test is loaded by the next (compilation is most of a tiny job's time).

    It lives in the session's temporary root, shared by pytest-xdist's workers, so no test reads a
    cache from another session. A size limit turns on JAX's file lock around reads and writes:
    parallel jobs compiling the same program must not read each other's half-written entries.

    Only programs that take at least 0.2 s to compile are kept: the many tiny programs of eager JAX code
    (milliseconds each to compile) cost more in cache files and locks than they save (measured: JAX's unit
    tests 15% faster than with every program cached)."""
    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent  # the session's root, above this worker's own directory
    cache = root / "jax-cache"
    cache.mkdir(exist_ok=True)
    values = {"jax_compilation_cache_dir": str(cache), "jax_persistent_cache_min_compile_time_secs": 0.2,
              "jax_persistent_cache_min_entry_size_bytes": 0, "jax_compilation_cache_max_size": 8 * 2**30}
    before = {name: getattr(jax.config, name) for name in values}
    with pytest.MonkeyPatch.context() as patch:
        for name, value in values.items():
            jax.config.update(name, value)
            patch.setenv(_PERSISTENT_CACHE[name], str(value))
        yield cache
    for name, value in before.items():
        jax.config.update(name, value)


@pytest.fixture(scope="session", autouse=True)
def sigma_cache(tmp_path_factory) -> Iterator[Path]:
    """The on-demand σ slabs (dpscaling.accounting.on_demand) of this session only, shared by its workers and
    subprocesses: no test reads a user's cache, and a slab built by one test serves the next."""
    from dpscaling.accounting.on_demand import CACHE_ENV

    root = tmp_path_factory.getbasetemp()
    if os.environ.get("PYTEST_XDIST_WORKER"):
        root = root.parent
    cache = root / "dpscaling-cache"
    cache.mkdir(exist_ok=True)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv(CACHE_ENV, str(cache))
        yield cache


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The longest modules first, by their ``slow(minutes=...)`` marks: with pytest-xdist's
    per-file distribution (the Makefile's ``-n <cores + 1> --dist loadfile --no-loadscope-reorder``;
    without the last flag xdist starts the files with the most tests first) the end-to-end files
    then run side by side on separate workers instead of one of them running alone at the end."""
    minutes: dict[str, float] = {}
    for item in items:
        mark = item.get_closest_marker("slow")
        if mark is not None:
            name = item.module.__name__
            minutes[name] = max(minutes.get(name, 0.0), float(mark.kwargs.get("minutes", 1.0)))
    items.sort(key=lambda item: -minutes.get(item.module.__name__, 0.0))  # stable: file order otherwise kept


@pytest.fixture(scope="session")
def job_env(compile_cache) -> dict[str, str]:
    """Environment of a subprocess job run from the tests: this checkout's library first, and the
    session's compilation cache (set in ``os.environ`` by ``compile_cache``)."""
    return dict(os.environ, PYTHONPATH=os.pathsep.join([str(REPO / "src"), os.environ.get("PYTHONPATH", "")]))


