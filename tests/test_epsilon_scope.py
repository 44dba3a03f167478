"""What a private run's ε covers (dpscaling.privacy.epsilon_scope): the configs refused for private runs resting on a
vocabulary fitted on the private domain, the statement every private answer and run record carries, and the
learning-rate protocol on the public domain (its refusal, its runs' data and paths, no grid run continuing it)."""

from __future__ import annotations

import json
import re

import pytest
import yaml

from conftest import REPO, run_snakemake
from dpscaling.config.blocks import load_config
from dpscaling.privacy.epsilon_scope import NO_DATA, PRIVATE, PUBLIC, UNKNOWN, epsilon_scope, fitted_choices
from dpscaling.core.errors import UserError
from dpscaling.config.checks import check_config
from test_config_schema import validated
from test_rate_protocol import tuned_config


def shipped(*names: str) -> dict:
    """The shipped configs ``names`` layered in order, as the workflow layers --configfile."""
    from snakemake.utils import update_config

    config: dict = {}
    for name in names:
        update_config(config, yaml.safe_load((REPO / name).read_text()))
    return config


def test_private_runs_on_a_vocabulary_fitted_on_the_private_domain_are_refused_naming_the_key() -> None:
    decoder = shipped("config/decoder.yaml")
    check_config(validated(decoder))  # its public domain trains the vocabulary
    private_text = {**decoder, "data": {key: value for key, value in decoder["data"].items()
                                        if key not in ("sources", "public_sources")}}
    with pytest.raises(UserError, match=r"^data\.tokenizer: the vocabulary is trained on the private domain.*"
                                        r"private_model\.budgets claim \(ε, δ\).*data\.public_sources"):
        check_config(validated(private_text))
    # the grid alone claims no (ε, δ): the same data is accepted without private runs
    check_config(validated({**private_text, "private_model": {"budgets": []}}))
    # the vendored wordpiece-core-8192 was built from the whole vendored corpus: on its text, savings claim too
    core = {**private_text, "data": {**private_text["data"], "tokenizer": "wordpiece-core-8192", "vocab_size": None},
            "private_model": {"budgets": []},
            "savings": {"budgets": [{"epsilon": 4.0, "data_budget": 20000, "compute": 2.0e+12}]}}
    with pytest.raises(UserError, match=r"^data\.tokenizer: .*wordpiece-core-8192.*savings\.budgets claim"):
        check_config(validated(core))
    check_config(validated({**core, "data": {**core["data"], "tokenizer": "bert-base-uncased"}}))


def test_the_protocol_on_the_public_domain_needs_one() -> None:
    with pytest.raises(UserError, match=r"^learning_rate_protocol\.domain: 'public' .*data\.public_sources"):
        check_config(tuned_config(domain="public"))
    default = shipped("config/config.yaml")
    check_config(validated({**default, "learning_rate_protocol": {**default["learning_rate_protocol"],
                                                                  "domain": "public"}}))


def test_the_statement_names_where_each_choice_was_fitted() -> None:
    default = shipped("config/config.yaml")
    choices = fitted_choices(validated(default))
    assert {name: choice.domain for name, choice in choices.items()} == {
        "vocabulary": PUBLIC, "output_bias": PUBLIC, "learning_rate": PRIVATE, "configuration": PRIVATE}
    scope = epsilon_scope(choices)
    assert scope["not_covered"] == ["learning_rate", "configuration"] and scope["unknown"] == []
    assert "not covered: the learning rate" in scope["statement"] and "on the private domain" in scope["statement"]
    # on the public domain the protocol's choice is public, unless the grid then compares rates on private runs
    public = {**default, "learning_rate_protocol": {**default["learning_rate_protocol"], "domain": "public"}}
    assert fitted_choices(validated(public))["learning_rate"].domain == PRIVATE  # rates_above: 1
    one_rate = {**public, "learning_rate_protocol": {**public["learning_rate_protocol"], "rates_above": 0}}
    assert fitted_choices(validated(one_rate))["learning_rate"].domain == PUBLIC
    assert epsilon_scope(choices, learning_rate_given=True)["chosen_on"]["learning_rate"]["domain"] == NO_DATA


def test_a_query_answer_says_what_epsilon_covers(tmp_path, capsys) -> None:
    """The bundle records where the run's choices were fitted (bundle_provenance); the query's JSON and text carry
    the statement (a private_model plan carries the same record: tests/test_private_model.py, and the smoke run's
    plan and audit in tests/test_workflow_e2e.py)."""
    from dpscaling import cli
    from dpscaling.cli.answer_text import render_answer
    from dpscaling.law.bundle import write_bundle
    from dpscaling.law.loading import load_primary_law
    from dpscaling.workflow.params import bundle_provenance
    from law_bundle_data import shapes_provenance, write_run

    run = write_run(tmp_path / "run")
    recorded = bundle_provenance(validated(shipped("config/config.yaml")))["fitted_on"]
    bundles = {name: write_bundle(tmp_path / name, run / "law" / "fit", provenance=provenance,
                                  sigma_table=run / "accounting" / "sigma_table.parquet").root
               for name, provenance in (("recorded", {**shapes_provenance(), "fitted_on": recorded}),
                                        ("before", shapes_provenance()))}
    query = ["--compute", "3e12", "--epsilon", "4", "--users", "1e6", "--allow-extrapolation", "--json"]
    assert cli.main(["query", "--law", str(bundles["recorded"]), *query]) == 0
    covers = json.loads(capsys.readouterr().out)["epsilon_covers"]
    assert covers["chosen_on"] == recorded and covers["not_covered"] == ["learning_rate", "configuration"]
    answer = load_primary_law(bundles["recorded"]).query(3e12, 4.0, users=1e6, allow_extrapolation=True)
    assert answer.epsilon_covers == covers
    assert re.search(r"^ε covers     ε covers only the private run's own noisy steps", render_answer(answer), re.M)
    # a bundle written before the record: its vocabulary unknown, its configuration still the law's own
    assert cli.main(["query", "--law", str(bundles["before"]), *query]) == 0
    old = json.loads(capsys.readouterr().out)["epsilon_covers"]
    assert old["unknown"] == ["vocabulary", "output_bias", "learning_rate"] and old["not_covered"] == ["configuration"]


def test_the_protocol_on_the_public_domain_trains_on_public_data_in_its_own_tree(tmp_path) -> None:
    """A dry run of the tuned smoke config with learning_rate_protocol.domain: public: the protocol's runs read
    the public domain's packed data and write under learning_rates/domain=public/; at the default every path is
    the one it was."""
    from dpscaling.workflow import layout
    from dpscaling.workflow.params import learning_rate_choice_params

    layer = tmp_path / "public.yaml"
    layer.write_text("run_name: public-protocol\nlearning_rate_protocol:\n  domain: public\n")
    configs = [str(REPO / "tests" / "configs" / name) for name in ("smoke.yaml", "smoke-tuned.yaml")]
    result = run_snakemake("-n", "learning_rates", "--configfile", *configs, str(layer), cwd=tmp_path)
    jobs = re.findall(r"^rule learning_rate_ladder:\n\s+input: (.*)\n\s+output: (.*)$", result.stdout, re.M)
    assert len(jobs) == 2  # one job per model: its ladder
    for inputs, outputs in jobs:
        assert inputs.split(", ") == [f"results/public-protocol/data/public/packed/seq=64/{name}"
                                      for name in ("meta.json", "train")]
        assert all(path.startswith("results/public-protocol/learning_rates/domain=public/runs/mech=dpsgd/model=")
                   for path in outputs.split(", "))
    assert "results/public-protocol/learning_rates/domain=public/chosen.json" in result.stdout
    # at the default, the protocol's paths and its choice's param are what they were before the key existed
    assert (layout.learning_rate_protocol_dir(PRIVATE), layout.learning_rate_choice(PRIVATE)) == (
        "learning_rates/", "learning_rates/chosen.json")
    private = tuned_config()
    assert learning_rate_choice_params(private) == {key: value for key, value in
                                                    private["learning_rate_protocol"].items() if key != "domain"}
    assert learning_rate_choice_params(tuned_config(domain="public"))["domain"] == "public"


def test_no_grid_run_continues_a_protocol_run_on_the_public_domain() -> None:
    """A public-domain protocol run is not the first steps of a grid run on the private domain: the grid's
    σ̄ = 0 runs train from step 0 (the job's checks could not tell: same config, same vocabulary)."""
    from dpscaling.workflow.grid import main_grid, protocol_prefix

    chosen = {"BertTiny": 0.02, "BertMini": 0.005}
    private, public = tuned_config(), tuned_config(domain="public")
    zero = [point for point in main_grid(private, chosen) if point.noise_batch_ratio == 0.0]
    assert all(protocol_prefix(private, point.wildcards) for point in zero)
    assert not any(protocol_prefix(public, point.wildcards) for point in zero)
    assert load_config(public).learning_rate_protocol.public and UNKNOWN not in (PRIVATE, PUBLIC)
