"""The adaptive design against the full grid on a known truth: error, regret and FLOPs, side by side.

    python benchmarks/adaptive_design.py --scale paper     # the paper's grid: 6 BERTs x 19 sigma-bar x 3 rates, 128K
    python benchmarks/adaptive_design.py --scale small     # 3 models x 5 sigma-bar, 2,000 steps (a minute)
    python benchmarks/adaptive_design.py --competitors     # and the designs it competes with, at its FLOPs

The truth is the synthetic law of dpscaling.law.synthetic (the paper's shape: E + A M^-a + B(1 + C s(sigma)) T^-b),
the worse two learning rates 2% and 4% worse; each run has a seed offset and measurement noise. The full grid trains
every point at every rate to the horizon (the paper's design); the adaptive design trains at the best rate only
(the protocol's choice, given here), its seed runs, then rounds chosen by dpscaling.design.choice. Both laws are
fitted with the sparse-design options (curve_horizons, fill_missing_models), which leave a full grid's law as the
paper's. Prints one row per design and the ratios; with --competitors, one row per competing design
(dpscaling.design.competitors: random, cheapest-first, cost-weighted random, the grid thinned evenly) at the adaptive
design's FLOPs, each scored as it is: error on the measurements it did not train, the same at the largest model and
the longest horizon, regret at the targets under the full grid's law. The randomised designs (random, cost-weighted
random) are scored over --draws draws (5 by default): each score's median and range, and the draws that left no law.
"""

from __future__ import annotations

import argparse
import json
import time
from itertools import product

import numpy as np

from dpscaling.design.answers import Target
from dpscaling.design.compare import compare
from dpscaling.design.competitors import COMPETITORS, RANDOMISED
from dpscaling.design.runs import DesignRun, design_flops, horizons
from dpscaling.design.settings import DesignSettings
from dpscaling.design.simulate import Simulator, run_design
from dpscaling.report.figures.context import AnalysisContext
from dpscaling.report.figures.settings import AnalysisSettings
from dpscaling.law import LawSettings
from dpscaling.law.artifact import fit_law
from dpscaling.law.columns import BERT_MODEL_SIZES
from dpscaling.law.synthetic import (
    PAPER_LEARNING_RATES, PAPER_MODELS, PAPER_NOISE_BATCH_RATIOS, DeterministicGaussianSigma, TrueLaw)

SCALES = {
    "small": dict(sizes={"S0": 1e5, "S1": 4e5, "S2": 1.6e6}, nbrs=(0.0, 2.0**-12, 2.0**-10, 2.0**-8, 2.0**-6),
                  rates=(2.0**-7,), horizon=2000, log_every=20, warmup=100, batch=32, seq_len=128,
                  targets=[(8.0, 1e5, 1e13), (1.0, 1e5, 1e13), (8.0, 1e6, 1e14)]),
    "paper": dict(sizes={name: float(BERT_MODEL_SIZES[name]) for name in PAPER_MODELS}, nbrs=PAPER_NOISE_BATCH_RATIOS,
                  rates=PAPER_LEARNING_RATES, horizon=128_000, log_every=1000, warmup=1000, batch=1024, seq_len=512,
                  targets=[(epsilon, users, compute) for epsilon, users, compute in product(
                      (1.0, 8.0), (1e7, 1e9), (1e18, 1e20))]),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--scale", choices=sorted(SCALES), default="small")
    parser.add_argument("--seed-fraction", type=float, default=0.25, help="the seed runs' horizon / the grid's")
    parser.add_argument("--rounds", type=int, default=4)
    parser.add_argument("--runs-per-round", type=int, default=4)
    parser.add_argument("--cap", type=float, default=0.1, help="compute cap, a fraction of the full grid's FLOPs")
    parser.add_argument("--replicates", type=int, default=8)
    parser.add_argument("--jackknife", action="store_true",
                        help="add the laws refitted with one trained point left out to the committee")
    parser.add_argument("--asymptote", default="per_curve", choices=["per_curve", "nonprivate",
                                                                      "per_curve_else_nonprivate"],
                        help="fit.extrapolation_asymptote of both laws (the paper's per_curve by default)")
    parser.add_argument("--contenders", type=int, default=0,
                        help="per target, rival answers whose loss gap to the consensus is a target too")
    parser.add_argument("--coverage", action="store_true",
                        help="every grid point's loss at the horizon is a target beside the answers")
    parser.add_argument("--fill-forms", action="store_true",
                        help="the committee's model forms include the fills' alternatives")
    parser.add_argument("--competitors", action="store_true",
                        help="also score the designs it competes with, at the adaptive design's FLOPs")
    parser.add_argument("--draws", type=int, default=5,
                        help="with --competitors: the draws each randomised design is scored over (their median and "
                             "range are printed)")
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    scale = SCALES[args.scale]
    sizes, rates, horizon = scale["sizes"], scale["rates"], scale["horizon"]
    penalty = {rate: 1.0 + 0.02 * rank for rank, rate in enumerate(rates)}
    simulator = Simulator(TrueLaw(), sizes, penalty, seed_noise=0.02, measurement_noise=0.005,
                          log_every=scale["log_every"])
    models = sorted(sizes, key=sizes.get)
    best_rate = {model: rates[0] for model in models}
    grid = [(model, float(nbr), rates[0]) for model, nbr in product(models, scale["nbrs"])]
    full_grid = [(model, float(nbr), float(rate)) for model, nbr, rate in product(models, scale["nbrs"], rates)]
    settings = LawSettings(warmup_steps=scale["warmup"], rolling_window=3, curve_horizons=True,
                           extrapolation_asymptote=args.asymptote,
                           fill_missing_models=True)
    options = dict(seq_len=scale["seq_len"], physical_batch=scale["batch"])
    analysis = AnalysisSettings()

    def fit(results, law_settings=settings):
        return fit_law(results, law_settings, **options)

    def context_of(law, members=None):
        return AnalysisContext(law, DeterministicGaussianSigma(), analysis, delta=1e-8, sampling="deterministic",
                               replicates=members)

    targets = [Target(*values) for values in scale["targets"]]
    full_flops = sum(6 * sizes[model] * scale["batch"] * scale["seq_len"] * horizon for model, _, _ in full_grid)
    design = DesignSettings(seed_steps=int(horizon * args.seed_fraction), horizon=horizon,
                            runs_per_round=args.runs_per_round, max_rounds=args.rounds, compute_cap=args.cap * full_flops,
                            stop_width=0.0, replicates=args.replicates, batch=scale["batch"], seq_len=scale["seq_len"],
                            jackknife=args.jackknife, coverage=args.coverage, contenders=args.contenders,
                            fill_forms=args.fill_forms)
    started = time.perf_counter()
    trained, rounds = run_design(simulator, grid, models, best_rate, targets, design, fit, settings, options,
                                 context_of)
    designed = time.perf_counter() - started
    full_runs = [DesignRun(*point, 0, horizon) for point in full_grid]
    result = compare(simulator, grid, trained, horizon, fit, context_of, targets, scale["batch"], scale["seq_len"],
                     full_runs=full_runs)
    report = {"scale": args.scale, "design_seconds": round(designed, 1), **result.row(),
              "regret per target": [round(value, 4) for value in result.regret],
              "rounds": [{"round": r.index, "runs": r.runs, "FLOPs fraction": r.flops / full_flops,
                          "widest band": max(r.widths), "chosen": len(r.chosen), "stopped": r.stopped} for r in rounds]}
    if args.competitors:
        spent = design_flops(trained, sizes, scale["batch"], scale["seq_len"])
        ladder = horizons(design.seed_steps, horizon)
        report["competitors"] = {"adaptive": _scores(result)}
        for name, choose in COMPETITORS.items():
            draws = []
            for draw in range(args.draws if name in RANDOMISED else 1):
                runs = choose(grid, ladder, spent, sizes, scale["batch"], scale["seq_len"],
                              rng=np.random.default_rng(draw))
                try:
                    scored = _scores(compare(simulator, grid, runs, horizon, fit, context_of, targets, scale["batch"],
                                             scale["seq_len"], full_runs=full_runs))
                except Exception as error:  # a design too sparse for a law is a result too
                    scored = {"FLOPs fraction": design_flops(runs, sizes, scale["batch"], scale["seq_len"]) / full_flops,
                              "failed": f"{type(error).__name__}: {error}"[:120]}
                draws.append({"runs": len(runs), **scored})
            report["competitors"][name] = draws[0] if len(draws) == 1 else _over_draws(draws)
    if args.json:
        print(json.dumps(report, indent=2, default=float))
        return
    for key, value in report.items():
        if key != "rounds":
            print(f"{key:>26}: {value}")
    for record in report["rounds"]:
        print(f"  round {record['round']}: {record['runs']} runs, {record['FLOPs fraction']:.3f} of the grid's FLOPs, "
              f"widest 90% band {record['widest band']:.3f}, chose {record['chosen']} {record['stopped']}")
    print(f"ratios: FLOPs {result.fraction:.3f}; error adaptive/grid "
          f"{result.adaptive_error / result.grid_error:.2f}; vs truth "
          f"{result.adaptive_truth_error / result.grid_truth_error:.2f}")
    for name, scores in report.get("competitors", {}).items():
        print(f"{name:>22}: " + ", ".join(f"{key} {value:.4g}" if isinstance(value, float) else f"{key} {value}"
                                          for key, value in scores.items()))


def _over_draws(draws: list[dict]) -> dict:
    """A randomised design's scores over its draws: each score's median and [min, max] over the draws that gave a
    law, and how many did not (a failed draw is a result: that design at that budget may leave no law). A score a
    draw's law could not give (NaN: no answer at a target, no prediction in the high-compute region) is left out
    of its median and counted beside its range."""
    scored = [draw for draw in draws if "failed" not in draw]
    summary: dict = {"draws": len(draws), "failed draws": len(draws) - len(scored)}
    for key in ("runs", "FLOPs fraction", "error", "high-compute error", "largest regret", "mean regret"):
        values = np.array([draw[key] for draw in scored], dtype=float)
        finite = values[np.isfinite(values)]
        if finite.size:
            summary[key] = float(np.median(finite))
            missing = f", {values.size - finite.size} NaN" if finite.size < values.size else ""
            summary[f"{key} range"] = f"[{finite.min():.4g}, {finite.max():.4g}]{missing}"
    return summary


def _scores(result) -> dict:
    """(a) error on the untrained measurements, (b) the same at the largest model and longest horizon, (c) regret."""
    return {"FLOPs fraction": result.fraction, "error": result.adaptive_error,
            "high-compute error": result.high_compute_error, "largest regret": max(result.regret),
            "mean regret": float(np.mean(result.regret))}


if __name__ == "__main__":
    np.seterr(all="ignore")
    main()
