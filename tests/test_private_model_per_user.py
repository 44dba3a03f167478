"""A private budget per user (docs/private-training.md, "A budget per user"): its plan priced in its unit, its
jobs sampling users (ULS) or their sequences (ELS), its audit with canary users, and the refusals."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from dpscaling.privacy.audit import AuditSettings, canary_scores, run_audit
from dpscaling.core.errors import UserError
from dpscaling.private.plans import Budget, PrivatePlan
from dpscaling.private.jobs import audit_settings_for, train_config_for, twin_config_for
from dpscaling.private.model import budgets, priced_plan

from test_audit import participations
from test_private_model import QUERY, a_plan

PER_USER = Budget(8.0, 1e-8, 600, 1e12, examples_per_user=4)
TRAINING = {"steps": 400, "microbatch_size": 4, "sampling": "truncated_poisson", "seed": 0, "clipping": "ghost"}


class _Law:
    """What :func:`priced_plan` reads of a law: its loss, sequence length and measured grid (not read here:
    every call gives the learning rate)."""

    seq_len = 64

    @staticmethod
    def loss(model_size, iterations, noise_batch_ratio):
        return 3.0 + 1e3 / np.asarray(iterations) + 50 * np.asarray(noise_batch_ratio)


def test_a_budget_per_user_has_its_own_label_and_reads_back() -> None:
    budget, = budgets({"budgets": [{"epsilon": 8.0, "data_budget": 600, "compute": 1e12, "examples_per_user": 4}]},
                      1e-8)
    assert budget == PER_USER and budget.label.endswith("_k=4")
    assert budget.label != dataclasses.replace(budget, examples_per_user=None).label
    assert Budget.from_json(budget.to_json()) == budget
    assert "examples_per_user" not in dataclasses.replace(budget, examples_per_user=None).to_json()
    plan = a_plan(PER_USER, sampler="els_poisson", dataset_size=1800)
    assert PrivatePlan.from_json(plan.to_json()) == plan
    assert "sampler" not in a_plan().to_json()  # a budget per sequence's plan is as before


@pytest.mark.parametrize("field, value", [("configuration", {"model": "BertNano", "batch_size": 8, "iterations": 9}),
                                          ("pretrained", True)])
def test_a_budget_per_user_refuses_what_is_not_built_naming_the_key(field, value) -> None:
    entry = {"epsilon": 8.0, "data_budget": 600, "compute": 1e12, "examples_per_user": 4, field: value}
    with pytest.raises(UserError, match=rf"private_model.budgets\[0\].{field}: a budget per user"):
        budgets({"budgets": [entry]}, 1e-8)


def test_uls_plan_counts_users_and_their_m_sequences_of_compute() -> None:
    """A user-level mechanism's plan: N and B are users, σ is DP-SGD's truncated-Poisson price over N users
    whatever k, and a step costs B·m sequences."""
    from dpscaling.accounting.pricing import price_run

    plan = priced_plan(_Law, PER_USER, "BertNano", 1e5, 30, 200, 0.01, 4, None, QUERY, "uls-m2")
    expected = price_run("dpsgd", 8.0, 1e-8, 600, 30, 200, 4)  # the same events, with users as the unit
    assert plan.sampler == "user_poisson" and plan.units == 600 and plan.dataset_size is None
    assert plan.sigma == pytest.approx(expected.sigma) and plan.truncated_batch_size == expected.truncated_batch_size
    assert plan.sequences_per_unit == 2 and plan.compute == pytest.approx(6 * 1e5 * 30 * 2 * 64 * 200)


def test_els_plan_is_priced_for_a_user_of_k_on_the_users_sequences() -> None:
    """DP-SGD's plan for a budget per user: Poisson over the N users' sequences (the count its run trains on),
    σ from the user-level mixture for k, above the sequence-level σ at the same rate."""
    from dpscaling.accounting.pricing import price_run
    from dpscaling.accounting.user_level import els_run

    plan = priced_plan(_Law, PER_USER, "BertNano", 1e5, 30, 200, 0.01, 4, None, QUERY, "dpsgd", user_sequences=1800)
    assert plan.sampler == "els_poisson" and plan.units == 1800 and plan.sequences_per_unit == 1
    independent = els_run(q=30 / 1800, steps=200, dataset_size=1800, examples_per_user=4, delta=1e-8, multiple=4,
                          target_epsilon=8.0)
    assert plan.sigma == pytest.approx(independent.sigma, rel=1e-6)
    assert plan.sigma > price_run("dpsgd", 8.0, 1e-8, 1800, 30, 200, 4).sigma
    assert plan.untruncated_sigma is None  # ELS charges truncation in δ: no untruncated σ
    # without the data's count, the conservative end: one sequence a user (the query's default too), more noise
    assumed = priced_plan(_Law, PER_USER, "BertNano", 1e5, 30, 200, 0.01, 4, None, QUERY)
    assert assumed.units == 600 and assumed.sigma > plan.sigma


def test_the_private_jobs_of_a_budget_per_user_sample_its_unit() -> None:
    uls = a_plan(PER_USER, model="BertNano", batch_size=30, iterations=120, seq_len=64, mechanism="uls-m2",
                 sampler="user_poisson", sequences_per_unit=2, noise_batch_ratio=0.01)
    job = train_config_for(uls, "BertNano", TRAINING, 0)
    assert (job.sampling, job.examples_per_user_per_batch, job.train_users, job.train_sequences) == (
        "user_poisson", 2, 600, None)
    assert (job.target_epsilon, job.examples_per_user, job.clipping) == (8.0, 4, "vmap")  # a user is clipped as one
    twin = twin_config_for(uls, "BertNano", TRAINING, "recommended_batch", 40, 0)
    assert (twin.sampling, twin.train_users, twin.noise_batch_ratio, twin.batch_size) == ("user_shuffle", 600, 0.01, 32)
    els = a_plan(PER_USER, model="BertNano", batch_size=30, iterations=120, seq_len=64, sampler="els_poisson",
                 dataset_size=1800)
    job = train_config_for(els, "BertNano", TRAINING, 0)
    assert (job.sampling, job.train_users, job.examples_per_user, job.clipping) == ("els_poisson", 600, 4, "ghost")
    twin = twin_config_for(els, "BertNano", TRAINING, "grid_batch", 40, 0)
    assert (twin.sampling, twin.train_users, twin.examples_per_user) == ("shuffle", 600, None)
    with pytest.raises(ValueError, match="priced for user_poisson"):  # a plan and its job never disagree
        train_config_for(dataclasses.replace(els, sampler="user_poisson"), "BertNano", TRAINING, 0)


def test_the_audit_of_a_budget_per_user_has_canary_users() -> None:
    audit = {"significance": 0.05, "seed": 3}
    els = audit_settings_for(a_plan(PER_USER, batch_size=30, iterations=120, sampler="els_poisson"), audit, 4)
    assert (els["n_canaries"], els["mechanism"], els["examples_per_user"]) == (1200, "dpsgd", 4)
    uls = audit_settings_for(a_plan(PER_USER, batch_size=30, iterations=120, mechanism="uls-m2",
                                    sampler="user_poisson"), audit, 4)
    assert (uls["mechanism"], "examples_per_user" in uls) == ("uls-m2", False)


def test_an_els_canary_user_contributes_each_of_its_k_sequences() -> None:
    """Without noise an ELS canary user's score is its k sequences' participations over B: each of its rows is
    its own canary gradient, drawn independently."""
    from dpscaling.train.sampling import secret_key

    settings = AuditSettings(n_canaries=20, expected_batch_size=6, steps=30, microbatch_size=4, examples_per_user=3)
    included = np.arange(20) % 2 == 0
    key = secret_key()
    scores = canary_scores(settings, 0.0, included, 16, key)
    counts = participations(settings, np.repeat(np.flatnonzero(included), 3), 16, key)  # a row per canary sequence
    np.testing.assert_allclose(scores, counts / 6, atol=1e-6)
    assert scores[~included].max() == 0 and counts.max() > 1


def test_an_els_audit_has_power_and_the_private_run_passes() -> None:
    settings = AuditSettings(n_canaries=1000, expected_batch_size=60, steps=80, epsilon=2.0, microbatch_size=4,
                             examples_per_user=4)
    results = {r.run: r for r in run_audit(settings)}
    private, control = results["private"], results["negative_control"]
    assert control.flagged and not private.flagged
    assert private.examples_per_user == 4 and private.sigma > 0
    sequence_level = {r.run: r for r in run_audit(dataclasses.replace(settings, examples_per_user=None))}["private"]
    assert private.sigma > sequence_level.sigma  # a user of 4 costs more noise than one sequence


def test_a_private_job_is_sized_by_the_sequences_its_steps_compute_and_its_devices_by_its_cap() -> None:
    """Its time follows the expected draw plus under one microbatch of padding a step (a ULS slot brings m
    sequences; BandMF samples one of b groups), its device count divides the cap L."""
    from dpscaling.accounting.truncation import computed_batch
    from dpscaling.config.blocks import load_config
    from dpscaling.workflow.cluster import private_work
    from test_wordpiece import validate_default

    config = validate_default()
    config["training"]["microbatch_size"] = 4
    run = load_config(config)
    dpsgd = a_plan(batch_size=256, truncated_batch_size=288)  # N = 50,000
    work = private_work(run, dpsgd)
    assert work.batch == 288 and work.computed_batch == pytest.approx(computed_batch(50_000, 256 / 50_000, 288, 4))
    assert 256 < work.computed_batch < 260
    uls = a_plan(PER_USER, batch_size=30, truncated_batch_size=48, mechanism="uls-m2", sampler="user_poisson",
                 sequences_per_unit=2)  # N = 600 users
    work = private_work(run, uls)
    assert work.batch == 96 and work.computed_batch == pytest.approx(2 * computed_batch(600, 0.05, 48, 4))
    bandmf = a_plan(batch_size=100, truncated_batch_size=140, mechanism="bandmf-b4")  # groups of 12,500
    assert private_work(run, bandmf).computed_batch == pytest.approx(computed_batch(12_500, 0.008, 140, 4))
