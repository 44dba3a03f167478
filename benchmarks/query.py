"""Benchmark: the CPU time of one ``dpscaling query`` answer after the law is loaded (docs/query.md, "Cost of an
answer"), and where it goes, side by side in one run.

Loads a law (a bundle, or a run's ``law/mechanisms``), answers one warm-up query (what a process pays once:
the σ table's first read, SciPy's and dp-accounting's imports), then answers ``--queries`` budgets spread
over compute and ε, each at a budget no earlier query asked (no answer is remembered from another). Prints
per query the process CPU seconds, then their median and maximum, the ratio of the median to the 0.2 s goal,
and with ``--profile`` the share of the median query spent in each part (cProfile's cumulative time of the
search, the runnable's pricing, the saturation scan and the optimum's bootstrap band).

With ``--baseline SRC`` (another checkout's ``src/``, e.g. ``git worktree add /tmp/before COMMIT``) it times the
same budgets under both codes side by side: ``--rounds`` rounds, each running this code and the baseline in
fresh processes one after the other, and prints each side's median per round and the ratio of the medians
(this machine's speed drifts between minutes; the ratio of one round does not).

Usage: .venv/bin/python benchmarks/query.py --law results/default/law/bundle [--users 1e5] [--queries 8]
       [--profile] [--baseline /tmp/before/src [--rounds 3]]
"""

from __future__ import annotations

import argparse
import cProfile
import json
import os
import pstats
import statistics
import subprocess
import sys
import time

import numpy as np

import dpscaling
from dpscaling.core.errors import UserError

GOAL_CPU_SECONDS = 0.2
PARTS = {"search (compute_optimal)": "compute_optimal", "runnable and its price (choose_runnable)": "choose_runnable",
         "saturation scan (saturation)": "saturation", "bootstrap band (optimum_band)": "optimum_band",
         "refusal check (refuse_beyond_validation)": "refuse_beyond_validation"}


def budgets(law, count: int, users: float) -> list[dict]:
    """``count`` budgets over the law's compute range (log-uniform between 4× its smallest and its horizon's
    budget) and ε ∈ {2, 8, 32}, none asked twice."""
    ask = law if not hasattr(law, "laws") else next(iter(law.laws.values()))
    fitted = ask.bundle.law
    low, high = fitted.model_size_range()
    first, horizon = ask.ranges.first_iteration, ask.ranges.horizon
    smallest = 6.0 * low * 32 * fitted.seq_len * first * 4
    largest = 6.0 * high * 256 * fitted.seq_len * horizon
    computes = np.geomspace(smallest, largest, count + 1)[1:]
    return [{"compute": float(c), "epsilon": float((2.0, 8.0, 32.0)[i % 3]), "users": users}
            for i, c in enumerate(computes)]


def answer(law, budget: dict):
    try:
        return law.query(**budget, allow_extrapolation=True)
    except UserError as error:  # a budget the law cannot answer costs what it cost
        return error


def timed(law, budget: dict) -> float:
    """The process CPU seconds of one answer."""
    start = time.process_time()
    answer(law, budget)
    return time.process_time() - start


def side_by_side(args) -> None:
    """Each round: this code's and the baseline's per-query CPU times, each in a fresh process, back to back."""
    command = [sys.executable, __file__, "--law", args.law, "--users", str(args.users), "--queries",
               str(args.queries), "--json"]

    def run(source: str | None) -> list[float]:
        env = dict(os.environ)
        if source is not None:
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [source, env.get("PYTHONPATH")]))
        return json.loads(subprocess.run(command, env=env, check=True, capture_output=True, text=True).stdout)

    ratios = []
    for index in range(args.rounds):
        current, baseline = statistics.median(run(None)), statistics.median(run(args.baseline))
        ratios.append(current / baseline)
        print(f"round {index + 1}: median {current:.3f} CPU-s against the baseline's {baseline:.3f} "
              f"(ratio {current / baseline:.2f}; goal {GOAL_CPU_SECONDS:g} s)")
    print(f"median ratio {statistics.median(ratios):.2f} over {args.rounds} rounds (this code / {args.baseline})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--law", required=True)
    parser.add_argument("--users", type=float, default=2e4)
    parser.add_argument("--queries", type=int, default=8)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--baseline", help="another checkout's src/ to time side by side")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", action="store_true", help=argparse.SUPPRESS)  # one side's times, for --baseline
    args = parser.parse_args()
    if args.baseline:
        return side_by_side(args)

    start = time.process_time()
    law = dpscaling.load_law(args.law)
    loaded = time.process_time() - start
    asked = budgets(law, args.queries + 1, args.users)
    start = time.process_time()
    answer(law, asked[0])
    warm = time.process_time() - start
    if args.json:
        print(json.dumps([timed(law, budget) for budget in asked[1:]]))
        return None
    print(f"law {args.law}: loaded in {loaded:.3f} CPU-s, first (warm-up) query {warm:.3f} CPU-s")
    times, profiles = [], []
    for budget in asked[1:]:
        profiler = cProfile.Profile() if args.profile else None
        start = time.process_time()
        if profiler is not None:
            profiler.enable()
        result = answer(law, budget)
        if profiler is not None:
            profiler.disable()
        spent = time.process_time() - start
        times.append(spent)
        profiles.append(profiler)
        outcome = ("refused: " + str(result)[:60]) if isinstance(result, Exception) else "answered"
        print(f"  C = {budget['compute']:.3g}, ε = {budget['epsilon']:g}: {spent:.3f} CPU-s ({outcome})")
    median = statistics.median(times)
    print(f"median {median:.3f} CPU-s, max {max(times):.3f} CPU-s over {len(times)} queries; "
          f"median / goal {GOAL_CPU_SECONDS:g} s = {median / GOAL_CPU_SECONDS:.2f}")
    if args.profile:
        index = int(np.argsort(times)[len(times) // 2])
        stats = pstats.Stats(profiles[index])
        cumulative = {func[2]: value[3] for func, value in stats.stats.items()}
        total = times[index]
        for label, name in PARTS.items():
            spent = sum(value for func, value in cumulative.items() if func == name)
            print(f"  {label}: {spent:.3f} s ({spent / total:.0%} of the median query, under the profiler)")


if __name__ == "__main__":
    main()
