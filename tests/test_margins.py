"""The answer's predicted margin over the rules of thumb (dpscaling.law.margins): each rule's configuration, its
price and prediction recomputed here from the pricing module and the law's surface, the interval and the verdict,
and the CLI's JSON and text."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import dpscaling
from dpscaling import cli
from dpscaling.accounting import pricing
from dpscaling.law.margins import BETTER, NO_INTERVAL, RULES_OF_THUMB, TIED, WORSE, verdict_of
from law_bundle_data import write_run, write_run_bundle

QUERY = dict(compute=1e13, epsilon=4.0, users=1e5)


@pytest.fixture(scope="module")
def bundle(tmp_path_factory):
    run = write_run(tmp_path_factory.mktemp("run"))
    return write_run_bundle(run, run / "bundle").root


def test_the_verdict_reads_the_interval() -> None:
    assert verdict_of((0.01, 0.2)) == BETTER and verdict_of((-0.2, -0.01)) == WORSE
    assert verdict_of((-0.01, 0.2)) == TIED and verdict_of(None) == NO_INTERVAL


def test_each_rule_is_its_own_configuration_priced_and_predicted_as_the_answer_is(bundle) -> None:
    law = dpscaling.load_law(bundle)
    answer = law.query(**QUERY)
    runnable = answer.runnable
    sizes = np.sort(law.measured_sizes.to_numpy(float))
    horizon = law.ranges.horizon
    by_rule = {margin.rule: margin for margin in answer.margins}
    assert list(by_rule) == [rule.name for rule in RULES_OF_THUMB] == ["dp_expert", "middle", "chinchilla"]
    assert by_rule["dp_expert"].model_size == sizes[0] and by_rule["middle"].model_size == sizes[len(sizes) // 2]
    chinchilla = math.sqrt(QUERY["compute"] / (6 * 20))
    assert abs(math.log(by_rule["chinchilla"].model_size / chinchilla)) < math.log(2)  # the nearest shape
    surface_loss = law.bundle.law.loss
    for rule in RULES_OF_THUMB:
        margin = by_rule[rule.name]
        # spends the budget's compute in whole microbatches (at most N) at about the rule's share of the horizon
        assert margin.batch_size % runnable.microbatch_size == 0 and margin.batch_size <= QUERY["users"]
        spent = 6 * margin.model_size * margin.batch_size * runnable.seq_len * margin.iterations
        assert spent == pytest.approx(QUERY["compute"], rel=0.05)
        assert margin.iterations == pytest.approx(rule.horizon_fraction * horizon, rel=0.5)
        # σ from the one pricing module under the answer's sampler; the law's loss at (M, T, σ/B), independently
        price = pricing.price(runnable.mechanism, answer.sampling, QUERY["epsilon"], runnable.delta, QUERY["users"],
                              margin.batch_size, margin.iterations)
        predicted = float(np.ravel(surface_loss(np.array([float(margin.model_size)]),
                                                np.array([float(margin.iterations)]),
                                                np.array([price.sigma / margin.batch_size])))[0])
        assert margin.predicted_loss == pytest.approx(predicted, rel=1e-9)
        assert margin.margin == pytest.approx(predicted - runnable.predicted_loss, rel=1e-9)
        # the interval: the two calibrated half-widths in quadrature (both 0.05 on this constant calibration)
        low, high = margin.interval
        assert (high - low) / 2 == pytest.approx(math.hypot(0.05, 0.05))
        assert margin.verdict == verdict_of(margin.interval)


def test_the_cli_prints_the_margins_in_json_and_text(bundle, capsys) -> None:
    argv = ["query", "--law", str(bundle), "--compute", "1e13", "--epsilon", "4", "--users", "1e5"]
    assert cli.main([*argv, "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    margins = document["margins_over_rules_of_thumb"]
    assert [m["rule"] for m in margins] == ["dp_expert", "middle", "chinchilla"]
    api = dpscaling.load_law(bundle).query(**QUERY).margins
    assert [m["margin"] for m in margins] == pytest.approx([m.margin for m in api])
    assert cli.main(argv) == 0
    text = capsys.readouterr().out
    assert "vs rules" in text and all(m["verdict"] in text for m in margins)


def test_the_default_savings_baselines_are_the_rules_of_thumb_at_its_horizon() -> None:
    """config/config.yaml's savings baselines (trained) and RULES_OF_THUMB (predicted) are the same three rules."""
    import yaml

    from conftest import REPO
    from dpscaling.law.runnable import custom_param_count

    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    horizon, data = config["training"]["steps"], config["data"]
    sizes = {name: custom_param_count("bert", shape["layers"], shape["heads"], shape["hidden"], data["vocab_size"],
                                      data["seq_len"]) for name, shape in config["models"]["custom"].items()
             if name in config["models"]["names"]}
    ordered = sorted(sizes, key=sizes.get)
    models = {"smallest": ordered[0], "middle": ordered[len(ordered) // 2]}
    baselines = {entry["name"]: entry for entry in config["savings"]["baselines"]}
    for rule in RULES_OF_THUMB:
        baseline = baselines[rule.name]
        assert baseline["iterations"] == round(rule.horizon_fraction * horizon)
        if rule.tokens_per_parameter is not None:
            assert baseline["tokens_per_parameter"] == rule.tokens_per_parameter
        else:
            assert baseline["model"] == models[rule.model]
