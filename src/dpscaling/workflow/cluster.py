"""Cluster sizing of training jobs, without importing JAX (the Snakefile imports this module, and so does every
cluster job that parses it); where a process sits in a multi-process launch is :mod:`dpscaling.workflow.launch`.

:func:`train_resources`: the Snakemake resources of one training job (GPUs, nodes, CPUs, host memory, wall time)
from the model's parameter count and the grid point's work (steps × batch × sequence length). Throughput is
calibrated on the paper's measured table (appendix "Training Throughput": records/s per TPUv3 core at sequence
length 512, pure data parallelism) and converted to GPUs with ``tpu_cores_per_gpu``. The device count is the
smallest power of two (so it divides the power-of-two physical batch) that finishes within ``target_hours`` — the
paper's own rule, "more cores for larger models so that each experiment finishes within four to ten hours".
Site properties come from ``DPSCALING_*`` environment variables (:class:`Site`); any resource can still be
overridden with ``--set-resources``.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from dpscaling.privacy.mechanisms import DPSGD, mechanism_named, state_copies
from dpscaling.models.family import BERT, Family, family_named, model_family, run_model_config
from dpscaling.privacy.samplers import SHUFFLE, TRUNCATED_POISSON, sampler_named

if TYPE_CHECKING:
    from dpscaling.config.blocks import RunConfig
    from dpscaling.private.plans import PrivatePlan

# Paper appendix "Training Throughput" (Table): params, records/s per TPUv3 core (seq 512).
PAPER_THROUGHPUT: tuple[tuple[float, float], ...] = (
    (4.52e6, 573.0),
    (11.4e6, 352.0),
    (29.0e6, 211.0),
    (41.6e6, 134.0),
    (110e6, 54.0),
    (335e6, 17.8),
    (729e6, 6.1),
)
PAPER_SEQ_LEN = 512


@dataclass(frozen=True)
class MeasuredThroughput:
    """A DP training job's records/s measured on one device kind (docs/runs.md): the paper config's job
    through ``run_training`` (``benchmarks/gpu_training.py job``: B 1024, S 512, σ̄ 2^-10, float32, vmap clipping
    over the whole batch)."""

    model: str
    n_params: float
    records_per_s: float
    seq_len: int
    date: str
    commit: str


# By jax's ``device_kind`` (DPSCALING_DEVICE_KIND): what :func:`param_tokens_per_gpu_second` uses for BERT jobs on
# that kind instead of the paper's TPUv3 table and the tpu_cores_per_gpu assumption.
MEASURED_THROUGHPUT: dict[str, tuple[MeasuredThroughput, ...]] = {
    "NVIDIA H100 80GB HBM3": (MeasuredThroughput("BertTiny", 4.52e6, 10_594.0, 512, "2026-11-26", "c3277e7"),),
    "NVIDIA H200": (MeasuredThroughput("BertTiny", 4.52e6, 12_892.0, 512, "2026-11-27", "e766019"),),
}


def _env_number(name: str, default: float) -> float:
    value = os.environ.get(name, "")
    try:
        return float(value) if value else default
    except ValueError:
        raise ValueError(f"environment variable {name}={value!r} is not a number") from None


@dataclass(frozen=True)
class Site:
    """What the cluster offers; read from ``DPSCALING_*`` environment variables.

    ``gpus_per_node`` (DPSCALING_GPUS_PER_NODE, 4), ``max_nodes`` (DPSCALING_MAX_NODES, 8),
    ``target_hours`` per job (DPSCALING_TARGET_HOURS, 8: the paper's 4-10 h),
    ``tpu_cores_per_gpu`` (DPSCALING_TPU_CORES_PER_GPU, 2: one A100-class GPU ≈ one
    TPUv3 chip = 2 cores), ``cpus_per_gpu`` (DPSCALING_CPUS_PER_GPU, 4),
    ``max_cpus_per_task`` (DPSCALING_MAX_CPUS_PER_TASK, 32), ``gpu_flops`` (DPSCALING_GPU_FLOPS,
    1e14: the FLOP/s a GPU is assumed to sustain where no throughput was measured) and ``device_kind``
    (DPSCALING_DEVICE_KIND, none: the GPUs' jax ``device_kind``, whose :data:`MEASURED_THROUGHPUT` then sizes
    BERT jobs).
    """

    gpus_per_node: int = 4
    max_nodes: int = 8
    target_hours: float = 8.0
    tpu_cores_per_gpu: float = 2.0
    cpus_per_gpu: int = 4
    max_cpus_per_task: int = 32
    gpu_flops: float = 1e14
    device_kind: str | None = None

    @classmethod
    def from_env(cls) -> Site:
        default = cls()
        return cls(
            gpus_per_node=int(_env_number("DPSCALING_GPUS_PER_NODE", default.gpus_per_node)),
            max_nodes=int(_env_number("DPSCALING_MAX_NODES", default.max_nodes)),
            target_hours=_env_number("DPSCALING_TARGET_HOURS", default.target_hours),
            tpu_cores_per_gpu=_env_number("DPSCALING_TPU_CORES_PER_GPU", default.tpu_cores_per_gpu),
            cpus_per_gpu=int(_env_number("DPSCALING_CPUS_PER_GPU", default.cpus_per_gpu)),
            max_cpus_per_task=int(_env_number("DPSCALING_MAX_CPUS_PER_TASK", default.max_cpus_per_task)),
            gpu_flops=_env_number("DPSCALING_GPU_FLOPS", default.gpu_flops),
            device_kind=os.environ.get("DPSCALING_DEVICE_KIND") or None,
        )


def param_tokens_per_core_second(n_params: float) -> float:
    """Throughput in parameter·tokens per TPUv3-core second, interpolated in log(params).

    The paper's table gives 1.3e12 (BertTiny) to 3.1e12 (BertSmall…BertLarge); outside
    its range the nearest end is used (tiny models are overhead-bound, so never faster).
    """
    return _interpolated([(p, r * PAPER_SEQ_LEN * p) for p, r in PAPER_THROUGHPUT], n_params)


def _interpolated(table: Sequence[tuple[float, float]], n_params: float) -> float:
    """Parameter·tokens/s at ``n_params``, linear in log(params) between the (params, parameter·tokens/s) rows,
    the nearest row's outside them: a larger model keeps the largest measured one's (its own runs at least as
    fast, so the request is never short)."""
    points = [(math.log(p), y) for p, y in sorted(table)]
    x = math.log(n_params)
    if x <= points[0][0]:
        return points[0][1]
    for (x0, y0), (x1, y1) in zip(points, points[1:]):
        if x <= x1:
            return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
    return points[-1][1]


def _next_power_of_two(n: float) -> int:
    return 1 << max(0, math.ceil(math.log2(max(n, 1.0))))


def _pow2_floor(n: int) -> int:
    return 1 << (max(n, 1).bit_length() - 1)


@dataclass(frozen=True)
class TrainResources:
    """One training job's request. ``gpus_per_node`` × ``nodes`` devices, one process per node."""

    n_params: int
    nodes: int
    gpus_per_node: int
    cpus_per_task: int
    mem_mb: int  # host memory per node
    runtime: int  # minutes

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    def snakemake(self) -> dict[str, Any]:
        """As Snakemake resources for snakemake-executor-plugin-slurm (same keys every time;
        ``None`` = not requested, which Snakemake drops).

        One node: ``gpu`` (→ ``--gpus=G``) and the plugin's own ``srun -n1`` job step.
        Several nodes: ``gres`` (per node) with ``nodes`` = ``tasks`` (one task per node)
        and ``mpi`` set, so the plugin leaves launching to the job, which re-executes
        itself under ``srun`` (:func:`relaunch_per_node`); ``tasks_per_gpu: 0`` stops the
        plugin from turning ``tasks`` into ``--ntasks-per-gpu``.
        """
        multi = self.nodes > 1
        return {
            "cpus_per_task": self.cpus_per_task,
            "mem_mb": self.mem_mb,
            "runtime": self.runtime,
            "nodes": self.nodes,
            "gpu": None if multi else self.gpus_per_node,
            "gres": f"gpu:{self.gpus_per_node}" if multi else None,
            "tasks": self.nodes if multi else None,
            "tasks_per_gpu": 0 if multi else None,
            "mpi": "srun" if multi else None,
        }


def param_tokens_per_gpu_second(basis: str, n_params: float, site: Site) -> float:
    """A GPU's training throughput in parameter·tokens per second, on a family's basis
    (:attr:`dpscaling.models.family.Family.throughput`):

    * ``paper_table`` (BERT): the paper's measured records/s per TPUv3 core
      (:func:`param_tokens_per_core_second`) × ``site.tpu_cores_per_gpu``;
    * ``flops`` (decoders, which the paper's table never measured): 6·M FLOPs per token at an
      assumed ``site.gpu_flops`` FLOP/s (DPSCALING_GPU_FLOPS; default 1e14, about a third of an
      A100's 312 TFLOP/s bf16 dense peak). An assumption, not a measurement: docs/cluster.md.

    On a ``site.device_kind`` with :data:`MEASURED_THROUGHPUT`, BERT jobs are sized from its measured rows
    instead (interpolated as the paper's table; the assumptions stay only for kinds never measured, and for
    decoders, which no lease measured).
    """
    measured = MEASURED_THROUGHPUT.get(site.device_kind or "")
    if basis == "paper_table" and measured:
        return _interpolated([(row.n_params, row.records_per_s * row.seq_len * row.n_params) for row in measured],
                             n_params)
    if basis == "paper_table":
        return param_tokens_per_core_second(n_params) * site.tpu_cores_per_gpu
    if basis == "flops":
        return site.gpu_flops / 6.0
    raise ValueError(f"unknown throughput basis {basis!r}")


def train_resources(
    n_params: int,
    *,
    steps: int,
    batch: int,
    seq_len: int,
    attempt: int = 1,
    site: Site | None = None,
    throughput: str = "paper_table",
    mechanism: str = DPSGD.name,
    computed_batch: float | None = None,
) -> TrainResources:
    """Size one training job; ``attempt`` (Snakemake's retry counter) scales time and memory;
    ``throughput`` is the model family's basis (:func:`param_tokens_per_gpu_second`). ``batch`` is the
    physical batch (a padded one's cap L: the devices divide it); ``computed_batch`` the sequences a step is
    expected to compute (a padded batch skips its microbatches of padding), which its time follows (None = batch).

    Wall time: work / throughput on the chosen devices, ×1.5 safety, +15 min for start-up,
    compilation and checkpoints. Host memory per node: 4 GiB for the runtime and data
    plus 48 bytes per parameter (parameters, two Adam moments and orbax's host copies), plus 8 bytes
    per parameter for each past noise draw a correlated ``mechanism`` keeps (b − 1 for BandMF:
    :func:`dpscaling.privacy.mechanisms.state_copies`), held on the device and copied to the host by orbax.
    """
    site = site or Site.from_env()
    work = float(steps) * (batch if computed_batch is None else computed_batch) * seq_len * n_params  # param·tokens
    per_gpu = param_tokens_per_gpu_second(throughput, n_params, site)
    one_gpu_hours = work / per_gpu / 3600.0
    # Device counts are powers of two so that they divide the (power-of-two) batch, as
    # pure data parallelism splits it evenly; a node contributes a power of two of its GPUs.
    node_gpus = _pow2_floor(site.gpus_per_node)
    cap = min(_pow2_floor(node_gpus * site.max_nodes), _largest_pow2_divisor(batch))
    gpus = min(_next_power_of_two(one_gpu_hours / site.target_hours), cap)
    if gpus > node_gpus:
        nodes, per_node = gpus // node_gpus, node_gpus
    else:
        nodes, per_node = 1, gpus
    hours = one_gpu_hours / (nodes * per_node)
    runtime = math.ceil(hours * 60 * 1.5) + 15
    history = state_copies(mechanism) - state_copies(DPSGD.name)
    mem_mb = 4096 + math.ceil(48 * n_params / 2**20) + math.ceil(8 * history * n_params / 2**20)
    cpus = min(site.cpus_per_gpu * per_node, site.max_cpus_per_task)
    return TrainResources(
        n_params=n_params,
        nodes=nodes,
        gpus_per_node=per_node,
        cpus_per_task=max(1, cpus),
        mem_mb=mem_mb * attempt,
        runtime=runtime * attempt,
    )


def _largest_pow2_divisor(n: int) -> int:
    return n & -n if n > 0 else 1


@dataclass(frozen=True)
class Work:
    """What one training-like job computes: ``steps`` steps of ``batch`` sequences through ``model``
    (scoring is sized as steps of batch 1: a forward pass is a third of a training step)."""

    model: str
    steps: int
    batch: int
    seq_len: int | None = None  # None = the run's data.seq_len
    # a shape the config does not name (a savings run's neighbour): its parameter count and family
    param_count: int | None = None
    family: str | None = None
    mechanism: str = DPSGD.name  # a correlated mechanism's state holds b − 1 past noise draws
    computed_batch: float | None = None  # a padded batch's expected computed sequences (None = batch)


# The resources a sized job sets; every training-like rule gets all of them (None = not requested).
SIZED_RESOURCES = ("cpus_per_task", "mem_mb", "runtime", "nodes", "gpu", "gres", "tasks", "tasks_per_gpu", "mpi")


def _shape_of(run: RunConfig, work: Work) -> tuple[int, Family, int]:
    """(parameters, family, sequence length) of ``work``'s model under the run's config."""
    seq_len = work.seq_len or run.data.seq_len
    if work.param_count is not None:
        return work.param_count, family_named(work.family or BERT.name), seq_len
    return run_model_config(run, work.model, seq_len).param_count().total, model_family(run.models, work.model), seq_len


def sized_resources(run: RunConfig, work: Work, attempt: int = 1) -> dict[str, Any]:
    """The Snakemake resources of ``work`` under the run's config (:func:`train_resources`)."""
    n_params, family, seq_len = _shape_of(run, work)
    return train_resources(n_params, steps=work.steps, batch=work.batch, seq_len=seq_len,
                           throughput=family.throughput, attempt=attempt, mechanism=work.mechanism,
                           computed_batch=work.computed_batch).snakemake()


def grid_work(run: RunConfig, model: str, training: Mapping[str, Any] | None = None,
              seq_len: int | None = None, mechanism: str = DPSGD.name) -> Work:
    """A grid training job of ``model`` at sequence length ``seq_len`` (None = ``data.seq_len``) with the
    ``training`` mapping (a training job's param; None = the run's ``training`` block). A truncating sampler's
    job runs its padded batch L: the run prices L once it has its data, so an upper bound of it sizes the job.
    A user-level sampler's batch is its users' m sequences each (a user-level mechanism's runs: its sampler)."""
    training = mechanism_named(mechanism).training(run.training.to_mapping() if training is None else training)
    batch = int(training["physical_batch"])
    sampler = sampler_named(training.get("sampling", SHUFFLE.name), "training")
    if sampler.truncated:
        from dpscaling.accounting.truncation import tail_truncated_batch_size

        batch = training.get("truncated_batch_size") or tail_truncated_batch_size(
            batch, int(training["steps"]), run.accounting.delta, training.get("microbatch_size") or 1)
    if sampler.unit == "user":  # each of the batch's users brings m sequences
        batch *= int(training.get("examples_per_user_per_batch", 1))
    return Work(model, int(training["steps"]), batch, seq_len, mechanism=mechanism)


def evaluation_work(model: str, examples: int) -> Work:
    """Scoring ``examples`` sequences with ``model``: forward passes only (2·M FLOPs per token against a
    training step's 6·M), batch 1 so that it stays on one device."""
    return Work(model, max(1, math.ceil(examples / 3)), 1)


def plan_work(run: RunConfig, plan: str | os.PathLike[str], scoring: int | None = None) -> Work:
    """A ``private_model`` job: its plan's model, iterations and padded batch L once the plan exists (the
    job is then ready to run; its time from the sequences a step computes: :func:`private_work`); before that (a
    dry run), the largest of the run's models at the grid's horizon. ``scoring`` = sequences scored, for the
    held-out evaluation of the plan's model."""
    from dpscaling.private.plans import read_plan

    if os.path.exists(plan):
        work = private_work(run, read_plan(plan))
    else:
        work = _largest_private_work(run)
    return work if scoring is None else evaluation_work(work.model, scoring)


def _largest_private_work(run: RunConfig) -> Work:
    """Before a plan exists (a dry run): the largest of the run's models at the grid's horizon, Poisson."""
    largest = max(run.models.names, key=lambda name: run_model_config(run, name).param_count().total)
    return grid_work(run, largest, {**run.training.to_mapping(), "sampling": TRUNCATED_POISSON.name})


def savings_work(run: RunConfig, plan: str | os.PathLike[str], role: str) -> Work:
    """A ``savings`` run (its held-out scoring included, a small part): the role's model (a shape the config
    may not name), iterations and padded batch L from the budget's plan; before it exists, as :func:`plan_work`."""
    from dpscaling.private.plans import PrivatePlan, read_json

    if os.path.exists(plan):
        record = read_json(plan)["runs"].get(role, {})
        if "model_shape" in record:  # a run that trains (a skipped one says why not)
            shape = record["model_shape"]
            return private_work(run, PrivatePlan.from_json(record), param_count=int(shape["param_count"]),
                                family=shape["family"])
    return _largest_private_work(run)


def private_work(run: RunConfig, plan: PrivatePlan, **shape: Any) -> Work:
    """A planned private run: its L user slots or sequences (each slot a unit's sequences) as the physical batch,
    and the sequences a step is expected to compute, skipping whole microbatches of padding, as its work."""
    return Work(plan.model, int(plan.iterations), int(plan.truncated_batch_size) * plan.sequences_per_unit,
                mechanism=plan.mechanism, computed_batch=plan.computed_sequences(run.training.microbatch_size),
                **shape)


class _SizedResource:
    """One resource of a training-like job as Snakemake asks for it: a callable of the job's wildcards,
    inputs and attempt (inputs, so a job can be sized from a file an upstream job writes)."""

    def __init__(self, run: RunConfig, work: Callable[[Any, Any], Work], name: str):
        self.run, self.work, self.name = run, work, name

    def __call__(self, wildcards, input, attempt):  # noqa: A002 - Snakemake passes arguments by name
        return sized_resources(self.run, self.work(wildcards, input), attempt)[self.name]


class _JobPriority:
    """A training-like job's Snakemake ``priority``: log10 of its parameter·tokens (steps × batch × length ×
    parameters), so that among the jobs ready to run the largest start first. On a few cores with jobs of very
    different sizes (the default's, on two) longest-first leaves the shortest tail: started in the DAG's order,
    the largest model's jobs came last and one core sat idle while the other finished them."""

    def __init__(self, run: RunConfig, work: Callable[[Any, Any], Work]):
        self.run, self.work = run, work

    def __call__(self, wildcards, input, attempt):  # noqa: A002 - Snakemake passes arguments by name
        work = self.work(wildcards, input)
        n_params, _, seq_len = _shape_of(self.run, work)
        return round(math.log10(float(work.steps) * work.batch * seq_len * n_params), 3)


def job_priority(run: RunConfig, work: Callable[[Any, Any], Work]) -> _JobPriority:
    """The ``priority`` of a training-like rule whose jobs compute ``work(wildcards, input)``: larger first."""
    return _JobPriority(run, work)


def job_resources(run: RunConfig, work: Callable[[Any, Any], Work]) -> dict[str, Any]:
    """The whole ``resources`` mapping of a training-like rule: ``work(wildcards, input)`` says what one
    job computes; GPUs, nodes, CPUs, host memory and wall time follow (:func:`train_resources`), and
    ``tpu=1``: a job owns every local accelerator (profiles/tpu runs one at a time). Every rule that
    trains or scores a model uses it, so none can miss a GPU request."""
    return {name: _SizedResource(run, work, name) for name in SIZED_RESOURCES} | {"tpu": 1}
