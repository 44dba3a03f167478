"""The savings target's parts (docs/savings.md): B and T that spend a compute, its settings, and how the measured
saving and regret are read off. The plan of every kind of run on a real law bundle, the private runs and their
report are checked end to end in the smoke workflow test (tests/test_workflow_e2e.py)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from dpscaling.core.errors import UserError
from dpscaling.private.savings_plan import (
    ANSWER, BASELINE, COMPUTE_TOLERANCE, FRACTION, NEIGHBOUR, SavingsSettings, spend)
from dpscaling.law.queries import compute_cost
from dpscaling.private.savings_report import budget_row, measured_saving, recomputed_epsilon, seed_noise

BLOCK = {"budgets": [{"epsilon": 4.0, "data_budget": 20_000, "compute": 3e12}], "fractions": [0.5],
         "seeds": [0, 3], "neighbours": ["model_x"],
         "baselines": [{"name": "chinchilla", "tokens_per_parameter": 20, "iterations": 300},
                       {"name": "expert", "model": "Synthetic0", "iterations": 100}]}


@pytest.mark.parametrize("model_size", [5e4, 3e5, 1.6e6])
@pytest.mark.parametrize("steps", [10, 40, 300])
def test_spend_matches_the_compute_in_whole_microbatches(model_size, steps) -> None:
    compute = 2e12
    batch, trained = spend(compute, model_size, 64, 8, 75_000, steps=steps)
    assert batch % 8 == 0 and 8 <= batch <= 75_000
    assert compute_cost(model_size, batch, trained, 64) == pytest.approx(compute, rel=COMPUTE_TOLERANCE)
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
    assert found["measured_saving_interpolated"] == pytest.approx(4.0)
    # 5.04 + 0.02 = 5.06 lies between C/2 (5.03) and C/4 (5.08), 3/5 of the way in log C: saving 2^(1.6)
    between = measured_saving(runs, 5.01, 5.04, 0.02)
    assert between["measured_saving"] == pytest.approx(2.0)
    assert between["measured_saving_interpolated"] == pytest.approx(2 ** 1.6)
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


def test_worth_is_each_rules_loss_above_the_best_at_its_budget_and_its_worst_over_budgets() -> None:
    """Two budgets: the law's answer (two seeds, their mean) wins the first, the DP expert's rule the second."""
    from dpscaling.private.worth import worth_table

    def run(budget, epsilon, kind, role, loss):  # the law predicts each run 0.1 above what it measures
        return {"budget": budget, "epsilon": epsilon, "data_budget": 5000, "compute": 1e12, "kind": kind,
                "role": role, "heldout_loss": loss, "predicted_loss": loss + 0.1}

    runs = pd.DataFrame([run("a", 1.0, "answer", "answer", 5.00), run("a", 1.0, "answer", "answer_seed1", 5.02),
                         run("a", 1.0, "baseline", "baseline_dp_expert", 5.05),
                         run("a", 1.0, "baseline", "baseline_chinchilla", 5.31),
                         run("b", 64.0, "answer", "answer", 4.50), run("b", 64.0, "answer", "answer_seed1", 4.54),
                         run("b", 64.0, "baseline", "baseline_dp_expert", 4.49),
                         run("b", 64.0, "baseline", "baseline_chinchilla", 4.60),
                         run("b", 64.0, "neighbour", "model_x2", 4.00)])  # a neighbour is no rule: not compared
    table = worth_table(runs).set_index("budget")
    assert list(table.columns[:4]) == ["epsilon", "data_budget", "compute", "law"]
    assert table.loc["a", "law"] == 0 and table.loc["a", "dp_expert"] == pytest.approx(0.04)
    assert table.loc["a", "chinchilla"] == pytest.approx(0.30) and table.loc["a", "best"] == "law"
    assert table.loc["b", "law"] == pytest.approx(0.03) and table.loc["b", "best"] == "dp_expert"
    assert table.loc["worst", "law"] == pytest.approx(0.03) and table.loc["worst", "dp_expert"] == pytest.approx(0.04)
    assert table.loc["worst", "chinchilla"] == pytest.approx(0.30)
    assert table.loc["b", "seed_spread"] == pytest.approx(0.04) and table.loc["worst", "seed_spread"] == pytest.approx(0.04)
    assert table.loc["mean", "best"] == "law 1, chinchilla 0, dp_expert 1"
    assert table.loc["a", "predicted_best"] == "law" and table.loc["b", "predicted_best"] == "dp_expert"
    assert table.loc["mean", "predicted_best"] == "2 of 2 as measured"
