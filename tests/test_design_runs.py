"""The adaptive design's runs (dpscaling.design.runs): the seed design's corners and centre, the candidates of a
round (new points, longer horizons, repeated seeds) and what each costs: an extension pays only its added steps."""

from __future__ import annotations

from itertools import product

import pytest

from dpscaling.design.runs import (
    EXTEND, NEW, REPEAT, Candidate, DesignRun, candidates, design_flops, horizons, seed_design)
from dpscaling.law.queries import compute_cost

MODELS = ["BertNano", "BertMicro", "BertTinier", "BertSlim"]
SIZES = {"BertNano": 49_760.0, "BertMicro": 175_104.0, "BertTinier": 553_984.0, "BertSlim": 1_576_528.0}
NOISY = [2.0**-6, 2.0**-8, 2.0**-10, 2.0**-12]
RATES = {"BertNano": 2.0**-6, "BertMicro": 2.0**-7, "BertTinier": 2.0**-8, "BertSlim": 2.0**-9}


def test_the_seed_design_is_the_corners_and_centre_with_sigma_0_and_cheap_repeats() -> None:
    runs = seed_design(MODELS, [0.0, *NOISY], RATES, seed=0, repeat_seeds=[1, 2], steps=125)
    main = {(run.model, run.noise_batch_ratio) for run in runs if run.seed == 0}
    assert main == {("BertNano", 2.0**-12), ("BertNano", 2.0**-6), ("BertSlim", 2.0**-12), ("BertSlim", 2.0**-6),
                    ("BertTinier", 2.0**-8), ("BertNano", 0.0), ("BertTinier", 0.0), ("BertSlim", 0.0)}
    assert all(run.steps == 125 and run.learning_rate == RATES[run.model] for run in runs)
    repeats = [run for run in runs if run.seed != 0]
    assert len(repeats) == 2 * 3 and {run.model for run in repeats} == {"BertNano"}  # the cheap end measures noise
    with pytest.raises(ValueError, match="one noisy"):
        seed_design(MODELS, [0.0], RATES, 0, [], 125)


def test_horizons_double_from_the_shortest_to_the_grids() -> None:
    assert horizons(125, 500) == (125, 250, 500)
    assert horizons(100, 500) == (100, 200, 400, 500)
    assert horizons(500, 500) == (500,)
    with pytest.raises(ValueError):
        horizons(600, 500)


def test_an_extension_pays_only_its_added_steps_and_a_design_each_points_longest_horizon() -> None:
    short = DesignRun("BertSlim", 2.0**-6, 2.0**-9, 0, 125)
    longer = DesignRun("BertSlim", 2.0**-6, 2.0**-9, 0, 250)
    assert Candidate(longer, EXTEND, continues=short).flops(SIZES, 40, 64) == pytest.approx(
        compute_cost(SIZES["BertSlim"], 40, 125, 64))
    assert Candidate(longer, NEW).flops(SIZES, 40, 64) == pytest.approx(compute_cost(SIZES["BertSlim"], 40, 250, 64))
    other_seed = DesignRun("BertSlim", 2.0**-6, 2.0**-9, 1, 125)
    assert design_flops([short, longer, other_seed], SIZES, 40, 64) == pytest.approx(
        compute_cost(SIZES["BertSlim"], 40, 250 + 125, 64))


def test_a_rounds_candidates_are_new_points_longer_horizons_and_missing_repeats() -> None:
    grid = [(model, nbr, RATES[model]) for model, nbr in product(MODELS, [0.0, *NOISY])]
    trained = seed_design(MODELS, [0.0, *NOISY], RATES, seed=0, repeat_seeds=[1], steps=125)
    found = candidates(trained, grid, seed=0, repeat_seeds=[1], ladder=horizons(125, 500))
    by_kind = {kind: [c for c in found if c.kind == kind] for kind in (NEW, EXTEND, REPEAT)}
    assert len(by_kind[NEW]) == len(grid) - 8 and all(c.run.steps == 125 and c.run.seed == 0 for c in by_kind[NEW])
    assert len(by_kind[EXTEND]) == 8 and all(c.run.steps == 250 and c.continues.steps == 125 for c in by_kind[EXTEND])
    # BertNano's points are repeated already; the other five main-seed points lack their repeat
    assert sorted(c.run.model for c in by_kind[REPEAT]) == ["BertSlim"] * 3 + ["BertTinier"] * 2
    # after the extension, a point's next horizon is the grid's
    extended = trained + [by_kind[EXTEND][0].run]
    again = [c for c in candidates(extended, grid, 0, [1], horizons(125, 500)) if c.kind == EXTEND
             and c.run.point == by_kind[EXTEND][0].run.point]
    assert [c.run.steps for c in again] == [500]


def test_the_competing_designs_spend_within_the_budget_each_point_once() -> None:
    """Random, cheapest-first, cost-weighted random and the thinned grid (dpscaling.design.competitors) pick from the
    adaptive design's pool (each grid point once, at one of its horizons) within the same FLOPs."""
    import numpy as np

    from dpscaling.design.competitors import COMPETITORS, RANDOMISED

    grid = [(model, nbr, RATES[model]) for model, nbr in product(MODELS, [0.0, *NOISY])]
    ladder = horizons(125, 1000)
    full = design_flops([DesignRun(*point, 0, 1000) for point in grid], SIZES, 8, 64)
    budget = 0.2 * full
    for name, choose in COMPETITORS.items():
        runs = choose(grid, ladder, budget, SIZES, 8, 64, rng=np.random.default_rng(3))
        assert runs and design_flops(runs, SIZES, 8, 64) <= budget, name
        assert len({run.point for run in runs}) == len(runs) and {run.steps for run in runs} <= set(ladder), name
    cheapest = COMPETITORS["cheapest_first"](grid, ladder, budget, SIZES, 8, 64)
    assert {run.model for run in cheapest} >= {"BertNano"} and {run.steps for run in cheapest} == {125}
    assert all(run.model != "BertSlim" for run in cheapest[:len(NOISY) + 1])  # the smallest model first
    # the designs scored over several draws (benchmarks/adaptive_design.py --draws) are exactly those a draw changes
    draws = {name: {tuple(choose(grid, ladder, budget, SIZES, 8, 64, rng=np.random.default_rng(seed)))
                    for seed in range(5)} for name, choose in COMPETITORS.items()}
    assert {name for name, designs in draws.items() if len(designs) > 1} == RANDOMISED
    thinned = COMPETITORS["thinned_grid"](grid, ladder, budget, SIZES, 8, 64)
    ordered = sorted(grid)
    step = ordered.index(thinned[1].point) - ordered.index(thinned[0].point)
    assert [run.point for run in thinned] == ordered[::step] and {run.steps for run in thinned} == {1000}
    if step > 1:  # the smallest step that fits
        assert design_flops([DesignRun(*point, 0, 1000) for point in ordered[::step - 1]], SIZES, 8, 64) > budget
