"""The grid: canonical spellings, and the paper's grid planned job by job."""

from __future__ import annotations

import re
from fractions import Fraction

import pytest
import yaml

from conftest import REPO, run_snakemake
from dpscaling.core.errors import UserError
from dpscaling.workflow.grid import TrainPoint, alternation, canonical, correction_grid, main_grid


@pytest.mark.parametrize(
    "value, spelling",
    [
        (0.0, "0"),
        (0, "0"),
        (1024, "1024"),
        (1.0, "1"),
        (2.0**-7, "0.0078125"),
        (1.0e-5, "0.00001"),
        (0.1 + 0.2, "0.30000000000000004"),
        (2.0**-23, "0.00000011920928955078125"),
    ],
)
def test_canonical_spelling(value: float, spelling: str) -> None:
    assert canonical(value) == spelling


@pytest.mark.parametrize("k", range(0, 40))
def test_canonical_round_trips_powers_of_two_exactly(k: int) -> None:
    value = 2.0**-k
    spelling = canonical(value)
    assert "e" not in spelling
    assert float(spelling) == value
    if k <= 23:  # the paper's grid: short enough that the decimal is the exact binary value
        assert Fraction(spelling) == Fraction(value)


def test_canonical_is_one_spelling_per_value() -> None:
    assert canonical(1.0e-3) == canonical(0.001) == canonical(float("1e-3"))


def test_alternation_matches_exactly_the_values() -> None:
    pattern = re.compile(f"^(?:{alternation([0.0, 2.0**-6, 2.0**-7])})$")
    assert pattern.match("0.015625") and pattern.match("0") and pattern.match("0.0078125")
    assert not pattern.match("0.0156250") and not pattern.match("1.5625e-02") and not pattern.match("00")


def test_paper_grid_in_config() -> None:
    """config/paper.yaml's grid: the schema's defaults (the paper's values) fill what it leaves out."""
    from dpscaling.config.schema import validate_config

    config = yaml.safe_load((REPO / "config" / "paper.yaml").read_text())
    validate_config(config, REPO / "workflow" / "schemas" / "config.schema.yaml")
    training = config["training"]
    assert training["noise_batch_ratios"] == [0.0] + [2.0**-k for k in range(6, 24)]
    assert training["learning_rates"] == [2.0**-7, 2.0**-8, 2.0**-9]
    assert (training["physical_batch"], training["steps"], training["warmup_steps"], training["log_every"]) == (
        1024,
        128000,
        1000,
        100,
    )
    assert config["data"]["seq_len"] == 512
    assert config["models"]["names"] == ["BertTiny", "BertMini", "BertSmall", "BertMedium", "BertBase", "BertLarge"]


def test_main_grid_expands_the_product() -> None:
    from test_config_schema import validated

    config = validated({
        "models": {"names": ["A", "B"]},
        "training": {"noise_batch_ratios": [0.0, 0.5], "learning_rates": [0.1, 0.2, 0.3], "physical_batch": 8, "seed": 3},
    })
    grid = main_grid(config)
    assert len(grid) == 12 and len(set(grid)) == 12
    assert TrainPoint("B", 8, 3, 0.5, 0.3, 512) in grid  # one length, data.seq_len (the paper's 512)
    assert {point.wildcards["seq"] for point in grid} == {"512"}


def test_every_length_gets_the_whole_grid_and_its_repeats() -> None:
    from test_config_schema import validated

    from dpscaling.workflow.grid import points_at_length, repeat_grid

    training = {"noise_batch_ratios": [0.0, 0.5], "learning_rates": [0.1], "physical_batch": 8, "seed": 3,
                "seq_lens": [128, 32], "repeat_seeds": [4],
                "repeat_points": [{"model": "A", "noise_batch_ratio": 0.5, "learning_rate": 0.1}]}
    config = validated({"models": {"names": ["A", "B"]}, "data": {"seq_len": 128}, "training": training})
    grid = main_grid(config) + repeat_grid(config)
    assert len(grid) == 2 * (2 * 2 + 1)
    for length in (32, 128):
        at_length = points_at_length(grid, length)
        assert sorted((p.model, p.noise_batch_ratio, p.seed) for p in at_length) == [
            ("A", 0.0, 3), ("A", 0.5, 3), ("A", 0.5, 4), ("B", 0.0, 3), ("B", 0.5, 3)]
        assert {p.wildcards["seq"] for p in at_length} == {str(length)}


def test_the_primary_length_must_be_a_trained_length() -> None:
    from test_config_schema import validated

    from dpscaling.config.checks import check_config

    config = validated({"data": {"seq_len": 64}, "training": {"seq_lens": [32, 128]}})
    with pytest.raises(UserError, match=r"data.seq_len: 64 must be one of training.seq_lens \[32, 128\]"):
        check_config(config)
    with pytest.raises(UserError, match="training.seq_lens: results_csv"):
        check_config(validated({"data": {"seq_len": 64}, "training": {"seq_lens": [32, 64]},
                                "results_csv": str(REPO / "README.md")}))


def test_two_lengths_plan_their_data_runs_and_laws(tmp_path) -> None:
    """A dry run of the smoke config at two lengths: one packed data set and one grid per length, each
    run's path naming its length; the primary length's law as before and the other's under law/lengths/."""
    layer = tmp_path / "lengths.yaml"
    layer.write_text(yaml.safe_dump({"run_name": "two-lengths", "training": {"seq_lens": [32, 64]}}))
    smoke = REPO / "tests" / "configs" / "smoke.yaml"
    result = run_snakemake("-n", "fit", "--configfile", str(smoke), str(layer), cwd=tmp_path)
    stats = dict(re.findall(r"^(\w+)\s+(\d+)\s*$", result.stdout, flags=re.MULTILINE))
    # 2 models x 3 sigma-bar + 1 repeat per length, and the physical-batch correction's 1 at the primary length:
    # each model's 2 noisy sigma-bar one job (smoke.yaml's training.runs_per_job), the others (sigma-bar 0 of each
    # model, the repeat) one job per run
    assert int(stats["train_noise_levels"]) == 2 * 2 and int(stats["train_run"]) == 2 * (2 + 1) + 1
    assert int(stats["pack_sequences"]) == 2 and int(stats["law_across_lengths"]) == 1
    assert int(stats["fit_law"]) == int(stats["fit_law_at_length"]) == 1
    assert "validate_lengths" not in stats  # two lengths have no interior one to hold out
    outputs = [path for paths in re.findall(r"^\s+output: (.*)$", result.stdout, flags=re.MULTILINE)
               for path in paths.split(", ") if re.fullmatch(r"results/two-lengths/runs/\S+/metrics.parquet", path)]
    assert len(outputs) == 15
    assert sum("/runs/mech=dpsgd/seq=32/model=" in path for path in outputs) == 7
    assert sum("/runs/mech=dpsgd/seq=64/model=" in path for path in outputs) == 8
    assert "results/two-lengths/data/packed/seq=32/meta.json" in result.stdout


def test_the_physical_batch_correction_pairs_grid_points_with_a_larger_batch() -> None:
    from test_config_schema import validated

    training = {"noise_batch_ratios": [0.0, 0.5], "learning_rates": [0.1], "physical_batch": 8, "seed": 3}
    block = {"enabled": True, "physical_batch": 64,
             "points": [{"model": "A", "noise_batch_ratio": 0.5, "learning_rate": 0.1}]}
    config = validated({"models": {"names": ["A", "B"]}, "training": training,
                        "fit": {"physical_batch_correction": block}})
    assert correction_grid(config) == [TrainPoint("A", 8, 3, 0.5, 0.1, 512), TrainPoint("A", 64, 3, 0.5, 0.1, 512)]
    assert correction_grid(validated({"models": {"names": ["A"]}, "training": training})) == []  # off by default
    off_grid = {**block, "points": [{"model": "A", "noise_batch_ratio": 0.25, "learning_rate": 0.1}]}
    with pytest.raises(UserError, match=r"physical_batch_correction.points\[0\]"):
        correction_grid(validated({"models": {"names": ["A"]}, "training": training,
                                   "fit": {"physical_batch_correction": off_grid}}))
    with pytest.raises(UserError, match="must be larger than training.physical_batch"):
        correction_grid(validated({"models": {"names": ["A"]}, "training": training,
                                   "fit": {"physical_batch_correction": {**block, "physical_batch": 8}}}))


def test_paper_dry_run_plans_342_training_jobs_with_canonical_wildcards(tmp_path) -> None:
    result = run_snakemake("-n", "train", "--configfile", str(REPO / "config" / "paper.yaml"), cwd=tmp_path)
    stats = dict(re.findall(r"^(\w+)\s+(\d+)\s*$", result.stdout, flags=re.MULTILINE))
    assert int(stats["train_run"]) == 6 * 19 * 3 == 342
    wildcards = re.findall(r"wildcards: (.*)", result.stdout)
    nbr = {re.search(r"nbr=([^,]+)", line).group(1) for line in wildcards if "nbr=" in line}
    lr = {re.search(r"lr=([^,\s]+)", line).group(1) for line in wildcards if "lr=" in line}
    assert nbr == {canonical(0.0)} | {canonical(2.0**-k) for k in range(6, 24)}
    assert lr == {"0.0078125", "0.00390625", "0.001953125"}
    assert not any("e-" in value for value in nbr | lr)
    assert not (tmp_path / "results").exists()  # a dry run writes nothing


def test_a_cluster_user_adds_lengths_to_the_paper_grid_in_one_key() -> None:
    from test_config_schema import validated

    from dpscaling.config.checks import check_config

    paper = yaml.safe_load((REPO / "config" / "paper.yaml").read_text())
    assert len(main_grid(validated(paper))) == 342  # S = 512 only
    layered = validated({**paper, "training": {**paper.get("training", {}), "seq_lens": [128, 256, 512]}})
    check_config(layered)
    grid = main_grid(layered)
    assert len(grid) == 3 * 342 and {point.seq_len for point in grid} == {128, 256, 512}


GROUPED = {"models": {"names": ["A", "B"]}, "learning_rate_protocol": {"ladder": [0.02, 0.01, 0.005]},
           "training": {"noise_batch_ratios": [0.0, 0.25, 0.5], "learning_rates": [0.1, 0.2], "physical_batch": 8,
                        "seed": 3, "runs_per_job": "shape"}}


@pytest.mark.parametrize("training, protocol", [
    ({}, {}),  # the config's rates, one mechanism
    ({"learning_rates": "tuned"}, {"rates_below": 0}),  # the noisy runs at the chosen rate
    ({"learning_rates": "tuned"}, {"rates_below": 1}),  # the noisy runs also below it
    ({"learning_rates": "tuned"}, {"rates_below": 0, "rates_above": 1}),
    ({"mechanisms": ["dpsgd", "bandmf-b4"]}, {}),  # sigma-bar 0 trains under the primary mechanism only
    ({"learning_rates": "tuned", "mechanism_learning_rates": {"dpsgd": [0.1]}}, {"rates_below": 0}),
    # the noisy runs at twice the chosen rate, sigma-bar 0 at it
    ({"learning_rates": "tuned", "mechanism_learning_rates": {"dpsgd": {"tuned_doublings": 1}}}, {"rates_below": 0}),
])
def test_a_job_of_one_shape_trains_exactly_main_grid_runs(training, protocol) -> None:
    """training.runs_per_job: shape -- a train_noise_levels job of any main-grid run trains that run's noise levels
    at its mechanism, length, model and rate, and each of them is a main-grid run: nothing the grid lacks."""
    from test_config_schema import validated

    from dpscaling.workflow.grid import noise_levels_of_one_job

    config = validated({**GROUPED, "training": {**GROUPED["training"], **training},
                        "learning_rate_protocol": {**GROUPED["learning_rate_protocol"], **protocol}})
    levels = noise_levels_of_one_job(config)
    assert "0" not in levels and {"0.25", "0.5"} <= set(levels)  # sigma-bar 0: a job of its own, whatever else
    grid = main_grid(config, {"A": 0.02, "B": 0.005})
    keys = {tuple(sorted(point.wildcards.items())) for point in grid}
    grouped = [point for point in grid if point.wildcards["nbr"] in levels]
    assert len(grouped) == len(grid) - sum(point.noise_batch_ratio == 0 for point in grid)
    for point in grouped:
        for level in levels:
            assert tuple(sorted({**point.wildcards, "nbr": level}.items())) in keys, (point, level)


def test_one_run_per_job_groups_nothing() -> None:
    from test_config_schema import validated

    from dpscaling.workflow.grid import ablation_seeds_of_one_job, ladder_of_one_job, noise_levels_of_one_job

    one = validated({**GROUPED, "training": {**GROUPED["training"], "runs_per_job": "one", "learning_rates": "tuned"}})
    assert noise_levels_of_one_job(one) == ladder_of_one_job(one) == ablation_seeds_of_one_job(one) == ()
    shape = validated({**GROUPED, "training": {**GROUPED["training"], "learning_rates": "tuned"}})
    assert ladder_of_one_job(shape) == ("0.02", "0.01", "0.005")
    assert ablation_seeds_of_one_job(shape) == tuple(str(seed) for seed in shape["ablation_batch"]["seeds"])
