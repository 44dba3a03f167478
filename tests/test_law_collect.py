"""Collecting results (the fit stage's first step): training-curve Parquet files and the authors' results.csv."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from dpscaling.core.errors import UserError
from dpscaling.law.collect import (
    TIDY_COLUMNS, collect_training_curves, read_reference_results, run_constants, tidy_training_curve)
from dpscaling.law.columns import BERT_MODEL_SIZES, CROSS_ENTROPY, ITERATIONS, MODEL_SIZE, STATUS


def training_curve(model: str = "BertNano", params: int = 70_000, nbr: float = 2.0**-8, seq_len: int = 128,
                   status: str = "finished") -> pd.DataFrame:
    return pd.DataFrame({
        "step": [10, 20, 30], "loss": [9.0, np.inf, 8.0], "grad_norm": 1.0, "model": model, "n_params": params,
        "noise_batch_ratio": nbr, "learning_rate": 2.0**-7, "batch_size": 32, "seq_len": seq_len,
        "seed": 0, "status": status})  # the columns dpscaling.train.metrics writes


def test_training_curve_columns_map_to_the_tidy_table() -> None:
    tidy = tidy_training_curve(training_curve())
    assert list(tidy.columns) == TIDY_COLUMNS
    assert tidy[ITERATIONS].tolist() == [10, 20, 30] and tidy[MODEL_SIZE].unique().tolist() == [70_000]
    assert np.isnan(tidy[CROSS_ENTROPY].iloc[1])  # a non-finite loss is a missing value, not a number


def test_the_issue_drafts_column_names_are_accepted_too() -> None:
    curve = training_curve().rename(columns={"n_params": "params", "batch_size": "physical_batch"})
    pd.testing.assert_frame_equal(tidy_training_curve(curve), tidy_training_curve(training_curve()))
    assert run_constants([curve]) == {"physical_batch": 32, "seq_len": 128}


def test_collect_reads_every_run_and_its_constants(tmp_path) -> None:
    paths = []
    for index, nbr in enumerate([0.0, 2.0**-8]):
        paths.append(tmp_path / f"run{index}.parquet")
        training_curve(nbr=nbr, status="diverged" if index else "finished").to_parquet(paths[-1])
    tidy, constants = collect_training_curves(paths)
    assert len(tidy) == 6 and constants == {"physical_batch": 32, "seq_len": 128, "mechanism": "dpsgd"}
    assert sorted(tidy[STATUS].unique()) == ["diverged", "finished"]


def test_runs_disagreeing_on_sequence_length_are_refused(tmp_path) -> None:
    training_curve().to_parquet(tmp_path / "a.parquet")
    training_curve(seq_len=512).to_parquet(tmp_path / "b.parquet")
    with pytest.raises(UserError, match="seq_len"):
        collect_training_curves([tmp_path / "a.parquet", tmp_path / "b.parquet"])


def test_missing_curve_column_is_named() -> None:
    with pytest.raises(UserError, match="loss"):
        tidy_training_curve(training_curve().drop(columns="loss"))
    assert tidy_training_curve(training_curve().drop(columns=["status", "seed"]))["Status"].eq("finished").all()


def test_reference_results_csv_maps_model_names_to_sizes(tmp_path) -> None:
    path = tmp_path / "results.csv"
    path.write_text("Model,Learning Rate,Iterations,Noise Batch Ratio,Cross Entropy\n"
                    "BertTiny,0.0078125,1000,0.0,5.5\nBertLarge,0.00390625,1000,1.1920928955078125e-07,3.25\n")
    results = read_reference_results(path)
    assert results[MODEL_SIZE].tolist() == [BERT_MODEL_SIZES["BertTiny"], BERT_MODEL_SIZES["BertLarge"]]
    assert results[CROSS_ENTROPY].tolist() == [5.5, 3.25]


def test_reference_results_with_unknown_model_or_columns_are_refused(tmp_path) -> None:
    path = tmp_path / "results.csv"
    path.write_text("Model,Learning Rate,Iterations,Noise Batch Ratio,Cross Entropy\nBertHuge,0.01,1000,0,5\n")
    with pytest.raises(UserError, match="BertHuge"):
        read_reference_results(path)
    path.write_text("Model,Iterations\nBertTiny,1000\n")
    with pytest.raises(UserError, match="Cross Entropy"):
        read_reference_results(path)


def test_collected_table_carries_run_constants_to_the_fit(tmp_path) -> None:
    from dpscaling.law.collect import load_results
    from dpscaling.law.collect import collect_to_parquet

    training_curve().to_parquet(tmp_path / "run.parquet")
    collect_to_parquet([tmp_path / "run.parquet"], tmp_path / "collected.parquet")
    tidy, constants = load_results(str(tmp_path / "collected.parquet"), "dpscaling")
    assert constants == {"physical_batch": 32, "seq_len": 128, "mechanism": "dpsgd"} and len(tidy) == 3
