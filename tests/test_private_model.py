"""The private_model target's pure parts (the target itself runs in tests/test_workflow_e2e.py)."""

from __future__ import annotations

import pandas as pd
import pytest

from dpscaling.errors import UserError
from dpscaling.private_model import Budget, audit_settings_for, budgets, integer_batch_sizes, twin_config_for
from dpscaling.tables.private_model import achieved_training_loss, cause_split


def test_budgets_take_accounting_delta_unless_given_and_refuse_duplicates() -> None:
    block = {"budgets": [{"epsilon": 4.0, "data_budget": 1000, "compute": 1e11},
                         {"epsilon": 4.0, "data_budget": 1000, "compute": 1e11, "delta": 1e-6}]}
    first, second = budgets(block, 1e-8)
    assert (first.delta, second.delta) == (1e-8, 1e-6)
    assert first.label != second.label and "/" not in first.label
    with pytest.raises(UserError, match="private_model.budgets: a budget is listed twice"):
        budgets({"budgets": [block["budgets"][0]] * 2}, 1e-8)
    with pytest.raises(UserError, match=r"private_model.budgets\[0\]"):
        budgets({"budgets": [{"epsilon": 4.0, "data_budget": 1000, "compute": -1.0}]}, 1e-8)


def test_batch_sizes_are_whole_and_within_the_data_budget() -> None:
    sizes = integer_batch_sizes(300)
    assert (sizes == sizes.round()).all() and sizes.max() <= 300 and sizes.min() == 1
    assert len(sizes) == len(set(sizes))


def test_the_matched_audit_has_the_runs_parameters() -> None:
    budget = Budget(8.0, 1e-7, 5000, 1e12)
    plan = {"budget": {"epsilon": 8.0, "delta": 1e-7, "data_budget": 5000, "label": budget.label},
            "batch_size": 64, "iterations": 120}
    settings = audit_settings_for(plan, {"significance": 0.05, "seed": 3}, microbatch=8)
    assert settings == {"n_canaries": 10000, "expected_batch_size": 64, "steps": 120, "epsilon": 8.0,
                        "delta": 1e-7, "significance": 0.05, "microbatch_size": 8, "seed": 3}


def test_achieved_loss_is_the_trailing_mean_the_law_smooths_with() -> None:
    curve = pd.DataFrame({"step": [30, 10, 20, 40], "loss": [3.0, 5.0, 4.0, 2.0]})
    assert achieved_training_loss(curve, None) == 2.0
    assert achieved_training_loss(curve, 3) == pytest.approx(3.0)


def test_the_study_twins_train_the_plan_with_shuffled_batches_at_two_physical_batches() -> None:
    plan = {"budget": {"epsilon": 8.0, "delta": 1e-8, "data_budget": 5000, "label": "x"}, "model": "BertNano",
            "batch_size": 181, "iterations": 120, "learning_rate": 0.0078125, "seq_len": 64,
            "noise_batch_ratio": 0.0019}
    training = {"steps": 400, "microbatch_size": 8, "sampling": "poisson", "seed": 0}
    grid = twin_config_for(plan, "BertNano", training, "grid_batch", 32, 0)
    at_b = twin_config_for(plan, "BertNano", training, "recommended_batch", 32, 0)
    for twin in (grid, at_b):
        assert (twin.sampling, twin.num_steps, twin.train_sequences) == ("shuffle", 120, 5000)
        assert twin.noise_batch_ratio == 0.0019 and twin.target_epsilon is None
        assert twin.learning_rate == 0.0078125
    assert grid.batch_size == 32
    assert at_b.batch_size == 184  # 181 rounded to whole microbatches of 8
    with pytest.raises(UserError, match="twin"):
        twin_config_for(plan, "BertNano", training, "other", 32, 0)


def test_the_cause_split_adds_up_to_the_whole_difference() -> None:
    split = cause_split(5.90, 5.80, {"grid_batch": 5.93, "recommended_batch": 5.84})
    assert split == pytest.approx({"law_error": 0.03, "physical_batch_effect": -0.09, "sampler_effect": -0.04})
    assert sum(split.values()) == pytest.approx(5.80 - 5.90)
