"""The one-run canary audit (docs/private-training.md, 'Audit'): it has power, and the private run passes."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from conftest import run_snakemake
from dpscaling.privacy.audit import AuditSettings, canary_scores, run_audit
from dpscaling.core.errors import UserError


def test_negative_control_is_flagged_and_the_private_run_is_not():
    settings = AuditSettings()
    results = {r.run: r for r in run_audit(settings)}
    private, control = results["private"], results["negative_control"]
    # Noise off while claiming ε = 2: the audit must catch it (its power).
    assert control.sigma == 0 and control.flagged
    assert control.audited_epsilon > 2 * settings.epsilon
    # The calibrated private run: the lower bound stays below the accounted ε.
    assert private.sigma > 0 and not private.flagged
    assert 0 <= private.audited_epsilon < settings.epsilon
    assert private.claimed_epsilon == control.claimed_epsilon == settings.epsilon
    assert 0.4 < private.n_included / settings.n_canaries < 0.6
    # L priced as a private training run's: a multiple of the microbatch, costing <= ~1% of noise.
    assert private.truncated_batch_size % settings.microbatch_size == 0
    assert private.sigma == pytest.approx(private.untruncated_sigma, rel=0.02)
    # the claimed ε is the audited run's price, recomputed with dp-accounting's truncated event directly
    import dp_accounting

    event = dp_accounting.TruncatedSubsampledGaussianDpEvent(private.n_included, private.sampling_probability,
                                                             private.truncated_batch_size, private.sigma)
    accountant = dp_accounting.pld.PLDAccountant(value_discretization_interval=1e-4)
    assert accountant.compose(event, private.steps).get_epsilon(settings.delta) == pytest.approx(settings.epsilon,
                                                                                                 rel=5e-3)


def test_canary_scores_count_participations_over_the_expected_batch():
    """Without noise a canary's score is (its participations) / B exactly: clipping maps its
    scaled gradient to its unit vector, padding adds nothing, and the divisor is B."""
    import numpy as np

    from dpscaling.train.sampling import secret_key

    settings = AuditSettings(n_canaries=40, expected_batch_size=5, steps=30, microbatch_size=4)
    included = np.arange(40) % 2 == 0
    key = secret_key()
    scores = canary_scores(settings, 0.0, included, 16, key)
    counts = participations(settings, np.flatnonzero(included), 16, key)
    np.testing.assert_allclose(scores, counts / 5, atol=1e-6)
    assert counts[~included].sum() == 0 and counts.sum() > 0


def participations(settings: AuditSettings, members, truncated_batch_size: int, key):
    """How often each canary took part in the audit's steps, replayed with the private run's own Poisson batches
    over the included canaries' rows (``members``: the canary of each row)."""
    import numpy as np

    from dpscaling.train.sampling import PADDING_INDEX, PoissonBatches

    sampler = PoissonBatches(len(members), settings.expected_batch_size, truncated_batch_size, key)
    counts = np.zeros(settings.n_canaries)
    for step in range(settings.steps):
        rows = sampler.indices(step)
        np.add.at(counts, members[rows[rows != PADDING_INDEX]], 1)
    return counts


def test_audit_settings_are_checked():
    with pytest.raises(UserError, match="audit.significance"):
        AuditSettings(significance=1.5)


def test_audit_target_writes_the_report(tmp_path):
    config = tmp_path / "audit.yaml"
    config.write_text("audit: {n_canaries: 400, steps: 60, expected_batch_size: 40}\n")
    run_snakemake("--cores", "1", "audit", "--directory", str(tmp_path), "--configfile", str(config),
                  cwd=tmp_path)
    # no run_name: the run is named after its config file (results/audit)
    summary = json.loads((tmp_path / "results/audit/audit/audit.json").read_text())
    table = pd.read_csv(tmp_path / "results/audit/audit/audit.csv")
    assert set(table["run"]) == {"private", "negative_control"}
    assert summary["accounted_epsilon"] == 2.0
    assert summary["audit_has_power"] is True and summary["private_run_passes"] is True
    # what the audited ε covers: the step alone (the target trains no model on data)
    assert summary["epsilon_covers"]["covers"].startswith("the audited training step alone")
