"""One price for every caller (docs/accounting.md, "Pricing a configuration") and one decision rule that weighs
risk (docs/query.md, "The decision rule"): a BandMF answer is priced by its own accountant, recomputed here
with dp-accounting and jax-privacy without the pricing module; a choice among configurations or mechanisms
charges what the law's calibration says it risks."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import dpscaling
from dpscaling import cli
from dpscaling.cli._output import _jsonable
from dpscaling.law.mechanisms import LawAcrossMechanisms, MechanismChoice
from law_bundle_data import bundled, shapes_provenance, write_mechanism_run

QUERY = dict(compute=3e12, epsilon=4.0, users=1e6)
DELTA = 1e-8


@pytest.fixture(scope="module")
def mech_run(tmp_path_factory):
    return write_mechanism_run(tmp_path_factory.mktemp("mechanisms"))


@pytest.fixture
def run(capsys):
    def invoke(*argv) -> tuple[int, str, str]:
        status = cli.main([str(a) for a in argv])
        out, err = capsys.readouterr()
        return status, out, err
    return invoke


def poisson_epsilon(sigma: float, q: float, compositions: int) -> float:
    """dp-accounting's PLD accountant, finer than dpscaling's, composed by hand."""
    import dp_accounting
    from dp_accounting.pld import pld_privacy_accountant

    accountant = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
    accountant.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma)), compositions)
    return accountant.get_epsilon(DELTA)


def test_a_bandmf_answer_s_sigma_is_its_cyclic_poisson_price_from_the_cli_and_the_api(run, mech_run) -> None:
    """The answer's σ spends exactly ε under the cyclic-Poisson reduction, q_g = B/⌊N/b⌋ over ⌈T/b⌉ steps,
    recomputed with dp-accounting; priced as DP-SGD (q = B/N over T steps) it would be far too small."""
    status, out, err = run("query", "--law", mech_run / "law" / "bundle", "--mechanism", "bandmf-b4",
                           "--sampling", "poisson", "--compute", QUERY["compute"], "--epsilon", QUERY["epsilon"],
                           "--users", QUERY["users"], "--json")
    assert status == 0, err
    printed = json.loads(out)
    choice = dpscaling.load_law(mech_run / "law" / "bundle", mechanism="bandmf-b4").query(**QUERY,
                                                                                            sampling="poisson")
    assert isinstance(choice, MechanismChoice) and choice.mechanism == "bandmf-b4"
    assert json.loads(json.dumps(_jsonable(choice.to_json()))) == printed  # the CLI prints the API's answer
    answer = choice.answer.runnable
    batch, steps, units = answer.batch_size, answer.iterations, int(answer.data_budget)
    assert printed["mechanism"] == "bandmf-b4" and printed["sampler"] == "truncated_poisson"
    assert printed["adjacency"] == "zero-out" and printed["sampling"] == "poisson"
    group = units // 4
    assert printed["accounting_event"] == {"kind": "poisson_subsampled_gaussian", "compositions": math.ceil(steps / 4),
                                           "sensitivity": 1.0, "adjacency": "zero-out",
                                           "sampling_probability": batch / group, "population": group}
    assert poisson_epsilon(printed["sigma"], batch / group, math.ceil(steps / 4)) == pytest.approx(4.0, rel=2e-3)
    as_dpsgd = poisson_epsilon(printed["sigma"], batch / units, steps)
    assert as_dpsgd < 0.9 * 4.0  # the reduction's σ is not DP-SGD's: DP-SGD's would be smaller, and overspend


def test_bandmf_s_fixed_batches_are_priced_for_the_cyclic_sampler_whose_sensitivity_is_root_k(mech_run) -> None:
    """The deterministic branch of a BandMF answer: k = ⌈T/⌊N/B⌋⌉ participations ⌊N/B⌋ ≥ b apart, σ = √k·s_AG
    (dp-accounting's Gaussian), and √k is the strategy's sensitivity at that separation (jax-privacy's
    minsep_sensitivity_squared on a real optimised strategy), while at any separation (shuffled epochs) it is
    larger."""
    import dp_accounting

    from dpscaling.dp.correlated import sensitivity_squared, strategy_coefficients
    from dpscaling.privacy.mechanisms import mechanism_named

    law = dpscaling.load_law(mech_run / "law" / "bundle", mechanism="bandmf-b4")
    runnable = law.query(**QUERY, sampling="deterministic").answer.runnable
    event = runnable.price.event
    separation = int(runnable.data_budget) // runnable.batch_size
    assert runnable.price.sampler == "cyclic" and event.min_separation == separation >= 4
    assert event.participations == math.ceil(runnable.iterations / separation)
    noise = runnable.sigma / math.sqrt(event.participations)
    assert dp_accounting.get_epsilon_gaussian(noise, DELTA) == pytest.approx(4.0, rel=1e-6)
    steps, participations = 64, 4
    coefficients = strategy_coefficients(mechanism_named("bandmf-b4"), steps, "mean_error")
    assert sensitivity_squared(coefficients, steps, participations, 16) == pytest.approx(participations, rel=1e-5)
    assert sensitivity_squared(coefficients, steps, participations, 1) > participations * 1.05


def test_the_sigma_table_prices_bandmf_s_fixed_batches_as_the_pricing_module() -> None:
    """SigmaTable's deterministic branch of a 4-band table: the cyclic sampler's √⌈T/⌊1/q⌋⌉ · s_AG, NaN where a
    group could not hold a batch (⌊1/q⌋ < b); a DP-SGD table keeps the paper's ⌈qT⌉."""
    import pandas as pd

    from dpscaling.accounting import pricing
    from dpscaling.accounting.gaussian import analytic_gaussian_sigma
    from dpscaling.accounting.table import SigmaTable

    frame = pd.DataFrame({"epsilon": np.repeat([1.0, 4.0], 4), "steps": np.tile([100, 100, 1000, 1000], 2),
                          "sampling_probability": np.tile([2.0**-6, 2.0**-1], 4), "delta": DELTA, "sigma": 1.0})
    bandmf, dpsgd = SigmaTable(frame, bands=4), SigmaTable(frame)
    e, t, q = np.array([4.0, 4.0, 1.0]), np.array([1000.0, 300.0, 130.0]), np.array([2.0**-6, 2.0**-6, 2.0**-1])
    got = bandmf.deterministic(e, t, q)
    assert np.isnan(got[2])  # 1/q = 2 < 4 bands
    for index in range(2):
        units, batch = 64 * 100, 100
        priced = pricing.price("bandmf-b4", "deterministic", e[index], DELTA, units, batch, int(t[index]))
        assert got[index] == pytest.approx(priced.sigma, rel=1e-9)
        assert got[index] == pytest.approx(math.sqrt(math.ceil(t[index] / 64)) * analytic_gaussian_sigma(4.0, DELTA))
    assert dpsgd.deterministic(e[:1], t[:1], q[:1])[0] == pytest.approx(
        math.sqrt(math.ceil(1000 / 64)) * analytic_gaussian_sigma(4.0, DELTA))


def test_load_law_on_a_mechanisms_directory_chooses_exactly_as_the_cli(run, mech_run) -> None:
    """The calibrated upper end chooses DP-SGD (BandMF predicts lower, but its interval is 0.45 nats wider);
    the point prediction alone chooses BandMF, shown beside; the CLI prints the API's choice."""
    law = dpscaling.load_law(mech_run / "law" / "bundle")
    assert isinstance(law, LawAcrossMechanisms) and law.mechanisms == ["dpsgd", "bandmf-b4"]
    choice = law.query(**QUERY, decision_rule="calibrated_upper")
    status, out, err = run("query", "--law", mech_run / "law" / "bundle", "--compute", QUERY["compute"],
                           "--epsilon", QUERY["epsilon"], "--users", QUERY["users"], "--json",
                           "--decision-rule", "calibrated_upper")
    assert status == 0, err
    printed = json.loads(out)
    assert json.loads(json.dumps(_jsonable(choice.to_json()))) == printed
    assert printed["mechanism"] == "dpsgd" and printed["point_prediction_choice"] == "bandmf-b4"
    rows = {row["mechanism"]: row for row in printed["mechanisms"]}
    assert rows["bandmf-b4"]["predicted_loss"] < rows["dpsgd"]["predicted_loss"]
    assert rows["dpsgd"]["decision_score"] < rows["bandmf-b4"]["decision_score"]
    assert printed["decision_rule"]["rule"] == "calibrated_upper"
    assert printed["decision_rule"]["score"] == pytest.approx(printed["calibrated_interval_90"][1])
    point = law.query(**QUERY, decision_rule="point")
    assert point.mechanism == "bandmf-b4" and point.answer.runnable.decision.applied == "point"
    status, out, _ = run("query", "--law", mech_run / "law" / "bundle", "--compute", QUERY["compute"],
                         "--epsilon", QUERY["epsilon"], "--users", QUERY["users"], "--decision-rule", "point")
    assert status == 0 and out.startswith("mechanism    bandmf-b4")


def test_a_mechanism_s_law_directory_finds_its_own_calibration(mech_run, tmp_path) -> None:
    """law/mechanisms/mech=M/fit is bundled with validate/mech=M/calibration.json (not the primary's, nor none),
    by the workflow and by the conversion of the directory alone."""
    from dpscaling.workflow.layout import calibration_beside

    fit = mech_run / "law" / "mechanisms" / "mech=bandmf-b4" / "fit"
    assert calibration_beside(fit) == (mech_run / "validate" / "mech=bandmf-b4" / "calibration.json").resolve()
    for law in (dpscaling.load_law(mech_run / "law" / "bundle", mechanism="bandmf-b4").law("bandmf-b4"),
                dpscaling.load_law(bundled(fit, tmp_path / "bundle"))):
        assert law.bundle.calibration is not None and law.bundle.calibration.half_width == 0.5
        assert law.mechanism == "bandmf-b4"


def test_a_bundle_records_its_mechanism_sampler_and_adjacency(mech_run, tmp_path) -> None:
    from dpscaling.law.bundle import write_bundle

    law = mech_run / "law" / "mechanisms" / "mech=bandmf-b4"
    bundle = write_bundle(tmp_path / "bundle", law / "fit", provenance=shapes_provenance(),
                          sigma_table=mech_run / "accounting" / "mech=bandmf-b4" / "sigma_table.parquet")
    provenance = bundle.manifest()["provenance"]
    assert provenance["mechanism"] == "bandmf-b4" and provenance["bands"] == 4
    assert provenance["samplers"] == {"poisson": "truncated_poisson", "deterministic": "cyclic"}
    assert provenance["adjacency"] == {"poisson": "zero-out", "deterministic": "zero-out"}
    answer = dpscaling.load_law(tmp_path / "bundle").query(**QUERY, sampling="poisson")
    assert answer.runnable.mechanism == "bandmf-b4" and answer.runnable.price.event.compositions == math.ceil(
        answer.runnable.iterations / 4)
    assert answer.runnable.train_config()["private_model"]["budgets"][0]["mechanism"] == "bandmf-b4"


@pytest.mark.parametrize("rule_name", ["extrapolation_charged", "calibrated_upper"])
def test_a_charging_rule_steps_back_from_the_extrapolation_the_point_prediction_takes(
        mech_run, tmp_path, rule_name) -> None:
    """With a distance-scaled calibration (wider per doubling of T past the horizon), each charging rule's
    runnable has its lowest score and the point rule's the lowest predicted loss, each stated in its answer,
    and the law's point optimum stays beside both."""
    from dpscaling.law import read_law
    from dpscaling.law.calibration import DISTANCE_METHOD, Calibration, write_calibration
    from dpscaling.law.columns import SOURCE
    from dpscaling.law.decision import DecisionRule
    from dpscaling.law.distance import DistanceScale

    fit = mech_run / "law" / "fit"
    scale = DistanceScale.of(read_law(fit).grid.pipe(lambda grid: grid[grid[SOURCE] == "measured"]))
    path = tmp_path / "calibration.json"
    # q = 2 nats: the synthetic law's losses fall by nats per doubling of T, so its risk must be as large to matter
    write_calibration({"paper": Calibration("paper", False, 2.0, ("horizon (fit T <= 1000, predict the rest)",),
                                            0.5, 1.0, 0.0, method=DISTANCE_METHOD, iterations_from=500.0,
                                            scale=scale)}, path)
    law = dpscaling.load_law(bundled(fit, tmp_path / "bundle", calibration=path))
    budget = dict(compute=3e13, epsilon=16.0, users=1e6, allow_extrapolation=True)
    upper, point = law.query(**budget, decision_rule=rule_name), law.query(**budget, decision_rule="point")
    rule = DecisionRule(rule_name)
    calibration = law.bundle.calibration

    def score(answer) -> float:
        r = answer.runnable
        return rule.decide(r.predicted_loss, calibration, r.model_size, r.iterations, r.noise_batch_ratio).score

    assert upper.runnable.iterations < point.runnable.iterations  # the point prediction extrapolates further
    assert point.runnable.iterations > law.ranges.validated_iterations >= upper.runnable.iterations
    assert "point_optimum_beyond_validated" in [flag.code for flag in upper.flags]
    assert "iterations_beyond_validated" in [flag.code for flag in point.flags]
    with pytest.raises(dpscaling.ExtrapolationRefused):  # the point rule's choice is refused unless allowed
        law.query(**{**budget, "allow_extrapolation": False}, decision_rule="point")
    assert law.query(**{**budget, "allow_extrapolation": False},
                     decision_rule=rule_name).runnable.iterations == upper.runnable.iterations
    assert score(upper) < score(point) and point.predicted_loss < upper.predicted_loss
    assert upper.to_json()["decision_rule"]["rule"] == rule_name
    assert upper.to_json()["law_optimum"]["iterations"] == point.to_json()["law_optimum"]["iterations"]


def test_choose_plans_every_mechanism_with_the_same_correction_and_the_decision_rule(mech_run) -> None:
    """private_model's `choose` asks every mechanism's law through the query (one rounding, one price, one
    rule), applies the physical-batch correction to every mechanism alike, and picks by the rule."""
    from dpscaling.law.physical_batch import PhysicalBatchCorrection
    from dpscaling.private.plans import Budget
    from dpscaling.private.model import plan_mechanisms

    budget = Budget(4.0, DELTA, 20_000, 1e12, mechanism="choose")
    correction = PhysicalBatchCorrection(0.1, 32, 10, 0.01)
    models = ["Synthetic0", "Synthetic1", "Synthetic2"]
    chosen = plan_mechanisms(mech_run / "law" / "bundle", budget, models, microbatch_size=8,
                             correction=correction, decision_rule="calibrated_upper")
    assert chosen.mechanism == "dpsgd" and chosen.physical_batch_correction == correction
    compared = {row["mechanism"]: row for row in chosen.mechanisms_compared}
    assert compared["bandmf-b4"]["planned"] and compared["bandmf-b4"]["decision"]["score"] > chosen.decision["score"]
    assert chosen.batch_size % 8 == 0  # whole microbatches, as the query rounds
    point = plan_mechanisms(mech_run / "law" / "bundle", budget, models, microbatch_size=8,
                            correction=correction, decision_rule="point")
    assert point.mechanism == "bandmf-b4" and point.physical_batch_correction == correction
    # The default charges only extrapolation, which these laws' constant half-widths cannot measure: it falls
    # back to the point prediction, says so, and BandMF's wider interval costs it nothing.
    default = plan_mechanisms(mech_run / "law" / "bundle", budget, models, microbatch_size=8,
                              correction=correction)
    assert default.mechanism == "bandmf-b4" and default.decision["rule"] == "extrapolation_charged"
    assert default.decision["applied"] == "point" and default.decision["charge"] is None
    assert default.decision["score"] == default.decision["predicted_loss"]
    assert point.untruncated_sigma == pytest.approx(  # the private run's price, its cyclic-Poisson reduction
        dpscaling.accounting.pricing.price("bandmf-b4", "poisson", 4.0, DELTA, 20_000, point.batch_size,
                                           point.iterations).sigma, rel=0.01)


def test_dpscaling_sigma_prices_a_bandmf_configuration_with_its_own_events(run) -> None:
    """`dpscaling sigma --mechanism` is the pricing module's: BandMF's σ is its run's, cyclic Poisson truncated at
    its L, and spends ε under the cyclic reduction (recomputed with dp-accounting's truncated event), its fixed
    batches need B to fit b times into N, and a bad name is refused."""
    import dp_accounting

    status, out, err = run("sigma", "--mechanism", "bandmf-b16", "--epsilon", 8, "--users", 20000, "--batch", 304,
                           "--steps", 341, "--sampling", "poisson", "--json")
    assert status == 0, err
    printed = json.loads(out)
    assert printed["sampler"] == "truncated_poisson" and printed["adjacency"] == "zero-out"
    assert printed["accounted_rounds"] == 22 and printed["group_size"] == 1250
    event = dp_accounting.TruncatedSubsampledGaussianDpEvent(1250, 304 / 1250, printed["truncated_batch_size"],
                                                             printed["sigma"])
    accountant = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
    assert accountant.compose(event, 22).get_epsilon(DELTA) == pytest.approx(8.0, rel=5e-3)
    assert poisson_epsilon(printed["sigma"], 304 / 1250, 22) < 8.0  # the truncation is paid for
    status, _, err = run("sigma", "--mechanism", "bandmf-b16", "--epsilon", 8, "--users", 2000, "--batch", 304,
                         "--steps", 341, "--sampling", "deterministic")
    assert status == 2 and "closer than its 16 bands" in err
    status, _, err = run("sigma", "--mechanism", "bandmf-b1", "--epsilon", 8, "--users", 2000, "--batch", 30,
                         "--steps", 34)
    assert status == 2 and "bandmf-b<b>" in err


def test_a_law_without_a_calibration_is_charged_like_the_others_not_scored_bare(tmp_path) -> None:
    """Choices across laws compare like with like: BandMF's law (its answer predicted 0.026 nats worse, no
    calibration) used to win on its bare prediction against DP-SGD's prediction plus its half-width 0.05; it is now
    charged the widest calibrated half-width of the others, says so, and DP-SGD's answer wins. Without any
    calibration the scores are the bare predictions."""
    from dpscaling.law.bundle import write_bundle
    from dpscaling.law.decision import Scored, comparable_scores

    root = write_mechanism_run(tmp_path / "run", bandmf_gain=0.04)
    bandmf = root / "law" / "mechanisms" / "mech=bandmf-b4"
    write_bundle(tmp_path / "bundle", root / "law" / "fit", sigma_table=root / "accounting" / "sigma_table.parquet",
                 bootstrap=root / "law" / "bootstrap", calibration=root / "validate" / "calibration.json",
                 mechanisms={"bandmf-b4": {"law": bandmf / "fit", "bootstrap": bandmf / "bootstrap",
                                           "sigma_table": root / "accounting" / "mech=bandmf-b4" / "sigma_table.parquet"}})
    choice = dpscaling.load_law(tmp_path / "bundle").query(**QUERY, decision_rule="calibrated_upper",
                                                            optimum_interval=False)
    rows = {row["mechanism"]: row for row in choice.comparison()}
    assert choice.answers["bandmf-b4"].runnable.decision.applied == "point"  # it has no calibration to apply
    width = (lambda low, high: (high - low) / 2)(*choice.answers["dpsgd"].runnable.calibrated_interval)
    assert rows["bandmf-b4"]["decision_score"] == pytest.approx(rows["bandmf-b4"]["predicted_loss"] + width)
    assert "widest calibrated half-width" in rows["bandmf-b4"]["decision_note"] and rows["dpsgd"]["decision_note"] is None
    assert rows["dpsgd"]["predicted_loss"] < rows["bandmf-b4"]["predicted_loss"]
    assert choice.answers["bandmf-b4"].runnable.decision.score < rows["dpsgd"]["decision_score"]  # the bare score won
    assert choice.mechanism == "dpsgd" and choice.to_json()["decision_notes"].keys() == {"bandmf-b4"}
    bare = {"a": Scored(5.0, 5.0, "point", "point", None), "b": Scored(5.1, 5.1, "point", "point", 0.2)}
    assert comparable_scores(bare) == ({"a": 5.0, "b": 5.1}, {})
