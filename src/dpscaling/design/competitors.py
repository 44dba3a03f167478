"""The designs a researcher would use instead of the adaptive one, at the same FLOPs (not in the paper).

Li et al. 2026 ("Spend Less, Fit Better") score their active design against random, cheapest-first and cost-weighted
random choices, among others; the paper's own is the full grid, which a smaller budget thins evenly. Each design here
picks from the same pool as the adaptive design: a grid point of the main seed at one of the design's horizons
(:func:`dpscaling.design.runs.horizons`), each point at most once, until the next pick would pass ``budget`` FLOPs
(:func:`dpscaling.design.runs.design_flops`). They are scored as the adaptive design is
(:func:`dpscaling.design.compare.compare`).

- ``random``: points and horizons drawn uniformly;
- ``cheapest_first``: the cheapest (point, horizon) first, so the smallest models at the shortest horizon;
- ``cost_weighted_random``: drawn with probability inversely proportional to cost;
- ``thinned_grid``: the grid at the full horizon, every k-th point (by model, then σ̄), the smallest k that fits.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence

import numpy as np

from dpscaling.design.runs import DesignRun, design_flops

Point = tuple[str, float, float]  # (model, σ̄, learning rate)


def _pool(grid: Sequence[Point], ladder: Sequence[int], seed: int) -> list[DesignRun]:
    return [DesignRun(model, nbr, rate, seed, steps) for model, nbr, rate in grid for steps in ladder]


def _cost(run: DesignRun, sizes: Mapping[str, float], batch: int, seq_len: int) -> float:
    return design_flops([run], sizes, batch, seq_len)


def _take(order: Sequence[DesignRun], budget: float, sizes: Mapping[str, float], batch: int,
          seq_len: int) -> list[DesignRun]:
    """Runs in ``order``, each point once, skipping any that would pass ``budget``."""
    chosen, spent, points = [], 0.0, set()
    for run in order:
        cost = _cost(run, sizes, batch, seq_len)
        if run.point in points or spent + cost > budget:
            continue
        chosen.append(run)
        points.add(run.point)
        spent += cost
    return chosen


def random_design(grid: Sequence[Point], ladder: Sequence[int], budget: float, sizes: Mapping[str, float], batch: int,
                  seq_len: int, seed: int = 0, rng: np.random.Generator | None = None) -> list[DesignRun]:
    rng = rng or np.random.default_rng(0)
    pool = _pool(grid, ladder, seed)
    return _take([pool[i] for i in rng.permutation(len(pool))], budget, sizes, batch, seq_len)


def cheapest_first(grid: Sequence[Point], ladder: Sequence[int], budget: float, sizes: Mapping[str, float], batch: int,
                   seq_len: int, seed: int = 0, rng: np.random.Generator | None = None) -> list[DesignRun]:
    pool = _pool(grid, ladder, seed)
    return _take(sorted(pool, key=lambda run: (_cost(run, sizes, batch, seq_len), run)), budget, sizes, batch, seq_len)


def cost_weighted_random(grid: Sequence[Point], ladder: Sequence[int], budget: float, sizes: Mapping[str, float], batch: int,
                         seq_len: int, seed: int = 0, rng: np.random.Generator | None = None) -> list[DesignRun]:
    rng = rng or np.random.default_rng(0)
    pool = _pool(grid, ladder, seed)
    weights = np.array([1.0 / _cost(run, sizes, batch, seq_len) for run in pool])
    order = rng.choice(len(pool), size=len(pool), replace=False, p=weights / weights.sum())
    return _take([pool[i] for i in order], budget, sizes, batch, seq_len)


def thinned_grid(grid: Sequence[Point], ladder: Sequence[int], budget: float, sizes: Mapping[str, float], batch: int,
                 seq_len: int, seed: int = 0, rng: np.random.Generator | None = None) -> list[DesignRun]:
    full = [DesignRun(model, nbr, rate, seed, max(ladder)) for model, nbr, rate in sorted(grid)]
    for step in range(1, len(full) + 1):
        thinned = full[::step]
        if design_flops(thinned, sizes, batch, seq_len) <= budget:
            return thinned
    return []


Design = Callable[..., list[DesignRun]]
COMPETITORS: dict[str, Design] = {"random": random_design, "cheapest_first": cheapest_first,
                                  "cost_weighted_random": cost_weighted_random, "thinned_grid": thinned_grid}
# The designs whose picks depend on their random draw: one draw of them is one sample of the design, so they are
# scored over several (the others give the same runs for every draw).
RANDOMISED = frozenset({"random", "cost_weighted_random"})
