"""The private_model target's pure parts (the target itself runs in tests/test_workflow_e2e.py)."""

from __future__ import annotations

import dataclasses
import json

import pandas as pd
import pytest

from dpscaling.core.errors import UserError
from dpscaling.law.physical_batch import PhysicalBatchCorrection
from dpscaling.private.plans import Budget, FixedConfiguration, LawQuery, PrivatePlan
from dpscaling.models.family import run_model_config
from dpscaling.private.jobs import audit_settings_for, twin_config_for
from dpscaling.private.model import budgets
from dpscaling.report.tables.private_model import achieved_training_loss, cause_split

BUDGET = Budget(8.0, 1e-8, 50000, 1e15)
QUERY = LawQuery(4e5, 256.0, 1000.0, 0.6, 2.0 ** -9, 5.0, "min", 1e-8, 48, models=("M", "N"))


def a_plan(budget: Budget = BUDGET, **fields) -> PrivatePlan:
    """A plan with every field set; a test gives the ones it reads."""
    plan = PrivatePlan(budget, model="M", model_size=4e5, batch_size=256, iterations=1000, learning_rate=0.01,
                       seq_len=128, compute=1e15, sigma=0.5, noise_batch_ratio=0.5 / 256, untruncated_sigma=0.49,
                       truncated_batch_size=288, truncation_probability=1e-9, padding_share=0.1,
                       predicted_loss=5.1, law_loss=5.2, physical_batch_correction=None, query=QUERY)
    return dataclasses.replace(plan, **fields)


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


def test_the_matched_audit_has_the_runs_parameters() -> None:
    plan = a_plan(Budget(8.0, 1e-7, 5000, 1e12), batch_size=64, iterations=120)
    settings = audit_settings_for(plan, {"significance": 0.05, "seed": 3}, microbatch=8, strategy="max_error")
    assert settings == {"n_canaries": 10000, "expected_batch_size": 64, "steps": 120, "epsilon": 8.0,
                        "delta": 1e-7, "significance": 0.05, "microbatch_size": 8, "seed": 3}
    # A BandMF run's audit correlates its noise with the strategy the run optimised, not a fixed criterion.
    bandmf = audit_settings_for(dataclasses.replace(plan, mechanism="bandmf-b4"), {"significance": 0.05, "seed": 3},
                                microbatch=8, strategy="max_error")
    assert bandmf == settings | {"mechanism": "bandmf-b4", "strategy": "max_error"}


def test_achieved_loss_is_the_trailing_mean_the_law_smooths_with() -> None:
    curve = pd.DataFrame({"step": [30, 10, 20, 40], "loss": [3.0, 5.0, 4.0, 2.0]})
    assert achieved_training_loss(curve, None) == 2.0
    assert achieved_training_loss(curve, 3) == pytest.approx(3.0)


def test_the_study_twins_train_the_plan_with_shuffled_batches_at_two_physical_batches() -> None:
    plan = a_plan(Budget(8.0, 1e-8, 5000, 1e12), model="BertNano", batch_size=181, iterations=120,
                  learning_rate=0.0078125, seq_len=64, noise_batch_ratio=0.0019)
    training = {"steps": 400, "microbatch_size": 8, "sampling": "truncated_poisson", "seed": 0}
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


def test_a_report_row_carries_both_intervals_the_correction_and_the_split() -> None:
    import numpy as np

    from dpscaling.law import LawSettings
    from dpscaling.law.artifact import fit_law
    from dpscaling.law.calibration import Calibration
    from dpscaling.law.physical_batch import PhysicalBatchCorrection
    from dpscaling.law.synthetic import synthetic_results
    from dpscaling.report.tables.private_model import report_row

    law = fit_law(synthetic_results(noise=0.0), LawSettings(warmup_steps=100, rolling_window=None), seq_len=128,
                  physical_batch=32)
    plan = a_plan()
    nbr = 2.0 ** -9

    def curve(final: float, batch: int) -> pd.DataFrame:
        return pd.DataFrame({"step": [990, 1000], "loss": [final + 0.01, final], "batch_size": batch,
                             "noise_batch_ratio": nbr, "sigma": nbr * batch, "truncated_batch_size": 288,
                             "truncation_probability": 1e-6, "padding_share": 0.1, "untruncated_sigma": nbr * batch,
                             "dataset_size": 50000, "sampling_probability": 256 / 50000, "epsilon": 8.0,
                             "accountant": "truncated_poisson", "status": "finished"})

    law_loss = float(law.loss(np.array([4e5]), np.array([1000.0]), np.array([nbr]))[0])
    correction = PhysicalBatchCorrection(slope=0.1, grid_batch=32, pairs=4, residual_rms=0.01)
    shift = float(correction.shift(256, nbr, 4e5))
    calibration = Calibration("paper", False, 0.2, ("horizon",), 0.5, 1.0, 0.0)
    twins = {"grid_batch": curve(law_loss + 0.03, 32), "recommended_batch": curve(law_loss - 0.02, 256)}
    row = report_row(plan, curve(law_loss - 0.05, 256), {"loss": 5.0}, {"audited_epsilon": 0.5,
                     "audit_has_power": True}, law, None, None, twins, correction, calibration)
    assert row["law_loss"] == pytest.approx(law_loss) and row["predicted_loss"] == pytest.approx(law_loss - shift)
    assert (row["calibrated_low"], row["calibrated_high"]) == pytest.approx((law_loss - shift - 0.2,
                                                                             law_loss - shift + 0.2))
    assert row["inside_calibrated"] and not row["inside_seed_only"]  # no replicates: no seed-only interval
    assert (row["law_error"], row["physical_batch_effect"], row["sampler_effect"]) == pytest.approx((0.03, -0.05, -0.03))
    assert (row["twin_grid_batch"], row["twin_recommended_batch"]) == (32, 256)
    # private_model.cause_split false: no twins were trained, the split is empty and the rest of the row the same
    alone = report_row(plan, curve(law_loss - 0.05, 256), {"loss": 5.0}, {"audited_epsilon": 0.5,
                       "audit_has_power": True}, law, None, None, {}, correction, calibration)
    split = ("twin_grid_batch", "twin_recommended_batch", "achieved_grid_batch", "achieved_recommended_batch",
             "law_error", "physical_batch_effect", "sampler_effect")
    assert all(np.isnan(alone[column]) for column in split)
    assert {k: v for k, v in alone.items() if k not in split} == {k: v for k, v in row.items() if k not in split}
    # A distance-scaled calibration: the half-width at the plan's point, q · (1 + its distance from the measured
    # points; here one doubling beyond a horizon of 500 steps, at a measured model and σ̄).
    from dpscaling.law.distance import DistanceScale, MeasuredPoints

    scaled = Calibration("paper", False, 0.2, ("horizon",), 0.5, 1.0, 0.0,
                         scale=DistanceScale(MeasuredPoints((4e5,), (nbr,), 500.0), 1.0, 1.0))
    row = report_row(plan, curve(law_loss - 0.05, 256), {"loss": 5.0}, {"audited_epsilon": 0.5,
                     "audit_has_power": True}, law, None, None, twins, correction, scaled)
    assert (row["calibrated_low"], row["calibrated_high"]) == pytest.approx((law_loss - shift - 0.4,
                                                                             law_loss - shift + 0.4))


def test_a_budget_may_fix_the_configuration_it_trains(tmp_path) -> None:
    """A budget with a ``configuration`` (what `dpscaling query --train-config` writes) is planned as it stands:
    its model, B, T and learning rate, σ priced for truncated Poisson; a model the config lacks is refused."""
    import numpy as np

    from dpscaling.law import LawSettings, fit_law
    from dpscaling.law.synthetic import DeterministicGaussianSigma, accounting_table, synthetic_results
    from dpscaling.law.conversion import convert_to_bundle
    from dpscaling.private.model import plan_budget

    table = accounting_table(DeterministicGaussianSigma(), epsilons=2.0 ** np.arange(-2, 8),
                             iterations=np.geomspace(10, 2e5, 30), sampling_probabilities=2.0 ** np.arange(-24, 1))
    fit_law(synthetic_results(), LawSettings(warmup_steps=100), seq_len=128, physical_batch=32,
            accounting_unamplified=table).save(tmp_path / "fit")
    convert_to_bundle(tmp_path / "fit", tmp_path / "law")  # what rule law_bundle writes
    entry = {"epsilon": 8.0, "data_budget": 5000, "compute": 1e12,
             "configuration": {"model": "BertL2H96", "batch_size": 64, "iterations": 300, "learning_rate": 0.004}}
    (budget,) = budgets({"budgets": [entry]}, 1e-8)
    assert budget.configuration == FixedConfiguration("BertL2H96", 64, 300, 0.004)
    assert budget.label.endswith("_BertL2H96_B=64_T=300")  # two configurations at one budget stay apart
    plan = plan_budget(tmp_path / "law", budget, ["Synthetic0"], fixed_sizes={"BertL2H96": 2.5e5})
    assert (plan.model, plan.model_size, plan.batch_size, plan.iterations) == ("BertL2H96", 2.5e5, 64, 300)
    assert plan.learning_rate == 0.004 and plan.query.fixed and plan.decision is None
    # what its ε covers: the law's choices (a bundle without the record of where they were fitted), its rate given
    assert plan.epsilon_covers["chosen_on"]["learning_rate"]["domain"] == "no data"
    assert plan.epsilon_covers["not_covered"] == ["configuration"]
    assert "ε covers only" in plan.epsilon_covers["statement"]
    assert plan.compute == pytest.approx(6 * 2.5e5 * 64 * 128 * 300)
    assert plan.sigma >= plan.untruncated_sigma and plan.truncated_batch_size >= 64
    assert plan.noise_batch_ratio == pytest.approx(plan.sigma / 64)
    text = json.dumps(plan.to_json(), indent=2, sort_keys=True)  # as plan.json (NaN: the law's range ends)
    assert json.dumps(PrivatePlan.from_json(json.loads(text)).to_json(), indent=2, sort_keys=True) == text
    with pytest.raises(UserError, match="not a model of this config"):
        plan_budget(tmp_path / "law", budget, ["Synthetic0"], fixed_sizes={"Other": 1e5})


@pytest.mark.parametrize("plan", [
    a_plan(decision={"rule": "extrapolation_charged", "applied": "extrapolation_charged", "score": 5.3,
                     "predicted_loss": 5.1, "charge": 0.2, "charge_is": "extrapolation charge", "flags": []}),
    a_plan(Budget(4.0, 1e-6, 1000, 1e11, FixedConfiguration("BertNano", 40, 24)),
           query=dataclasses.replace(QUERY, models=None, candidates=1, fixed=True),
           physical_batch_correction=PhysicalBatchCorrection(0.1, 32, 10, 0.01)),
    a_plan(query={"kind": "answer"})], ids=["searched", "fixed", "savings"])
def test_a_plan_reads_back_what_it_wrote(plan: PrivatePlan) -> None:
    """plan.json holds exactly the plan's record (its keys, its values' types), and reading it gives the plan."""
    record = json.loads(json.dumps(plan.to_json()))
    assert PrivatePlan.from_json(record) == plan and plan.to_json() == record
    assert ("decision" in record) == (plan.decision is not None)
    assert record["budget"]["label"] == plan.budget.label
    assert PrivatePlan.from_json(record | {"role": "answer", "seed": 0}) == plan  # a savings run's own keys


def test_the_workflow_gives_a_configured_budget_its_own_model_only() -> None:
    """A budget's configuration may name a models.custom entry the grid does not train: that budget's jobs get
    that model (and its parameter count), every other budget the grid's models; an unknown name is refused."""
    import yaml

    from conftest import REPO
    from dpscaling.config.blocks import load_config
    from dpscaling.config.schema import validate_config
    from dpscaling.workflow.params import private_model_models, private_model_sizes

    config = yaml.safe_load((REPO / "tests" / "configs" / "smoke.yaml").read_text())
    config["models"]["custom"]["BertL2H96"] = {"layers": 2, "heads": 2, "hidden": 96, "family": "bert"}
    fixed = {"epsilon": 16.0, "data_budget": 1000, "compute": 1e11,
             "configuration": {"model": "BertL2H96", "batch_size": 40, "iterations": 24}}
    config["private_model"]["budgets"].append(fixed)
    validate_config(config)
    run = load_config(config)
    searched, configured = (budget.label for budget in budgets(config["private_model"], 1e-8))
    assert private_model_models(run, searched) == ["BertNano", "BertMicro"] and private_model_sizes(run, searched) == {}
    assert private_model_models(run, configured) == ["BertL2H96"]
    assert private_model_sizes(run, configured) == {"BertL2H96": run_model_config(run, "BertL2H96").param_count().total}
    fixed["configuration"]["model"] = "Nowhere"
    with pytest.raises(UserError, match="configuration.model 'Nowhere'"):
        private_model_models(load_config(config), budgets(config["private_model"], 1e-8)[1].label)
