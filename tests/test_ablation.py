"""The physical-batch ablation: its grid, the final-model evaluation, its figures and table, end to end.

Documented in docs/appendix-experiments.md.
"""

from __future__ import annotations

import itertools
import json
import re
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import yaml

from conftest import REPO, run_snakemake
from dpscaling.core.errors import UserError
from dpscaling.workflow.grid import (
    TrainPoint, ablation_curve_points, ablation_eval_points, ablation_grid, ablation_sweep_points, canonical)
from dpscaling.config.checks import check_config
from dpscaling.config.schema import validate_config
from dpscaling.workflow.params import ablation_training

SCHEMA = str(REPO / "workflow" / "schemas" / "config.schema.yaml")
SMOKE = REPO / "tests" / "configs" / "smoke.yaml"


def merged(*names: str) -> dict:
    """The validated config of ``names`` deep-merged in order, or of config/config.yaml when none is
    given (as the Snakefile layers ``--configfile``s; tests/test_config_layering.py checks the real one)."""

    def merge(base: dict, extra: dict) -> dict:
        for key, value in extra.items():
            base[key] = merge(base.get(key, {}), value) if isinstance(value, dict) else value
        return base

    config = {} if names else yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    for name in names:
        config = merge(config, yaml.safe_load(Path(name).read_text()))
    validate_config(config, SCHEMA)
    return config


# ---------------------------------------------------------------------------- the grid


def test_paper_ablation_is_the_papers_experiment() -> None:
    config = merged(REPO / "config" / "paper.yaml")
    check_config(config)
    block = config["ablation_batch"]
    # The paper's NanoDO pipeline (appendix "Training Pipelines"): a ~30M decoder, 32K iterations.
    assert block["model"] == "NanoDO30M" and block["steps"] == block["decay_steps"] == 32000
    assert block["noise_batch_ratios"] == [0.5**20, 0.5**15, 0.5**10]
    assert block["physical_batches"] == [128, 512, 2048, 8192]
    assert len(block["seeds"]) == 3 and block["learning_rate"] == 0.5**8
    assert block["sweep"] == {"noise_batch_ratio": 0.5**15, "learning_rates": [0.5**6, 0.5**7, 0.5**8, 0.5**9]}
    assert block["evaluation"]["examples"] == 1_000_000
    curves, sweep = ablation_curve_points(config), ablation_sweep_points(config)
    assert len(curves) == 3 * 4 * 3 and len(sweep) == 4 * 4 * 3
    # The sweep's 2^-8 runs at 2^-15 are the ablation's own: trained once.
    grid = ablation_grid(config)
    assert len(grid) == len(set(grid)) == 36 + 48 - 12
    evaluated = ablation_eval_points(config)
    assert len(evaluated) == 4 * 3 and set(evaluated) <= set(curves) & set(sweep)
    assert {p.wildcards["nbr"] for p in evaluated} == {"0.000030517578125"}  # canonical, no exponent


def test_ablation_grid_expands_and_deduplicates() -> None:
    config = {"ablation_batch": {
        "model": "M", "noise_batch_ratios": [0.25, 0.5], "physical_batches": [4, 8], "seeds": [0, 1],
        "learning_rate": 0.1, "sweep": {"noise_batch_ratio": 0.125, "learning_rates": [0.2, 0.3]}}}
    curves, sweep = ablation_curve_points(config), ablation_sweep_points(config)
    assert len(curves) == 8 and TrainPoint("M", 8, 1, 0.5, 0.1) in curves
    assert len(sweep) == 8 and TrainPoint("M", 4, 0, 0.125, 0.3) in sweep
    # The sweep does not include the ablation's learning rate: the evaluated runs are extra jobs.
    evaluated = ablation_eval_points(config)
    assert evaluated == sorted(TrainPoint("M", b, s, 0.125, 0.1) for b in (4, 8) for s in (0, 1))
    assert sorted(ablation_grid(config)) == sorted(set(curves) | set(sweep) | set(evaluated))
    assert len(ablation_grid(config)) == 20


def test_ablation_jobs_take_their_horizon_from_the_block() -> None:
    config = merged()
    config["ablation_batch"]["microbatch_size"] = 16
    small, large = ablation_training(config, 8), ablation_training(config, 64)
    assert small["steps"] == config["ablation_batch"]["steps"] != config["training"]["steps"]
    assert small["microbatch_size"] is None and large["microbatch_size"] == 16  # min(micro, batch)
    assert small["clip_norm"] == config["training"]["clip_norm"] and large["physical_batch"] == 64
    assert "noise_batch_ratios" not in small  # a change to the main grid retrains no ablation job


@pytest.mark.parametrize(
    "override, key",
    [
        ({"model": "BertGiant"}, "ablation_batch.model"),
        ({"steps": 10, "warmup_steps": 10}, "ablation_batch.warmup_steps"),
        ({"log_every": 10, "checkpoint_every": 15}, "ablation_batch.checkpoint_every"),
        ({"physical_batches": [8, 24], "microbatch_size": 16}, "ablation_batch.microbatch_size"),
    ],
)
def test_bad_ablation_blocks_are_refused_by_key(override: dict, key: str) -> None:
    config = merged()
    config["ablation_batch"].update(override)
    with pytest.raises(UserError, match=key.replace(".", r"\.")):
        check_config(config)


def test_targets_are_planned_apart_from_the_main_grid(tmp_path) -> None:
    """ablation_batch trains only its own jobs, under ablation/; `figures` and `all` never touch them."""
    paper = ["--configfile", str(REPO / "config" / "paper.yaml")]
    stats = _job_stats(run_snakemake("-n", "ablation_batch", *paper, cwd=tmp_path).stdout)
    assert stats["ablation_run"] == 72 and stats["ablation_evaluate"] == 12 and stats["figure"] == 2
    assert "train_run" not in stats and "fit_law" not in stats
    assert "ablation" not in run_snakemake("-n", "all", cwd=tmp_path).stdout  # `all` includes `figures`
    aliases = run_snakemake("-n", "lr_curves", "throughput", "nonprivate", cwd=tmp_path).stdout
    for path in ("figures/fig-training.png", "figures/fig-nonprivate_reproduction.csv", "tables/tab-throughput.md"):
        assert f"results/default/{path}" in aliases, path
    assert "ablation" not in aliases
    assert not (tmp_path / "results").exists()


def _job_stats(output: str) -> dict[str, int]:
    section = output.split("Job stats:", 1)[1]
    return {rule: int(count) for rule, count in re.findall(r"^(\w+)\s+(\d+)\s*$", section, flags=re.MULTILINE)}


# ---------------------------------------------------------------------------- the figures' arithmetic


def _curves() -> pd.DataFrame:
    """Two seeds of two batch sizes at two learning rates and two σ̄ (the sweep's at 0.5, the ablation's at
    lr 0.1); seed 1 of (σ̄ 0.5, B=8, lr 0.2) diverged after step 10."""
    rows = []
    for nbr, lr, batch, seed in itertools.product((0.25, 0.5), (0.1, 0.2), (4, 8), (0, 1)):
        if (nbr, lr) == (0.25, 0.2):
            continue  # the sweep is at σ̄ = 0.5 only
        diverged = (nbr, batch, lr, seed) == (0.5, 8, 0.2, 1)
        for step in (10,) if diverged else (10, 20):
            loss = 5.0 - step / 10 - batch / 100 - lr + seed / 10 + nbr
            rows.append({"Model": "M", "Model Size": 1.0, "Learning Rate": lr, "Iterations": step,
                         "Noise Batch Ratio": nbr, "Cross Entropy": loss, "Seed": seed,
                         "Status": "diverged" if diverged else "finished", "Batch Size": batch,
                         "In Ablation": lr == 0.1, "In Sweep": nbr == 0.5})
    return pd.DataFrame(rows)


def test_seed_summary_and_best_learning_rate_per_iteration(tmp_path) -> None:
    from dpscaling.report.figures import ABLATION_FIGURES, FIGURES, render
    from dpscaling.report.figures.physical_batch import AblationContext, ablation_table, sweep_table

    context = AblationContext(_curves())
    ablation = ablation_table(context).set_index(["Noise Batch Ratio", "Batch Size", "Iterations"])
    assert set(ablation["Learning Rate"]) == {0.1} and len(ablation) == 2 * 2 * 2
    row = ablation.loc[(0.5, 4, 20)]
    assert row["Cross Entropy"] == pytest.approx(5.0 - 2 - 0.04 - 0.1 + 0.05 + 0.5)
    assert (row["Cross Entropy Min"], row["Cross Entropy Max"], row["Seeds"]) == pytest.approx((3.36, 3.46, 2))
    sweep = sweep_table(context).set_index(["Batch Size", "Iterations"])
    assert set(sweep["Noise Batch Ratio"]) == {0.5}
    assert sweep.loc[(4, 20), "Best Learning Rate"] == 0.2  # lower loss at every iteration
    # (8, 0.2) lacks seed 1 at step 20: only lr 0.1 is averaged there; its diverged seed is counted.
    assert sweep.loc[(8, 20), "Best Learning Rate"] == 0.1 and sweep.loc[(8, 10), "Best Learning Rate"] == 0.2
    assert sweep.loc[(8, 10), "Unfinished Seeds"] == 1
    # Both draw (one panel per σ̄), with their data beside them; `figures` does not include them.
    assert not set(ABLATION_FIGURES) & set(FIGURES)
    for name in ABLATION_FIGURES:
        written = render(name, context, tmp_path / name)
        assert [p.suffix for p in written] == [".pdf", ".png", ".csv"] and all(p.stat().st_size for p in written)


def test_batch_gap_is_the_spread_of_seed_means_against_the_widest_seed_range() -> None:
    from dpscaling.report.tables.batch_gap import batch_gap_table

    table = batch_gap_table(_curves(), final_intervals=1).set_index(["Noise Batch Ratio", "Batch Size"])
    assert len(table) == 2 * 2 and set(table["Seeds"]) == {2}  # the ablation's learning rate only
    row = table.loc[(0.5, 4)]
    assert row["Final Loss"] == pytest.approx(5.0 - 2 - 0.04 - 0.1 + 0.05 + 0.5)
    assert (row["Final Loss Min"], row["Final Loss Max"]) == pytest.approx((3.36, 3.46))
    # B = 4 and 8 differ by 0.04, the seeds by 0.1: consistent with "loss depends on σ̄, not on B".
    assert (row["Batch Gap"], row["Seed Spread"]) == pytest.approx((0.04, 0.1)) and row["Gap Within Seed Spread"]
    # The final loss averages the last intervals (steps 10 and 20 here).
    two = batch_gap_table(_curves(), final_intervals=2).set_index(["Noise Batch Ratio", "Batch Size"])
    assert two.loc[(0.5, 4), "Final Loss"] == pytest.approx(row["Final Loss"] + 0.5)
    # A batch effect larger than the seeds' noise is flagged, at every σ̄.
    curves = _curves()
    curves.loc[curves["Batch Size"] == 8, "Cross Entropy"] += 0.3
    wide = batch_gap_table(curves, final_intervals=1)
    assert wide["Batch Gap"].to_numpy() == pytest.approx([0.26] * 4) and not wide["Gap Within Seed Spread"].any()


# ---------------------------------------------------------------------------- the evaluation


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> tuple[Path, Path, Path]:
    """(packed data, checkpoint dir, curve) of a one-layer model trained 20 steps."""
    from dp_training_data import build_packed_corpus
    from dpscaling.train import TrainConfig, run_training

    root = tmp_path_factory.mktemp("evaluate")
    build_packed_corpus(root / "packed", seq_len=64, n_documents=20)
    config = TrainConfig(model="custom", model_name="Tiny",
                         model_overrides=dict(num_layers=1, num_heads=2, hidden_size=32), batch_size=16,
                         num_steps=20, warmup_steps=2, decay_steps=20, learning_rate=2.0**-7,
                         noise_batch_ratio=2.0**-10, seed=3, log_every=5, checkpoint_every=10)
    run_training(config, root / "packed", root / "metrics.parquet", root / "ckpt")
    return root / "packed", root / "ckpt", root / "metrics.parquet"


def test_evaluation_scores_the_final_checkpoint(trained) -> None:
    from dpscaling.data.shards import load_meta
    from dpscaling.train.evaluate import evaluate_checkpoint, sample_rows

    data, checkpoint, curve = trained
    result = evaluate_checkpoint(checkpoint, data, 200, batch_size=64, seed=1)
    assert result.step == 20 and result.num_steps == 20  # the last checkpoint, not the one at step 10
    assert (result.model, result.batch_size, result.seed, result.learning_rate) == ("Tiny", 16, 3, 2.0**-7)
    assert result.examples == 200 and result.masked_tokens >= 200
    assert 0.0 <= result.accuracy <= 1.0
    # The final model on training sequences vs the last logged interval (steps 16-20, 80 sequences,
    # measured before each update): per-sequence losses have a std of ~0.5 nats, so the two means differ
    # by noise of ~0.5 * sqrt(1/80 + 1/200) = 0.07, plus the model's progress within the interval.
    losses = pd.read_parquet(curve)["loss"].to_numpy()
    assert losses[-1] - (losses[-2] - losses[-1]) - 0.3 <= result.loss <= losses[-1] + 0.3
    assert result.loss < np.log(load_meta(data).vocab_size)  # better than uniform: it learned
    # The same masked tokens whatever the batch size (memory only); another seed draws other sequences.
    again = evaluate_checkpoint(checkpoint, data, 200, batch_size=48, seed=1)
    assert again.loss == pytest.approx(result.loss, rel=1e-5) and again.accuracy == result.accuracy
    assert not np.array_equal(sample_rows(1000, 200, 1), sample_rows(1000, 200, 2))
    # More examples than the split holds: all of them.
    everything = evaluate_checkpoint(checkpoint, data, 10**9, batch_size=64)
    assert everything.examples == load_meta(data).n_train


def test_evaluation_refuses_a_directory_without_checkpoints(trained, tmp_path) -> None:
    from dpscaling.train.evaluate import evaluate_checkpoint

    data, _, _ = trained
    with pytest.raises(UserError, match="training configuration"):
        evaluate_checkpoint(tmp_path, data, 10)


# ---------------------------------------------------------------------------- end to end


@pytest.mark.slow(minutes=4.5)
def test_ablation_target_end_to_end(tmp_path) -> None:
    """`snakemake ablation_batch` on the smoke config: 8 training jobs (one sigma-bar x 2 batches x 2 seeds
    x the ablation's and one more learning rate), 4 evaluations, 2 figures and the table."""
    run_snakemake("ablation_batch", "--cores", "2", "--set-threads", "ablation_run=1", "ablation_evaluate=1",
                  "--configfile", str(SMOKE), cwd=tmp_path, timeout=900)
    root = tmp_path / "results" / "smoke"
    smoke = yaml.safe_load(SMOKE.read_text())["ablation_batch"]
    assert not (root / "runs").exists() and not (root / "law").exists()  # the main grid is not trained

    runs = pd.concat([pd.read_parquet(p) for p in sorted((root / "ablation" / "runs").rglob("metrics.parquet"))])
    assert runs.groupby(["noise_batch_ratio", "batch_size", "learning_rate", "seed"]).ngroups == 8
    assert (runs["status"] == "finished").all() and set(runs["step"]) == {10, 20, 30, 40}
    figures = root / "figures"
    # The smoke ablation's model is a decoder: the paper's NanoDO figure, not the BERT sweep's.
    assert not (root / "figures" / "fig-physical-batch-size-sweep-loss.csv").exists()
    for name in ("fig-physical_batch_size_ablation", "fig-physical-batch-size-sweep-nanodo"):
        for suffix in (".pdf", ".png", ".csv"):
            assert (figures / f"{name}{suffix}").stat().st_size > 0
    assert not (figures / "fig-training.csv").exists()  # `figures` is not built

    # fig:physical_batch_size_ablation: the seed mean and spread of the raw curves, at the ablation's rate.
    drawn = pd.read_csv(figures / "fig-physical_batch_size_ablation.csv")
    ablation = runs[runs["learning_rate"] == smoke["learning_rate"]]
    expected = ablation.groupby(["noise_batch_ratio", "batch_size", "step"])["loss"].agg(["mean", "min", "max"])
    drawn = drawn.set_index(["Noise Batch Ratio", "Batch Size", "Iterations"]).sort_index()
    assert len(drawn) == len(expected) == 2 * 4 and (drawn["Seeds"] == 2).all()
    np.testing.assert_allclose(drawn["Cross Entropy"], expected["mean"], rtol=1e-12)
    np.testing.assert_allclose(drawn["Cross Entropy Min"], expected["min"], rtol=1e-12)
    np.testing.assert_allclose(drawn["Cross Entropy Max"], expected["max"], rtol=1e-12)

    assert set(runs["family"]) == {"decoder"}
    # fig:physical-batch-size-sweep-nanodo: per iteration, the best learning rate's seed mean.
    sweep = runs[runs["noise_batch_ratio"] == smoke["sweep"]["noise_batch_ratio"]]
    means = sweep.groupby(["batch_size", "step", "learning_rate"])["loss"].mean()
    best = pd.read_csv(figures / "fig-physical-batch-size-sweep-nanodo.csv").set_index(["Batch Size", "Iterations"])
    assert len(best) == 2 * 4
    np.testing.assert_allclose(best["Cross Entropy"].sort_index(), means.groupby(level=[0, 1]).min(), rtol=1e-12)

    # The table: one row per batch, mean over seeds of the evaluations, accuracy a fraction.
    table = pd.read_csv(root / "tables" / "tab-physical-batch-size-sweep-loss-entire-train-set.csv")
    for suffix in (".md", ".tex"):
        assert (root / "tables" / f"tab-physical-batch-size-sweep-loss-entire-train-set{suffix}").stat().st_size
        assert (root / "tables" / f"table-physical_batch_gap{suffix}").stat().st_size
    gap = pd.read_csv(root / "tables" / "table-physical_batch_gap.csv")
    finals = ablation[ablation["step"] >= 20].groupby(["batch_size", "seed"])["loss"].mean()  # last 3 intervals
    assert gap["Batch Size"].tolist() == smoke["physical_batches"]
    assert gap["Final Loss"].tolist() == pytest.approx(finals.groupby(level=0).mean().tolist(), rel=1e-12)
    assert gap["Batch Gap"].iloc[0] == pytest.approx(np.ptp(finals.groupby(level=0).mean()), rel=1e-9)
    assert table["Batch Size"].tolist() == smoke["physical_batches"]
    assert ((table["Accuracy"] >= 0) & (table["Accuracy"] <= 1)).all()
    assert (table["Seeds"] == 2).all() and (table["Examples"] == smoke["evaluation"]["examples"]).all()
    evaluations = [json.loads(p.read_text()) for p in (root / "ablation" / "evaluations").rglob("*.json")]
    assert len(evaluations) == 4
    sweep_nbr = canonical(smoke["sweep"]["noise_batch_ratio"])
    for _, row in table.iterrows():
        mine = [e for e in evaluations if e["batch_size"] == row["Batch Size"]]
        assert {canonical(e["noise_batch_ratio"]) for e in mine} == {sweep_nbr}
        assert row["Cross Entropy"] == pytest.approx(np.mean([e["loss"] for e in mine]), rel=1e-12)
        assert row["Accuracy"] == pytest.approx(np.mean([e["accuracy"] for e in mine]), rel=1e-12)
    # Final model vs last logged training loss (the mean over the last 10 steps, each measured before its
    # update). Per-sequence losses have a std of ~0.5 nats here (measured on these models), so the
    # interval's 2 seeds x 10 x B sequences and the 256 evaluated ones (the same for both seeds) differ by
    # noise of ~0.5 * sqrt(1/(20 B) + 1/256) <= 0.064 for B >= 4: 0.25 is 4 of those. On top of that the
    # final model is better than the interval's average by its progress within the interval, at most about
    # the drop over one whole interval.
    last = ablation[ablation["noise_batch_ratio"] == smoke["sweep"]["noise_batch_ratio"]]
    means = last.groupby(["batch_size", "step"])["loss"].mean()
    for _, row in table.iterrows():
        batch = row["Batch Size"]
        final, drop = means[(batch, 40)], means[(batch, 30)] - means[(batch, 40)]
        assert row["Final Training Loss"] == pytest.approx(final, rel=1e-12)
        assert final - drop - 0.25 <= row["Cross Entropy"] <= final + 0.25, (row, drop)
