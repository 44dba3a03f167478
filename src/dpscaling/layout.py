"""Where the workflow's outputs live in a results directory (``results/<run>/``), all paths relative to it.

Documented in docs/cluster.md, "Reruns after an upgrade" (README.md, "Where results land": the tree).

**Runs.** A training run's id is one ``name=value`` level per run axis (:data:`RUN_AXES`):
``[mech=M/]seq=S/model=…/batch=…/seed=…/nbr=…/lr=…`` (``mech=`` only in a run whose grid has a mechanism
other than DP-SGD). Its curve is ``runs/<id>/metrics.parquet``, its checkpoints
``checkpoints/<id>/`` and its log ``logs/train/<id>.log`` (:func:`run_paths`); the physical-batch ablation's
runs, at ``data.seq_len``, carry no length and live under ``ablation/``. An axis added after results exist
declares a default: its level is left out of the id unless the run's grid takes another value on it
(:func:`run_id`), so a new axis at its default moves and retrains nothing. The workflow builds its
templates from the axes when it loads (workflow/rules/common.smk): Snakemake wildcards cannot be optional.

**Data.** One set of packed shards per length: ``data/packed/seq=S/`` (:data:`PACKED`). A fine-tuning run's
public domain has its own documents and shards under ``data/public/`` (:data:`PUBLIC_DOCUMENTS`,
:data:`PUBLIC_PACKED`); ``data/`` itself is the private domain, where the privacy unit lives.

**The law.** The primary length's law directory ``law/`` holds the curves it is fitted on
(``results.parquet``), the fitted law (``fit/``) and its bootstrap replicates (``bootstrap/``); each other
length's is ``law/lengths/seq=S/`` (:data:`LENGTH_LAW`), and each other mechanism's
``law/mechanisms/mech=M/`` (:data:`MECHANISM_LAW`), the same inside. The held-out calibration is
``validate/calibration.json`` and the physical-batch correction ``law/physical_batch/correction.json``.
:func:`bootstrap_beside` and :func:`calibration_beside` say where those are for a fitted law directory:
the defaults of ``dpscaling query --law <run>/law/fit``.

Results written before sequence length was an axis are moved into this layout once by
:mod:`dpscaling.layout_migration`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from dpscaling.grid import alternation


@dataclass(frozen=True)
class Axis:
    """One level of a run's id, ``name={wildcard}``. ``default``: for an axis added after results exist,
    the value at which the level is left out (None: always there)."""

    name: str
    wildcard: str
    default: str | None = None

    @property
    def level(self) -> str:
        return f"{self.name}={{{self.wildcard}}}"

    def set_off_default(self, points: Iterable[Mapping[str, str]]) -> bool:
        """Whether one of ``points`` (run wildcards; an absent key is the default) takes another value."""
        return any(point.get(self.wildcard, self.default) != self.default for point in points)


# The noise mechanism, first in a run's id where a run's grid has one other than DP-SGD (dpscaling.mechanisms).
MECHANISM = Axis("mech", "mech", default="dpsgd")
# The sequence length, next in a grid run's id; the ablation's runs leave it out.
LENGTH = Axis("seq", "seq")
# The run axes in path order (dpscaling.grid.TrainPoint.wildcards gives a run's values).
RUN_AXES: tuple[Axis, ...] = (MECHANISM, LENGTH, Axis("model", "model"), Axis("batch", "batch"),
                              Axis("seed", "seed"), Axis("nbr", "nbr"), Axis("lr", "lr"))
ONE_LENGTH_AXES: tuple[Axis, ...] = tuple(axis for axis in RUN_AXES if axis != LENGTH)

PACKED = "data/packed/seq={seq}"
# With a public domain: its unigram beside each length's private shards (dpscaling.data.public_unigram).
PUBLIC_UNIGRAM_FILE = "public_unigram.json"
PUBLIC_UNIGRAM = f"{PACKED}/{PUBLIC_UNIGRAM_FILE}"
PACK_LOG = "logs/data/pack_sequences/seq={seq}.log"
PUBLIC_DOCUMENTS = "data/public/documents.parquet"
PUBLIC_PACKED = "data/public/packed/seq={seq}"
PUBLIC_PACK_LOG = "logs/data/public/pack_sequences/seq={seq}.log"
RUNS, CHECKPOINTS, LOGS, TRAIN = "runs", "checkpoints", "logs", "train"
ABLATION = "ablation/"
PRETRAIN, FINETUNE = "pretrain/", "finetune/"  # fine-tuning's public pretraining and private fine-tuning runs
# The learning-rate protocol's runs, its choice (and evidence) and figure (dpscaling.rate_protocol).
LR_PROTOCOL = "learning_rates/"
LR_CHOSEN = "learning_rates/chosen.json"
LR_TABLE = "tables/learning-rates"
LR_FIGURE = "figures/learning-rates"

PRIMARY_LAW = "law"
LENGTH_LAW = "law/lengths/seq={seq}"
MECHANISM_LAW = "law/mechanisms/mech={mech}"  # each other mechanism's law, at the primary length
LAW_ACROSS_MECHANISMS = "law/mechanisms/mechanisms.json"
# Each other mechanism's accounting table, σ(ε, T, q; b), and its validation (calibration.json).
MECHANISM_SIGMA_TABLE = "accounting/mech={mech}/sigma_table.parquet"
MECHANISM_CALIBRATION = "validate/mech={mech}/calibration.json"
# Inside a law directory (PRIMARY_LAW or LENGTH_LAW).
CURVES, FIT, BOOTSTRAP = "results.parquet", "fit", "bootstrap"
REPLICATES = f"{BOOTSTRAP}/replicates.parquet"
BOOTSTRAP_CHUNK = f"{BOOTSTRAP}/chunks/chunk{{chunk}}.parquet"
LAW_ACROSS_LENGTHS = "law/lengths/lengths.json"
CALIBRATION = "validate/calibration.json"
CORRECTION = "law/physical_batch/correction.json"
CORRECTION_PAIRS = "law/physical_batch/pairs.csv"


def run_id(axes: Sequence[Axis] = RUN_AXES, points: Iterable[Mapping[str, str]] = ()) -> str:
    """The run id's template: each axis's level in order, an axis with a default only where one of
    ``points`` (the wildcards of the runs it names) is off that default."""
    points = list(points)
    return "/".join(axis.level for axis in axes if axis.default is None or axis.set_off_default(points))


def run_constraints(axes: Sequence[Axis], points: Iterable[Mapping[str, str]]) -> dict[str, str]:
    """Each axis's wildcard constraint: exactly the values ``points`` take on it."""
    points = list(points)
    return {axis.wildcard: alternation(point[axis.wildcard] for point in points if axis.wildcard in point)
            for axis in axes}


@dataclass(frozen=True)
class RunPaths:
    """Where one kind of training run writes (templates over its id's wildcards)."""

    curve: str
    checkpoints: str
    log: str


def run_paths(run: str, prefix: str = "") -> RunPaths:
    """The curve, checkpoint directory and log of the runs with id template ``run``; ``prefix``
    (:data:`ABLATION`) puts them in a tree of their own."""
    return RunPaths(curve=f"{prefix}{RUNS}/{run}/metrics.parquet", checkpoints=f"{prefix}{CHECKPOINTS}/{run}",
                    log=f"{LOGS}/{prefix}{TRAIN}/{run}.log")


def bootstrap_beside(law_directory: str | os.PathLike[str]) -> Path:
    """The bootstrap replicates' directory of the fitted law ``<law>/fit``: ``<law>/bootstrap``."""
    return Path(law_directory).resolve().parent / BOOTSTRAP


def calibration_beside(law_directory: str | os.PathLike[str]) -> Path:
    """The calibration of the fitted law ``<run>/law/fit``: ``<run>/validate/calibration.json``; of another
    mechanism's ``<run>/law/mechanisms/mech=M/fit``: ``<run>/validate/mech=M/calibration.json``
    (:data:`MECHANISM_CALIBRATION`)."""
    law = Path(law_directory).resolve().parent
    mechanisms = Path(MECHANISM_LAW).parent  # law/mechanisms
    if law.name.startswith("mech=") and law.parent.parts[-len(mechanisms.parts):] == mechanisms.parts:
        run = law.parents[len(mechanisms.parts)]
        return run / MECHANISM_CALIBRATION.format(mech=law.name.removeprefix("mech="))
    return law.parent / CALIBRATION


def length_replicates(lengths: str | os.PathLike[str]) -> dict[int, Path]:
    """Each length's bootstrap directory, beside its fitted law, for the laws ``lengths``/lengths.json lists
    (``law/lengths``)."""
    from dpscaling.law.sequence_length import law_directories

    return {length: bootstrap_beside(directory) for length, directory in law_directories(lengths).items()}
