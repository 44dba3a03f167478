"""Answers over a lattice of budgets: none below the non-private law at its compute, and where one rises with ε, N or C.

    python benchmarks/answer_monotonicity.py results/default/law/bundle            # 10 ε x 10 N x 10 C = 1,000
    python benchmarks/answer_monotonicity.py BUNDLE --count 4 --json               # 64 budgets

ε from 1 to 1,024 (or --epsilon), N and C over the explorer's default ranges for the bundle (or --users / --compute), each at
``--count`` points evenly spaced in log. Prints how many budgets were answered, how many the non-private floor bound
(dpscaling.law.monotonicity), and per axis how many steps to a larger value raised the predicted loss, and by how
much at most. Run from the workflow's directory when the bundle names its σ table relative to it.
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np

import dpscaling
from dpscaling.law.monotonicity import AXES, rises, sweep
from dpscaling.report.explorer.sweep import DEFAULT_DATA_DECADES, default_compute_range


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("bundle")
    parser.add_argument("--count", type=int, default=10, help="points per axis")
    parser.add_argument("--epsilon", type=float, nargs=2, default=(1.0, 1024.0), help="ε range")
    parser.add_argument("--users", type=float, nargs=2, default=None, help="N range (default: the explorer's)")
    parser.add_argument("--compute", type=float, nargs=2, default=None, help="C range (default: the explorer's)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    law = dpscaling.load_law(args.bundle)
    users = args.users or tuple(10.0**decade for decade in DEFAULT_DATA_DECADES)
    compute = args.compute or default_compute_range(law)

    def axis(low: float, high: float) -> np.ndarray:
        return np.geomspace(float(low), float(high), args.count)

    started = time.perf_counter()
    frame = sweep(law, axis(*args.epsilon), axis(*users), axis(*compute))
    answered = frame.dropna(subset=["predicted_loss"])
    report = {"budgets": len(frame), "answered": len(answered), "seconds": round(time.perf_counter() - started, 1),
              "below the floor after the query": int((answered["predicted_loss"] < answered["floor"] - 1e-9).sum()),
              "bound by the floor": int(answered["floor_bound"].sum())}
    for name in AXES:
        up = rises(frame, name)
        report[f"rises with {name}"] = len(up)
        report[f"largest rise with {name} (nats)"] = float(up["rise"].max()) if len(up) else 0.0
    if args.json:
        print(json.dumps(report, indent=2))
        return
    for key, value in report.items():
        print(f"{key:>40}: {value}")


if __name__ == "__main__":
    main()
