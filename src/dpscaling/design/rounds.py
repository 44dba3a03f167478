"""The adaptive design as workflow steps (``design: adaptive``; workflow/rules/adaptive.smk). Not in the paper.

Round 0 is the seed design (:func:`dpscaling.design.runs.seed_design`). Each later round reads the curves of every
run the rounds before it chose, fits the design's law and its committee, and records the answers and their 90%
bands at the target budgets, then stops or chooses the next runs (:func:`dpscaling.design.plan.plan_round`). A
record (``design/rounds/round-R.json``) holds what was trained before the round and what it cost (FLOPs, and the
training steps' seconds from the curves), the answers and bands, the runs chosen and why, and why it stopped.

What the workflow fixes here, from the config:
- the grid the design draws from: the main grid's points at the primary length and mechanism (the main seed at the
  physical batch), so an adaptive run is a grid run trained to a shorter horizon, or a repeat seed;
- the seed design's learning rate per model: the rate the σ̄ = 0 grid run trains at (the learning-rate protocol's
  choice under ``training.learning_rates: tuned``; the middle of the config's rates otherwise);
- the horizons: ``adaptive_design.seed_fraction`` of ``training.steps`` rounded down to a multiple of
  ``training.log_every``, doubled up to ``training.steps`` (a continued run starts at a logged step);
- the targets: the ``private_model`` and ``savings`` budgets (ε, N, C), or the paper's fig:grid budgets without
  any (:func:`targets`);
- the law: the run's (paper or reference-compatible mode), with the sparse-design options ``curve_horizons`` and
  ``fill_missing_models`` (:mod:`dpscaling.law.settings`), which leave a full grid's law as it was;
- the compute cap: ``adaptive_design.compute_cap`` of the grid's FLOPs (its main grid and repeat seeds to
  ``training.steps``). Both designs pay the learning-rate protocol, whose rates they train at, once: it is the
  design's first spend, and a grid run that continues a protocol run pays only its steps past it.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from dpscaling.config.blocks import RunConfig, typed
from dpscaling.design.answers import Target
from dpscaling.design.plan import plan_round, run_of_record, run_record
from dpscaling.design.settings import DesignSettings
from dpscaling.design.runs import DesignRun, continued, design_flops, horizons, longest_runs, seed_design
from dpscaling.report.figures.context import AnalysisContext
from dpscaling.report.figures.settings import analysis_settings_of
from dpscaling.workflow.grid import (
    TrainPoint, canonical, main_grid, mechanisms, points_at_length, points_with_mechanism, repeat_grid)
from dpscaling.core.io import write_json_atomic
from dpscaling.law.artifact import fit_law
from dpscaling.law.collect import collect_training_curves, read_curve
from dpscaling.law.settings import LawSettings, law_settings_of, mode_name
from dpscaling.law.queries import compute_cost
from dpscaling.models.family import run_model_config
from dpscaling.tuning.stage import grid_run_flops, protocol_flops

SEED_KIND = "seed design"


def design_law_settings(run: RunConfig) -> LawSettings:
    """The run's law settings with the sparse-design options on (module doc)."""
    return dataclasses.replace(law_settings_of(run), curve_horizons=True, fill_missing_models=True)


def contexts(run: RunConfig, sigma_table: str | Path | None):
    """(law, committee members or None) → the analysis context that prices the answers: σ from ``sigma_table``
    under the run's sampling rule, the run's analysis settings."""
    sampling, analysis = run.accounting.sampling, analysis_settings_of(run)

    def context_of(law, members=None) -> AnalysisContext:
        found = law.sigma_source(sigma_table=sigma_table, sampling=sampling)
        return AnalysisContext(law, found.sigma, analysis, found.delta, found.sampling, replicates=members)

    return context_of


def design_law_settings_json(config: Mapping[str, Any] | RunConfig) -> dict[str, Any]:
    """:func:`design_law_settings` as JSON (a rule's param)."""
    return design_law_settings(typed(config)).to_json()


def seed_steps(run: RunConfig) -> int:
    """The seed runs' horizon (module doc): at least one logging interval."""
    log_every, steps = run.training.log_every, run.training.steps
    return max(log_every, int(steps * run.adaptive_design.seed_fraction) // log_every * log_every)


def ladder(run: RunConfig) -> tuple[int, ...]:
    """The horizons the design trains to."""
    return horizons(seed_steps(run), run.training.steps)


def _primary_points(run: RunConfig, points):
    return points_with_mechanism(points_at_length(points, run.data.seq_len), mechanisms(run)[0])


def design_grid(run: RunConfig, chosen: Mapping[str, float] | None) -> list[tuple[str, float, float]]:
    """The (model, σ̄, learning rate) points the design draws from (module doc)."""
    points = _primary_points(run, main_grid(run, chosen))
    return sorted({(p.model, p.noise_batch_ratio, p.learning_rate) for p in points
                   if p.seed == run.training.seed and p.batch == run.training.physical_batch})


def seed_rates(run: RunConfig, chosen: Mapping[str, float] | None) -> dict[str, float]:
    """Each model's seed-design rate (module doc)."""
    rates: dict[str, list[float]] = {}
    for model, nbr, rate in design_grid(run, chosen):
        if nbr == 0:
            rates.setdefault(model, []).append(rate)
    return {model: sorted(values)[len(values) // 2] for model, values in rates.items()}


def model_sizes(run: RunConfig) -> dict[str, float]:
    """Each model's parameter count, as its curves record it (the law's M)."""
    return {name: float(run_model_config(run, name).param_count().total) for name in run.models.names}


def protocol_spend(run: RunConfig, sizes: Mapping[str, float] | None = None) -> float:
    """What both designs spend before their runs: the learning-rate protocol's runs (0 when the config gives its
    rates), whose chosen rates both train at."""
    return float(protocol_flops(run, sizes or model_sizes(run)))


def grid_flops(run: RunConfig, chosen: Mapping[str, float] | None) -> float:
    """What the grid design trains (module doc): the protocol's runs, then every main-grid and repeat run to
    ``training.steps``, each step once (a σ̄ = 0 run that continues the protocol's pays only its steps past it)."""
    sizes = model_sizes(run)
    points = _primary_points(run, main_grid(run, chosen) + repeat_grid(run, chosen))
    return protocol_spend(run, sizes) + float(sum(grid_run_flops(run, point, sizes) for point in points))


def targets(run: RunConfig) -> list[Target]:
    """The budgets the design's answers are for: the ``private_model`` and ``savings`` budgets, each once; without
    any, the analysis block's ``grid_privacy_budget`` and ``grid_data_budget`` at each of its
    ``grid_compute_budgets`` (the paper's fig:grid budgets)."""
    budgets = [*run.private_model.budgets, *run.savings.budgets]
    if budgets:
        return sorted({Target(float(b.epsilon), float(b.data_budget), float(b.compute)) for b in budgets})
    analysis = analysis_settings_of(run)
    return [Target(float(analysis.grid_privacy_budget), float(analysis.grid_data_budget), float(compute))
            for compute in sorted(analysis.grid_compute_budgets)]


def design_settings(run: RunConfig, chosen: Mapping[str, float] | None) -> DesignSettings:
    block = run.adaptive_design
    training = run.training
    return DesignSettings(
        seed_steps=seed_steps(run), horizon=training.steps, runs_per_round=block.runs_per_round,
        max_rounds=block.rounds, compute_cap=block.compute_cap * grid_flops(run, chosen),
        stop_width=block.stop_width, replicates=block.replicates, batch=training.physical_batch,
        seq_len=run.data.seq_len, seed=training.seed, repeat_seeds=tuple(block.repeat_seeds),
        coverage=block.coverage, fill_forms=block.fill_forms, model_forms=block.model_forms,
        jackknife=block.jackknife, contenders=block.contenders, spent_before=protocol_spend(run))


# ----------------------------------------------------------------------------------------------- records


def read_round(path: str | Path) -> dict[str, Any]:
    return json.loads(Path(path).read_text())


def runs_after(record: Mapping[str, Any]) -> list[DesignRun]:
    """Every run trained once the round ``record`` has been trained: those before it and those it chose."""
    return sorted({*(run_of_record(r) for r in record["trained"]), *(run_of_record(r) for r in record["chosen"])})


def curve_runs(runs: Sequence[DesignRun]) -> list[DesignRun]:
    """The runs whose curves the law reads: per point and seed its longest horizon (a shorter one is its start)."""
    return list(longest_runs(runs).values())


def training_seconds(curve: str | Path, after_step: int) -> float:
    """Seconds the training steps past ``after_step`` took, from the curve's per-interval throughput (start-up,
    compilation and checkpoints not included)."""
    frame = read_curve(curve)
    frame = frame[frame["step"] > after_step]
    intervals = np.diff(np.concatenate([[after_step], frame["step"].to_numpy(float)]))
    return float(np.sum(intervals / frame["steps_per_s"].to_numpy(float)))


def write_round(config: Mapping[str, Any], index: int, output: str | Path, *, chosen_rates: Mapping[str, float] | None,
                previous: str | Path | None = None, curve: str | None = None,
                sigma_table: str | Path | None = None) -> dict[str, Any]:
    """Round ``index``'s record (module doc) at ``output``: round 0 the seed design; a later one from the
    ``previous`` record and the curves of its runs (:func:`runs_after`), at ``curve``, a template over
    :func:`design_wildcards`."""
    run = typed(config)
    design = design_settings(run, chosen_rates)
    sizes, goals = model_sizes(run), targets(run)
    base = {"round": index, "targets": [dataclasses.asdict(t) for t in goals], "horizons": list(ladder(run)),
            "grid_flops": grid_flops(run, chosen_rates), "compute_cap": design.compute_cap}
    if index == 0:
        seeds = seed_design(list(run.models.names), [n for _, n, _ in design_grid(run, chosen_rates)],
                            seed_rates(run, chosen_rates), design.seed, design.repeat_seeds, design.seed_steps)
        record = {**base, "trained": [], "flops": design.spent_before, "seconds": 0.0, "answers": [], "widths": [],
                  "chosen": [{**run_record(r), "kind": SEED_KIND,
                              "flops": float(compute_cost(sizes[r.model], design.batch, r.steps, design.seq_len)),
                              "variance_reduction": None} for r in seeds], "stopped": ""}
        write_json_atomic(output, record)
        return record
    if previous is None or curve is None:
        raise ValueError("a round after the seed design needs the previous record and the curves of its runs")
    before = read_round(previous)
    trained = runs_after(before)
    curves = {r: curve.format(**design_wildcards(r, design.batch)) for r in trained}
    horizons_ = ladder(run)
    started = {r: continued(r, horizons_) for r in map(run_of_record, before["chosen"])}
    seconds = float(before["seconds"]) + sum(
        training_seconds(curves[r], 0 if start is None else start.steps) for r, start in started.items())
    results = collect_training_curves([curves[r] for r in curve_runs(trained)])[0]
    settings = design_law_settings(run)
    fit_options = {"seq_len": design.seq_len, "physical_batch": design.batch}

    def fit(frame: pd.DataFrame, law_settings: LawSettings):
        return fit_law(frame, law_settings, sigma_table=sigma_table, sampling=run.accounting.sampling, **fit_options)

    round_, chosen = plan_round(index - 1, trained, results, design_grid(run, chosen_rates), sizes, goals, design,
                                fit, settings, fit_options, contexts(run, sigma_table))
    record = {**base, "trained": [run_record(r) for r in trained], "flops": round_.flops, "seconds": seconds,
              "answers": round_.answers, "widths": round_.widths, "chosen": round_.chosen,
              "stopped": round_.stopped}
    write_json_atomic(output, record)
    return record


def check_design(run: RunConfig) -> None:
    """``design: adaptive``'s own refusals (UserError naming the key): a run continued from a shorter one must compute
    the same first steps (:mod:`dpscaling.train.prefix`), so no private sampler, no correlated mechanism and a horizon
    at a logged step; the paper's schedule, whose every row is a loss the law can read; a repeat seed is another seed."""
    from dpscaling.core.errors import UserError
    from dpscaling.privacy.mechanisms import mechanism_named
    from dpscaling.privacy.samplers import sampler_named

    if run.design != "adaptive":
        return
    training = run.training
    if sampler_named(training.sampling, "training.sampling").private:
        raise UserError(f"training.sampling: {training.sampling!r} is calibrated to each run's horizon, so a design "
                        "run cannot continue a shorter one; design: adaptive takes shuffle or cyclic")
    primary = mechanisms(run)[0]
    if mechanism_named(primary, "training.mechanisms").correlated:
        raise UserError(f"training.mechanisms: the primary mechanism {primary!r} is built for each run's horizon, so "
                        "a design run cannot continue a shorter one; design: adaptive needs dpsgd first")
    if training.schedule != "paper":
        raise UserError(f"training.schedule: {training.schedule!r} cools each run down at its own horizon, and the "
                        "design's law reads every row of a curve as the loss at its step; design: adaptive takes "
                        "the paper's schedule, under which a shorter horizon is the first steps of a longer one")
    if training.seed in run.adaptive_design.repeat_seeds:
        raise UserError(f"adaptive_design.repeat_seeds: {list(run.adaptive_design.repeat_seeds)} holds training.seed "
                        f"({training.seed}); a repeat needs another seed")
    if training.steps % training.log_every:
        raise UserError(f"training.steps: {training.steps} must be a multiple of training.log_every "
                        f"({training.log_every}) under design: adaptive (a run continues at a logged step)")


def design_wildcards(run: DesignRun, batch: int) -> dict[str, str]:
    """The wildcards of a design run's paths (:data:`dpscaling.workflow.layout.DESIGN_AXES`)."""
    point = TrainPoint(run.model, batch, run.seed, run.noise_batch_ratio, run.learning_rate)
    return {key: point.wildcards[key] for key in ("model", "batch", "seed", "nbr", "lr")} | {
        "steps": canonical(run.steps)}


def design_run_of(wildcards: Mapping[str, str]) -> DesignRun:
    return DesignRun(wildcards["model"], float(wildcards["nbr"]), float(wildcards["lr"]), int(wildcards["seed"]),
                     int(wildcards["steps"]))


def shorter_wildcards(run: RunConfig, wildcards: Mapping[str, str]) -> dict[str, str] | None:
    """The wildcards of the run the design run ``wildcards`` continues, None at the shortest horizon."""
    shorter = continued(design_run_of(wildcards), ladder(run))
    return None if shorter is None else {**wildcards, "steps": str(shorter.steps)}


def training_params(run: RunConfig, steps: int) -> dict[str, Any]:
    """A design run's ``training`` param: the grid's, to ``steps``."""
    return {**run.training.job_params(run.accounting.delta), "steps": int(steps)}


# ------------------------------------------------------------------------------------------------ report


def rounds_table(records: Sequence[Mapping[str, Any]]) -> pd.DataFrame:
    """One row per round after the seed design and target: the FLOPs and seconds spent before it (and as a share of
    the grid's FLOPs), the committee's answer and 90% band, what the round chose and why it stopped."""
    rows = []
    for record in records:
        for target, answer, width in zip(record["targets"], record["answers"], record["widths"]):
            rows.append({"round": record["round"], "runs trained": len(record["trained"]),
                         "FLOPs": record["flops"], "FLOPs share of grid": record["flops"] / record["grid_flops"],
                         "training seconds": record["seconds"], "epsilon": target["epsilon"],
                         "data budget": target["data_budget"], "compute": target["compute"], "answer (nats)": answer,
                         "90% band (nats)": width, "chosen": len(record["chosen"]),
                         "chosen kinds": ", ".join(sorted({c["kind"] for c in record["chosen"]})),
                         "stopped": record["stopped"]})
    return pd.DataFrame(rows)


def draw_rounds(table: pd.DataFrame, out_stem: str | Path) -> None:
    """The answers' 90% bands against the FLOPs spent, one line per target: ``out_stem``.pdf and .png."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from dpscaling.core.io import atomic_path

    fig, ax = plt.subplots(figsize=(6, 4))
    for (epsilon, users, compute), rows in table.groupby(["epsilon", "data budget", "compute"]):
        ax.plot(rows["FLOPs share of grid"], rows["90% band (nats)"], marker="o",
                label=f"ε={epsilon:g}, N={users:.3g}, C={compute:.3g}")
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("FLOPs spent, share of the grid's")
    ax.set_ylabel("answer's 90% band (nats)")
    ax.set_title("Adaptive design: the answers' uncertainty against compute")
    ax.legend(fontsize=7)
    fig.tight_layout()
    for suffix in (".pdf", ".png"):
        with atomic_path(f"{out_stem}{suffix}") as tmp:
            fig.savefig(tmp, format=suffix[1:], dpi=150)
    plt.close(fig)


def compare_with_grid(config: Mapping[str, Any], records: Sequence[str | Path], grid_results: str | Path,
                      grid_law: str | Path, design_law: str | Path, sigma_table: str | Path,
                      output: str | Path, grid_validation: str | Path | None = None) -> dict[str, Any]:
    """The adaptive law against the grid's (:func:`dpscaling.design.compare.comparison`), written to ``output``:
    its error on every grid measurement it did not train beside the grid law's on the same ones (in-sample) and,
    from ``grid_validation`` (``validate``'s points), the grid law's own held-out error in the config's mode, every
    held-out set pooled; the regret of its answers at the targets under the grid's law; and both designs' FLOPs."""
    from dpscaling.design.compare import comparison
    from dpscaling.law.artifact import read_law
    from dpscaling.law.collect import load_results
    from dpscaling.law.validation import pooled_error

    run = typed(config)
    final = read_round(records[-1])
    trained = runs_after(final)
    goals = targets(run)
    spent = protocol_spend(run) + design_flops(trained, model_sizes(run), run.training.physical_batch, run.data.seq_len)
    result = comparison(load_results(grid_results)[0], trained, read_law(grid_law), read_law(design_law),
                        contexts(run, sigma_table),
                        goals, spent, float(final["grid_flops"]), run.training.seed)
    row = {key: value for key, value in result.row().items() if "truth" not in key}
    if grid_validation is not None:
        error, points = pooled_error(pd.read_csv(grid_validation), mode_name(run.fit.reference_compatible))
        row |= {"grid law held-out error": error, "grid law held-out points": points}
    report = {**row, "rounds": len(records) - 1, "runs trained": len(trained), "stopped": final["stopped"],
              "targets": [{**dataclasses.asdict(t), "regret": r, "adaptive answer": a, "grid answer": g}
                          for t, r, (a, g) in zip(goals, result.regret, result.answers)]}
    write_json_atomic(output, report)
    return report
