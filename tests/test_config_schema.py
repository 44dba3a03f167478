"""The config schema rejects bad values and unknown keys by name, at parse time."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from conftest import REPO, run_snakemake
from dpscaling.errors import UserError
from dpscaling.workflow import check_config, validate_config

SCHEMA = str(REPO / "workflow" / "schemas" / "config.schema.yaml")


def load(name: str) -> dict:
    return yaml.safe_load((REPO / "config" / name).read_text())


def validated(config: dict) -> dict:
    config = copy.deepcopy(config)
    validate_config(config, SCHEMA)
    return config


@pytest.mark.parametrize("name", ["config.yaml", "paper.yaml"])
def test_shipped_configs_are_valid(name: str) -> None:
    config = validated(load(name))
    check_config(config)
    assert config["accounting"]["delta"] == 1.0e-8


def test_defaults_fill_every_block() -> None:
    config = validated({})
    assert config["run_name"] == "default"
    assert config["data"]["seq_len"] == 128
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
    ],
)
def test_semantic_checks_name_the_key(override: dict, key: str) -> None:
    config = validated(override)
    with pytest.raises(UserError, match=key.replace(".", r"\.")):
        check_config(config)


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
