"""Design study for the embedded default (docs/design-study.md): which CPU-sized design learns past unigram
statistics, spans >= 30x in parameter count, and keeps `make run` <= 30 min on 2 quiet cores?

Two modes:

* ``probe`` — cheap estimates before any full grid: packs the vendored corpus under a trained
  vocabulary of each asked size (the data stage's own functions), reports its held-out unigram
  floor, then trains single runs of each asked shape (the training library, one XLA thread, as a
  workflow job runs) and reports parameter counts, the final smoothed training loss and the CPU
  and wall seconds per run (start-up and compilation included) and per step.

      python benchmarks/design_study.py probe --vocab 1024 --shapes 1x32 2x64 2x128 4x128 \\
          --steps 400 --batch 32 --nbr 0.000244140625 --out /tmp/probe.json

* ``candidate`` — the real pipeline: snakemake on config/config.yaml with the candidate's YAML
  layered on top (as the default is layered on the schema's defaults) in a scratch directory, the
  ``all`` target (or ``--target``); reports the floor, each model's parameter count and final loss
  (non-private and smallest sigma-bar), the size span, CPU (user+sys of snakemake and every job) and
  wall time with the load average, and the findings table.

      python benchmarks/design_study.py candidate cand.yaml --scratch /tmp/cand --out /tmp/cand.json

Numbers of the study: docs/design-study.md.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def load_average() -> list[float]:
    return [round(x, 2) for x in os.getloadavg()]


def children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def self_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


# --------------------------------------------------------------------------- probe


def probe_data(scratch: Path, vocab_size: int, seq_len: int) -> tuple[Path, dict]:
    """Packed shards of the vendored corpus under a trained ``vocab_size`` vocabulary, and its floor."""
    from dpscaling.data.floor import unigram_floor
    from dpscaling.config.checks import corpus_spec
    from dpscaling.data.stage import pack_documents, prepare_documents, train_vocabulary

    documents = scratch / "documents.parquet"
    if not documents.is_file():
        import yaml

        from dpscaling.config.schema import validate_config

        config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
        validate_config(config)  # fills the schema's defaults
        spec = corpus_spec(config, repo=REPO)
        prepare_documents(spec, 0.02, 0, documents)
    out = scratch / f"v{vocab_size}-s{seq_len}"
    if not (out / "packed" / "meta.json").is_file():
        vocab = train_vocabulary(documents, vocab_size, out / "vocab.txt")
        pack_documents(documents, vocab.path, "train", seq_len, 4096, out / "packed")
    floor = unigram_floor(out / "packed")
    return out / "packed", floor.to_dict()


def overrides(settings: list[str]) -> list[tuple[str, object]]:
    """``key=value`` training settings (values read as YAML: numbers, booleans, strings)."""
    import yaml

    pairs = []
    for setting in settings:
        key, sep, value = setting.partition("=")
        if not sep:
            raise SystemExit(f"--set {setting!r}: expected key=value (a training key, e.g. adam_eps=1e-5)")
        parsed = yaml.safe_load(value)
        try:  # YAML 1.1 reads 1e-6 (no dot) as a string
            parsed = float(parsed) if isinstance(parsed, str) else parsed
        except ValueError:
            pass
        pairs.append((key, parsed))
    return pairs


def start_output_bias_at_unigram(data_dir: Path, counts_file: str | None = None):
    """Probe only (not a training option): start every run's MLM output bias at the train split's add-one
    unigram log-frequencies (centred), so a run starts at the unigram floor instead of learning it, by wrapping
    the training loop's initial state. Returns the bias."""
    import numpy as np

    import dpscaling.train.loop as loop
    from dpscaling.data.shards import load_meta, load_split

    meta = load_meta(data_dir)
    counts = (np.load(counts_file) if counts_file else
              np.bincount(np.asarray(load_split(data_dir, "train")).ravel(), minlength=meta.vocab_size)) + 1.0
    counts[list(meta.special_ids)] = 1.0
    bias = np.log(counts / counts.sum())
    bias = (bias - bias.mean()).astype(np.float32)
    original = loop.init_state

    def init_state(model, objective, optimizer, config, seq_len, key=None):
        state = original(model, objective, optimizer, config, seq_len, key)
        params = dict(state.params)
        params["mlm_output_bias"] = {"bias": bias}
        return state._replace(params=params, opt_state=optimizer.init(params))

    loop.init_state = init_state
    return bias


def scale_output_bias_steps(factor: float) -> None:
    """Probe only: multiply Adam's update of the MLM output bias by ``factor`` (post-processing of the noisy
    gradient, so no privacy cost), by wrapping the training step's optimizer."""
    import jax
    import optax

    import dpscaling.train.loop as loop
    import dpscaling.train.step as step

    original = step.make_optimizer

    def scaled(tree):
        return jax.tree_util.tree_map_with_path(
            lambda path, _: factor if any(getattr(k, "key", None) == "mlm_output_bias" for k in path) else 1.0, tree)

    def make_optimizer(config, hyperparams=None):
        base = original(config, hyperparams)

        def update(updates, state, params=None):
            updates, state = base.update(updates, state, params)
            return jax.tree.map(lambda u, f: u * f, updates, scaled(updates)), state

        return optax.GradientTransformation(base.init, update)

    step.make_optimizer = loop.make_optimizer = make_optimizer


def warm_start_output_bias(steps: int, factor: float) -> None:
    """Probe only: for the first ``steps`` updates apply only the MLM output bias's Adam step (times
    ``factor``) and hold every other parameter, so the bias learns the unigram before the tied embeddings
    can take it on (post-processing of the noisy gradient: no privacy cost)."""
    import jax
    import jax.numpy as jnp
    import optax

    import dpscaling.train.loop as loop
    import dpscaling.train.step as step

    original = step.make_optimizer

    def is_bias(path) -> bool:
        return any(getattr(k, "key", None) == "mlm_output_bias" for k in path)

    def make_optimizer(config, hyperparams=None):
        base = original(config, hyperparams)

        def init(params):
            return (base.init(params), jnp.zeros([], jnp.int32))

        def update(updates, state, params=None):
            inner, count = state
            updates, inner = base.update(updates, inner, params)
            warm = count < steps
            updates = jax.tree_util.tree_map_with_path(
                lambda path, u: jnp.where(warm, u * factor, u) if is_bias(path) else jnp.where(warm, 0.0, u),
                updates)
            return updates, (inner, count + 1)

        return optax.GradientTransformation(init, update)

    step.make_optimizer = loop.make_optimizer = make_optimizer


def probe(args: argparse.Namespace) -> dict:
    from dpscaling.train.distributed import limit_host_threads

    limit_host_threads(1)
    import yaml

    from dpscaling.config.schema import validate_config
    from dpscaling.train import run_training
    from dpscaling.train.config import job_train_config

    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    validate_config(config, REPO / "workflow" / "schemas" / "config.schema.yaml")
    training = {**config["training"], "steps": args.steps, "decay_steps": args.steps,
                "warmup_steps": args.warmup or max(1, args.steps // 10), "physical_batch": args.batch,
                "log_every": args.log_every, "checkpoint_every": args.steps, **dict(overrides(args.set))}
    scratch = Path(args.scratch)
    scratch.mkdir(parents=True, exist_ok=True)
    report: dict = {"load_start": load_average(), "runs": [], "data": {}}
    unigram_bias = None
    for vocab_size in args.vocab:
        started, cpu0 = time.perf_counter(), self_cpu()
        if args.data:  # a workflow's packed shards (with its public unigram, if it has one)
            from dpscaling.data.floor import unigram_floor

            data_dir, floor = Path(args.data), unigram_floor(args.data).to_dict()
        else:
            data_dir, floor = probe_data(scratch, vocab_size, args.seq_len)
        report["data"][vocab_size] = {"floor": floor, "wall_s": time.perf_counter() - started,
                                      "cpu_s": self_cpu() - cpu0}
        print(json.dumps({"vocab": vocab_size, **report["data"][vocab_size]}), flush=True)
        if args.bias_init == "unigram" or args.bias_counts:
            unigram_bias = start_output_bias_at_unigram(data_dir, args.bias_counts)
        if args.bias_lr_factor != 1.0:
            scale_output_bias_steps(args.bias_lr_factor)
        if args.bias_warm_start:
            warm_start_output_bias(args.bias_warm_start, args.bias_warm_factor)
        for shape in args.shapes:
            # LAYERSxHIDDEN, or LAYERSxHIDDENxHEADS
            layers, hidden, *heads = (int(x) for x in shape.split("x"))
            model = {"layers": layers, "heads": heads[0] if heads else max(2, hidden // 64), "hidden": hidden,
                     "max_positions": args.seq_len, "type_vocab_size": 1}
            for nbr in args.nbr:
                for lr in args.lr:
                    name = "-".join([f"v{vocab_size}-{shape}-{args.mechanism}-nbr{nbr}-lr{lr}-w{training['warmup_steps']}",
                                     *args.set,
                                     *args.model_set,
                                     *(["bias-unigram" + ("-file" if args.bias_counts else "")] if unigram_bias is not None else []),
                                     *([f"bias-lr-x{args.bias_lr_factor:g}"] if args.bias_lr_factor != 1.0 else []),
                                     *([f"bias-warm{args.bias_warm_start}-x{args.bias_warm_factor:g}"]
                                       if args.bias_warm_start else [])])
                    run_dir = scratch / "runs" / name
                    shutil.rmtree(run_dir, ignore_errors=True)
                    tc = job_train_config(model, training, {"model": shape, "nbr": str(nbr), "lr": str(lr),
                                                        "batch": str(args.batch), "seed": "0",
                                                        "mech": args.mechanism}, args.seq_len)
                    tc = dataclasses.replace(tc, model_overrides={**tc.model_overrides,
                                                                  **dict(overrides(args.model_set))})
                    started, cpu0, load0 = time.perf_counter(), self_cpu(), load_average()
                    summary = run_training(tc, data_dir, run_dir / "curve.parquet", run_dir / "ckpt")
                    wall, cpu = time.perf_counter() - started, self_cpu() - cpu0
                    row = {"vocab": vocab_size, "shape": shape, "mechanism": args.mechanism, "set": args.set, "model_set": args.model_set, "nbr": nbr, "lr": lr, "steps": summary.steps,
                           "batch": args.batch, "seq_len": args.seq_len, "status": summary.status,
                           "params": summary.n_params, "params_non_embedding": summary.n_params_non_embedding,
                           "final_loss": summary.final_loss, "floor": floor["nats"],
                           "below_floor": None if summary.final_loss is None else floor["nats"] - summary.final_loss,
                           "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
                           "cpu_s_per_step": round(cpu / max(1, summary.steps), 4), "load": [load0, load_average()]}
                    report["runs"].append(row)
                    print(json.dumps(row), flush=True)
                    shutil.rmtree(run_dir / "ckpt", ignore_errors=True)
    return report


# --------------------------------------------------------------------------- candidate


def model_losses(results_dir: Path, floor: float) -> list[dict]:
    """Per model: parameters, and the final smoothed training loss (the last logged interval's mean,
    seeds averaged; best learning rate) at sigma-bar 0 and at the smallest positive sigma-bar."""
    from dpscaling.findings.paper import final_losses
    from dpscaling.law.collect import read_tidy_results
    from dpscaling.law.columns import CROSS_ENTROPY, MODEL, MODEL_SIZE, NOISE_BATCH_RATIO

    ends = final_losses(read_tidy_results(results_dir / "law" / "results.parquet"))
    rows = []
    for (model, size), group in ends.groupby([MODEL, MODEL_SIZE]):
        public = group[group[NOISE_BATCH_RATIO] == 0]
        private = group[group[NOISE_BATCH_RATIO] > 0]
        smallest = private[private[NOISE_BATCH_RATIO] == private[NOISE_BATCH_RATIO].min()]
        row = {"model": model, "params": int(size),
               "loss_nonprivate": float(public[CROSS_ENTROPY].min()) if len(public) else None,
               "smallest_sigma_bar": float(smallest[NOISE_BATCH_RATIO].iloc[0]) if len(smallest) else None,
               "loss_smallest_sigma_bar": float(smallest[CROSS_ENTROPY].min()) if len(smallest) else None}
        row["margin_nonprivate"] = None if row["loss_nonprivate"] is None else floor - row["loss_nonprivate"]
        row["margin_smallest_sigma_bar"] = (None if row["loss_smallest_sigma_bar"] is None
                                            else floor - row["loss_smallest_sigma_bar"])
        rows.append(row)
    return sorted(rows, key=lambda row: row["params"])


def run_summaries(results_dir: Path) -> list[dict]:
    """Every finished training run's final logged loss and step rate, read from its metrics file (so a
    candidate stopped before the law still reports what it trained)."""
    import pandas as pd

    rows = []
    for path in sorted((results_dir / "runs").glob("model=*/batch=*/seed=*/nbr=*/lr=*/metrics.parquet")):
        frame = pd.read_parquet(path)
        last = frame.iloc[-1]
        rows.append({"model": last["model"], "params": int(last["n_params"]), "seed": int(last["seed"]),
                     "nbr": float(last["noise_batch_ratio"]), "lr": float(last["learning_rate"]),
                     "steps": int(last["step"]), "final_loss": float(last["loss"]),
                     "median_steps_per_s": round(float(frame["steps_per_s"].median()), 2)})
    return rows


def candidate(args: argparse.Namespace) -> dict:
    import threading

    import yaml

    layer = Path(args.layer).resolve()
    scratch = Path(args.scratch)
    scratch.mkdir(parents=True, exist_ok=True)
    run_name = yaml.safe_load(layer.read_text()).get("run_name", "default")
    command = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"),
               "--profile", str(REPO / "profiles" / "local"), "--cores", str(args.cores),
               "--configfile", str(REPO / "config" / "config.yaml"), str(layer), "--", args.target]
    loads: list[list[float]] = []
    done = threading.Event()

    def sample() -> None:
        while not done.wait(30.0):
            loads.append(load_average())

    sampler = threading.Thread(target=sample, daemon=True)
    load0, cpu0, started = load_average(), children_cpu(), time.perf_counter()
    sampler.start()
    if args.summarize:
        status = None
    else:
        with open(scratch / "snakemake.log", "w") as log:
            status = subprocess.run(command, cwd=scratch, stdout=log, stderr=subprocess.STDOUT).returncode
    wall, cpu = time.perf_counter() - started, children_cpu() - cpu0
    done.set()
    results = scratch / "results" / run_name
    report: dict = {"candidate": str(layer), "layer": yaml.safe_load(layer.read_text()), "target": args.target,
                    "status": status, "wall_s": round(wall, 1), "cpu_s": round(cpu, 1),
                    "load_start": load0, "load_end": load_average(),
                    "load_1min_mean": round(sum(x[0] for x in loads) / len(loads), 2) if loads else None}
    floor_file = results / "data" / "unigram_floor.json"
    if floor_file.is_file():
        report["floor"] = json.loads(floor_file.read_text())["nats"]
    report["runs"] = run_summaries(results)
    if (results / "law" / "results.parquet").is_file() and "floor" in report:
        report["models"] = model_losses(results, report["floor"])
        sizes = [row["params"] for row in report["models"]]
        report["span"] = round(max(sizes) / min(sizes), 1)
    findings = results / "tables" / "findings.md"
    if findings.is_file():
        report["findings"] = findings.read_text()
    print(json.dumps({k: v for k, v in report.items() if k != "findings"}, indent=1))
    print(report.get("findings", "(no findings table)"))
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="mode", required=True)
    p = sub.add_parser("probe")
    p.add_argument("--vocab", type=int, nargs="+", default=[1024])
    p.add_argument("--shapes", nargs="+", default=["1x32", "2x64", "2x128"])
    p.add_argument("--steps", type=int, default=400)
    p.add_argument("--warmup", type=int, default=0)
    p.add_argument("--batch", type=int, default=32)
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--nbr", type=float, nargs="+", default=[0.000244140625])
    p.add_argument("--lr", type=float, nargs="+", default=[0.0078125])
    p.add_argument("--mechanism", default="dpsgd", help="the noise mechanism (training.mechanisms' names: dpsgd, "
                   "bandmf-b<b>)")
    p.add_argument("--log-every", type=int, default=10)
    p.add_argument("--bias-init", choices=["zeros", "unigram"], default="zeros",
                   help="unigram: start the MLM output bias at the unigram log-frequencies (a probe, not an option)")
    p.add_argument("--bias-counts", help="with --bias-init unigram: token counts (.npy) to start from instead")
    p.add_argument("--bias-lr-factor", type=float, default=1.0,
                   help="multiply the MLM output bias's Adam steps by this (a probe, not an option)")
    p.add_argument("--bias-warm-start", type=int, default=0, metavar="K",
                   help="for the first K steps update only the MLM output bias (a probe, not an option)")
    p.add_argument("--bias-warm-factor", type=float, default=1.0,
                   help="multiply the bias's Adam steps by this during --bias-warm-start")
    p.add_argument("--set", nargs="*", default=[], metavar="KEY=VALUE",
                   help="training settings over the default's (e.g. adam_eps=1e-5 warmup_steps=100)")
    p.add_argument("--model-set", nargs="*", default=[], metavar="KEY=VALUE",
                   help="model shape fields over the shape's (e.g. layer_norm=pre)")
    p.add_argument("--data", help="train on these packed shards (e.g. a make run's results/default/data/packed/seq=64, "
                                  "its public unigram included) instead of packing the corpus; --vocab is then ignored")
    p.add_argument("--scratch", default="/tmp/design-probe")
    p.add_argument("--out", required=True)
    c = sub.add_parser("candidate")
    c.add_argument("layer", help="the candidate's YAML, layered on config/config.yaml")
    c.add_argument("--scratch", required=True)
    c.add_argument("--target", default="all")
    c.add_argument("--cores", type=int, default=2)
    c.add_argument("--out", required=True)
    c.add_argument("--summarize", action="store_true", help="only read what an earlier (or running) run wrote")
    args = parser.parse_args()
    report = probe(args) if args.mode == "probe" else candidate(args)
    Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    sys.exit(main())
