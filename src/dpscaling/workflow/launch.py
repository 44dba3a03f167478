"""Where a process sits in a multi-process launch, without importing JAX (the training scripts ask before
they import it).

A Slurm job with several tasks (one per node) starts in the batch step as a single process; it must re-execute
itself under ``srun`` (:func:`relaunch_per_node`) so that every node runs one JAX process, and only inside that
step does ``jax.distributed.initialize()`` find Slurm's variables (``SLURM_STEP_NODELIST``, ``SLURM_PROCID`` …)
(:func:`launch_environment`). TPU pods are detected from ``TPU_WORKER_HOSTNAMES``. Jobs are sized by
:mod:`dpscaling.workflow.cluster`.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class LaunchEnvironment:
    """Where this process runs. ``kind``: ``single`` | ``slurm-batch`` | ``slurm-step`` | ``tpu-pod``."""

    kind: str
    process_count: int  # 0 = unknown from the environment (a batch step whose SLURM_* were stripped)

    @property
    def multiprocess(self) -> bool:
        """True when ``jax.distributed.initialize()`` must run (and can find its peers)."""
        return self.kind in ("slurm-step", "tpu-pod") and self.process_count > 1


def launch_environment(environ: Mapping[str, str] | None = None) -> LaunchEnvironment:
    """Classify the process from Slurm / Cloud TPU variables (measured on Slurm 22.05).

    A batch script has ``SLURM_JOB_ID`` but no ``SLURM_STEP_ID`` (nor
    ``SLURM_STEP_NODELIST``, which JAX's Slurm detection needs); a process started by
    ``srun`` has ``SLURM_STEP_ID`` and ``SLURM_STEP_NUM_TASKS``. The executor plugin's
    job step strips every other ``SLURM_*`` variable before running the job, so the batch
    step's task count may be missing (see :func:`slurm_allocation`).
    """
    env = os.environ if environ is None else environ
    if "SLURM_JOB_ID" in env:
        if "SLURM_STEP_ID" in env:
            return LaunchEnvironment("slurm-step", int(env.get("SLURM_STEP_NUM_TASKS") or env.get("SLURM_NTASKS") or 1))
        return LaunchEnvironment("slurm-batch", int(env.get("SLURM_NTASKS") or 0))
    hosts = [h for h in env.get("TPU_WORKER_HOSTNAMES", "").split(",") if h]
    if len(hosts) > 1:
        return LaunchEnvironment("tpu-pod", len(hosts))
    return LaunchEnvironment("single", 1)


@dataclass(frozen=True)
class SlurmAllocation:
    """What ``sbatch`` granted the job (``scontrol show job``): the step we launch must match."""

    tasks: int
    nodes: int
    cpus_per_task: int
    gres_per_node: str | None  # e.g. "gpu:4"

    @classmethod
    def parse(cls, scontrol_line: str) -> SlurmAllocation:
        fields = dict(item.split("=", 1) for item in scontrol_line.split() if "=" in item)
        gres = fields.get("TresPerNode") or None
        if gres:  # "gres:gpu:4" (22.05) or "gres/gpu:4" (23.x), possibly a comma list
            gres = ",".join(part.split(":", 1)[1] if part.startswith("gres:") else part.removeprefix("gres/")
                            for part in gres.split(","))
        return cls(
            tasks=int(fields.get("NumTasks", "1")),
            nodes=int(fields.get("NumNodes", "1").split("-")[0]),
            cpus_per_task=int(fields.get("CPUs/Task", "1")),
            gres_per_node=gres,
        )


def slurm_allocation(job_id: str) -> SlurmAllocation:
    line = subprocess.run(
        ["scontrol", "show", "job", "-o", job_id], check=True, capture_output=True, text=True
    ).stdout
    return SlurmAllocation.parse(line)


def srun_command(argv: Sequence[str], allocation: SlurmAllocation) -> list[str]:
    """``srun`` line starting one copy of ``argv`` per task of ``allocation``, each with the
    job's CPUs per task and GPUs per node (the plugin stripped SLURM_* that would carry them)."""
    per_node = math.ceil(allocation.tasks / allocation.nodes)
    command = [
        "srun",
        f"--ntasks={allocation.tasks}",
        f"--nodes={allocation.nodes}",
        f"--ntasks-per-node={per_node}",
        f"--cpus-per-task={allocation.cpus_per_task}",
        "--kill-on-bad-exit=1",  # one dead process would leave the others blocked in a collective
        "--cpu-bind=none",
    ]
    if allocation.gres_per_node:
        command.append(f"--gres={allocation.gres_per_node}")
    return [*command, *argv]


def relaunch_per_node(argv: Sequence[str] | None = None) -> int | None:
    """In the batch step of a multi-task Slurm job: run ``argv`` (default: this script)
    once per task via ``srun`` and return its exit status. Elsewhere return ``None``.

    A Snakemake ``script:`` job runs a generated file on the shared filesystem, so
    re-executing ``sys.argv`` under ``srun`` runs the same job in every task; each copy
    then sees itself in a Slurm step and joins ``jax.distributed``.
    """
    where = launch_environment()
    if where.kind != "slurm-batch" or where.process_count == 1:
        return None
    allocation = slurm_allocation(os.environ["SLURM_JOB_ID"])
    if allocation.tasks <= 1:
        return None
    command = srun_command([sys.executable, *(sys.argv if argv is None else argv)], allocation)
    return subprocess.run(command, check=False).returncode
