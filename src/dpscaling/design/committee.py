"""The committee of laws whose disagreement the adaptive design reads (not in the paper).

Each member is the law fitted to the runs so far in one way: the bootstrap replicates (seed noise,
:mod:`dpscaling.law.bootstrap`), the law under other extrapolation and fill choices (its model forms: how sure an
extrapolation from a short horizon is), and optionally the laws refitted with one trained point left out each. Their
answers at the target budgets (:mod:`dpscaling.design.answers`) and their predictions where candidate runs would be
measured give the joint covariance the choice rule works on (:mod:`dpscaling.design.choice`).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import pandas as pd

from dpscaling.design.answers import Target, answers_of, contenders, target_optima
from dpscaling.design.choice import jackknife_covariance, joint_covariance
from dpscaling.design.runs import DesignRun
from dpscaling.design.settings import DesignSettings
from dpscaling.core.errors import UserError
from dpscaling.law.bootstrap import REPLICATE, Replicates, replicate_grids
from dpscaling.law.columns import LEARNING_RATE, MODEL, NOISE_BATCH_RATIO, SEED
from dpscaling.law.interpolation import LossFunction
from dpscaling.law.settings import Window


@dataclass(frozen=True)
class MemberSet:
    """Laws of one kind in the committee and their answers at the targets (members × targets); ``covariance``
    reads their spread: :func:`joint_covariance` for a sample, :func:`jackknife_covariance` for a jackknife."""

    name: str
    members: Replicates
    answers: np.ndarray
    covariance: Callable[[np.ndarray, np.ndarray], np.ndarray] = joint_covariance


# The committee's model forms (DesignSettings.model_forms): the design's law refitted with each of these changes,
# the choices its extrapolation from a short horizon is least sure of (the window, and whether the asymptote is free).
MODEL_FORMS: tuple[dict[str, Any], ...] = (
    {"extrapolation_window": Window(0.25, 1.0)},
    {"extrapolation_window": Window(0.5, 1.0)},
    {"extrapolation_asymptote": "nonprivate"},
    {"extrapolation_asymptote": "per_curve_else_nonprivate"},
)
# With DesignSettings.fill_forms, also the fills it is least sure of: across models first, and in log loss.
FILL_FORMS: tuple[dict[str, Any], ...] = (
    {"fill_models_first": True},
    {"interpolate_log_loss": True},
)


@dataclass(frozen=True)
class Committee:
    """The laws whose disagreement the design reads, as sets whose covariances add: the bootstrap replicates (seed
    noise); with ``DesignSettings.model_forms`` the law refitted under other extrapolation choices (how sure its
    extrapolation from short horizons is); with ``DesignSettings.jackknife`` the laws refitted with one trained point
    left out each (what the answers hang on). ``contenders``: per target, its consensus answer then its rivals
    (M, T, σ̄) whose loss gaps are targets too (:func:`decision_columns`), empty without ``DesignSettings.contenders``."""

    sets: tuple[MemberSet, ...]
    contenders: tuple[np.ndarray, ...] = ()

    def covariance(self, runs: Sequence[DesignRun], sizes: Mapping[str, float]) -> tuple[np.ndarray, np.ndarray]:
        """The joint covariance of (answers, the ``runs``' predicted losses where they would be measured), and
        the indices of the runs at least two members of every set predict (the others are left out)."""
        points = (np.array([sizes[run.model] for run in runs], float), np.array([run.steps for run in runs], float),
                  np.array([run.noise_batch_ratio for run in runs], float))
        predictions = [part.members.loss_matrix(*points) for part in self.sets]
        answered = np.flatnonzero(np.all([np.sum(np.isfinite(p), axis=0) >= 2 for p in predictions], axis=0))
        sigma = sum(part.covariance(part.answers, p[:, answered]) for part, p in zip(self.sets, predictions))
        return sigma, answered

    @property
    def bootstrap_answers(self) -> np.ndarray:
        return self.sets[0].answers

    def widths(self) -> np.ndarray:
        """Each target's 90% band, Gaussian, from the committee's total variance of its answer."""
        sigma, _ = self.covariance([], {})
        return 2 * 1.645 * np.sqrt(np.clip(np.diag(sigma), 0.0, None))


def committee(results: pd.DataFrame, fit: Callable[[pd.DataFrame, Any], Any], settings: Any, design: DesignSettings,
              context_of: Callable[[Any, Replicates], Any], fit_options: Mapping[str, Any],
              targets: Sequence[Target], coverage: np.ndarray | None = None) -> Committee:
    """The committee on ``results`` (:class:`Committee`), answering at ``targets``; with ``coverage`` (points ×
    (M, T, σ̄)) also predicting the loss there, each such point one more target; with ``DesignSettings.contenders``
    also the loss of each target's contending answers less its consensus's (:func:`decision_columns`), one more
    target each. ``fit``: (results, law settings) → law."""
    law = fit(results, settings)
    kinds: list[tuple[str, Replicates, Callable[[np.ndarray, np.ndarray], np.ndarray]]] = []
    grids = replicate_grids(results, settings, range(design.replicates), **fit_options)
    kinds.append(("bootstrap", Replicates([LossFunction.from_grid(grid) for _, grid in grids.groupby(REPLICATE)]),
                  joint_covariance))
    if design.model_forms:
        forms = [law.loss]
        for change in (*MODEL_FORMS, *(FILL_FORMS if design.fill_forms else ())):
            try:
                forms.append(fit(results, dataclasses.replace(settings, **change)).loss)
            except UserError:
                continue
        kinds.append(("model forms", Replicates(forms), joint_covariance))
    if design.jackknife:
        point = [MODEL, NOISE_BATCH_RATIO, LEARNING_RATE]
        left_out = []
        for (model, nbr, rate), _ in results[results[SEED] == design.seed].groupby(point):
            rest = results[~((results[MODEL] == model) & (results[NOISE_BATCH_RATIO] == nbr)
                             & (results[LEARNING_RATE] == rate))]
            try:
                left_out.append(fit(rest, settings).loss)
            except UserError:  # a point the law cannot do without (a model's only curve): no refit of it
                continue
        kinds.append(("jackknife", Replicates(left_out), jackknife_covariance))
    optima = [target_optima(context_of(law, members), targets) for _, members, _ in kinds]
    points = [contenders([per_set[j] for per_set in optima], design.contenders) if design.contenders
              else np.empty((0, 3)) for j in range(len(targets))]
    sets = []
    for (name, members, covariance), per_set in zip(kinds, optima):
        answers = answers_of(per_set, len(members))
        if coverage is not None and len(coverage):
            answers = np.hstack([answers, members.loss_matrix(*coverage.T)])
        answers = np.hstack([answers, decision_columns(members, points)])
        sets.append(MemberSet(name, members, answers, covariance))
    return Committee(tuple(sets), tuple(points) if design.contenders else ())


def decision_columns(members: Replicates, points: Sequence[np.ndarray]) -> np.ndarray:
    """Members × contenders: per target (``points``, each its consensus then its contenders, rows (M, T, σ̄), as
    :func:`dpscaling.design.answers.contenders` gives them), each contender's loss less the consensus's, as each
    member predicts them. A run that shrinks these tells the target's answer from its rivals: what a wrong choice
    would cost (the regret), where the answer's own variance is what its loss is."""
    columns = [np.empty((len(members), 0))]
    for rows in points:
        if len(rows) < 2:
            continue
        losses = members.loss_matrix(*rows.T)
        columns.append(losses[:, 1:] - losses[:, :1])
    return np.hstack(columns)
