"""What each key of a config block (or field of a settings dataclass) reaches: its declared roles.

Each key of the ``training`` block declares its roles in the schema (``x-roles``, with ``x-position`` where a
param was first written in another order); :func:`dpscaling.config.block.from_schema` puts them on the block's
fields. Every job's ``training`` param is derived from them: the main grid's (``TrainingBlock.job_params``), the
private runs' (``TrainingBlock.private_params``) and the physical-batch ablation's (``AblationBlock.training``).
A key without a role is a parameter of every grid and private job. Snakemake reruns a job whose params change,
so a new key must say where it goes: see each role. The ``ablation_batch`` block declares its keys' roles the
same way, and the figures' settings dataclass with :func:`role`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import field
from typing import Any


# Chooses which jobs exist, not how one trains (repeats, lengths): never a job's param.
SELECTS_JOBS = "selects_jobs"
# An axis (or fixed setting) of the main grid: a grid job's param, never a private run's (a private run has
# its own B and σ̄), so a change to the grid retrains no private run.
GRID_AXIS = "grid_axis"
# Added after results existed: a param only where it differs from the schema's default, so adding it
# retrained nothing; a changed value is a changed param.
LATE = "late"
# How a private run is sampled and accounted: never in the ablation's params (it runs the study's sampler).
PRIVATE_RUNS = "private_runs"
# Shared with the physical-batch ablation: its jobs read it from this block.
ABLATION_SHARED = "ablation_shared"
# Where a model's parameters start: a grid and private job's param, never the ablation's (its model may be of
# another family, and the batches it compares share the start) nor a fine-tuning job's (the checkpoint is its start).
MODEL_START = "model_start"
# (The ablation_batch block's fields) the ablation job's own training setting: its horizon and logging.
ABLATION_OWN = "ablation_own"
# (The ablation_batch block's fields) which ablation run belongs to which figure: the ablation figures' param.
FIGURE_RUNS = "figure_runs"
ROLES = (SELECTS_JOBS, GRID_AXIS, LATE, PRIVATE_RUNS, MODEL_START, ABLATION_SHARED, ABLATION_OWN, FIGURE_RUNS)


def role(*roles: str, position: int | None = None, **default: Any) -> Any:
    """A field of a block (or of any settings dataclass) with these roles (:data:`ROLES`); ``position``
    orders it among the fields of its role where a param was first written in another order than the
    block's (Snakemake compares a param's ``repr``, key order included); ``default=`` as for ``field``."""
    unknown = set(roles) - set(ROLES)
    if unknown:
        raise ValueError(f"unknown role(s) {sorted(unknown)}; accepted: {list(ROLES)}")
    return field(metadata={"roles": frozenset(roles), "position": position}, **default)


def fields_with(block: type, wanted: str) -> tuple[str, ...]:
    """The names of ``block``'s fields that declare role ``wanted``, by position, else declaration order."""
    found = [(f.metadata.get("position"), index, f.name) for index, f in enumerate(dataclasses.fields(block))
             if wanted in f.metadata.get("roles", ())]
    return tuple(name for _, _, name in sorted(found, key=lambda x: (x[0] is None, x[0] or 0, x[1])))
