"""The decoder family and sequence length as a grid axis, end to end on the decoder smoke grid at S = 16, 32
and 64 (tests/configs/smoke-decoder.yaml, smoke-seqlen.yaml): next-token DP training, the primary length's law
(one family) with its bootstrap, per-length data, runs and laws, the law across lengths, the held-out middle
length, fig:seq_len_tradeoff, its finding, and `dpscaling query` on the run's law across lengths."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from conftest import REPO, run_snakemake
from dpscaling.workflow.grid import canonical
from dpscaling.train.metrics import SUMMARY_KEY

CONFIGS = [str(REPO / "tests" / "configs" / name) for name in ("smoke.yaml", "smoke-decoder.yaml", "smoke-seqlen.yaml")]
LENGTHS = (16, 32, 64)
FIGURE = "fig-seq_len_tradeoff"

pytestmark = pytest.mark.slow(minutes=4)


@pytest.fixture(scope="module")
def seqlen_run(tmp_path_factory) -> Path:
    workdir = tmp_path_factory.mktemp("seqlen")
    # Data, training and the law (with its bootstrap) at every length, the held-out length, the law across
    # lengths, the figure and its finding (the primary length's own `validate` is the BERT smoke test's).
    root = "results/smoke-seqlen"
    run_snakemake(f"{root}/validate/seq_len_holdout.csv", f"{root}/tables/finding-seq_len.csv",
                  f"{root}/figures/learning-rates.png", "--cores", "2",
                  "--configfile", *CONFIGS, cwd=workdir, timeout=1200)
    return workdir / "results" / "smoke-seqlen"


def test_each_length_has_its_data_and_runs(seqlen_run: Path) -> None:
    for length in LENGTHS:
        meta = json.loads((seqlen_run / "data" / "packed" / f"seq={length}" / "meta.json").read_text())
        assert meta["seq_len"] == length
        curves = [pd.read_parquet(path) for path in (seqlen_run / "runs" / "mech=dpsgd" / f"seq={length}").rglob("metrics.parquet")]
        assert len(curves) == 2 * 3 + 1  # 2 models x 3 sigma-bar + 1 repeat seed
        assert all(set(curve["seq_len"]) == {length} for curve in curves)
    # A model's size follows its length by its position rows (hidden 32 per row for DecoderNano).
    sizes = {length: pd.read_parquet(next((seqlen_run / "runs" / "mech=dpsgd" / f"seq={length}" / "model=DecoderNano")
                                          .rglob("metrics.parquet")))["n_params"].iloc[0] for length in LENGTHS}
    assert (sizes[32] - sizes[16], sizes[64] - sizes[32]) == (16 * 32, 32 * 32)


def test_the_protocol_chose_a_rate_per_model_and_the_grid_trained_at_it(seqlen_run: Path) -> None:
    """training.learning_rates: tuned (smoke-decoder.yaml): the protocol's runs, its record, table and figure,
    and every grid run (each length, the repeat seed included) at its model's chosen rate."""
    record = json.loads((seqlen_run / "learning_rates" / "chosen.json").read_text())
    chosen = {model: entry["rate"] for model, entry in record["models"].items()}
    assert set(chosen) == {"DecoderNano", "DecoderMicro"} and set(chosen.values()) <= {0.015625, 0.0078125}
    for model, entry in record["models"].items():  # the choice is the ladder's lowest loss (tolerance 0.01)
        finite = {float(rate): loss for rate, loss in entry["losses"].items() if loss is not None}
        assert len(finite) == 2 and finite[entry["rate"]] <= min(finite.values()) + 0.01
    protocol = list((seqlen_run / "learning_rates" / "runs").rglob("metrics.parquet"))
    assert len(protocol) == 2 * 2 and all(pd.read_parquet(p)["noise_batch_ratio"].eq(0).all() for p in protocol)
    assert 0 < record["cost"]["protocol_share"] < 0.5
    grid = list((seqlen_run / "runs").rglob("metrics.parquet"))
    assert grid and all(set(pd.read_parquet(p)["learning_rate"]) == {chosen[pd.read_parquet(p)["model"].iloc[0]]}
                        for p in grid)
    # The σ̄ = 0 run at the chosen rate and the primary length continues the protocol's run at that rate, its
    # first 10 steps (dpscaling.train.prefix); at the other lengths (other data) it trains from step 0.
    for model, rate in chosen.items():
        point = Path("mech=dpsgd", f"model={model}", "batch=8", "seed=0", "nbr=0", f"lr={canonical(rate)}")
        protocol = pd.read_parquet(seqlen_run / "learning_rates" / "runs" / point / "metrics.parquet")
        for length in LENGTHS:
            curve = (seqlen_run / "runs" / "mech=dpsgd" / f"seq={length}" / point.relative_to("mech=dpsgd")
                     / "metrics.parquet")
            summary = json.loads(pq.read_schema(curve).metadata[SUMMARY_KEY])
            if length == 64:
                assert summary["resumed_from_step"] == 10
                assert summary["prefix_dir"].endswith(f"learning_rates/checkpoints/{point.as_posix()}")
                assert pd.read_parquet(curve)["loss"].iloc[:len(protocol)].tolist() == protocol["loss"].tolist()
            else:
                assert (summary["resumed_from_step"], summary["prefix_dir"]) == (0, None)
    table = pd.read_csv(seqlen_run / "tables" / "learning-rates.csv")
    assert table.groupby("model")["chosen"].sum().to_dict() == {"DecoderMicro": 1, "DecoderNano": 1}
    assert (seqlen_run / "figures" / "learning-rates.png").stat().st_size > 0


def test_the_primary_length_is_a_decoder_law_with_its_bootstrap(seqlen_run: Path) -> None:
    """The decoder family through data, next-token DP training and the law (one family)."""
    import math

    results = pd.read_parquet(seqlen_run / "law" / "results.parquet")
    assert set(results["Family"]) == {"decoder"} and set(results["Model"]) == {"DecoderNano", "DecoderMicro"}
    curves = [pd.read_parquet(p) for p in (seqlen_run / "runs").rglob("metrics.parquet")]
    assert len(curves) == 3 * (2 * 3 + 1) and all(set(c["family"]) == {"decoder"} for c in curves)
    for curve in curves:  # every decoder learned: the last loss is below the first, and far below ln V
        assert curve["loss"].iloc[-1] < curve["loss"].iloc[0] < math.log(8192) + 0.1
    floor = json.loads((seqlen_run / "data" / "unigram_floor.json").read_text())
    assert floor["objective"] == "causal_lm"
    manifest = json.loads((seqlen_run / "law" / "fit" / "manifest.json").read_text())
    primary = [c for c in curves if c["seq_len"].iloc[0] == 64]
    assert manifest["seq_len"] == 64 and manifest["model_sizes"] == sorted({float(c["n_params"].iloc[0])
                                                                             for c in primary})
    assert (seqlen_run / "law" / "bootstrap" / "replicates.parquet").is_file()


def test_the_law_across_lengths_lists_every_lengths_law(seqlen_run: Path) -> None:
    from dpscaling.law.sequence_length import law_directories, load_law_across_lengths

    directory = seqlen_run / "law" / "lengths"
    listed = json.loads((directory / "lengths.json").read_text())["lengths"]
    assert listed == {"16": "seq=16/fit", "32": "seq=32/fit", "64": "../fit"}  # relative: the run can move
    across, laws = load_law_across_lengths(directory)
    assert across.lengths == list(LENGTHS) and {s: law.seq_len for s, law in laws.items()} == dict(zip(LENGTHS, LENGTHS))
    for length, path in law_directories(directory).items():  # each length's bootstrap beside its law
        assert (path.parent / "bootstrap" / "replicates.parquet").is_file(), length


def test_validate_holds_out_the_middle_length(seqlen_run: Path) -> None:
    table = pd.read_csv(seqlen_run / "validate" / "seq_len_holdout.csv")
    assert set(table["held-out length"]) == {32} and set(table["neighbours"]) == {"16 and 64"}
    assert set(table["mode"]) == {"paper", "reference-compatible"} and len(table) == 2 * 3
    blend = table[table["predictor"] == "log-S blend of the neighbours"]
    assert (blend["points"] > blend["unanswered"]).all() and blend["mean_abs_error"].notna().all()


def test_the_tradeoff_figure_answers_every_budget_with_its_configuration(seqlen_run: Path) -> None:
    data = pd.read_csv(seqlen_run / "figures" / f"{FIGURE}.csv")
    for suffix in (".pdf", ".png"):
        assert (seqlen_run / "figures" / f"{FIGURE}{suffix}").stat().st_size > 0
    assert set(data["Privacy Budget"]) == {4.0, 16.0, np.inf}
    answered = data.dropna(subset=["Cross Entropy"])
    assert set(answered["Privacy Budget"]) == {4.0, 16.0, np.inf}
    s, m, b, t = (answered[c] for c in ("Sequence Length", "Model Size", "Batch Size", "Iterations"))
    assert (s.between(16, 64)).all()
    assert np.allclose(6 * m * b * s * t, answered["Compute"], rtol=1e-9)
    assert (answered["Data Budget"] == np.floor(64000 / s)).all()  # N = tokens / S sequences at each S
    assert (answered.loc[np.isinf(answered["Privacy Budget"]), "Batch Size"] == 8).all()  # the physical batch
    assert set(data["Privacy Unit"]) == {"sequence"} and set(data["Measured Lengths"]) == {"16 32 64"}
    assert answered["Sequence Length 5%"].notna().all()  # every length has replicates: a band everywhere


def test_the_finding_states_its_verdict_with_numbers(seqlen_run: Path) -> None:
    table = pd.read_csv(seqlen_run / "tables" / "finding-seq_len.csv")
    assert list(table["finding"]) == ["seq_len"] and table["verdict"].iloc[0] in {"holds", "does not hold"}
    assert "privacy unit: one sequence" in table["measured"].iloc[0] and "(C, eps) pairs" in table["measured"].iloc[0]


def test_query_on_the_runs_law_across_lengths_returns_a_length(seqlen_run: Path) -> None:
    import subprocess
    import sys

    data = pd.read_csv(seqlen_run / "figures" / f"{FIGURE}.csv").dropna(subset=["Cross Entropy"])
    row = data[data["Privacy Budget"] == 16.0].iloc[-1]  # a budget the figure answered
    # A bundle of the run's laws across lengths (every length's law and replicates copied in); the directory of
    # laws across lengths itself is the workflow's intermediate, refused with the command that bundles it.
    bundle = seqlen_run.parent.parent / "bundle"
    made = subprocess.run([sys.executable, "-m", "dpscaling.cli", "law", "bundle", "--law",
                           str(seqlen_run / "law" / "fit"), "--lengths", str(seqlen_run / "law" / "lengths"),
                           "--out", str(bundle), "--json"],  # law/fit's replicates found beside it
                          capture_output=True, text=True, timeout=300)
    assert made.returncode == 0, made.stderr
    assert json.loads(made.stdout)["sequence_lengths"] == list(LENGTHS)
    answers = []
    for law in (seqlen_run / "law" / "lengths", bundle):
        command = [sys.executable, "-m", "dpscaling.cli", "query", "--law", str(law), "--tokens",
                   "64000", "--epsilon", "16", "--compute", repr(float(row["Compute"])), "--allow-extrapolation",
                   "--json"]
        result = subprocess.run(command, capture_output=True, text=True, cwd=seqlen_run.parent.parent, timeout=300)
        if law != bundle:
            assert result.returncode == 2 and "a law across lengths" in result.stderr
            assert "dpscaling law bundle --law" in result.stderr
            continue
        assert result.returncode == 0, result.stderr
        answer = json.loads(result.stdout)
        optimum = answer["law_optimum"]
        assert optimum["seq_len"] == row["Sequence Length"] and optimum["predicted_loss"] == pytest.approx(
            row["Cross Entropy"])  # the figure and the command line agree
        low, high = optimum["seed_only_interval_90"]
        assert low <= high and all(LENGTHS[0] <= entry["seq_len"] <= LENGTHS[-1] for entry in answer["per_length"])
        query = answer["query"]
        assert query["privacy_unit"] == "sequence" and query["data_budget_units"] == np.floor(64000 / optimum["seq_len"])
        assert answer["seq_len"] == optimum["seq_len"] and isinstance(answer["iterations"], int)
        answers.append(answer)
    assert len(answers) == 1
