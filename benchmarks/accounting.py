"""Benchmark: accounting-table speed and accuracy against direct dp-accounting calibration.

Prints, in one run and side by side:
  * table build: grid points, wall time, points/second (chunks in parallel processes);
  * table queries: points/second of vectorised SigmaTable lookups;
  * direct calibration with dpscaling (tight PLD, chosen discretisation): points/second;
  * direct calibration with stock dp-accounting (``calibrate_dp_mechanism`` +
    ``PLDAccountant``) at 4× finer discretisation than ours, explicit bracket,
    relative tolerance 1e-5 — the reference: points/second;
  * max and median relative σ error of table and of dpscaling-direct vs that reference,
    at random off-grid points (linear interpolation's worst case is off-grid).

Usage: .venv/bin/python benchmarks/accounting.py [--preset small|medium|paper] [--points 20] [--jobs 2]
"""

from __future__ import annotations

import argparse
import math
import time
from concurrent.futures import ProcessPoolExecutor

import dp_accounting
import numpy as np
import pandas as pd

from dpscaling.accounting import calibration, gaussian, pld
from dpscaling.accounting.table import SigmaTable, compute_chunk, plan_table
from dpscaling.accounting.table_spec import TableSpec

PRESETS = {
    "small": dict(epsilon_min=0.5, epsilon_max=64.0, steps_min=1000, steps_max=16000, q_min_log2=-8),
    "medium": dict(epsilon_min=2.0**-3, epsilon_max=2.0**10, steps_min=100, steps_max=128_000, q_min_log2=-12),
    "paper": dict(),  # TableSpec defaults: ε 2^-7..2^20, T 100..128000, q 2^-20..1
}
DELTA = 1e-8


def stock_dp_accounting_sigma(epsilon: float, q: float, steps: int) -> float:
    """Reference σ from dp-accounting's own calibration with a finer discretisation."""
    guess = calibration.calibrate_poisson(epsilon, q, steps, DELTA)
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


def build(spec: TableSpec, jobs: int) -> tuple[SigmaTable, float]:
    started = time.perf_counter()
    with ProcessPoolExecutor(jobs) as pool:
        frames = list(pool.map(compute_chunk, [spec] * len(plan_table(spec)), plan_table(spec)))
    return SigmaTable(pd.concat(frames, ignore_index=True)), time.perf_counter() - started


def off_grid(table: SigmaTable, count: int, seed: int) -> list[tuple[float, int, float]]:
    rng = np.random.default_rng(seed)
    def draw(axis: np.ndarray) -> float:
        return float(np.exp(rng.uniform(np.log(axis[0]), np.log(axis[-1]))))
    points = []
    while len(points) < count:
        point = (draw(table.epsilons), int(round(draw(table.steps))), draw(table.sampling_probabilities[:-1]))
        if np.isfinite(table.poisson(*point, on_missing="nan")):
            points.append(point)
    return points


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", choices=PRESETS, default="small")
    parser.add_argument("--points", type=int, default=20)
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    spec = TableSpec(**PRESETS[args.preset])

    table, build_seconds = build(spec, args.jobs)
    refused = int(np.isnan(np.log(table.frame["sigma"])).sum())
    points = off_grid(table, args.points, args.seed)
    eps, steps, qs = (np.array(column) for column in zip(*points))

    started = time.perf_counter()
    interpolated = table.poisson(eps, steps, qs)
    query_seconds = time.perf_counter() - started

    ours, reference = [], []
    started = time.perf_counter()
    for e, t, q in points:
        ours.append(calibration.calibrate_poisson(e, q, t, DELTA))
    ours_seconds = time.perf_counter() - started
    started = time.perf_counter()
    for e, t, q in points:
        reference.append(stock_dp_accounting_sigma(e, q, t))
    reference_seconds = time.perf_counter() - started
    reference = np.array(reference)
    table_error = np.abs(interpolated / reference - 1)
    direct_error = np.abs(np.array(ours) / reference - 1)

    print(f"preset {args.preset}: {spec.size()} grid points "
          f"({len(spec.epsilons())} eps x {len(spec.steps())} T x {len(spec.sampling_probabilities())} q), "
          f"{refused} refused, {args.jobs} processes")
    print(f"{'method':<34}{'points/s':>12}{'max rel err':>14}{'median':>10}")
    print(f"{'table build (all grid points)':<34}{spec.size() / build_seconds:>12.1f}{'':>14}{'':>10}"
          f"   wall {build_seconds:.1f} s")
    print(f"{'table query (interpolation)':<34}{len(points) / query_seconds:>12.0f}"
          f"{table_error.max():>14.2e}{np.median(table_error):>10.1e}")
    print(f"{'dpscaling direct calibration':<34}{len(points) / ours_seconds:>12.2f}"
          f"{direct_error.max():>14.2e}{np.median(direct_error):>10.1e}")
    print(f"{'stock dp-accounting (reference)':<34}{len(points) / reference_seconds:>12.2f}{0:>14.2e}{0:>10.1e}")
    worst = int(np.argmax(table_error))
    print(f"worst table point: eps={eps[worst]:.4g} T={steps[worst]} q={qs[worst]:.3g} "
          f"table={interpolated[worst]:.6g} reference={reference[worst]:.6g}")


if __name__ == "__main__":
    main()
