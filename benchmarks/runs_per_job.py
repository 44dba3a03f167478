"""One job per run against one job per shape (``training.runs_per_job``), side by side on one config.

Results: docs/runs.md ("One job per shape"). For each setting this runs ``snakemake train`` (or ``--target``)
in a fresh directory of its own, after that directory's data stage (not timed), with one persistent
compilation cache shared by every run, warmed by a first, untimed pass, so that both settings load what
they compile: it measures start-up, tracing and steps, not XLA compilation. It prints each setting's
training jobs, wall seconds and CPU seconds (Snakemake and all its jobs), the ratios, and checks that both
wrote the same curves. The last line printed is one JSON object.

    python benchmarks/runs_per_job.py                       # the tests' smoke grid (tests/configs/smoke.yaml)
    python benchmarks/runs_per_job.py --configfile config/config.yaml --target learning_rates
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pandas as pd

REPO = Path(__file__).resolve().parents[1]
SETTINGS = ("one", "shape")


def snakemake(workdir: Path, configfiles: list[str], setting: str, *targets: str, cores: int) -> str:
    layer = workdir / "runs-per-job.yaml"
    layer.write_text(f"training:\n  runs_per_job: {setting}\n")
    command = [sys.executable, "-m", "snakemake", *targets, "--snakefile", str(REPO / "Snakefile"),
               "--directory", str(workdir), "--cores", str(cores), "--configfile", *configfiles, str(layer)]
    result = subprocess.run(command, capture_output=True, text=True, env=os.environ | {"PYTHONUNBUFFERED": "1"})
    if result.returncode:
        sys.exit(f"snakemake {' '.join(targets)} ({setting}) failed:\n{result.stderr[-3000:]}")
    return result.stderr


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def measure(root: Path, configfiles: list[str], setting: str, target: str, cores: int) -> dict:
    workdir = root / setting
    workdir.mkdir()
    snakemake(workdir, configfiles, setting, "data", cores=cores)
    cpu, wall = children_cpu(), time.perf_counter()
    log = snakemake(workdir, configfiles, setting, target, cores=cores)
    cpu, wall = children_cpu() - cpu, time.perf_counter() - wall
    jobs = sum(log.count(f"rule {rule}:") for rule in ("train_run", "train_noise_levels", "learning_rate_run",
                                                        "learning_rate_ladder"))
    curves = {str(path.relative_to(workdir / "results")): pd.read_parquet(path)
              for path in sorted((workdir / "results").rglob("runs/**/metrics.parquet"))}
    return {"setting": setting, "training_jobs": jobs, "runs": len(curves), "wall_s": round(wall, 1),
            "cpu_s": round(cpu, 1), "curves": curves}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--configfile", nargs="+", default=[str(REPO / "tests" / "configs" / "smoke.yaml")])
    parser.add_argument("--target", default="train", help="the Snakemake target timed (after `data`)")
    parser.add_argument("--cores", type=int, default=2)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="runs-per-job-") as tmp:
        root = Path(tmp)
        os.environ.setdefault("JAX_COMPILATION_CACHE_DIR", str(root / "jax-cache"))
        warm = root / "warm"
        warm.mkdir()
        snakemake(warm, args.configfile, "one", args.target, cores=args.cores)  # fills the compilation cache
        results = {setting: measure(root, args.configfile, setting, args.target, args.cores) for setting in SETTINGS}
    one, shape = results["one"], results["shape"]
    if one["curves"].keys() != shape["curves"].keys():
        sys.exit("the two settings wrote different runs")
    columns = ["step", "loss", "grad_norm", "clipped_fraction", "lr"]
    identical = all(one["curves"][run][columns].equals(shape["curves"][run][columns]) for run in one["curves"])
    for result in (one, shape):
        print(f"runs_per_job: {result['setting']:5s}  {result['training_jobs']:3d} training jobs for {result['runs']} runs"
              f"  {result['wall_s']:7.1f} s wall  {result['cpu_s']:7.1f} CPU-s")
    ratios = {"cpu_shape_over_one": round(shape["cpu_s"] / one["cpu_s"], 3),
              "wall_shape_over_one": round(shape["wall_s"] / one["wall_s"], 3)}
    print(f"shape / one: CPU {ratios['cpu_shape_over_one']:.2f}, wall {ratios['wall_shape_over_one']:.2f}; "
          f"curves identical: {identical}")
    summary = {key: value for result in (one, shape) for key, value in
               {f"{result['setting']}_{name}": result[name] for name in ("training_jobs", "runs", "wall_s", "cpu_s")}.items()}
    print(json.dumps(summary | ratios | {"identical_curves": identical, "configfiles": args.configfile,
                                         "target": args.target, "cores": args.cores}))
    if not identical:
        sys.exit(1)


if __name__ == "__main__":
    main()
