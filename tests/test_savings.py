"""The savings target's plan and report (docs/savings.md): what is trained at a budget, that it spends the
answer's compute, and how the measured saving and regret are read off. Its end-to-end run is in the smoke
workflow test (tests/test_workflow_e2e.py)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

import dpscaling
from dpscaling.errors import UserError
from dpscaling.savings.plan import (
    ANSWER, BASELINE, COMPUTE_TOLERANCE, FRACTION, NEIGHBOUR, SavingsSettings, compute_of, plan_savings, spend,
    trained_roles)
from dpscaling.savings.report import budget_row, measured_saving, recomputed_epsilon, seed_noise
from law_bundle_data import write_run, write_run_bundle

BLOCK = {"budgets": [{"epsilon": 4.0, "data_budget": 20_000, "compute": 3e12}], "fractions": [0.5],
         "seeds": [0, 3], "neighbours": ["model_x"],
         "baselines": [{"name": "chinchilla", "tokens_per_parameter": 20, "iterations": 300},
                       {"name": "expert", "model": "Synthetic0", "iterations": 100}]}


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    run = write_run(tmp_path_factory.mktemp("run"))
    return write_run_bundle(run, run / "bundle").root


@pytest.fixture(scope="module")
def settings():
    return SavingsSettings.from_mapping(BLOCK, 1e-8)


@pytest.fixture(scope="module")
def plan(bundle, settings):
    return plan_savings(bundle, settings, settings.budgets[0].label, 8)


def test_a_budget_trains_its_answer_with_every_seed_its_fractions_baselines_and_neighbours(plan, settings) -> None:
    runs = plan["runs"]
    assert list(runs) == settings.roles() == ["answer", "answer_seed3", "answer_c2", "baseline_chinchilla",
                                              "baseline_expert", "model_x2"]
    assert trained_roles(plan) == list(runs)
    assert [runs[r]["seed"] for r in runs] == [0, 3, 0, 0, 0, 0]
    # the answer is what `dpscaling query` answers, made runnable
    answer = plan["answer"]
    for role in ("answer", "answer_seed3"):
        assert (runs[role]["model_size"], runs[role]["batch_size"], runs[role]["iterations"]) == (
            answer["model_size"], answer["batch_size"], answer["iterations"])
    assert {runs[r]["kind"] for r in runs} == {ANSWER, FRACTION, BASELINE, NEIGHBOUR}


def test_every_run_at_the_answer_s_compute_spends_it_to_one_percent(plan) -> None:
    spent = plan["answer_compute"]
    assert spent == pytest.approx(plan["budget"]["compute"], rel=COMPUTE_TOLERANCE)
    for role, run in plan["runs"].items():
        own = compute_of(run["model_shape"]["param_count"], run["batch_size"], run["iterations"], run["seq_len"])
        assert own == pytest.approx(run["compute"], rel=1e-12)
        if run["kind"] != FRACTION:
            assert run["compute"] == pytest.approx(spent, rel=COMPUTE_TOLERANCE), role


def test_baselines_neighbours_and_fractions_are_what_their_names_say(bundle, plan) -> None:
    runs = plan["runs"]
    answer = runs["answer"]
    # Chinchilla: the shape nearest sqrt(C / (6 * 20)); the expert: the named model
    assert runs["baseline_chinchilla"]["model_size"] == dpscaling.load_law(bundle).shape_near(
        math.sqrt(plan["answer_compute"] / 120)).param_count
    assert runs["baseline_expert"]["model"] == "Synthetic0"
    assert abs(runs["baseline_expert"]["iterations"] - 100) <= 2
    # M x 2: a larger shape at the answer's B, fewer steps
    assert runs["model_x2"]["model_size"] > answer["model_size"]
    assert runs["model_x2"]["batch_size"] == answer["batch_size"]
    assert runs["model_x2"]["iterations"] < answer["iterations"]
    # C/2: the law's own answer at half the compute
    half = dpscaling.load_law(bundle).query(plan["budget"]["compute"] / 2, 4.0, users=20_000,
                                            physical_batch_correction=True, microbatch_size=8,
                                            allow_extrapolation=True).runnable
    assert (runs["answer_c2"]["batch_size"], runs["answer_c2"]["iterations"]) == (half.batch_size, half.iterations)


def test_every_run_is_priced_as_a_private_run_at_the_budget_s_epsilon(plan) -> None:
    for run in plan["runs"].values():
        assert run["budget"]["epsilon"] == 4.0 and run["budget"]["data_budget"] == 20_000
        assert run["noise_batch_ratio"] == pytest.approx(run["sigma"] / run["batch_size"])
        assert run["truncated_batch_size"] % 8 == 0 and run["truncated_batch_size"] >= run["batch_size"]
        assert run["model_param"]["layers"] == run["model_shape"]["layers"]


@pytest.mark.parametrize("model_size", [5e4, 3e5, 1.6e6])
@pytest.mark.parametrize("steps", [10, 40, 300])
def test_spend_matches_the_compute_in_whole_microbatches(model_size, steps) -> None:
    compute = 2e12
    batch, trained = spend(compute, model_size, 64, 8, 75_000, steps=steps)
    assert batch % 8 == 0 and 8 <= batch <= 75_000
    assert compute_of(model_size, batch, trained, 64) == pytest.approx(compute, rel=COMPUTE_TOLERANCE)
    again, _ = spend(compute, model_size, 64, 8, 75_000, batch=batch)
    assert again == batch


@pytest.mark.parametrize("change, field", [
    ({"fractions": [1.5]}, "savings.fractions"),
    ({"seeds": [1, 1]}, "savings.seeds"),
    ({"baselines": [{"name": "x", "iterations": 10}]}, "savings.baselines[0]"),
    ({"neighbours": ["model_x", "depth_x"]}, "savings.neighbours"),
    ({"neighbour_factor": 1.0}, "savings.neighbour_factor"),
])
def test_bad_settings_name_the_field(change, field) -> None:
    with pytest.raises(UserError, match=field.replace("[", r"\[").replace("]", r"\]")):
        SavingsSettings.from_mapping({**BLOCK, **change}, 1e-8)


def _runs(answer=(5.00, 5.02), fractions=((0.5, 5.03), (0.25, 5.08)), baselines=(5.10, 5.30),
          neighbours=(5.05, 4.98)) -> pd.DataFrame:
    rows = [{"kind": ANSWER, "role": "answer", "heldout_loss": loss} for loss in answer]
    rows += [{"kind": FRACTION, "role": f"answer_c{1 / f:g}", "fraction": f, "heldout_loss": loss}
             for f, loss in fractions]
    rows += [{"kind": BASELINE, "role": f"baseline_{i}", "heldout_loss": loss} for i, loss in enumerate(baselines)]
    rows += [{"kind": NEIGHBOUR, "role": f"n{i}", "heldout_loss": loss} for i, loss in enumerate(neighbours)]
    frame = pd.DataFrame(rows).assign(budget="b", model="M", batch_size=8, iterations=10, predicted_loss=np.nan,
                                      train_loss=5.0)
    return frame.assign(fraction=frame["fraction"].fillna(1.0))


def test_the_saving_is_the_smallest_fraction_within_seed_noise_of_the_best_baseline() -> None:
    runs = _runs()
    assert seed_noise(runs) == pytest.approx(0.02)
    # C/2 ends at 5.03 <= 5.10 + 0.02; C/4 at 5.08 too: both match, C/4 is the smallest trained
    found = measured_saving(runs, 5.01, 5.10, 0.02)
    assert found["measured_saving"] == pytest.approx(4.0) and found["saving_is_lower_bound"]
    assert measured_saving(runs, 5.01, 5.04, 0.02)["measured_saving"] == pytest.approx(2.0)
    assert math.isnan(measured_saving(runs, 5.01, 4.90, 0.02)["measured_saving"])


def test_regret_is_the_answer_s_loss_above_its_best_neighbour() -> None:
    plan = {"budget": {"label": "b", "epsilon": 1.0, "data_budget": 10, "compute": 1.0}, "predicted_saving": None}
    row = budget_row(plan, _runs(), 0.02)
    assert row["regret"] == pytest.approx(5.01 - 4.98) and row["regret_within_noise"] is False
    assert row["best_neighbour"].startswith("n1")
    assert budget_row(plan, _runs(neighbours=(5.2, 5.3)), 0.02)["regret"] == 0.0
    assert row["best_baseline"] == "0" and row["answer_vs_best_baseline"] == pytest.approx(5.01 - 5.10)


def test_the_recomputed_epsilon_agrees_with_the_calibration_it_checks() -> None:
    from dpscaling.accounting.truncation import truncated_poisson_run

    run = truncated_poisson_run(q=256 / 20_000, steps=300, dataset_size=20_000, delta=1e-8, multiple=8,
                                target_epsilon=4.0)
    record = {"dataset_size": 20_000, "sampling_probability": 256 / 20_000, "sigma": run.sigma,
              "truncated_batch_size": run.price.truncated_batch_size, "accounted_steps": 300, "delta": 1e-8}
    assert recomputed_epsilon(record) == pytest.approx(4.0, rel=0.01)
    assert recomputed_epsilon({**record, "sigma": 0.95 * run.sigma}) > 4.0 * 1.02
