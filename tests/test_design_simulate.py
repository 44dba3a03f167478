"""The adaptive design simulated on a known truth (dpscaling.design.simulate): a longer run continues a shorter one
draw for draw; rounds are recorded with what they spent and chose, within the compute cap, and stop by a stated rule."""

from __future__ import annotations

from itertools import product

import numpy as np
import pytest

from dpscaling.design.answers import Target
from dpscaling.design.runs import EXTEND, NEW, REPEAT, DesignRun
from dpscaling.design.settings import DesignSettings
from dpscaling.design.simulate import Simulator, run_design
from dpscaling.law.synthetic import TrueLaw

pytestmark = pytest.mark.slow(minutes=1)

SIZES = {"S0": 1e5, "S1": 4e5, "S2": 1.6e6}
NBRS = [0.0, 2.0**-12, 2.0**-10, 2.0**-8, 2.0**-6]
RATES = {model: 2.0**-7 for model in SIZES}
SIMULATOR = Simulator(TrueLaw(), SIZES, {2.0**-7: 1.0}, seed_noise=0.02, measurement_noise=0.005, log_every=20)


def test_a_longer_run_is_the_shorter_one_continued() -> None:
    short, longer = DesignRun("S1", 2.0**-8, 2.0**-7, 0, 500), DesignRun("S1", 2.0**-8, 2.0**-7, 0, 1000)
    first, second = SIMULATOR.curve(short), SIMULATOR.curve(longer)
    assert len(second) == 2 * len(first)
    np.testing.assert_array_equal(second["Cross Entropy"].to_numpy()[: len(first)], first["Cross Entropy"].to_numpy())
    other_seed = SIMULATOR.curve(DesignRun("S1", 2.0**-8, 2.0**-7, 1, 500))
    assert not np.array_equal(other_seed["Cross Entropy"].to_numpy(), first["Cross Entropy"].to_numpy())


def test_rounds_spend_within_the_cap_choose_stated_kinds_and_stop_by_a_rule() -> None:
    from figure_context import PHYSICAL_BATCH, SEQ_LEN, SETTINGS

    from dpscaling.report.figures.context import AnalysisContext
    from dpscaling.law import LawSettings
    from dpscaling.law.artifact import fit_law
    from dpscaling.law.synthetic import DeterministicGaussianSigma

    grid = [(model, nbr, RATES[model]) for model, nbr in product(SIZES, NBRS)]
    settings = LawSettings(warmup_steps=100, rolling_window=3, curve_horizons=True, fill_missing_models=True)
    options = dict(seq_len=SEQ_LEN, physical_batch=PHYSICAL_BATCH)
    full = sum(6 * SIZES[model] * PHYSICAL_BATCH * SEQ_LEN * 2000 for model, _, _ in grid)
    design = DesignSettings(seed_steps=500, horizon=2000, runs_per_round=3, max_rounds=2, compute_cap=0.2 * full,
                            stop_width=0.0, replicates=4, batch=PHYSICAL_BATCH, seq_len=SEQ_LEN)
    trained, rounds = run_design(
        SIMULATOR, grid, list(SIZES), RATES, [Target(8.0, 1e5, 1e13), Target(1.0, 1e5, 1e13)], design,
        lambda results, law_settings: fit_law(results, law_settings, **options), settings, options,
        lambda law, members: AnalysisContext(law, DeterministicGaussianSigma(), SETTINGS, delta=1e-8,
                                             sampling="deterministic", replicates=members))
    assert [r.index for r in rounds] == list(range(len(rounds))) and 1 <= len(rounds) <= 3
    assert rounds[-1].stopped  # every design says why it stopped
    flops = [r.flops for r in rounds]
    assert flops == sorted(flops) and flops[-1] <= design.compute_cap
    for record in rounds:
        assert len(record.answers) == len(record.widths) == 2 and all(np.isfinite(record.answers))
        assert len(record.chosen) <= design.runs_per_round
        assert all(c["kind"] in (NEW, EXTEND, REPEAT) and c["flops"] > 0 and c["variance_reduction"] > 0
                   for c in record.chosen)
    chosen = [c for r in rounds for c in r.chosen]
    assert {(c["model"], c["noise_batch_ratio"], c["steps"], c["seed"]) for c in chosen} <= {
        (run.model, run.noise_batch_ratio, run.steps, run.seed) for run in trained}


def test_the_comparison_of_a_design_that_trained_the_whole_grid_is_the_grids_own() -> None:
    from figure_context import PHYSICAL_BATCH, SEQ_LEN, SETTINGS

    from dpscaling.design.compare import compare, untrained
    from dpscaling.design.runs import seed_design
    from dpscaling.report.figures.context import AnalysisContext
    from dpscaling.law import LawSettings
    from dpscaling.law.artifact import fit_law
    from dpscaling.law.synthetic import DeterministicGaussianSigma

    grid = [(model, nbr, RATES[model]) for model, nbr in product(SIZES, NBRS)]
    settings = LawSettings(warmup_steps=100, rolling_window=3, curve_horizons=True, fill_missing_models=True)

    def fit(results):
        return fit_law(results, settings, seq_len=SEQ_LEN, physical_batch=PHYSICAL_BATCH)

    def context_of(law):
        return AnalysisContext(law, DeterministicGaussianSigma(), SETTINGS, delta=1e-8, sampling="deterministic")

    targets = [Target(8.0, 1e5, 1e13)]
    seeds = seed_design(list(SIZES), NBRS, RATES, 0, (1,), 500)
    partial = compare(SIMULATOR, grid, seeds, 2000, fit, context_of, targets, PHYSICAL_BATCH, SEQ_LEN)
    full = SIMULATOR.results([DesignRun(*point, 0, 2000) for point in grid])
    assert partial.untrained_measurements == len(untrained(full, seeds, 0)) > 0
    assert 0 < partial.fraction < 1 and partial.grid_error < partial.adaptive_error
    # the untrained measurements: every step past 500 of a seed point, every step of the others
    assert partial.untrained_measurements == (len(grid) - 8) * 100 + 8 * 75
    whole = compare(SIMULATOR, grid, [DesignRun(*point, 0, 2000) for point in grid], 2000, fit, context_of, targets,
                    PHYSICAL_BATCH, SEQ_LEN)
    assert whole.fraction == 1 and whole.untrained_measurements == 0 and whole.regret == (0.0,)
    # the high-compute region (largest model, longest horizon) is scored whether trained or not: the whole grid's law
    # there is its own, and the seed runs' law extrapolates to it
    assert whole.high_compute_error == pytest.approx(whole.grid_high_compute_error)
    assert partial.grid_high_compute_error == pytest.approx(whole.grid_high_compute_error)
    assert partial.high_compute_error > partial.grid_high_compute_error


def test_the_model_forms_see_the_short_horizons_extrapolation_and_agree_once_runs_are_long() -> None:
    from dataclasses import replace

    from figure_context import PHYSICAL_BATCH, SEQ_LEN, SETTINGS

    from dpscaling.design.runs import seed_design
    from dpscaling.design.committee import committee, decision_columns
    from dpscaling.report.figures.context import AnalysisContext
    from dpscaling.law import LawSettings
    from dpscaling.law.artifact import fit_law
    from dpscaling.law.synthetic import DeterministicGaussianSigma

    settings = LawSettings(warmup_steps=100, rolling_window=3, curve_horizons=True, fill_missing_models=True)
    options = dict(seq_len=SEQ_LEN, physical_batch=PHYSICAL_BATCH)
    design = DesignSettings(seed_steps=500, horizon=2000, runs_per_round=3, max_rounds=0, compute_cap=1e30,
                            stop_width=0.0, replicates=4, batch=PHYSICAL_BATCH, seq_len=SEQ_LEN, contenders=2)

    coverage = np.array([[4e5, 2000.0, 2.0**-10], [1.6e6, 1000.0, 2.0**-6]])

    def spread(runs):
        found = committee(SIMULATOR.results(runs), lambda results, law: fit_law(results, law, **options), settings,
                          design, lambda law, members: AnalysisContext(law, DeterministicGaussianSigma(), SETTINGS,
                                                                       delta=1e-8, sampling="deterministic",
                                                                       replicates=members), options,
                          [Target(8.0, 1e5, 1e13), Target(8.0, 1e6, 1e14)], coverage)
        assert [part.name for part in found.sets] == ["bootstrap", "model forms"]
        assert len(found.contenders) == 2 and all(1 <= len(rows) <= 3 for rows in found.contenders)
        assert sum(len(rows) - 1 for rows in found.contenders) >= 1  # the members choose differently somewhere
        for part in found.sets:  # the coverage points are targets after the answers: each member's loss there
            np.testing.assert_allclose(part.answers[:, 2:4], part.members.loss_matrix(*coverage.T))
            # then each target's rivals' loss gaps to its consensus, the same columns in every set
            np.testing.assert_allclose(part.answers[:, 4:], decision_columns(part.members, found.contenders))
            assert part.answers.shape[1] == 4 + sum(len(rows) - 1 for rows in found.contenders)
        return found.widths()[:2], found.sets[1].answers

    short = seed_design(list(SIZES), NBRS, RATES, 0, (1,), 500)
    long = [replace(run, steps=2000) for run in short]
    (short_width, short_forms), (long_width, long_forms) = spread(short), spread(long)
    assert len(short_forms) == 5  # the law itself and its four other extrapolation choices
    assert short_width.max() > 2 * long_width.max()
