"""The learning-rate protocol (paper §3.2 "Learning Rates"): the choice rule on synthetic loss-against-rate
tables (clear, flat, noisy, at the edge, diverged), the grid it names, and the config's refusals."""

from __future__ import annotations

import math

import pandas as pd
import pytest

from dpscaling.config.blocks import load_config
from dpscaling.config.training_blocks import check_ladder
from dpscaling.core.errors import UserError
from dpscaling.workflow.grid import (TrainPoint, learning_rate_protocol_grid, main_grid, possible_grid, protocol_prefix,
                            repeat_grid)
from dpscaling.tuning.rule import (
    choice_table, choose_rate, choose_rates, final_loss, grid_rates, read_chosen, write_choice)
from test_config_schema import validated

LADDER = [2.0**-k for k in range(5, 11)]  # 2^-5 .. 2^-10


def table(*losses: float) -> dict[float, float]:
    return dict(zip(LADDER, losses))


def test_a_clear_optimum_is_chosen() -> None:
    choice = choose_rate("M", table(6.3, 6.0, 5.7, 5.8, 5.9, 6.0), tolerance=0.01)
    assert choice.rate == choice.best_rate == 2.0**-7
    assert choice.basin == (2.0**-7,) and not choice.flat and not choice.noisy and choice.at_edge is None
    assert not choice.ambiguous


def test_a_flat_basin_takes_its_largest_rate() -> None:
    # 2^-6..2^-9 within 0.02 of the best (2^-8): the largest, 2^-6, not the best
    choice = choose_rate("M", table(6.3, 5.71, 5.705, 5.70, 5.715, 5.9), tolerance=0.02)
    assert choice.best_rate == 2.0**-8
    assert choice.basin == (2.0**-6, 2.0**-7, 2.0**-8, 2.0**-9)
    assert choice.rate == 2.0**-6 and choice.flat and choice.ambiguous
    # the default's BertMicro after 100 steps: 2^-8 and 2^-9 within 0.01; 2^-8 was the best at 400 steps
    micro = {2.0**-6: 6.146, 2.0**-7: 6.098, 2.0**-8: 6.069, 2.0**-9: 6.071, 2.0**-10: 6.093}
    assert choose_rate("BertMicro", micro, tolerance=0.01).rate == 2.0**-8
    # a tolerance of 0 keeps only the best
    assert choose_rate("M", table(6.3, 5.705, 5.70, 5.71, 5.9, 6.0), tolerance=0.0).rate == 2.0**-7


def test_a_noisy_table_keeps_the_basin_of_the_best_and_reports_the_others() -> None:
    # 2^-5 is within tolerance but 2^-6 between is not: noisy, not part of the basin
    choice = choose_rate("M", table(5.705, 5.9, 5.70, 5.8, 6.0, 6.1), tolerance=0.01)
    assert choice.basin == (2.0**-7,) and choice.noisy == (2.0**-5,)
    assert choice.rate == 2.0**-7 and choice.ambiguous and not choice.flat


def test_an_optimum_at_the_ladder_edge_is_flagged() -> None:
    assert choose_rate("M", table(5.6, 5.7, 5.8, 5.9, 6.0, 6.1), 0.01).at_edge == "top"
    assert choose_rate("M", table(6.1, 6.0, 5.9, 5.8, 5.7, 5.6), 0.01).at_edge == "bottom"


def test_diverged_runs_count_as_infinite_and_all_diverged_is_refused() -> None:
    choice = choose_rate("M", table(math.nan, math.inf, 5.9, 5.8, 5.85, 6.0), 0.01)
    assert choice.rate == 2.0**-8 and math.isinf(choice.losses[2.0**-5])
    with pytest.raises(UserError, match="every run of M diverged"):
        choose_rate("M", {0.1: math.nan, 0.01: math.inf}, 0.01)


def test_final_loss_is_the_mean_of_the_last_window_and_inf_when_short_or_diverged() -> None:
    curve = pd.DataFrame({"step": [10, 20, 30, 40], "loss": [7.0, 6.0, 5.0, 4.0]})
    assert final_loss(curve, steps=40, window=2) == 4.5
    assert final_loss(curve, steps=50, window=2) == math.inf  # did not finish
    assert final_loss(curve.assign(loss=[7.0, 6.0, math.nan, 4.0]), steps=40, window=2) == math.inf


def test_grid_rates_are_the_choice_and_its_halvings() -> None:
    assert grid_rates(2.0**-7, 2) == (2.0**-7, 2.0**-8, 2.0**-9)  # the paper's three
    assert grid_rates(0.01, 0) == (0.01,)
    assert grid_rates(2.0**-7, 1, rates_above=1) == (2.0**-6, 2.0**-7, 2.0**-8)  # an option, off by default


@pytest.mark.parametrize("ladder", [[], [0.01, 0.0], [0.01, -0.001]])
def test_an_empty_or_non_positive_ladder_is_refused_naming_the_key(ladder: list) -> None:
    with pytest.raises(UserError, match=r"learning_rate_protocol\.ladder"):
        check_ladder(ladder)
    with pytest.raises(UserError, match=r"learning_rate_protocol\.ladder"):
        validated({"training": {"learning_rates": "tuned"}, "learning_rate_protocol": {"ladder": ladder}})


def tuned_config(**protocol) -> dict:
    return validated({
        "models": {"names": ["BertTiny", "BertMini"]},
        "training": {"noise_batch_ratios": [0.0, 0.25, 0.5], "learning_rates": "tuned", "physical_batch": 8,
                     "repeat_seeds": [1], "repeat_points": [{"model": "BertTiny", "noise_batch_ratio": 0.5,
                                                             "learning_rate": "tuned"}]},
        "learning_rate_protocol": {"ladder": [0.02, 0.01, 0.005], "rates_below": 2, **protocol},
    })


def test_a_tuned_grid_trains_each_model_at_its_chosen_rate_and_the_rungs_below() -> None:
    config = tuned_config()
    chosen = {"BertTiny": 0.02, "BertMini": 0.005}
    grid = main_grid(config, chosen)
    rates = {(p.model, p.noise_batch_ratio): sorted(q.learning_rate for q in grid
                                                    if (q.model, q.noise_batch_ratio) == (p.model, p.noise_batch_ratio))
             for p in grid}
    assert rates[("BertTiny", 0.0)] == [0.02]  # sigma-bar 0: the tuned rate only
    assert rates[("BertTiny", 0.5)] == [0.005, 0.01, 0.02]
    assert rates[("BertMini", 0.25)] == [0.00125, 0.0025, 0.005]
    assert [(p.model, p.learning_rate, p.seed) for p in repeat_grid(config, chosen)] == [("BertTiny", 0.02, 1)]
    with pytest.raises(ValueError, match="pass the protocol's chosen rates"):
        main_grid(config)
    # before the choice, every rate it may name: a superset of any choice's grid
    assert set(main_grid(config, chosen)) <= set(possible_grid(config))
    assert len(learning_rate_protocol_grid(config)) == 2 * 3
    assert {p.noise_batch_ratio for p in learning_rate_protocol_grid(config)} == {0.0}


def test_the_sigma_0_run_at_a_ladder_rate_continues_the_protocols_run_and_no_other_does() -> None:
    config = tuned_config()
    chosen = {"BertTiny": 0.02, "BertMini": 0.005}
    grid = main_grid(config, chosen) + repeat_grid(config, chosen)
    continuing = {p: protocol_prefix(config, p.wildcards) for p in grid if protocol_prefix(config, p.wildcards)}
    assert sorted((p.model, p.noise_batch_ratio, p.learning_rate, p.seed) for p in continuing) == [
        ("BertMini", 0.0, 0.005, 0), ("BertTiny", 0.0, 0.02, 0)]
    for point, found in continuing.items():  # the protocol run of the same model, rate, batch and seed
        assert found == TrainPoint(point.model, point.batch, point.seed, 0.0, point.learning_rate).wildcards
    zero = next(iter(continuing)).wildcards
    assert protocol_prefix(config, {**zero, "seq": "32"}) is None  # another length: other data
    assert protocol_prefix(config, {**zero, "lr": "0.0025"}) is None  # a rate off the ladder
    assert protocol_prefix(config, {key: value for key, value in zero.items() if key != "seq"}) is None  # the ablation's


def test_the_protocol_s_cost_counts_each_step_once() -> None:
    """The σ̄ = 0 grid runs that continue the protocol's runs pay only their steps past it: the grid's FLOPs are
    every run to the horizon less those prefixes, recomputed here from the parameter counts."""
    from dpscaling.config.blocks import typed
    from dpscaling.models.family import run_model_config
    from dpscaling.tuning.stage import protocol_cost

    config = tuned_config(domain="private")
    chosen = {"BertTiny": 0.02, "BertMini": 0.005}
    run = typed(config)
    steps, protocol_steps = run.training.steps, run.learning_rate_protocol.steps
    size = {name: run_model_config(run, name).param_count().total for name in run.models.names}
    points = main_grid(config, chosen) + repeat_grid(config, chosen)
    full = sum(6.0 * size[p.model] * p.batch * run.data.seq_len * steps for p in points)
    prefixes = 6.0 * 8 * run.data.seq_len * protocol_steps * (size["BertTiny"] + size["BertMini"])
    cost = protocol_cost(config, chosen)
    assert cost["grid_runs_continuing_the_protocol"] == 2
    assert cost["grid_flops"] == pytest.approx(full - prefixes, rel=1e-12)
    assert cost["protocol_flops"] == pytest.approx(
        3 * 6.0 * 8 * run.data.seq_len * protocol_steps * (size["BertTiny"] + size["BertMini"]), rel=1e-12)
    public = protocol_cost(tuned_config(domain="public"), chosen)  # public protocol runs: the grid starts at step 0
    assert public["grid_runs_continuing_the_protocol"] == 0 and public["grid_flops"] == pytest.approx(full, rel=1e-12)


def test_an_adaptive_design_pays_the_protocol_once_as_the_grid_does() -> None:
    """Both designs train at the protocol's rates: its FLOPs are the adaptive design's first spend and part of the
    grid's, whose continuing σ̄ = 0 runs pay only their steps past it."""
    from dpscaling.config.blocks import typed
    from dpscaling.design.rounds import design_settings, grid_flops
    from dpscaling.tuning.stage import protocol_cost

    config = tuned_config(domain="private")
    chosen = {"BertTiny": 0.02, "BertMini": 0.005}
    cost = protocol_cost(config, chosen)
    run = typed(config)
    assert design_settings(run, chosen).spent_before == pytest.approx(cost["protocol_flops"], rel=1e-12)
    assert cost["protocol_flops"] > 0
    assert grid_flops(run, chosen) == pytest.approx(cost["protocol_flops"] + cost["grid_flops"], rel=1e-12)


def test_tuned_point_rates_need_a_tuned_config() -> None:
    config = validated({"models": {"names": ["BertTiny"]},
                        "training": {"noise_batch_ratios": [0.0, 0.5], "learning_rates": [0.01], "repeat_seeds": [1],
                                     "repeat_points": [{"model": "BertTiny", "noise_batch_ratio": 0.5,
                                                        "learning_rate": "tuned"}]}})
    with pytest.raises(UserError, match="training.learning_rates is not tuned"):
        repeat_grid(config)
    assert load_config(config).learning_rate_protocol.rates_below == 2  # the paper's default


def test_the_record_round_trips_and_names_the_grid_rates(tmp_path) -> None:
    curves = [("A", rate, pd.DataFrame({"step": [10, 20], "loss": [6.5, loss]}))
              for rate, loss in zip(LADDER, [6.3, 6.0, 5.7, 5.8, 5.9, 6.0])]
    choices = choose_rates(curves, steps=20, window=1, tolerance=0.01)
    write_choice(choices, {"rates_below": 2}, {"protocol_flops": 1.0}, tmp_path / "chosen.json")
    assert read_chosen(tmp_path / "chosen.json") == {"A": 2.0**-7}
    frame = choice_table(choices, rates_below=2)
    assert frame.loc[frame["chosen"], "learning_rate"].tolist() == [2.0**-7]
    assert sorted(frame.loc[frame["grid"], "learning_rate"]) == [2.0**-9, 2.0**-8, 2.0**-7]


@pytest.mark.parametrize("steps", [4, 50])
def test_protocol_steps_must_lie_between_the_warm_up_and_the_horizon(steps: int) -> None:
    from dpscaling.config.checks import check_config

    config = validated({"models": {"names": ["BertTiny"]},
                        "training": {"learning_rates": "tuned", "steps": 40, "warmup_steps": 4, "decay_steps": 40},
                        "learning_rate_protocol": {"steps": steps}})
    with pytest.raises(UserError, match=r"learning_rate_protocol\.steps"):
        check_config(config)
    check_config({**config, "learning_rate_protocol": {**config["learning_rate_protocol"], "steps": 10}})


def test_a_protocol_run_is_the_first_steps_of_the_grids_schedule() -> None:
    run = load_config(validated({"training": {"learning_rates": "tuned", "steps": 400, "warmup_steps": 40,
                                              "decay_steps": 400, "log_every": 10, "checkpoint_every": 100},
                                 "learning_rate_protocol": {"steps": 95}}))
    params = run.learning_rate_protocol.run_params(run.training, 1e-8)
    assert (params["steps"], params["warmup_steps"], params["decay_steps"]) == (95, 40, 400)
    assert params["checkpoint_every"] % params["log_every"] == 0 and params["checkpoint_every"] >= 95
