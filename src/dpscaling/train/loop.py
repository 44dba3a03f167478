"""One training job: DP-Adam MLM pretraining with checkpoint/resume (paper §3.2).

``run_training`` is what the workflow's ``train`` rule calls. It is restartable: the
state (parameters, Adam moments, step, noise counter) is checkpointed with orbax every
``checkpoint_every`` steps into ``checkpoint_dir``, together with the partial curve and
a digest of the saved arrays (:mod:`dpscaling.train.checkpoint`); a rerun after a crash
continues from the newest checkpoint whose restored arrays match their digest (falling
back to an older one, or to step 0) and, because data order, masking and noise are pure
functions of (seed, step), reproduces the uninterrupted curve. So a run is only ever
recorded as ``diverged`` when the divergence happened in the process that records it,
starting from a fresh or a verified state. The final curve is written to ``output``
atomically, once, at the end — for a finished or a diverged run alike.

Batches come from :mod:`dpscaling.train.sampling` (``shuffle``, ``cyclic`` or ``truncated_poisson``), and
every run is accounted for the sampler it ran (:mod:`dpscaling.accounting.matched`): its ε, δ,
σ, q, T, sampler and accountant are columns of the curve and the ``privacy`` entry of the
summary. A ``truncated_poisson`` run's noise and sampling key is drawn from the operating system's
entropy, stored only in the checkpointed state, and never logged or written to the curve.
"""

from __future__ import annotations

import json
import logging
import math
import time
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import jax
import numpy as np
import optax
import orbax.checkpoint as ocp

from dpscaling.data.epochs import check_one_epoch, epochs_seen
from dpscaling.data.public_unigram import ZEROS, load_public_unigram
from dpscaling.accounting.matched import RunPrivacy
from dpscaling.data.shards import DatasetMeta, load_meta, load_split, load_users
from dpscaling.models.shapes import ParamCount
from dpscaling.core.errors import UserError
from dpscaling.core.io import raise_if_storage_full_or_read_only
from dpscaling.train.checkpoint import (
    PARTIAL_METRICS, STATE_DIR, check_same_config, open_manager, restore_latest_verified, save_checkpoint)
from dpscaling.train.config import TrainConfig, learning_rate_schedule
from dpscaling.train.distributed import DataParallel, maybe_initialize_distributed
from dpscaling.train.init import with_output_bias
from dpscaling.train.metrics import code_version, write_metrics
from dpscaling.train.objectives import Objective, run_objective
from dpscaling.train.prefix import restore_prefix
from dpscaling.train.run_privacy import (
    Accounted, account, check_divisible, private_key, privacy_columns, training_rows, users_subset, with_noise_key)
from dpscaling.train.step import (
    StepHyperparams,
    TrainState,
    init_key,
    init_state,
    make_optimizer,
    make_train_step,
    step_hyperparams,
)

logger = logging.getLogger(__name__)



@dataclass(frozen=True)
class RunSummary:
    status: str  # "finished" | "diverged"
    steps: int  # steps completed (for a diverged run: at the end of the diverged interval)
    final_loss: float | None  # loss of the last interval (NaN/inf if diverged)
    last_finite_loss: float | None
    n_params: int
    n_params_non_embedding: int
    resumed_from_step: int
    prefix_dir: str | None  # the shorter run this one continued from its checkpoint (dpscaling.train.prefix)
    wall_seconds: float
    privacy: dict[str, Any] | None = None  # RunPrivacy.record(): the guarantee of what ran


class CompiledSteps:
    """The train steps compiled in this process, by everything that shapes the program: the config
    without its :class:`~dpscaling.train.step.StepHyperparams` (σ̄, learning rate, seed), the data's
    metadata and the devices. Runs given one instance (one job training several noise levels,
    ``training.runs_per_job``) trace, lower and compile their step once; each run computes exactly
    what it would alone, since the hyperparameters are the step's arguments."""

    # Fields whose values reach the step only as StepHyperparams (or not at all).
    HYPERPARAMETERS = ("noise_batch_ratio", "learning_rate", "seed")

    def __init__(self) -> None:
        self._compiled: dict[str, Any] = {}

    def get(self, config: TrainConfig, meta: DatasetMeta, parallel: DataParallel, compile_step) -> Any:
        """The compiled step of ``config``'s shape: ``compile_step()`` the first time, then the same program."""
        shape = {key: value for key, value in config.to_dict().items() if key not in self.HYPERPARAMETERS}
        key = json.dumps([shape, asdict(meta), parallel.n_devices], sort_keys=True, default=str)
        if key not in self._compiled:
            self._compiled[key] = compile_step()
        return self._compiled[key]

    def __len__(self) -> int:
        return len(self._compiled)


def run_training(
    config: TrainConfig,
    data_dir: Path,
    output: Path,
    checkpoint_dir: Path,
    compiled_steps: CompiledSteps | None = None,
    prefix_dir: Path | None = None,
) -> RunSummary:
    """Train one grid point; write its curve to ``output`` (Parquet) atomically. Runs of one shape
    trained in one process share ``compiled_steps`` (default: this run's own). With no checkpoint of its own, a
    run given ``prefix_dir``, the checkpoint directory of a shorter run of its config, continues that run
    (:mod:`dpscaling.train.prefix`)."""
    started = time.perf_counter()
    maybe_initialize_distributed(config.distributed)
    data_dir, output, checkpoint_dir = Path(data_dir), Path(output), Path(checkpoint_dir)
    meta = load_meta(data_dir)
    if meta.seq_len > config.max_positions:
        raise UserError(
            f"train.max_positions: {config.max_positions} < data seq_len {meta.seq_len}"
        )
    n_train = config.train_sequences or meta.n_train
    if n_train > meta.n_train:
        raise UserError(
            f"train.train_sequences: {n_train:,} exceeds the {meta.n_train:,} sequences of the train split"
        )
    # A sampler that protects users, or draws them, reads them; one whose unit is a user (dpscaling.train.units)
    # counts N and B in users.
    # A run on a subset of users (train_users) reads them too, whatever it samples (a study twin of a user budget).
    reads_users = "user" in (config.sampler.protects, config.sampler.unit) or config.train_users is not None
    users = load_users(data_dir) if reads_users else None
    rows = training_rows(load_split(data_dir, "train"), config)
    if users is not None:
        rows, users = users_subset(rows, users, config)
    units = len(rows) if config.sampler.unit == "sequence" else int(users.max()) + 1
    # The one-epoch guard, before anything trains (dpscaling.data.epochs).
    check_one_epoch(config.num_steps, config.batch_size, units, config.allow_repeats)
    parallel = DataParallel()
    if config.truncation_resolved:  # else checked once the accountant has priced L
        check_divisible(config, parallel)
    try:  # a read-only or full results directory fails here, in one line, before any training
        checkpoint_dir.mkdir(parents=True, exist_ok=True)
        check_same_config(checkpoint_dir, config, jax.process_index() == 0, meta)
        manager = open_manager(checkpoint_dir / STATE_DIR, keep=(config.branch_step,))
    except OSError as error:
        raise_if_storage_full_or_read_only(error, f"cannot write checkpoints to {checkpoint_dir}")
        raise
    # Where the output bias starts, checked against the shards' vocabulary before anything trains.
    output_bias = None if config.output_bias == ZEROS else load_public_unigram(data_dir, meta)
    try:
        return _train(
            config,
            meta,
            output_bias,
            rows,
            users,
            parallel,
            manager,
            checkpoint_dir,
            output,
            started,
            CompiledSteps() if compiled_steps is None else compiled_steps,
            None if prefix_dir is None else Path(prefix_dir),
        )
    finally:
        manager.close()


@dataclass(frozen=True)
class _Run:
    """What the parts of one run's training share, fixed once it is set up (:func:`_set_up`)."""

    config: TrainConfig  # as it runs: with the L its accountant priced
    meta: DatasetMeta
    parallel: DataParallel
    privacy: RunPrivacy
    model: Any  # the model family's Flax module
    objective: Objective
    hyperparams: StepHyperparams  # replicated: arguments of the compiled step, not constants in it
    schedule: optax.Schedule
    counts: ParamCount
    run_info: dict[str, Any]  # the columns every row of the curve has
    writer: bool  # whether this process writes the curve (process 0)


@dataclass(frozen=True)
class _Start:
    """Where a run starts training: the verified step it resumed from (0: a fresh start), the curve logged up to
    it (which training appends to), and the shorter run it continued, if any (:mod:`dpscaling.train.prefix`)."""

    step: int
    curve: list[dict[str, Any]]
    prefix: str | None


def _train(
    config: TrainConfig,
    meta: DatasetMeta,
    output_bias: np.ndarray | None,
    rows: np.ndarray,
    users: np.ndarray | None,
    parallel: DataParallel,
    manager: ocp.CheckpointManager,
    checkpoint_dir: Path,
    output: Path,
    started: float,
    compiled_steps: CompiledSteps,
    prefix_dir: Path | None,
) -> RunSummary:
    """Train from the newest verified start to the last step (or the divergence), checkpointing on the way; write
    the final curve to ``output`` and return the run's summary."""
    run, state = _set_up(config, meta, rows, users, parallel)
    state, start = _restore(run, state, manager, output_bias, prefix_dir)
    state, batches = _batch_source(run, state, rows, users, fresh=not start.step)
    # The same program for every σ̄, learning rate and seed of this shape: traced once per process
    # (CompiledSteps), and with a persistent compilation cache (dpscaling.train.distributed.use_compilation_cache)
    # compiled by the first such job only.
    compiled = compiled_steps.get(run.config, meta, parallel, lambda: jax.jit(
        make_train_step(run.model, run.objective, run.config, parallel.microbatch), donate_argnums=0
    ).lower(state, run.hyperparams, *batches(parallel, 0)).compile())
    status, step = _train_steps(run, compiled, state, batches, start, manager, checkpoint_dir)
    return _finish(run, start, status, step, output, started)


def _set_up(
    config: TrainConfig, meta: DatasetMeta, rows: np.ndarray, users: np.ndarray | None, parallel: DataParallel
) -> tuple[_Run, TrainState]:
    """The run as accounted (its model, objective, step hyperparameters, schedule and curve columns), and its
    initial state from ``config.seed`` (which a restore or a pretrained start then replaces)."""
    accounted = account(config, rows, users, parallel)
    config, privacy = accounted.config, accounted.privacy
    model_config = config.model_config(meta.vocab_size)
    model = config.model_family.module_class()(model_config)
    objective = run_objective(config, meta)
    hyperparams = jax.device_put(step_hyperparams(config, privacy.noise_batch_ratio), parallel.replicated)
    optimizer = make_optimizer(config, hyperparams)
    state = jax.jit(
        lambda key: init_state(model, objective, optimizer, config, meta.seq_len, key),
        out_shardings=parallel.replicated,
    )(init_key(config.seed))
    schedule = learning_rate_schedule(config)
    counts = model_config.param_count()
    run_info = _run_info(accounted, meta.seq_len, counts, users, parallel)
    run = _Run(
        config=config,
        meta=meta,
        parallel=parallel,
        privacy=privacy,
        model=model,
        objective=objective,
        hyperparams=hyperparams,
        schedule=schedule,
        counts=counts,
        run_info=run_info,
        writer=jax.process_index() == 0,
    )
    return run, state


def _run_info(
    accounted: Accounted, seq_len: int, counts: ParamCount, users: np.ndarray | None, parallel: DataParallel
) -> dict[str, Any]:
    """The columns every row of the run's curve has: its constants, what it started from, its epochs and its
    guarantee (and a user-level run's users)."""
    config = accounted.config
    # A run started from pretrained weights names them (a column only such runs have).
    started_from = {} if config.init_checkpoint is None else {"init_checkpoint": str(config.init_checkpoint)}
    if config.output_bias != ZEROS:  # likewise a run whose output bias starts elsewhere than zero
        started_from["output_bias"] = config.output_bias
    # A correlated mechanism's curve names its strategy (the sensitivity of any participation follows).
    if config.noise_mechanism.correlated:
        started_from["bandmf_coefficients"] = json.dumps([float(c) for c in accounted.coefficients])
    run_info = _run_constants(config, seq_len, counts, parallel) | started_from | {
        "epochs": epochs_seen(config.num_steps, config.batch_size, accounted.units)} | privacy_columns(
        accounted.privacy)
    if accounted.user_level:  # a run that protects or samples users says so (columns only such runs have)
        run_info |= {"privacy_unit": "user", "users": int(users.max()) + 1,
                     "examples_per_user": accounted.examples_per_user}
        if config.sampler.unit == "user":
            run_info["examples_per_user_per_batch"] = config.examples_per_user_per_batch
    return run_info


def _restore(
    run: _Run,
    state: TrainState,
    manager: ocp.CheckpointManager,
    output_bias: np.ndarray | None,
    prefix_dir: Path | None,
) -> tuple[TrainState, _Start]:
    """The state training starts from, and where: this run's newest verified checkpoint, else that of the shorter
    run in ``prefix_dir``, else step 0 (from ``config.init_checkpoint``'s parameters, or with the output bias at
    ``output_bias``, or as initialised)."""
    config, parallel = run.config, run.parallel
    curve: list[dict[str, Any]] = []
    start_step = 0
    if config.sampler.private:  # a slot for the secret key, so a restore fills it
        state = with_noise_key(state, np.zeros(2, np.uint32), parallel)
    # Only a state proven to be the one saved is trained on (corrupted checkpoints are discarded).
    restored = restore_latest_verified(manager, state)
    prefix = None
    if restored is None and prefix_dir is not None:
        restored = restore_prefix(prefix_dir, config, run.meta, state)
        prefix = None if restored is None else str(prefix_dir)
    if restored is not None:
        start_step, state, curve = restored.step, restored.state, restored.curve
        logger.info("resuming from verified step %d (%d logged intervals)", start_step, len(curve))
    elif config.init_checkpoint is not None:  # a fresh start from pretrained weights (a resume has its own)
        state = _start_from(config, state, run.model, run.objective, run.meta, parallel)
    elif output_bias is not None:  # a fresh start with the output bias at the public domain's unigram
        params = with_output_bias(state.params, config.model_family, output_bias)
        state = state._replace(params=jax.device_put(params, parallel.replicated))
        logger.info("starting the output bias at the public domain's unigram")
    return state, _Start(start_step, curve, prefix)


def _batch_source(
    run: _Run, state: TrainState, rows: np.ndarray, users: np.ndarray | None, fresh: bool
) -> tuple[TrainState, Any]:
    """The run's step inputs (``batches(parallel, step)``), and its state: a private run's with its secret key
    (drawn on a ``fresh`` start, else the one restored), which its sampler is keyed with too."""
    config = run.config
    key = None
    if config.sampler.private:
        state, key = private_key(state, fresh=fresh, parallel=run.parallel)
    batches = config.sampler.batch_source()(
        rows,
        run.meta.pad_id,
        config.batch_size,
        config.physical_batch_size,
        config.seed,
        key,
        cycle_length=config.noise_mechanism.cycle_length,
        users=users,
        examples_per_user=config.examples_per_user_per_batch,
        microbatch_size=config.microbatch,
    )
    return state, batches


def _train_steps(
    run: _Run,
    compiled: Any,
    state: TrainState,
    batches: Any,
    start: _Start,
    manager: ocp.CheckpointManager,
    checkpoint_dir: Path,
) -> tuple[str, int]:
    """Train from ``start.step`` one logged interval at a time, appending each interval's row to ``start.curve``,
    then writing the partial curve and checkpointing when due; stop at the first interval with a non-finite loss.
    The status ("finished" or "diverged") and the step reached."""
    config, curve = run.config, start.curve
    status, step = "finished", start.step
    while step < config.num_steps:
        interval_end = min(config.num_steps, (step // config.log_every + 1) * config.log_every)
        state, row, finite = _train_interval(run, compiled, state, batches, step, interval_end)
        curve.append(row)
        n, step = interval_end - step, interval_end
        logger.info(
            "step %d/%d  loss %.4f  %.2f steps/s  %.1f examples/s",
            step,
            config.num_steps,
            row["loss"],
            row["steps_per_s"],
            row["examples_per_s"],
        )
        if not finite:
            status = "diverged"
            logger.warning(
                "diverged in steps %d..%d: non-finite loss; stopping (started from %s)",
                step - n + 1,
                step,
                f"verified step {start.step}" if start.step else "step 0",
            )
            break
        if run.writer:
            write_metrics(
                checkpoint_dir / PARTIAL_METRICS,
                curve,
                run.run_info | {"status": "running"},
                config.to_dict(),
            )
        # the branch step is kept: a longer horizon of this run starts there (dpscaling.train.prefix)
        if step % config.checkpoint_every == 0 or step in (config.num_steps, config.branch_step):
            save_checkpoint(manager, step, state, curve)
    return status, step


def _train_interval(
    run: _Run, compiled: Any, state: TrainState, batches: Any, start: int, end: int
) -> tuple[TrainState, dict[str, Any], bool]:
    """Steps (start, end] of the run: the state after them, their curve row, and whether their losses were all
    finite. The fetch of the interval's metrics is its one host synchronisation, so its timing covers every step."""
    tick = time.perf_counter()
    interval = []
    for s in range(start, end):
        state, metrics = compiled(state, run.hyperparams, *batches(run.parallel, s))
        interval.append(metrics)
    fetched = jax.device_get(interval)  # waits for the interval's last step
    row, finite = _interval_row(fetched, start, end, time.perf_counter() - tick, run.config, run.schedule)
    return state, row, finite


def _finish(run: _Run, start: _Start, status: str, step: int, output: Path, started: float) -> RunSummary:
    """The run's summary, with its final curve written to ``output`` (by the writing process) once, at the end:
    for a finished or a diverged run alike."""
    curve = start.curve
    finite_losses = [r["loss"] for r in curve if math.isfinite(r["loss"])]
    summary = RunSummary(
        status=status,
        steps=step,
        final_loss=curve[-1]["loss"] if curve else None,
        last_finite_loss=finite_losses[-1] if finite_losses else None,
        n_params=run.counts.total,
        n_params_non_embedding=run.counts.non_embedding,
        resumed_from_step=start.step,
        prefix_dir=start.prefix,
        wall_seconds=time.perf_counter() - started,
        privacy=_jsonable(run.privacy.record()),
    )
    if run.writer:
        final_info = run.run_info | {"status": status, "last_finite_loss": summary.last_finite_loss}
        write_metrics(output, curve, final_info, run.config.to_dict(), _jsonable(asdict(summary)))
    return summary


def _interval_row(metrics, start, end, seconds, config, schedule) -> tuple[dict[str, Any], bool]:
    """The curve row of steps (start, end]: means of the per-step metrics, and throughput.

    ``jax.device_get`` of the interval's metrics (done by the caller) is the only host
    synchronisation per interval, so the timing covers all of its steps.
    """
    losses = np.array([m["loss"] for m in metrics], dtype=np.float64)
    n = end - start
    row = {
        "step": end,
        "loss": float(losses.mean()),
        "grad_norm": float(np.mean([m["grad_norm"] for m in metrics])),
        "clipped_fraction": float(np.mean([m["clipped_fraction"] for m in metrics])),
        "lr": float(schedule(end - 1)),
        "steps_per_s": n / seconds,
        "examples_per_s": n * config.batch_size / seconds,
    }
    return row, bool(np.all(np.isfinite(losses)))


def _start_from(config: TrainConfig, state, model, objective, meta: DatasetMeta, parallel: DataParallel):
    """``state`` with the parameters of ``config.init_checkpoint`` (the optimiser's state stays fresh)."""
    from dpscaling.train.init import pretrained_params

    params, step = pretrained_params(config.init_checkpoint, config, model, objective, meta.vocab_size, meta.seq_len,
                                     meta.vocab_sha256)
    logger.info("starting from the parameters of %s (step %d)", config.init_checkpoint, step)
    return state._replace(params=jax.device_put(params, parallel.replicated))


def _run_constants(config: TrainConfig, seq_len: int, counts, parallel: DataParallel) -> dict[str, Any]:
    return {
        "model": config.display_name,
        "family": config.family,  # every curve records its model family (a law fits one)
        "n_params": counts.total,
        "n_params_non_embedding": counts.non_embedding,
        "noise_batch_ratio": config.noise_batch_ratio,
        "learning_rate": config.learning_rate,
        "batch_size": config.batch_size,
        "seq_len": seq_len,
        "seed": config.seed,
        "clipping": config.clipping,
        "code_version": code_version(),
        # The hardware behind steps_per_s (tab:throughput): data-parallel devices and their kind.
        "n_devices": parallel.n_devices,
        "device_kind": jax.devices()[0].device_kind,
    }


def _jsonable(values: dict[str, Any]) -> dict[str, Any]:
    return {
        k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in values.items()
    }
