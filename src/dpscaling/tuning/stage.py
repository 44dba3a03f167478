"""The learning-rate protocol's stage (paper §3.2 "Learning Rates"): the choice step of the workflow, from the
protocol runs' curves to the record, the table of the evidence and the cost beside the grid it tunes. The rule
itself is :mod:`dpscaling.tuning.rule`."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import pandas as pd

from dpscaling.config.blocks import RunConfig, typed
from dpscaling.law.queries import compute_cost
from dpscaling.models.family import run_model_config
from dpscaling.workflow.grid import (
    TrainPoint, canonical, correction_grid, learning_rate_protocol_grid, main_grid, protocol_prefix, repeat_grid)
from dpscaling.tuning.rule import CAPTION, RateChoice, choice_table, choose_rates, write_choice
from dpscaling.report.tables.write import write_table


def continues_the_protocol(run: RunConfig, point: TrainPoint) -> bool:
    """Whether the grid run ``point`` continues a protocol run (:func:`protocol_prefix`): its first steps are the
    protocol's, trained and paid once."""
    return protocol_prefix(run, {"seq": canonical(point.seq_len or run.data.seq_len), **point.wildcards}) is not None


def grid_run_flops(run: RunConfig, point: TrainPoint, sizes: Mapping[str, float]) -> float:
    """What the grid run ``point`` trains itself, in the paper's compute (6 M per token): ``training.steps``, less the
    protocol's steps where it continues the protocol's run."""
    steps = run.training.steps - (run.learning_rate_protocol.steps if continues_the_protocol(run, point) else 0)
    return float(compute_cost(sizes[point.model], point.batch, steps, point.seq_len or run.data.seq_len))


def protocol_flops(run: RunConfig, sizes: Mapping[str, float]) -> float:
    """What the protocol's runs train (0 when the config gives its rates)."""
    return sum(float(compute_cost(sizes[point.model], point.batch, run.learning_rate_protocol.steps, run.data.seq_len))
               for point in learning_rate_protocol_grid(run))


def protocol_cost(config: Any, chosen: Mapping[str, float]) -> dict[str, Any]:
    """The protocol's cost beside the grid it tunes, in the paper's compute (6 M per token trained): its runs
    against the main, repeat and correction runs trained at the ``chosen`` rates (``config``: the run's), every step
    counted once (:func:`grid_run_flops`)."""
    run = typed(config)
    sizes = {name: run_model_config(run, name).param_count().total for name in run.models.names}
    protocol = run.learning_rate_protocol
    spent = protocol_flops(run, sizes)
    grid = set(main_grid(run, chosen) + repeat_grid(run, chosen) + correction_grid(run, chosen))
    grid_flops = sum(grid_run_flops(run, point, sizes) for point in grid)
    return {"protocol_runs": len(learning_rate_protocol_grid(run)), "protocol_steps": protocol.steps,
            "protocol_flops": spent, "grid_runs": len(grid), "grid_steps": run.training.steps,
            "grid_runs_continuing_the_protocol": sum(continues_the_protocol(run, point) for point in grid),
            "grid_flops": grid_flops, "protocol_share": spent / (spent + grid_flops)}


def run_protocol(config: Any, curve_paths: Sequence[str | Path], chosen_path: str | Path,
                 table_stem: str | Path) -> list[RateChoice]:
    """The protocol's choice step: each model's rate from its runs' curves (``curve_paths``, in the order of
    :func:`dpscaling.workflow.grid.learning_rate_protocol_grid`), written as the record ``chosen_path`` and the table
    ``table_stem``.csv/.md/.tex of the evidence."""
    run = typed(config)
    settings = run.learning_rate_protocol
    points = learning_rate_protocol_grid(run)
    if len(points) != len(curve_paths):
        raise ValueError(f"{len(curve_paths)} protocol curves for {len(points)} protocol runs")
    curves = [(point.model, point.learning_rate, pd.read_parquet(path)) for point, path in zip(points, curve_paths)]
    choices = choose_rates(curves, settings.steps, settings.window, settings.tolerance)
    cost = protocol_cost(run, {choice.model: choice.rate for choice in choices})
    write_table(choice_table(choices, settings.rates_below, settings.rates_above), table_stem, CAPTION,
                "tab:learning-rates")
    write_choice(choices, settings.to_mapping(), cost, chosen_path)
    return choices
