"""One round of the adaptive design (not in the paper): fit the committee on the runs trained so far, read the
answers' bands at the target budgets, and stop or choose the next runs.

The same step serves the simulation at paper scale (:mod:`dpscaling.design.simulate`) and the workflow's rounds
(:mod:`dpscaling.design.rounds`, workflow/rules/adaptive.smk). A round stops the design when every target's 90% band
is narrower than ``stop_width``, at the round limit, when no candidate fits under the compute cap, or when none is
expected to narrow the answers; otherwise it takes up to ``runs_per_round`` candidates in the order of the choice rule
(:mod:`dpscaling.design.choice`), within the cap in total.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pandas as pd

from dpscaling.design.answers import Target
from dpscaling.design.choice import choose_from_covariance
from dpscaling.design.committee import Committee, committee
from dpscaling.design.runs import Candidate, DesignRun, candidates, design_flops, horizons
from dpscaling.design.settings import DesignSettings
from dpscaling.law.bootstrap import seed_noise


@dataclass
class Round:
    """One round's record: what was trained before it, what the committee said, and what it chose and why."""

    index: int
    runs: int
    flops: float
    answers: list[float]  # the committee's median answer per target
    widths: list[float]  # its 90% band per target
    chosen: list[dict[str, Any]] = field(default_factory=list)
    stopped: str = ""




def coverage_points(grid: Sequence[tuple[str, float, float]], sizes: Mapping[str, float],
                    design: DesignSettings) -> np.ndarray | None:
    """With ``DesignSettings.coverage``, every grid point's (M, T, σ̄) at the seed, middle and full horizon: targets
    beside the answers (the law everywhere, not only at the answers' optima); None without it."""
    if not design.coverage:
        return None
    ladder = horizons(design.seed_steps, design.horizon)
    steps = (design.seed_steps, ladder[len(ladder) // 2], design.horizon)
    return np.array(sorted({(sizes[model], float(t), nbr) for model, nbr, _ in grid for t in steps}))


def plan_round(index: int, trained: Sequence[DesignRun], results: pd.DataFrame,
               grid: Sequence[tuple[str, float, float]], sizes: Mapping[str, float], targets: Sequence[Target],
               design: DesignSettings, fit: Callable[[pd.DataFrame, Any], Any], law_settings: Any,
               fit_options: Mapping[str, Any], context_of: Callable[[Any, Any], Any]) -> tuple[Round, list[DesignRun]]:
    """Round ``index`` after ``trained`` (whose tidy curves are ``results``): the committee's answers and bands at
    ``targets``, and what it chose (module doc), as its record and the runs to train next (none when it stopped).
    ``grid``: the full design's (model, σ̄, rate) points; ``fit``: (results, law settings) → law; ``context_of``:
    (law, committee members) → an analysis context."""
    members = committee(results, fit, law_settings, design, context_of, fit_options, targets,
                        coverage_points(grid, sizes, design))
    widths = members.widths()[: len(targets)]
    spent = design.spent_before + design_flops(trained, sizes, design.batch, design.seq_len)
    record = Round(index, len(trained), spent,
                   [float(v) for v in np.nanmedian(members.bootstrap_answers[:, : len(targets)], axis=0)],
                   [float(v) for v in widths])
    if np.all(np.isfinite(widths)) and np.max(widths, initial=0.0) < design.stop_width:
        record.stopped = f"every target's band is below {design.stop_width} nats"
        return record, []
    if index >= design.max_rounds:
        record.stopped = f"the round limit ({design.max_rounds})"
        return record, []
    ladder = horizons(design.seed_steps, design.horizon)
    options = candidates(trained, grid, design.seed, design.repeat_seeds, ladder)
    costs = [option.flops(sizes, design.batch, design.seq_len) for option in options]
    affordable = [i for i, cost in enumerate(costs) if spent + cost <= design.compute_cap]
    if not affordable:
        record.stopped = "the compute cap"
        return record, []
    chosen = _choose(options, affordable, costs, members, seed_noise(results), sizes, design, spent)
    if not chosen:
        record.stopped = "no candidate is expected to narrow the answers within the cap"
        return record, []
    record.chosen = [{**run_record(option.run), "kind": option.kind, "flops": cost, "variance_reduction": gain}
                     for option, cost, gain in chosen]
    return record, [option.run for option, _, _ in chosen]


def run_record(run: DesignRun) -> dict[str, Any]:
    """A run as a record's fields (:func:`run_of_record` reads it back)."""
    return {"model": run.model, "noise_batch_ratio": run.noise_batch_ratio, "learning_rate": run.learning_rate,
            "seed": run.seed, "steps": run.steps}


def run_of_record(record: Mapping[str, Any]) -> DesignRun:
    return DesignRun(str(record["model"]), float(record["noise_batch_ratio"]), float(record["learning_rate"]),
                     int(record["seed"]), int(record["steps"]))


def _choose(options: Sequence[Candidate], affordable: Sequence[int], costs: Sequence[float], members: Committee,
            noise: float, sizes: Mapping[str, float], design: DesignSettings, spent: float):
    """The round's picks among the affordable candidates: distinct, in the rule's order, within the cap in total."""
    sigma, answered = members.covariance([options[i].run for i in affordable], sizes)
    affordable = [affordable[i] for i in answered]
    if not affordable:
        return []
    n_targets = members.bootstrap_answers.shape[1]
    choice = choose_from_covariance(sigma, n_targets, [costs[i] for i in affordable], max(noise**2, 1e-8),
                                    2 * design.runs_per_round)
    chosen, total = [], spent
    for pick in choice.picks:
        index = affordable[pick.candidate]
        if any(index == taken for taken, _, _ in chosen) or total + costs[index] > design.compute_cap:
            continue
        chosen.append((index, costs[index], pick.variance_reduction))
        total += costs[index]
        if len(chosen) == design.runs_per_round:
            break
    return [(options[index], cost, gain) for index, cost, gain in chosen]
