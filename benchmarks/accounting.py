"""Benchmark: accounting-table build time and accuracy against direct calibration, side by side.

Speed of the accounting stage (paper §3.4: σ̄ for every hypothetical configuration comes from a
precomputed σ(ε, T, q) table; results in docs/accounting.md). Prints, in one run:
  * table build: grid size, refused cells, wall time with ``--jobs`` processes (one
    chunk of q values per task, as the Snakemake jobs), points/second, and the CPU
    seconds the workers used (wall time on a shared machine includes waiting for CPU);
  * table queries: points/second of one vectorised ``SigmaTable`` lookup of 10^5 points;
  * dpscaling direct calibration (the production discretisation): points/second;
  * stock dp-accounting ``calibrate_dp_mechanism`` + ``PLDAccountant`` at 4x finer
    discretisation, explicit bracket, tolerance 1e-5·σ (only at q ≥ 2^-12, where its
    pure-Python PLD build stays affordable): points/second;
  * max and median relative σ error of each against the tight reference — dpscaling
    direct calibration at 4x finer discretisation, relative tolerance 1e-5 — at random
    points drawn log-uniformly over the table's range (off-grid almost surely), for the
    Poisson branch and for the paper's min rule. Points the table refuses are skipped
    and counted.

Usage: .venv/bin/python benchmarks/accounting.py [--preset small|medium|paper] [--points 30]
       [--stock-points 6] [--jobs 2] [--save table.parquet]
"""

from __future__ import annotations

import argparse
import math
import resource
import time
from concurrent.futures import ProcessPoolExecutor

import dp_accounting
import numpy as np
import pandas as pd

from dpscaling.accounting import calibration, gaussian, pld
from dpscaling.accounting.table import STATUS_OK, Chunk, SigmaTable, compute_chunk, plan_table, save_table
from dpscaling.accounting.table_spec import TableSpec
from dpscaling.accounting.validation import AccountingRefused

PRESETS = {
    "small": {"epsilon_min": 0.5, "epsilon_max": 64.0, "steps_min": 1000, "steps_max": 16000, "q_min_log2": -8},
    "medium": {"epsilon_min": 2.0**-3, "epsilon_max": 2.0**10, "steps_min": 100, "steps_max": 128_000,
               "q_min_log2": -12},
    "paper": {},  # TableSpec defaults: ε 2^-8..2^20, T 100..128000, q 2^-20..1 (factor-2 steps)
}
DELTA = 1e-8
REFERENCE_FRACTION = pld.DISCRETISATION_FRACTION / 4
REFERENCE_MAX_POINTS = 4 * pld.DEFAULT_MAX_POINTS
STOCK_MIN_Q = 2.0**-12
# The smallest ε the figures query; the default table extends an octave below it.
QUERY_EPSILON_MIN = 2.0**-7
QUERY_COUNT = 100_000
QUERY_EPSILONS = 64


def reference_sigma(epsilon: float, q: float, steps: int) -> float:
    """The tight reference: direct PLD calibration at 4x finer discretisation."""
    return calibration.calibrate_poisson(epsilon, q, steps, DELTA, relative_tolerance=1e-5,
                                         max_points=REFERENCE_MAX_POINTS,
                                         discretisation_fraction=REFERENCE_FRACTION)


def stock_dp_accounting_sigma(epsilon: float, q: float, steps: int, guess: float) -> float:
    """σ from dp-accounting's own calibration with a finer discretisation than ours."""
    interval = pld.choose_discretisation(
        guess, q, gdp_step_mu=gaussian.gdp_mu(epsilon, DELTA) / math.sqrt(steps)).interval / 4

    def event(sigma: float) -> dp_accounting.DpEvent:
        return dp_accounting.SelfComposedDpEvent(
            dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), steps)

    return dp_accounting.calibrate_dp_mechanism(
        lambda: dp_accounting.pld.PLDAccountant(value_discretization_interval=interval),
        event, epsilon, DELTA,
        bracket_interval=dp_accounting.ExplicitBracketInterval(guess * 0.97, guess * 1.03),
        tol=guess * 1e-5)


def build(spec: TableSpec, chunks: list[Chunk], jobs: int) -> tuple[pd.DataFrame, float, float]:
    """(long frame, wall seconds, worker CPU seconds) for computing ``chunks`` in ``jobs`` processes."""
    started = time.perf_counter()
    with ProcessPoolExecutor(jobs) as pool:
        frames = list(pool.map(compute_chunk, [spec] * len(chunks), chunks))
    wall = time.perf_counter() - started
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return pd.concat(frames, ignore_index=True), wall, usage.ru_utime + usage.ru_stime


def random_points(table: SigmaTable, count: int, seed: int) -> tuple[list[tuple[float, int, float]], int]:
    """Log-uniform points inside the table (q < 1, ε ≥ QUERY_EPSILON_MIN) where the min rule
    has a σ; also how many draws it refused."""
    rng = np.random.default_rng(seed)
    qs = table.sampling_probabilities[table.sampling_probabilities < 1]

    def draw(low: float, high: float) -> float:
        return float(np.exp(rng.uniform(np.log(low), np.log(high))))

    points, refused = [], 0
    while len(points) < count:
        point = (draw(max(table.epsilons[0], QUERY_EPSILON_MIN), table.epsilons[-1]),
                 round(draw(table.steps[0], table.steps[-1])), draw(qs[0], qs[-1]))
        if np.isfinite(table.sigma(*point, on_missing="nan")):
            points.append(point)
        else:
            refused += 1
    return points, refused


def bulk_query_seconds(table: SigmaTable, seed: int) -> float:
    """Seconds per query of one vectorised min-rule lookup of QUERY_COUNT log-uniform points
    over QUERY_EPSILONS distinct ε (as figures query: the deterministic branch's
    dp_accounting.get_sigma_gaussian runs once per distinct ε, ~1 ms each)."""
    rng = np.random.default_rng(seed + 1)
    axes = (table.epsilons, table.steps, table.sampling_probabilities)
    eps, steps, qs = (np.exp(rng.uniform(np.log(a[0]), np.log(a[-1]), QUERY_COUNT)) for a in axes)
    eps = rng.choice(eps[:QUERY_EPSILONS], QUERY_COUNT)
    started = time.perf_counter()
    table.sigma(eps, steps, qs, on_missing="nan")
    return (time.perf_counter() - started) / QUERY_COUNT


def timed(function, points) -> tuple[np.ndarray, float]:
    started = time.perf_counter()
    values = []
    for point in points:
        try:
            values.append(function(*point))
        except AccountingRefused:
            values.append(np.nan)
    return np.array(values, dtype=float), time.perf_counter() - started


def error_row(name: str, rate: float, errors: np.ndarray, note: str = "") -> str:
    errors = errors[np.isfinite(errors)]
    if errors.size == 0:
        return f"{name:<44}{rate:>12.3g}{'-':>14}{'-':>10}{'-':>14}   {note}"
    return (f"{name:<44}{rate:>12.3g}{np.abs(errors).max():>14.2e}{np.median(np.abs(errors)):>10.1e}"
            f"{errors.min():>+14.2e}   {note}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=PRESETS, default="small")
    parser.add_argument("--points", type=int, default=30)
    parser.add_argument("--stock-points", type=int, default=6)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--save", default="", help="also write the built table (Parquet) here")
    args = parser.parse_args()
    spec = TableSpec(**PRESETS[args.preset])
    frame, build_wall, build_cpu = build(spec, plan_table(spec), args.jobs)
    table = SigmaTable(frame)
    if args.save:
        save_table(frame, args.save, spec)
    built_points = len(frame)
    refused_cells = int((frame["status"] != STATUS_OK).sum())
    print(f"preset {args.preset}: {spec.size()} grid points ({len(spec.epsilons())} eps x {len(spec.steps())} T x "
          f"{len(spec.sampling_probabilities())} q), sigma lattice {spec.sigma_per_octave}/octave, "
          f"{table.method} interpolation, {args.jobs} processes")
    print(f"table build: {built_points} points in {build_wall:.1f} s wall ({build_cpu:.0f} CPU-s in the workers), "
          f"{refused_cells} refused cells ({refused_cells / built_points:.1%})", flush=True)

    points, refused_draws = random_points(table, args.points, args.seed)
    eps, steps, qs = (np.array(column) for column in zip(*points))
    table_min = table.sigma(eps, steps, qs)
    query_seconds = bulk_query_seconds(table, args.seed)
    table_poisson = table.poisson(eps, steps, qs, on_missing="nan")  # NaN: refused near-steps
    deterministic = table.deterministic(eps, steps, qs)

    reference, reference_seconds = timed(lambda e, t, q: reference_sigma(e, q, t), points)
    ours, ours_seconds = timed(lambda e, t, q: calibration.calibrate_poisson(e, q, t, DELTA), points)
    stock_points = [(p, s) for p, s in zip(points, ours) if p[2] >= STOCK_MIN_Q][:args.stock_points]
    stock, stock_seconds = timed(lambda p, s: stock_dp_accounting_sigma(p[0], p[2], p[1], s), stock_points)
    stock_reference = np.array([reference[points.index(p)] for p, _ in stock_points])

    def relative(values: np.ndarray, against: np.ndarray) -> np.ndarray:
        return values / against - 1

    def min_rule(values: np.ndarray) -> np.ndarray:
        return np.minimum(values, deterministic)

    print(f"random points: {len(points)} with a table sigma, {refused_draws} draws skipped (refused corner)")
    print(f"{'method':<44}{'points/s':>12}{'max |rel err|':>14}{'median':>10}{'most optim.':>14}")
    print(f"{'table build (all grid points)':<44}{built_points / build_wall:>12.3g}"
          f"{'':>38}   wall {build_wall:.1f} s, {build_cpu:.0f} CPU-s")
    min_error = relative(table_min, min_rule(reference))
    print(error_row("table query, min rule (the paper's)", 1 / query_seconds, min_error))
    print(error_row("table query, Poisson branch", 1 / query_seconds,
                    relative(table_poisson, reference),
                    f"{int(np.isnan(table_poisson).sum())} refused (near-steps; min rule is deterministic)"))
    print(error_row("dpscaling direct calibration", len(points) / ours_seconds, relative(ours, reference)))
    print(error_row("stock dp-accounting (4x finer)", len(stock_points) / max(stock_seconds, 1e-9),
                    relative(stock, stock_reference), f"{len(stock_points)} points with q >= 2^-12"))
    print(error_row("reference (4x finer, tol 1e-5)", len(points) / reference_seconds, np.zeros(len(points))))
    worst = int(np.nanargmax(np.abs(min_error)))
    print(f"worst table point (min rule): eps={eps[worst]:.4g} T={steps[worst]} q=2^{np.log2(qs[worst]):.2f} "
          f"table={table_min[worst]:.6g} reference={min_rule(reference)[worst]:.6g}")


if __name__ == "__main__":
    main()
