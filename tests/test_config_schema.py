"""The config schema rejects bad values and unknown keys by name, at parse time."""

from __future__ import annotations

import copy
import os
import re
from pathlib import Path

import pytest
import yaml

from conftest import REPO, run_snakemake
from dpscaling.core.errors import UserError
from dpscaling.config.checks import check_config
from dpscaling.config.schema import validate_config

SCHEMA = str(REPO / "workflow" / "schemas" / "config.schema.yaml")


def load(name: str) -> dict:
    return yaml.safe_load((REPO / "config" / name).read_text())


def validated(config: dict) -> dict:
    """``config`` validated, defaults filled; named "test" unless it names itself (the workflow names an
    unnamed run after its config file, dpscaling.config.checks.settle_run_name)."""
    config = copy.deepcopy(config)
    config.setdefault("run_name", "test")
    validate_config(config, SCHEMA)
    return config


@pytest.mark.parametrize("name", ["config.yaml", "paper.yaml"])
def test_shipped_configs_are_valid(name: str) -> None:
    config = validated(load(name))
    check_config(config)
    assert config["accounting"]["delta"] == 1.0e-8


def test_defaults_fill_every_block() -> None:
    config = validated({})
    assert "default" not in yaml.safe_load(Path(SCHEMA).read_text())["properties"]["run_name"]  # the file's stem
    assert config["data"]["seq_len"] == 512  # the paper's (every default is; tests/test_config_layering.py)
    assert config["training"]["log_every"] == 100
    assert config["training"]["warmup_steps"] == 1000
    assert config["fit"]["reference_compatible"] is False


def error_text(config: dict) -> str:
    with pytest.raises(UserError) as caught:
        validate_config(copy.deepcopy(config), SCHEMA)
    return str(caught.value)


def test_wrong_enum_value_names_key_and_allowed_values() -> None:
    text = error_text({"data": {"tokenizer": "gpt2"}})
    assert "'data.tokenizer'" in text
    assert "bert-base-uncased" in text and "wordpiece-core-8192" in text


@pytest.mark.parametrize("config, key, accepted", [
    ({"training": {"learning_rates": "tunned"}}, "training.learning_rates", "a list of number > 0 or 'tuned'"),
    ({"training": {"mechanisms": ["dpsgd", "bandmf-b4"], "mechanism_learning_rates": {"bandmf-b4": {"doublings": 2}}}},
     "training.mechanism_learning_rates.bandmf-b4",
     "a list of number > 0 or a mapping {tuned_doublings: integer >= -8 <= 8}"),
])
def test_a_value_of_no_accepted_form_lists_the_forms(config: dict, key: str, accepted: str) -> None:
    text = error_text(config)
    assert f"'{key}'" in text and f"accepted: {accepted}" in text, text


@pytest.mark.parametrize(
    "config, typo",
    [
        ({"trainig": {}}, "trainig"),
        ({"training": {"stpes": 10}}, "stpes"),
        ({"models": {"custom": {"X": {"layers": 1, "heads": 1, "hidden": 8, "hiden": 8}}}}, "hiden"),
    ],
)
def test_unknown_keys_are_rejected_by_name(config: dict, typo: str) -> None:
    text = error_text(config)
    assert typo in text and "unexpected" in text and "accepted keys" in text


def test_exponent_without_dot_is_a_string_and_rejected() -> None:
    config = yaml.safe_load("accounting:\n  delta: 1e-8\n")
    assert config["accounting"]["delta"] == "1e-8"  # the YAML pitfall the schema guards against
    text = error_text(config)
    assert "'accounting.delta'" in text and "1.0e-3" in text


@pytest.mark.parametrize(
    "config, fragment",
    [
        ({"training": {"noise_batch_ratios": [-0.5]}}, "minimum"),
        ({"training": {"physical_batch": 0}}, "physical_batch"),
        ({"data": {"heldout_fraction": 1.5}}, "heldout_fraction"),
        ({"run_name": "../escape"}, "run_name"),
    ],
)
def test_out_of_range_values_are_rejected(config: dict, fragment: str) -> None:
    assert fragment in error_text(config)


@pytest.mark.parametrize(
    "config, key, name",
    [
        ({"run_name": ".."}, "run_name", ".."),
        ({"run_name": "."}, "run_name", "."),
        ({"run_name": ".hidden"}, "run_name", ".hidden"),
        ({"run_name": "a/b"}, "run_name", "a/b"),
        ({"run_name": ""}, "run_name", ""),
        ({"models": {"custom": {"../up": {"layers": 1, "heads": 1, "hidden": 8}}}}, "models.custom", "../up"),
        ({"models": {"custom": {"..": {"layers": 1, "heads": 1, "hidden": 8}}}}, "models.custom", ".."),
        ({"models": {"names": ["a/b"]}}, "models.names.0", "a/b"),
    ],
)
def test_names_that_become_paths_are_one_safe_component(config: dict, key: str, name: str) -> None:
    text = error_text(config)
    assert text.startswith(f"config key {key!r}: {name!r}") and "one safe path component" in text


@pytest.mark.parametrize("name", ["smoke", "run-2.v1", "paper_2025"])
def test_ordinary_run_names_are_accepted(name: str) -> None:
    assert validated({"run_name": name})["run_name"] == name


@pytest.mark.parametrize(
    "override, key",
    [
        ({"models": {"names": ["BertGiant"]}}, "models.names"),
        ({"models": {"names": ["X"], "custom": {"X": {"layers": 1, "heads": 3, "hidden": 32}}}}, "models.custom.X"),
        ({"data": {"tokenizer": "custom"}}, "data.vocab_file"),
        ({"training": {"steps": 10, "warmup_steps": 20}}, "training.warmup_steps"),
        ({"training": {"physical_batch": 10, "microbatch_size": 4}}, "training.microbatch_size"),
        ({"data": {"source": "text"}}, "data.paths"),
        ({"training": {"sampling": "user_poisson"}}, "data.users"),  # user-level sampling, no user identities
        ({"training": {"examples_per_user_per_batch": 4}}, "training.examples_per_user_per_batch"),
        ({"training": {"mechanisms": ["dpsgd", "uls-m4"]}}, "data.users"),  # a user-level mechanism, no users
        ({"data": {"users": {"unit": "document"}},
          "training": {"mechanisms": ["dpsgd", "uls-m4"], "sampling": "cyclic"}}, "training.sampling"),
        ({"private_model": {"budgets": [{"epsilon": 4.0, "data_budget": 100, "compute": 1e10, "examples_per_user": 4}]}},
         "private_model.budgets[0].examples_per_user"),  # a budget per user, no user identities
        ({"data": {"users": {"unit": "synthetic", "max_examples": 8}},  # users of 8 sequences, a budget for 4
          "private_model": {"budgets": [{"epsilon": 4.0, "data_budget": 100, "compute": 1e10, "examples_per_user": 4}]}},
         "data.users.max_examples to at most 4"),
    ],
)
def test_semantic_checks_name_the_key(override: dict, key: str) -> None:
    config = validated(override)
    with pytest.raises(UserError, match=re.escape(key)):
        check_config(config)


def test_a_budget_per_user_on_users_capped_at_its_k_is_accepted() -> None:
    check_config(validated({"data": {"users": {"unit": "synthetic", "max_examples": 4}}, "private_model": {
        "budgets": [{"epsilon": 4.0, "data_budget": 100, "compute": 1e10, "examples_per_user": 4}]}}))


def test_user_level_sampling_with_user_identities_is_accepted() -> None:
    config = validated({"data": {"users": {"unit": "synthetic", "max_examples": 16}},
                        "training": {"sampling": "user_poisson", "examples_per_user_per_batch": 4}})
    check_config(config)
    assert config["data"]["users"]["mean_examples"] == 8  # the nested block's defaults are filled in


@pytest.mark.parametrize(
    "bad_config, expected",
    [
        # a typo: named, with the accepted keys listed
        ("training:\n  learning_rate: [0.01]\n", ["config key 'training'", "'learning_rate' was unexpected", "learning_rates"]),
        # an unknown model: named, with the known ones listed
        ("models:\n  names: [BertGiant]\n", ["models.names", "BertTiny"]),
    ],
)
def test_workflow_rejects_bad_config_at_parse_time(tmp_path: Path, bad_config: str, expected: list[str]) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(bad_config)
    result = run_snakemake("-n", "--configfile", str(bad), cwd=tmp_path, check=False)
    assert result.returncode != 0
    output = result.stdout + result.stderr
    assert all(fragment in output for fragment in expected), output[-2000:]
    assert not (tmp_path / "results").exists()


def test_fit_block_reaches_law_settings_and_reference_mode_fixes_the_authors_choices() -> None:
    from dpscaling.law.settings import LawSettings
    from dpscaling.workflow.params import law_settings

    paper = LawSettings.from_json(law_settings(validated({})))
    assert paper.smooth_nonprivate_along_nbr is False and paper.extrapolation_asymptote == "per_curve"
    chosen = {"fit": {"smooth_nonprivate_along_nbr": True, "extrapolation_asymptote": "nonprivate"}}
    mixed = LawSettings.from_json(law_settings(validated(chosen)))
    assert mixed.smooth_nonprivate_along_nbr is True and mixed.extrapolation_asymptote == "nonprivate"
    assert not mixed.reference_compatible
    # Reference mode ignores the keys: the authors' code pools σ̄ = 0 and ties E to E*.
    assert (paper.isotonic_skip_nan, paper.interpolate_log_loss, paper.fill_missing_nbr) == (True, False, "log_nbr")
    chosen = {"fit": {"isotonic_skip_nan": False, "interpolate_log_loss": True, "fill_missing_nbr": "positional"}}
    mixed = LawSettings.from_json(law_settings(validated(chosen)))
    assert (mixed.isotonic_skip_nan, mixed.interpolate_log_loss, mixed.fill_missing_nbr) == (False, True, "positional")
    reference = {"fit": {"reference_compatible": True, "extrapolation_asymptote": "per_curve",
                         "interpolate_log_loss": False}}
    fixed = LawSettings.from_json(law_settings(validated(reference)))
    assert fixed.smooth_nonprivate_along_nbr is True and fixed.extrapolation_asymptote == "nonprivate"
    assert (fixed.isotonic_skip_nan, fixed.interpolate_log_loss, fixed.fill_missing_nbr) == (False, True, "positional")
    assert "extrapolation_asymptote" in error_text({"fit": {"extrapolation_asymptote": "tied"}})
    # The zero-weight option: off in paper mode unless asked, never in reference mode.
    assert paper.ignore_zero_weight_nan is False
    asked = {"fit": {"ignore_zero_weight_nan": True}}
    assert LawSettings.from_json(law_settings(validated(asked))).ignore_zero_weight_nan is True
    asked["fit"]["reference_compatible"] = True
    assert LawSettings.from_json(law_settings(validated(asked))).ignore_zero_weight_nan is False


def test_new_training_keys_leave_existing_jobs_params_unchanged_at_their_defaults() -> None:
    """Snakemake reruns a job whose params change: the late keys (Adam's b1, b2, eps, allow_repeats, the
    private-training keys, delta) at their defaults must give the training param of a config without them
    (same repr, the config's key order), a changed value must change it."""
    from dpscaling.workflow.params import ablation_training, training_params

    config = validated(load("config.yaml"))
    # The keys the default's finished jobs were written without: the late keys, and repeat_seeds /
    # repeat_points / seq_lens / the mechanisms and their learning rates, which choose which jobs exist,
    # never a job's param.
    late = ("adam_b1", "adam_b2", "adam_eps", "allow_repeats", "sampling", "truncated_batch_size", "accountant",
            "bandmf_strategy", "schedule", "cooldown_fraction", "examples_per_user_per_batch", "scan_layers", "remat",
            "skip_padding")
    selects = ("repeat_seeds", "repeat_points", "seq_lens", "mechanisms", "mechanism_learning_rates", "runs_per_job")
    before = {key: value for key, value in config["training"].items() if key not in late and key not in selects}
    assert repr(training_params(config)) == repr(before)
    explicit = validated({**load("config.yaml"), "training": {**load("config.yaml")["training"], "adam_eps": 1.0e-8}})
    assert repr(training_params(explicit)) == repr(before)
    changed = validated({"training": {"adam_eps": 1.0e-4, "allow_repeats": True}, "accounting": {"delta": 1.0e-6}})
    assert training_params(changed)["adam_eps"] == 1.0e-4
    assert training_params(changed)["allow_repeats"] is True and training_params(changed)["delta"] == 1.0e-6
    assert "adam_eps" not in ablation_training(config, 8)
    assert ablation_training(changed, 8)["adam_eps"] == 1.0e-4
    # One set of defaults: TrainConfig's are the schema's.
    from dpscaling.train.config import TrainConfig, config_keys

    schema = yaml.safe_load(Path(SCHEMA).read_text())["properties"]
    for name, key in config_keys().items():
        block, leaf = key.split(".")
        assert getattr(TrainConfig(), name) == schema[block]["properties"][leaf]["default"], name
    assert "does not state" in schema["training"]["properties"]["adam_eps"]["description"]


TRAINING_CHANGES = {"noise_batch_ratios": [0.0, 0.5], "learning_rates": [0.5], "physical_batch": 48,
                    "seq_lens": [64, 128], "repeat_seeds": [7], "repeat_points": [], "adam_b1": 0.5, "adam_b2": 0.5,
                    "adam_eps": 1.0e-4, "allow_repeats": True, "sampling": "truncated_poisson", "truncated_batch_size": 40,
                    "accountant": "deterministic", "decay_factor": 3.0, "mask_rate": 0.3, "clip_norm": 0.5,
                    "clipping": "vmap", "seed": 9, "steps": 123, "warmup_steps": 7, "decay_steps": 123,
                    "log_every": 3, "checkpoint_every": 41, "microbatch_size": 2,
                    "mechanisms": ["dpsgd", "bandmf-b4"], "mechanism_learning_rates": {"dpsgd": [0.25]},
                    "bandmf_strategy": "max_error", "output_bias": "zeros", "runs_per_job": "shape",
                    "schedule": "constant_cooldown", "cooldown_fraction": 0.3, "examples_per_user_per_batch": 4,
                    "scan_layers": True, "remat": True, "skip_padding": False}


def _reached(key: str) -> dict[str, bool]:
    """Which jobs' params a change of training.``key`` reaches: grid, private, ablation."""
    from dpscaling.private.jobs import private_training
    from dpscaling.workflow.params import ablation_training, training_params

    base = load("config.yaml")
    before = validated(base)
    after = validated({**base, "training": {**base["training"], key: TRAINING_CHANGES[key]}})
    return {"grid": training_params(before) != training_params(after),
            "private": private_training(before["training"]) != private_training(after["training"]),
            "ablation": ablation_training(before, 8) != ablation_training(after, 8)}


def test_every_training_field_declares_where_it_goes_and_the_test_knows_each() -> None:
    from dataclasses import fields

    from dpscaling.config.training_blocks import TrainingBlock
    from dpscaling.config.roles import ROLES

    names = {f.name for f in fields(TrainingBlock)} - {"keys"}
    assert names == set(TRAINING_CHANGES)
    for f in fields(TrainingBlock):
        assert set(f.metadata.get("roles", ())) <= set(ROLES), f.name


# Per role (dpscaling.config.blocks): its training keys, and which jobs' params a change of one reaches.
ROLE_REACH = {
    "selects_jobs": (("seq_lens", "repeat_seeds", "repeat_points", "mechanisms", "mechanism_learning_rates",
                      "runs_per_job"), (False, False, False)),
    "grid_axis": (("noise_batch_ratios", "learning_rates", "physical_batch"), (True, False, False)),
    "late": (("adam_b1", "adam_b2", "adam_eps", "allow_repeats", "bandmf_strategy", "schedule", "cooldown_fraction",
              "scan_layers", "remat"), (True, True, True)),
    "private_runs": (("sampling", "truncated_batch_size", "accountant"), (True, True, False)),
    "model_start": (("output_bias",), (True, True, False)),
    "ablation_shared": (("decay_factor", "mask_rate", "clip_norm", "clipping"), (True, True, True)),
    # No role: the grid's and the private runs'; the ablation has its own horizon, logging, microbatch, seeds.
    "none": (("seed", "steps", "warmup_steps", "decay_steps", "log_every", "checkpoint_every", "microbatch_size"),
             (True, True, False)),
}


@pytest.mark.parametrize("role", list(ROLE_REACH))
def test_each_role_reaches_its_jobs(role) -> None:
    from dpscaling.config.training_blocks import TrainingBlock
    from dpscaling.config.roles import fields_with

    keys, (grid, private, ablation) = ROLE_REACH[role]
    declared = ({f for r in ROLE_REACH if r != "none" for f in fields_with(TrainingBlock, r)} if role == "none"
                else set(fields_with(TrainingBlock, role)))
    # The private-training keys are late keys too (added after results existed).
    assert (declared & set(keys) == set()) if role == "none" else (set(keys) <= declared), declared
    for key in keys:
        assert _reached(key) == {"grid": grid, "private": private, "ablation": ablation}, key


def test_the_ablation_s_own_fields_are_its_horizon_and_logging() -> None:
    from dpscaling.workflow.params import ablation_training

    base = load("config.yaml")
    config = validated({**base, "ablation_batch": {**base.get("ablation_batch", {}), "steps": 77, "log_every": 7}})
    params = ablation_training(config, 8)
    assert (params["steps"], params["log_every"]) == (77, 7)
    assert list(params)[:4] == ["decay_factor", "clip_norm", "clipping", "mask_rate"]  # the order jobs were written in


def test_one_epoch_guard_at_dag_time_reads_the_data_manifest(tmp_path, monkeypatch) -> None:
    import json

    from dpscaling.config.checks import check_epochs, corpus_spec

    monkeypatch.chdir(tmp_path)
    config = validated(load("config.yaml"))
    corpus = corpus_spec(config, repo=REPO)
    assert check_epochs(config, corpus) is None  # no data stage yet: the training job checks
    packed = tmp_path / "results" / config["run_name"] / "data" / "packed" / "seq=64"
    packed.mkdir(parents=True)
    meta = {"n_train": 114519, "seq_len": 64, "tokenizer": "train", "vocab_size": 1024, "source": corpus.record()}
    (packed / "meta.json").write_text(json.dumps(meta))
    # The default: 500 steps x batch 40 = 20,000 of 114,519 training sequences.
    assert check_epochs(config, corpus) == pytest.approx(20_000 / 114_519)
    (packed / "meta.json").write_text(json.dumps({**meta, "n_train": 10_000}))
    with pytest.raises(UserError) as caught:
        check_epochs(config, corpus)
    assert "training.steps x training.physical_batch = 500 x 40 = 20,000 sequences exceed the 10,000" in str(
        caught.value)
    allowed = validated({**load("config.yaml"), "training": {**load("config.yaml")["training"],
                                                              "allow_repeats": True}})
    assert check_epochs(allowed, corpus) == pytest.approx(2.0)
    # A manifest built for other data settings will be rebuilt: no verdict from it.
    (packed / "meta.json").write_text(json.dumps({**meta, "n_train": 10_000, "seq_len": 128}))
    assert check_epochs(config, corpus) is None
    # ... and so will one of another trained vocabulary size.
    (packed / "meta.json").write_text(json.dumps({**meta, "n_train": 10_000, "vocab_size": 2048}))
    assert check_epochs(config, corpus) is None


def test_laptop_config_layers_on_the_default() -> None:
    from snakemake.utils import update_config

    config = load("config.yaml")
    update_config(config, load("laptop.yaml"))
    config = validated(config)
    check_config(config)
    assert config["run_name"] == "laptop" and config["models"]["names"] == load("config.yaml")["models"]["names"]
    assert config["training"]["steps"] == 800 > load("config.yaml")["training"]["steps"]
    # The correction's points stay within one pass over the training split at the longer horizon.
    assert config["fit"]["physical_batch_correction"]["physical_batch"] * 800 < 105_404
    assert config["data"]["tokenizer"] == "train"  # the default's data, not the schema's


def test_a_config_without_run_name_is_named_after_its_file_and_says_so_first(tmp_path) -> None:
    from conftest import run_snakemake

    from dpscaling.config.checks import settle_run_name

    mine = tmp_path / "mine.yaml"
    mine.write_text("models:\n  names: [BertTiny]\n")
    result = run_snakemake("-n", "--cores", "1", "--configfile", str(mine), cwd=tmp_path)
    assert result.stderr.splitlines()[0] == "dpscaling: run 'mine' -> results/mine/ (no run_name set: the stem of mine.yaml)"
    assert "results/default" not in result.stdout and "results/mine/runs/mech=dpsgd/seq=512/model=BertTiny" in result.stdout
    named = {"run_name": "other"}
    assert settle_run_name(named, [mine]) == "run_name in the config" and named["run_name"] == "other"
    with pytest.raises(UserError, match="run_name"):
        settle_run_name({}, [])


def test_the_epoch_guard_reads_each_lengths_manifest(tmp_path, monkeypatch) -> None:
    """A longer sequence packs fewer sequences: the guard refuses the length whose data the grid would repeat."""
    import json

    from dpscaling.config.checks import check_epochs, corpus_spec

    monkeypatch.chdir(tmp_path)
    config = validated({**load("config.yaml"), "training": {**load("config.yaml")["training"], "seq_lens": [32, 64]}})
    corpus = corpus_spec(config, repo=REPO)
    meta = {"tokenizer": "train", "vocab_size": 1024, "source": corpus.record()}
    for length, sequences in ((32, 200_000), (64, 100_000)):
        packed = tmp_path / "results" / config["run_name"] / "data" / "packed" / f"seq={length}"
        packed.mkdir(parents=True)
        (packed / "meta.json").write_text(json.dumps({**meta, "seq_len": length, "n_train": sequences}))
    assert check_epochs(config, corpus) == pytest.approx(20_000 / 100_000)  # the most epochs of any length
    (packed / "meta.json").write_text(json.dumps({**meta, "seq_len": 64, "n_train": 10_000}))
    with pytest.raises(UserError, match="exceed the 10,000 training sequences"):
        check_epochs(config, corpus)


def test_the_ablation_figures_param_holds_the_fields_that_pick_their_runs() -> None:
    from dpscaling.workflow.params import ablation_figure_params

    base = validated(load("config.yaml"))
    params = ablation_figure_params(base)
    # The key order the figures' params were first written in (Snakemake compares their repr).
    assert list(params) == ["model", "noise_batch_ratios", "physical_batches", "seeds", "learning_rate", "sweep"]
    horizon = validated({**base, "ablation_batch": {**base["ablation_batch"], "steps": 77}})
    assert ablation_figure_params(horizon) == params  # the runs' horizon is their own param, not the figures'
    seeds = validated({**base, "ablation_batch": {**base["ablation_batch"], "seeds": [5, 6]}})
    assert ablation_figure_params(seeds)["seeds"] == [5, 6]


def test_late_analysis_settings_are_figure_params_only_off_their_default() -> None:
    from dpscaling.report.figures.settings import AnalysisSettings

    assert "privacy_unit" not in AnalysisSettings().to_mapping()
    assert AnalysisSettings(privacy_unit="user").to_mapping()["privacy_unit"] == "user"
    assert "compute_count" in AnalysisSettings().to_mapping()  # an original setting, always there


def test_unknown_corpus_sources_are_refused_when_the_workflow_loads() -> None:
    from dpscaling.config.checks import corpus_spec

    base = load("config.yaml")
    fiction = validated({**base, "data": {**base["data"], "sources": ["moby_dick", "jane_austen"]}})
    assert corpus_spec(fiction, repo=REPO).sources == ("moby_dick", "jane_austen")
    unset = {key: value for key, value in base["data"].items() if key not in ("sources", "public_sources")}
    # unset: the run's config is what it was before the keys
    assert not {"sources", "public_sources"} & set(validated({**base, "data": unset})["data"])
    unknown = validated({**base, "data": {**base["data"], "sources": ["poetry"]}})
    with pytest.raises(UserError, match=r"data\.sources: \['poetry'\] not among the corpus's sources"):
        corpus_spec(unknown, repo=REPO)


def test_a_new_config_key_is_one_edit_of_the_schema(tmp_path) -> None:
    """A throw-away key added to a copy of the library's tree by one edit of the schema (its type, default and
    roles) is validated, filled, typed on the block and reaches the jobs its roles say; nothing else edited."""
    import json
    import shutil
    import subprocess
    import sys

    shutil.copytree(REPO / "src", tmp_path / "src", ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    schema = tmp_path / "src" / "dpscaling" / "config" / "config.schema.yaml"
    text = schema.read_text(encoding="utf-8")
    anchor = "      output_bias:\n"
    assert text.count(anchor) == 1
    schema.write_text(text.replace(anchor, "      throwaway:\n        type: integer\n        minimum: 0\n"
                                           "        default: 3\n        x-roles: [late]\n"
                                           "        description: a key that exists only in this test\n" + anchor),
                      encoding="utf-8")  # the one edit
    changed = [path.relative_to(tmp_path).as_posix() for path in tmp_path.rglob("*") if path.is_file()
               and path.read_bytes() != (REPO / path.relative_to(tmp_path)).read_bytes()]
    assert changed == ["src/dpscaling/config/config.schema.yaml"]
    script = """
import json, sys, yaml
from dpscaling.config.blocks import config_yaml, load_config
from dpscaling.config.schema import validate_config
from dpscaling.config.training_blocks import TrainingBlock
from dpscaling.core.errors import UserError
seen = {}
for value in (None, 5, -1):
    config = yaml.safe_load(open(sys.argv[1]))
    if value is not None:
        config["training"]["throwaway"] = value
    try:
        validate_config(config)
    except UserError as error:
        seen[str(value)] = str(error)
        continue
    run = load_config(config)
    seen[str(value)] = {"field": run.training.throwaway,
                        "grid": run.training.job_params(run.accounting.delta).get("throwaway"),
                        "private": TrainingBlock.private_params(config["training"]).get("throwaway"),
                        "ablation": run.ablation_batch.training(run.training, 8).get("throwaway"),
                        "effective": "throwaway: " in config_yaml(run)}
print(json.dumps(seen))
"""
    done = subprocess.run([sys.executable, "-c", script, str(REPO / "config" / "config.yaml")], capture_output=True,
                          text=True, env={**os.environ, "PYTHONPATH": str(tmp_path / "src")}, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    # At its default a late key is in no grid or ablation job's param (nothing reruns), and is a private run's.
    assert seen["None"] == {"field": 3, "grid": None, "private": 3, "ablation": None, "effective": True}
    assert seen["5"] == {"field": 5, "grid": 5, "private": 5, "ablation": 5, "effective": True}
    assert "'training.throwaway'" in seen["-1"] and "minimum" in seen["-1"]
    # The repository's own schema does not know the key, and says so by name.
    with pytest.raises(UserError, match="throwaway"):
        validated({"training": {"throwaway": 5}})
