"""Answers a practitioner can act on: the law bundle (portable), the Python API (= the CLI), range flags and
the refusal policy, runnable answers (shapes, whole batches and steps, σ that spends exactly the asked ε)."""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pandas as pd
import pytest

import dpscaling
from dpscaling import cli
from dpscaling.cli._output import _jsonable
from dpscaling.core.errors import UserError
from dpscaling.law.bundle import BUNDLE_FILE, read_bundle
from dpscaling.law.range_checks import ExtrapolationRefused
from dpscaling.law.runnable import ModelShape, custom_param_count, nearest_shape, whole_batch, whole_steps
from law_bundle_data import SHAPES, bundled, write_run, write_run_bundle

@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    return write_run(tmp_path_factory.mktemp("run"))


@pytest.fixture(scope="module")
def bundle(run_dir):
    return write_run_bundle(run_dir, run_dir / "bundle").root


@pytest.fixture
def run(monkeypatch, capsys):
    """The real CLI entry point; returns (status, stdout, stderr)."""
    def invoke(*argv) -> tuple[int, str, str]:
        status = cli.main([str(a) for a in argv])
        out, err = capsys.readouterr()
        return status, out, err
    return invoke


QUERY = dict(compute=3e12, epsilon=4.0, users=1e6)


def test_the_bundle_holds_everything_and_answers_the_same_from_anywhere(run, run_dir, bundle, tmp_path) -> None:
    manifest = json.loads((bundle / BUNDLE_FILE).read_text())
    assert manifest["contents"]["bootstrap_replicates"] == 4 and manifest["contents"]["calibration"]
    assert manifest["validated_ranges"]["extrapolation_factor"] == 2.0
    ranges = manifest["validated_ranges"]
    assert ranges["horizon"] == 2000 and ranges["calibration_iterations_from"] == 500
    assert manifest["provenance"]["models"]["Synthetic2"]["layers"] == 4
    argv = ("query", "--law", bundle, "--compute", QUERY["compute"], "--epsilon", QUERY["epsilon"], "--users",
            QUERY["users"], "--json")
    status, out, err = run(*argv)
    assert status == 0, err
    here = json.loads(out)
    assert here["seed_only_interval_90"] is not None and here["calibrated_interval_90"] is not None
    # Copied elsewhere, with the run's results directory gone: the same answer, number for number.
    copy = tmp_path / "elsewhere" / "bundle"
    shutil.copytree(bundle, copy)
    moved = run_dir.parent / f"{run_dir.name}-moved"
    run_dir.rename(moved)
    try:
        status, out, err = run(*argv[:2], copy, *argv[3:])
    finally:
        moved.rename(run_dir)
    assert status == 0, err
    there = json.loads(out)
    assert there == here


def test_the_python_api_gives_the_cli_s_answer(run, bundle) -> None:
    law = dpscaling.load_law(bundle)
    answer = law.query(**QUERY)
    status, out, err = run("query", "--law", bundle, "--compute", QUERY["compute"], "--epsilon", QUERY["epsilon"],
                           "--users", QUERY["users"], "--json")
    assert status == 0, err
    assert json.loads(out) == json.loads(json.dumps(_jsonable(answer.to_json())))
    assert answer.predicted_loss == answer.runnable.predicted_loss == json.loads(out)["predicted_loss"]
    configs = pd.DataFrame({"Model Size": [4e5], "Batch Size": [256], "Iterations": [1000], "Privacy Budget": [4.0],
                            "Data Budget": [1e6]})
    evaluated = law.evaluate(configs)
    assert np.isfinite(evaluated["Cross Entropy"]).all() and "Cross Entropy 5%" in evaluated


def test_a_runnable_answer_trains_whole_microbatches_and_steps_at_the_budget(bundle) -> None:
    answer = dpscaling.load_law(bundle).query(**QUERY)
    runnable = answer.runnable
    assert runnable.batch_size % 8 == 0 and isinstance(runnable.iterations, int)  # the bundle's microbatch: 8
    assert runnable.compute == pytest.approx(QUERY["compute"], rel=0.05)
    assert runnable.model is not None and runnable.model_size == runnable.model.param_count
    assert runnable.model_size == custom_param_count("bert", runnable.model.layers, runnable.model.heads,
                                                     runnable.model.hidden, 1024, 128)
    assert abs(math.log(runnable.model_size / answer.optimum.model_size)) < math.log(1.6)
    assert runnable.noise_batch_ratio == pytest.approx(runnable.sigma / runnable.batch_size)
    low, high = runnable.calibrated_interval
    assert high - low == pytest.approx(0.1) and low < runnable.predicted_loss < high
    block = runnable.train_config()
    fixed = block["private_model"]["budgets"][0]
    assert fixed["configuration"]["batch_size"] == runnable.batch_size
    assert fixed["configuration"]["iterations"] == runnable.iterations
    assert fixed["data_budget"] == 1_000_000 and fixed["epsilon"] == 4.0 and fixed["delta"] == 1e-8


def test_a_distance_scaled_calibration_gives_the_half_width_at_the_answer_s_point(run_dir, tmp_path) -> None:
    from dpscaling.law import read_law
    from dpscaling.law.calibration import DISTANCE_METHOD, Calibration, write_calibration
    from dpscaling.law.columns import SOURCE
    from dpscaling.law.distance import DistanceScale

    law = read_law(run_dir / "law" / "fit")
    scale = DistanceScale.of(law.grid[law.grid[SOURCE] == "measured"])
    path = tmp_path / "calibration.json"
    write_calibration({"paper": Calibration("paper", False, 0.05, ("horizon (fit T <= 1000, predict the rest)",),
                                            0.5, 1.0, 0.0, method=DISTANCE_METHOD, iterations_from=500.0,
                                            scale=scale)}, path)
    answer = dpscaling.load_law(bundled(run_dir / "law" / "fit", tmp_path / "bundle", calibration=path)).query(**QUERY)
    runnable = answer.runnable
    distance = float(scale.distance(runnable.model_size, runnable.iterations, runnable.noise_batch_ratio))
    assert distance > 0  # a new shape between measured models, at a σ̄ between columns
    low, high = runnable.calibrated_interval
    assert (high - low) / 2 == pytest.approx(0.05 * (1 + distance))
    described = answer.to_json()["calibration"]
    assert described["half_width"] == pytest.approx(0.05 * (1 + distance)) and described["q"] == 0.05
    assert described["interval_scale"] == "distance"


@pytest.mark.parametrize("delta", [1e-8])
def test_the_runnable_sigma_spends_exactly_the_asked_epsilon(bundle, delta) -> None:
    """Recomputed independently: dp-accounting's own PLD accountant at a finer discretisation, and Microsoft's
    PRV accountant, neither through dpscaling's calibration."""
    import dp_accounting
    from dp_accounting.pld import pld_privacy_accountant
    from prv_accountant.dpsgd import DPSGDAccountant

    runnable = dpscaling.load_law(bundle).query(**QUERY, delta=delta).runnable
    q, steps = runnable.batch_size / runnable.data_budget, runnable.iterations
    assert runnable.sampling == "poisson" and runnable.epsilon == 4.0 and runnable.delta == delta
    accountant = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-4)
    accountant.compose(dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(runnable.sigma)), steps)
    assert accountant.get_epsilon(delta) == pytest.approx(4.0, rel=2e-3)
    prv = DPSGDAccountant(noise_multiplier=runnable.sigma, sampling_probability=q, eps_error=1e-3, delta_error=1e-10,
                          max_steps=steps)
    low, estimate, high = prv.compute_epsilon(delta=delta, num_steps=steps)
    assert low - 0.01 <= 4.0 <= high + 0.01 and estimate == pytest.approx(4.0, rel=5e-3)


def test_a_query_far_beyond_the_horizon_is_refused_unless_allowed(run, bundle) -> None:
    law = dpscaling.load_law(bundle)
    budget = dict(compute=3e15, epsilon=4.0, users=1e6)  # optimum at T of ~30× the 2,000-step horizon
    with pytest.raises(ExtrapolationRefused) as refused:
        law.query(**budget)
    message = str(refused.value)
    assert "the trained horizon 2,000" in message and "validated up to 2×" in message
    assert "--allow-extrapolation" in message
    assert refused.value.answer.optimum["Iterations"] > 20 * 2000
    status, out, err = run("query", "--law", bundle, "--compute", 3e15, "--epsilon", 4, "--users", 1e6)
    assert status == 2 and out == "" and "Refused" in err
    answer = law.query(**budget, allow_extrapolation=True)
    flag = next(flag for flag in answer.flags if flag.code == "iterations_beyond_validated")
    assert flag.severity == "warning" and flag.limit == 4000 and flag.value == answer.runnable.iterations
    assert flag.value > 20 * 2000 and answer.warning.startswith("T = ")
    status, out, _ = run("query", "--law", bundle, "--compute", 3e15, "--epsilon", 4, "--users", 1e6,
                         "--allow-extrapolation")
    assert status == 0 and "iterations_beyond_validated" in out


def test_inside_the_measured_range_an_answer_has_no_iteration_flag(bundle) -> None:
    answer = dpscaling.load_law(bundle).query(**QUERY)
    assert answer.runnable.iterations <= 2000
    assert not {"iterations_beyond_validated", "iterations_extrapolated"} & {flag.code for flag in answer.flags}


def test_flags_for_data_reuse_sampling_rate_and_the_calibration_region(bundle) -> None:
    law = dpscaling.load_law(bundle)
    # One sequence per privacy unit and few of them: B·T > N and q above the limit.
    answer = law.query(compute=1e12, epsilon=32.0, tokens=500 * 128, allow_extrapolation=True)
    assert answer.query["privacy_unit"] == "sequence" and answer.query["data_budget_units"] == 500
    codes = {flag.code: flag for flag in answer.flags}
    assert codes["repeats_data"].value == pytest.approx(answer.runnable.batch_size * answer.runnable.iterations / 500)
    assert codes["sampling_rate_above_limit"].value == pytest.approx(answer.runnable.batch_size / 500)
    # A small budget trains few steps: below the calibrated interval's region (T ≥ 500).
    small = law.query(compute=1e12, epsilon=4.0, users=1e5)
    assert small.runnable.iterations < 500
    assert "iterations_below_calibration" in {flag.code for flag in small.flags}


def test_a_budget_past_saturation_names_the_saturating_compute_and_its_answer(bundle) -> None:
    law = dpscaling.load_law(bundle)
    answer = law.query(compute=1e16, epsilon=1.0, users=1e4, allow_extrapolation=True)
    flag = next(flag for flag in answer.flags if flag.code == "past_saturation")
    saturating = answer.saturation["compute"]
    assert flag.limit == saturating < 1e16
    assert answer.saturation["answer"]["predicted_loss"] <= answer.optimum.predicted_loss * 1.01
    # the paper's definition, checked on the budgets themselves: nothing below the saturating compute is within 1%
    lower = law.query(compute=saturating / 2, epsilon=1.0, users=1e4, allow_extrapolation=True)
    best = min(answer.optimum.predicted_loss, answer.saturation["answer"]["predicted_loss"])
    assert lower.optimum.predicted_loss > best * 1.01 - 1e-12


def test_the_model_size_edge_is_flagged(bundle) -> None:
    from dpscaling.law.range_checks import model_size_flags

    small = dpscaling.load_law(bundle).query(compute=1e14, epsilon=32.0, users=1e8, allow_extrapolation=True)
    flag = next(flag for flag in small.flags if flag.code == "model_size_at_edge")
    assert "smallest" in flag.message and flag.limit == 1e5 and small.optimum.model_size < 1.02 * 1.01e5
    searched, measured = (1.01e5, 0.99 * 1.6e6), (1e5, 1.6e6)
    assert "largest" in model_size_flags(0.99 * 1.6e6, searched, measured)[0].message
    assert model_size_flags(5e5, searched, measured) == []


def test_nearest_shape_follows_the_measured_models() -> None:
    measured = [ModelShape(name, "bert", *SHAPES[name], custom_param_count("bert", *SHAPES[name], 1024, 128), True)
                for name in SHAPES]
    for target in (1.5e5, 3e5, 8e5, 1.2e6):
        shape = nearest_shape(target, measured, 1024, 128)
        assert shape.param_count == custom_param_count("bert", shape.layers, shape.heads, shape.hidden, 1024, 128)
        assert abs(math.log(shape.param_count / target)) < math.log(1.5)
        assert 1 <= shape.layers <= 4 and shape.hidden % shape.heads == 0
    same = nearest_shape(measured[1].param_count, measured, 1024, 128)
    assert same == measured[1] and same.measured  # a measured model keeps its name
    assert whole_batch(101, 8, 1e6) == 104 and whole_batch(3, 8, 1e6) == 8 and whole_batch(900, 8, 100) == 96
    assert whole_steps(1e12, 1e5, 104, 128) == round(1e12 / (6 * 1e5 * 104 * 128))
    with pytest.raises(UserError, match="no model shape"):
        nearest_shape(1e5, [], 1024, 128)


def test_law_info_prints_provenance_and_validated_ranges(run, bundle) -> None:
    status, out, err = run("law", "info", bundle, "--json")
    assert status == 0, err
    info = json.loads(out)
    assert info["validated_ranges"]["validated_iterations"] == 4000
    assert info["provenance"]["family"] == "bert" and info["provenance"]["vocab_size"] == 1024
    assert "nats" in info["loss_units"]
    status, out, err = run("law", "info", bundle)
    assert status == 0 and "validated to 4000 (2× the horizon)" in out and "Synthetic2" in out


def test_a_bundle_answers_the_physical_batch_correction_only_when_asked(bundle) -> None:
    law = dpscaling.load_law(bundle)
    plain, corrected = law.query(**QUERY), law.query(**QUERY, physical_batch_correction=True)
    assert plain.correction is None and corrected.correction.slope == 0.1
    assert corrected.optimum.predicted_loss <= plain.optimum.predicted_loss


def test_only_a_bundle_loads_and_an_older_format_converts_once(bundle, run_dir, tmp_path) -> None:
    """The workflow's law/fit (a format from before bundles) is refused with the command that converts it; the
    conversion takes the files beside it and answers as the run's bundle does; a format-1 bundle (before
    bundles held mechanisms) still reads; an unknown format is refused."""
    with pytest.raises(TypeError):
        dpscaling.load_law(bundle, calibration=bundle / "calibration.json")  # files travel inside the bundle
    with pytest.raises(UserError, match="a fitted law directory.*dpscaling law bundle --law"):
        dpscaling.load_law(run_dir / "law" / "fit")
    converted = dpscaling.load_law(bundled(run_dir / "law" / "fit", tmp_path / "converted"))
    assert converted.bundle.calibration is not None and converted.bundle.replicates is not None
    answer = dpscaling.load_law(bundle).query(**QUERY)
    assert converted.query(**QUERY).optimum.predicted_loss == answer.optimum.predicted_loss
    old = tmp_path / "format-1"
    shutil.copytree(bundle, old)
    manifest = json.loads((old / BUNDLE_FILE).read_text())
    manifest["format_version"] = 1
    del manifest["contents"]["mechanisms"]
    (old / BUNDLE_FILE).write_text(json.dumps(manifest))
    assert dpscaling.load_law(old).query(**QUERY).to_json() == answer.to_json()
    (tmp_path / BUNDLE_FILE).write_text(json.dumps({"format": "something", "format_version": 9}))
    with pytest.raises(UserError, match="rebuild it"):
        read_bundle(tmp_path)


def test_the_noise_edge_is_flagged() -> None:
    from dpscaling.law.range_checks import noise_flags

    (flag,) = noise_flags(2.0**-12 * 1.01, (2.0**-12, 2.0**-6))
    assert flag.code == "noise_batch_ratio_at_edge" and flag.limit == 2.0**-12
    assert noise_flags(2.0**-10, (2.0**-12, 2.0**-6)) == []


def test_a_fine_tuning_law_answers_with_a_pretrained_model_and_names_its_checkpoint(run, run_dir, tmp_path) -> None:
    from dpscaling.cli.answer_text import render_answer
    from dpscaling.law.bundle import write_bundle
    from law_bundle_data import shapes_provenance

    pretrained = {"Synthetic0": "ckpt/pretrain/Synthetic0", "Synthetic2": "ckpt/pretrain/Synthetic2"}
    law_dir = run_dir / "law"
    out = write_bundle(tmp_path / "finetune-bundle", law_dir / "fit",
                       provenance={**shapes_provenance(), "regime": "fine-tuning", "pretrained": pretrained},
                       sigma_table=run_dir / "accounting" / "sigma_table.parquet",
                       calibration=run_dir / "validate" / "calibration.json").root
    law = dpscaling.load_law(out)
    sizes = law.bundle.law.grid.drop_duplicates("Model").set_index("Model")["Model Size"]
    answer = law.query(**QUERY)
    runnable = answer.runnable
    # The search only weighs the pretrained models (a size between them has no weights to start from) ...
    assert answer.optimum.model_size in {float(sizes[name]) for name in pretrained}
    assert runnable.model.name in pretrained and runnable.model.measured
    assert runnable.init_checkpoint == pretrained[runnable.model.name]
    # ... and the answer says where it starts, in its JSON, its text and the block that trains it.
    assert answer.to_json()["init_checkpoint"] == pretrained[runnable.model.name]
    budget = runnable.train_config()["private_model"]["budgets"][0]
    assert budget["pretrained"] is True and budget["configuration"]["model"] == runnable.model.name
    assert f"fine-tuned from the pretrained checkpoint {pretrained[runnable.model.name]}" in render_answer(answer)
    # A law of training from scratch names no checkpoint (and may answer a size between the measured ones).
    scratch = write_run_bundle(run_dir, tmp_path / "scratch-bundle").root
    assert dpscaling.load_law(scratch).query(**QUERY).runnable.init_checkpoint is None
    # A model-size range holding no pretrained model is refused, naming them.
    middle = float(sizes["Synthetic1"])
    status, _, err = run("query", "--law", out, "--compute", QUERY["compute"], "--epsilon", QUERY["epsilon"],
                         "--users", QUERY["users"], "--model-size-range", middle * 0.99, middle * 1.01)
    assert status != 0 and "no pretrained model" in err and "Synthetic0" in err


def test_counting_pretraining_answers_with_what_it_leaves_for_fine_tuning(run_dir, tmp_path) -> None:
    from dpscaling.law.bundle import write_bundle
    from law_bundle_data import shapes_provenance

    law_dir = run_dir / "law"
    probe = write_bundle(tmp_path / "probe", law_dir / "fit", provenance=shapes_provenance()).law
    sizes = probe.grid.drop_duplicates("Model").set_index("Model")["Model Size"]
    compute = QUERY["compute"]
    # Synthetic2's pretraining alone costs twice the budget; Synthetic0's a tenth of it.
    spent = {"Synthetic0": compute / 10 / (6 * sizes["Synthetic0"]),
             "Synthetic2": 2 * compute / (6 * sizes["Synthetic2"])}
    pretrained = {"Synthetic0": "ckpt/0", "Synthetic2": "ckpt/2"}
    out = write_bundle(tmp_path / "bundle", law_dir / "fit", sigma_table=run_dir / "accounting" / "sigma_table.parquet",
                       provenance={**shapes_provenance(), "pretrained": pretrained, "pretraining_tokens": spent},
                       calibration=run_dir / "validate" / "calibration.json").root
    law = dpscaling.load_law(out)
    answer = law.query(**QUERY, count_pretraining=True)
    assert answer.runnable.model.name == "Synthetic0" and answer.runnable.init_checkpoint == "ckpt/0"
    assert answer.query["compute"] == compute
    assert answer.query["pretraining_compute"] == pytest.approx(compute / 10)
    assert answer.query["finetuning_compute"] == pytest.approx(0.9 * compute)
    assert answer.runnable.compute == pytest.approx(0.9 * compute, rel=0.05)
    alone = law.query(0.9 * compute, QUERY["epsilon"], users=QUERY["users"],
                      model_size_range=(sizes["Synthetic0"], sizes["Synthetic0"]))
    assert answer.predicted_loss == alone.predicted_loss
    # Sunk (the default), the same budget may go to Synthetic2 and buys more fine-tuning for Synthetic0.
    assert law.query(**QUERY).runnable.compute == pytest.approx(compute, rel=0.05)
    scratch = write_run_bundle(run_dir, tmp_path / "scratch").root
    with pytest.raises(UserError, match="--count-pretraining: this law trains from scratch"):
        dpscaling.load_law(scratch).query(**QUERY, count_pretraining=True)
    unknown = write_bundle(tmp_path / "unknown", law_dir / "fit",
                           sigma_table=run_dir / "accounting" / "sigma_table.parquet",
                           provenance={**shapes_provenance(), "pretrained": pretrained,
                                       "pretraining_tokens": {"Synthetic0": 1.0}}).root
    with pytest.raises(UserError, match=r"records no pretraining for \['Synthetic2'\]"):
        dpscaling.load_law(unknown).query(**QUERY, count_pretraining=True)


def test_a_sigma_the_accountant_refuses_is_shown_apart_never_as_runnable(bundle) -> None:
    """Where exact pricing is refused (here ELS's fixed batches, which no sampler trains), the table's interpolated
    σ is not the runnable σ: the runnable block shows none, the σ stands apart with its reason, the answer has no
    train config and says so in text."""
    import dataclasses

    from dpscaling.cli.answer_text import render_answer
    from dpscaling.law.columns import BATCH_SIZE, ITERATIONS, MODEL_SIZE
    from dpscaling.law.decision import rule_named
    from dpscaling.law.noise import SigmaSource
    from dpscaling.law.budget import AnswerSettings, Budget, PricedSurface
    from dpscaling.law.range_checks import unpriced_sigma_flag
    from dpscaling.law.rounding import rounded
    from dpscaling.law.surface import surface_at

    law = dpscaling.load_law(bundle)
    answer = law.query(**QUERY)
    table = law.sigma_source()
    per_user = SigmaSource(table.sigma, table.delta, "poisson", "the table, standing for ELS's", examples_per_user=4)
    optimum = pd.Series({MODEL_SIZE: answer.runnable.model_size, BATCH_SIZE: float(answer.runnable.batch_size),
                         ITERATIONS: float(answer.runnable.iterations)})
    # at ε 8 the synthetic table's σ̄ lies inside the law's range (its σ is the closed form of fixed batches)
    priced = PricedSurface(8.0, surface_at(law.bundle, 128), per_user, QUERY["users"],
                           np.array([float(answer.runnable.model_size)]), None, 0.0)
    runnable = rounded(law, optimum, Budget.asked(QUERY["compute"], 8.0, QUERY["users"], None), priced,
                       AnswerSettings(rule_named(None), "deterministic"))
    assert not runnable.priced and runnable.price is None and "Poisson sampling only" in runnable.unpriced
    assert math.isfinite(runnable.predicted_loss) and runnable.train_config() == {}
    shown = runnable.to_json()
    assert shown["sigma"] is None and shown["noise_batch_ratio"] is None and shown["train_config"] is None
    assert shown["interpolated_sigma"]["sigma"] == runnable.sigma > 0
    text = render_answer(dataclasses.replace(answer, runnable=runnable,
                                             flags=tuple(unpriced_sigma_flag(runnable.sigma, runnable.unpriced))))
    assert "none priced" in text and "sigma_not_priced" in text and "train with   snakemake" not in text
    assert answer.runnable.priced and answer.to_json()["interpolated_sigma"] is None


def test_no_answer_is_below_the_non_private_law_at_its_compute(bundle, monkeypatch) -> None:
    """Every answer over a sweep of budgets lies at or above the non-private law's best up to its compute (recomputed
    here from the law at σ = 0 on a finer lattice); where the law predicts less, the loss and both intervals are raised
    to that floor and a flag says so."""
    from dpscaling.law.queries import compute_cost, model_size_grid, nonprivate_best_up_to

    law = dpscaling.load_law(bundle)
    fitted = law.bundle.law
    sizes, bounds = model_size_grid(*fitted.model_size_range()), fitted.iteration_bounds()
    answered: list[bool] = []
    for compute in (1e11, 1e12, 3e12, 1e13):
        lattice = compute * 2.0 ** (-np.arange(0, 161) / 8)
        lattice = lattice[lattice >= compute_cost(sizes[0], fitted.physical_batch, bounds[0], fitted.seq_len)]
        floor = float(law.nonprivate_floor(compute)[0])
        if not len(lattice):  # below the law's smallest budget: no floor
            assert floor == math.inf
            continue
        finer = nonprivate_best_up_to(fitted.loss, lattice, fitted.seq_len, sizes, bounds, fitted.physical_batch)[0]
        assert finer <= floor <= finer + 0.02  # the query's 2^(1/2) lattice is a little coarser
        for epsilon in (1.0, 4.0, 64.0):
            try:
                answer = law.query(compute, epsilon, users=1e6, allow_extrapolation=True, optimum_interval=False)
            except UserError:  # a budget outside the law's range
                continue
            answered.append(answer.predicted_loss >= floor)
    assert len(answered) >= 4 and all(answered)
    # Where the law predicts less, the answer says so and is raised (a floor above this law's answers, patched in).
    honest = law.query(**QUERY, optimum_interval=False)
    assert "below_nonprivate_law" not in {flag.code for flag in honest.flags}
    monkeypatch.setattr(type(law), "nonprivate_floor", lambda self, computes: np.atleast_1d(honest.predicted_loss + 0.5))
    raised = dpscaling.load_law(bundle).query(**QUERY, optimum_interval=False)
    flag = next(flag for flag in raised.flags if flag.code == "below_nonprivate_law")
    assert flag.value == pytest.approx(honest.predicted_loss) and flag.limit == pytest.approx(raised.predicted_loss)
    assert raised.predicted_loss == pytest.approx(honest.predicted_loss + 0.5)
    assert min(raised.calibrated_interval) >= raised.predicted_loss and min(raised.seed_only_interval) >= raised.predicted_loss
    assert raised.runnable.batch_size == honest.runnable.batch_size  # the configuration is the law's


def test_a_sweep_of_budgets_finds_no_answer_below_the_floor_and_lists_every_rise(bundle) -> None:
    from dpscaling.law.monotonicity import rises, sweep

    frame = sweep(dpscaling.load_law(bundle), [1.0, 8.0], [1e5, 1e6], [1e12, 3e12, 1e13])
    assert len(frame) == 12 and frame["predicted_loss"].notna().sum() >= 6
    answered = frame.dropna(subset=["predicted_loss"])
    assert (answered["predicted_loss"] >= answered["floor"]).all()
    assert set(frame.loc[frame["predicted_loss"].isna(), "unanswered"].str.len() > 0) <= {True}
    # rises: each step along one axis whose loss went up, the other two fixed
    made = pd.DataFrame({"epsilon": [1.0, 2.0, 4.0, 1.0], "users": [10.0, 10.0, 10.0, 20.0],
                         "compute": [1.0, 1.0, 1.0, 1.0], "predicted_loss": [5.0, 5.2, 4.9, 6.0]})
    up = rises(made, "epsilon")
    assert list(up["epsilon"]) == [1.0] and list(up["next"]) == [2.0] and up["rise"].iloc[0] == pytest.approx(0.2)
    assert rises(made, "users")["rise"].tolist() == pytest.approx([1.0])  # at ε 1: N 10 -> 20 raised it
    assert rises(made, "compute").empty  # one compute: no step
    with pytest.raises(ValueError, match="axis"):
        rises(made, "seq_len")
