"""Where the workflow's outputs live in a results directory (``results/<run>/``), all paths relative to it:
the rules (workflow/rules/) take every path they write or read there from here, as ``{RESULTS}/{layout.X}``.

Documented in docs/cluster.md, "Reruns after an upgrade" (README.md, "Where results land": the tree).

**Runs.** A training run's id is one ``name=value`` level per run axis (:data:`RUN_AXES`):
``mech=M/seq=S/model=…/batch=…/seed=…/nbr=…/lr=…``. Its curve is ``runs/<id>/metrics.parquet``, its
checkpoints ``checkpoints/<id>/`` and its log ``logs/train/<id>.log`` (:func:`run_paths`); the physical-batch
ablation's runs, at ``data.seq_len``, carry no length and live under ``ablation/`` (fine-tuning's and the
learning-rate protocol's likewise, under their own trees). Every level is always there: a run's path depends
on its own values only, so adding a value to an axis (a mechanism, a length, a model, a rate) schedules only
the new runs and moves none that exist. An axis added after results exist is brought into older results once
by :mod:`dpscaling.workflow.migration`.

**Data.** One set of packed shards per length: ``data/packed/seq=S/`` (:data:`PACKED`). A fine-tuning run's
public domain has its own documents and shards under ``data/public/`` (:data:`PUBLIC_DOCUMENTS`,
:data:`PUBLIC_PACKED`); ``data/`` itself is the private domain, where the privacy unit lives.

**The law.** The primary length's law directory ``law/`` holds the curves it is fitted on
(``results.parquet``), the fitted law (``fit/``) and its bootstrap replicates (``bootstrap/``); each other
length's is ``law/lengths/seq=S/`` (:data:`LENGTH_LAW`), and each other mechanism's
``law/mechanisms/mech=M/`` (:data:`MECHANISM_LAW`), the same inside; the bundle of them all, what queries
read, is ``law/bundle/``. The held-out calibration is ``validate/calibration.json`` and the physical-batch
correction ``law/physical_batch/correction.json``.
:func:`bootstrap_beside` and :func:`calibration_beside` say where those are for a fitted law directory:
what ``dpscaling law bundle`` takes when it converts a ``law/fit`` into a bundle.

**Everything else**, grouped by stage below: templates over the rules' wildcards (``{figure}``, ``{budget}``,
...), directories with the names of the files inside them (a law directory's, a packed directory's, a
private_model budget's), and stems that take a file type (figures: ``.pdf``, ``.png``, ``.csv``; tables,
:func:`table`: ``.csv``, ``.md``, ``.tex``). A job's log is ``logs/<stage>/<job>.log`` (:func:`log_path`),
its stage mostly the directory it writes in.

Results written by an older layout (before sequence length was an axis, or before every run id named its
mechanism) are moved into this layout once by :mod:`dpscaling.workflow.migration`.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from dpscaling.config.training_blocks import PRIVATE_DOMAIN
from dpscaling.workflow.grid import alternation


@dataclass(frozen=True)
class Axis:
    """One level of a run's id, ``name={wildcard}``."""

    name: str
    wildcard: str

    @property
    def level(self) -> str:
        return f"{self.name}={{{self.wildcard}}}"


# The noise mechanism (dpscaling.privacy.mechanisms), first in a run's id.
MECHANISM = Axis("mech", "mech")
# The sequence length, next in a grid run's id; the ablation's runs leave it out.
LENGTH = Axis("seq", "seq")
# The run axes in path order (dpscaling.workflow.grid.TrainPoint.wildcards gives a run's values).
RUN_AXES: tuple[Axis, ...] = (MECHANISM, LENGTH, Axis("model", "model"), Axis("batch", "batch"),
                              Axis("seed", "seed"), Axis("nbr", "nbr"), Axis("lr", "lr"))
ONE_LENGTH_AXES: tuple[Axis, ...] = tuple(axis for axis in RUN_AXES if axis != LENGTH)
# An adaptive design's run: at the primary length and mechanism, to its own horizon.
DESIGN_AXES: tuple[Axis, ...] = (*(axis for axis in ONE_LENGTH_AXES if axis != MECHANISM), Axis("steps", "steps"))

# The run's own files, at the top of its directory; their jobs log at the top of logs/ (log_path("", job)).
RUN_CONFIG = "config.yaml"  # the effective config (every named target's)
REPORT = "report.html"  # the figures, tables and validation in one page
EXPLORER = "explorer.html"  # the law bundle's answers over a grid of budgets (docs/explorer.md)

# The data stage: the private domain's documents under DATA, the public domain's under PUBLIC_DATA.
DATA, PUBLIC_DATA = "data", "data/public"
DOCUMENTS = f"{DATA}/documents.parquet"
UNIGRAM_FLOOR = f"{DATA}/unigram_floor.json"  # the held-out unigram entropy, at the primary length
TRAINED_VOCAB = f"{DATA}/vocab.txt"  # the vocabulary trained on the run's corpus (data.tokenizer: trained)
PACKED = "data/packed/seq={seq}"
# Inside a packed directory (PACKED, PUBLIC_PACKED; dpscaling.data.shards): its metadata and its splits' shards.
PACKED_META, PACKED_TRAIN, PACKED_HELDOUT = "meta.json", "train", "heldout"
# With a public domain: its unigram beside each length's private shards (dpscaling.data.public_unigram).
PUBLIC_UNIGRAM_FILE = "public_unigram.json"
PUBLIC_UNIGRAM = f"{PACKED}/{PUBLIC_UNIGRAM_FILE}"
PACK_LOG = "logs/data/pack_sequences/seq={seq}.log"
PUBLIC_DOCUMENTS = f"{PUBLIC_DATA}/documents.parquet"
PUBLIC_PACKED = "data/public/packed/seq={seq}"
PUBLIC_PACK_LOG = "logs/data/public/pack_sequences/seq={seq}.log"

RUNS, CHECKPOINTS, LOGS, TRAIN = "runs", "checkpoints", "logs", "train"
ABLATION = "ablation/"
# The physical-batch ablation's curves in one file, and one <run id>.json per evaluated run (its log under
# ABLATION_EVALUATE_LOGS).
ABLATION_CURVES = f"{ABLATION}curves.parquet"
ABLATION_EVALUATIONS, ABLATION_EVALUATE_LOGS = f"{ABLATION}evaluations", f"{ABLATION}evaluate"
PRETRAIN, FINETUNE = "pretrain/", "finetune/"  # fine-tuning's public pretraining and private fine-tuning runs
# The adaptive design (design: adaptive; dpscaling.design.rounds): its runs, each a grid point of one seed to a
# horizon (one more level, steps=T, after the one-length id), its rounds' records, its law and its report.
DESIGN = "design/"
DESIGN_ROUND = f"{DESIGN}rounds/round-{{round}}.json"
DESIGN_LAW = f"{DESIGN}law"
DESIGN_ROUNDS_TABLE = f"{DESIGN}rounds"  # .csv, .md: one row per round and target
DESIGN_FIGURE = f"{DESIGN}intervals"  # .pdf, .png: the answers' bands against the FLOPs spent
DESIGN_COMPARISON = f"{DESIGN}vs_grid.json"  # the adaptive law against the grid's (target adaptive_vs_grid)

# The paper's figures (one <name>.pdf, .png and .csv each) and tables (table: .csv, .md and .tex).
FIGURES, TABLES = "figures", "tables"
FIGURE = f"{FIGURES}/{{figure}}"
# The learning-rate protocol's runs, its choice (and evidence) and figure (dpscaling.tuning.rule); on the public
# domain its runs and choice live apart (learning_rate_protocol_dir).
LR_PROTOCOL = "learning_rates/"
LR_CHOSEN = "learning_rates/chosen.json"
LR_TABLE = f"{TABLES}/learning-rates"
LR_FIGURE = f"{FIGURES}/learning-rates"

# The accounting table, σ(ε, T, q; b), its chunks and CSV views in ACCOUNTING; each other mechanism's in
# MECHANISM_ACCOUNTING; the table's interpolation check.
ACCOUNTING, MECHANISM_ACCOUNTING = "accounting", "accounting/mech={mech}"
ACCOUNTING_CHUNK = "chunks/chunk-{chunk}.parquet"
SIGMA_TABLE = "sigma_table.parquet"
# σ slabs built on demand (dpscaling.accounting.on_demand) by this run's jobs: kept with the run, not in a
# user's cache, so what its answers rest on is part of its results.
SIGMA_CACHE = f"{ACCOUNTING}/sigma_cache"
AMPLIFIED, UNAMPLIFIED = "accounting_amplified.csv", "accounting_unamplified.csv"
INTERPOLATION_ERRORS = f"{ACCOUNTING}/interpolation_errors.csv"

PRIMARY_LAW = "law"
LENGTH_LAW = "law/lengths/seq={seq}"
MECHANISM_LAW = "law/mechanisms/mech={mech}"  # each other mechanism's law, at the primary length
FINETUNE_LAW = f"{FINETUNE}{PRIMARY_LAW}"  # the fine-tuning runs' law
# Each other mechanism's accounting table and its validation (calibration.json).
MECHANISM_SIGMA_TABLE = f"{MECHANISM_ACCOUNTING}/{SIGMA_TABLE}"
MECHANISM_CALIBRATION = "validate/mech={mech}/calibration.json"
# Inside a law directory (PRIMARY_LAW, LENGTH_LAW, MECHANISM_LAW, FINETUNE_LAW; a bundle in the first and last).
CURVES, FIT, BOOTSTRAP, BUNDLE = "results.parquet", "fit", "bootstrap", "bundle"
REPLICATES = f"{BOOTSTRAP}/replicates.parquet"
BOOTSTRAP_CHUNK = f"{BOOTSTRAP}/chunks/chunk{{chunk}}.parquet"
LAW_ACROSS_LENGTHS = "law/lengths/lengths.json"
CALIBRATION = "validate/calibration.json"
# Beside each calibration.json: the error table, the predicted-against-measured figure and the coverage table.
VALIDATION, PREDICTED_VS_MEASURED, COVERAGE = "validation", "predicted_vs_measured", "coverage"
# Each interior length predicted from its neighbours' laws (a table) and its points.
LENGTH_HOLDOUT = "validate/seq_len_holdout"
LENGTH_HOLDOUT_POINTS = "validate/seq_len_holdout_points.csv"
CORRECTION = "law/physical_batch/correction.json"
CORRECTION_PAIRS = "law/physical_batch/pairs.csv"
# Each law's jobs log under logs/fit/ (the primary length's), logs/fit/seq=S/, logs/fit/mech=M/ and
# logs/finetune/fit/.
LAW_LOGS, LENGTH_LAW_LOGS, MECHANISM_LAW_LOGS = "fit", "fit/seq={seq}", "fit/mech={mech}"
FINETUNE_LAW_LOGS = f"{FINETUNE}fit"

# The one-run privacy audit of the private training step.
AUDIT = "audit"
AUDIT_SUMMARY, AUDIT_TABLE = f"{AUDIT}/audit.json", f"{AUDIT}/audit.csv"

# A run of private_model (PRIVATE_BUDGET) or savings (savings_paths): its plan (the budget's), curve,
# checkpoint and held-out evaluation; a private_model budget's audit (.json, .csv) and its twins' runs.
PLAN, METRICS, CHECKPOINT, EVALUATION = "plan.json", "metrics.parquet", "checkpoint", "evaluation.json"
PRIVATE_MODEL = "private_model"
FINETUNE_PRIVATE_MODEL = f"{FINETUNE}{PRIVATE_MODEL}"  # the report of the budgets fine-tuned from pretraining
PRIVATE_BUDGET = f"{PRIVATE_MODEL}/{{budget}}"
PRIVATE_AUDIT, PRIVATE_AUDIT_TABLE = "audit.json", "audit.csv"
TWIN = "twin_{twin}"
SAVINGS = "savings"  # savings.directory's default: another name keeps a second study beside it
# The reports' files, by stem (.csv, .md, .tex tables; .pdf, .png, .csv figures), in PRIVATE_MODEL (and
# FINETUNE_PRIVATE_MODEL) and SAVINGS.
REPORT_TABLE, PREDICTED_VS_ACHIEVED = "table", "predicted_vs_achieved"
SAVINGS_RUNS, BASELINE_COMPARISON, SAVINGS_FIGURE = "runs", "baseline_compare_measured", "savings"
# Each way of choosing a configuration (the law's answer, each baseline rule): its regret per budget, as a table
# and a figure (docs/savings.md, what an answer is worth).
WORTH, WORTH_FIGURE = "worth", "regret_by_budget"


def savings_paths(directory: str | None = None) -> tuple[str, str, str]:
    """The study's directory, a budget's and a run's (wildcards ``savings_budget``, ``role``), for a savings
    study in ``directory`` (None: :data:`SAVINGS`)."""
    root = directory or SAVINGS
    return root, f"{root}/{{savings_budget}}", f"{root}/{{savings_budget}}/{{role}}"


def run_id(axes: Sequence[Axis] = RUN_AXES) -> str:
    """The run id's template: each axis's level, in order."""
    return "/".join(axis.level for axis in axes)


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


def learning_rate_protocol_dir(domain: str) -> str:
    """Where the learning-rate protocol's runs (:func:`run_paths`' prefix), logs and choice live for
    ``learning_rate_protocol.domain``: :data:`LR_PROTOCOL` on the private domain (the paper's protocol, where its
    runs always were), ``learning_rates/domain=<domain>/`` on another: its runs train on other data, so they are
    other runs."""
    return LR_PROTOCOL if domain == PRIVATE_DOMAIN else f"{LR_PROTOCOL}domain={domain}/"


def learning_rate_choice(domain: str) -> str:
    """The protocol's choice on ``domain`` (:data:`LR_CHOSEN` on the private one)."""
    return f"{learning_rate_protocol_dir(domain)}chosen.json"


def log_path(stage: str, job: str) -> str:
    """A job's log, ``logs/<stage>/<job>.log`` (``logs/<job>.log`` for stage ""): ``stage`` is mostly the
    directory the job writes in (a trailing "/" dropped), so its log mirrors it under ``logs/``."""
    return "/".join(part.rstrip("/") for part in (LOGS, stage, job) if part) + ".log"


def table(label: str) -> str:
    """The stem of the paper table ``label`` (``table:models`` -> ``tables/table-models``): its .csv, .md, .tex."""
    return f"{TABLES}/{label.replace(':', '-')}"


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
