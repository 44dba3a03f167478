"""The adaptive design's choice rule (dpscaling.design.choice) on synthetic committees whose answer is known:
it picks what the answers depend on, per FLOP; a second pick of the same point is worth less (a repeated seed);
the expected variance after the picks is the linear-Gaussian posterior's, checked against a direct computation."""

from __future__ import annotations

import numpy as np
import pytest

from dpscaling.design.choice import choose_runs, joint_covariance


def committee(members: int = 400, seed: int = 0):
    """Two independent sources of uncertainty u, w; the answer is u; candidate 0 measures u, 1 measures w,
    2 measures u + w."""
    rng = np.random.default_rng(seed)
    u, w = rng.normal(0, 0.1, members), rng.normal(0, 0.1, members)
    return u[:, None], np.column_stack([u, w, u + w])


def test_the_candidate_the_answer_depends_on_is_chosen_and_the_unrelated_never_first() -> None:
    answers, predictions = committee()
    choice = choose_runs(answers, predictions, costs=[1.0, 1.0, 1.0], noise_variance=1e-4, runs=1)
    assert choice.candidates == [0]
    assert choice.variance_after[0] < 0.05 * choice.variance_before[0]


def test_cost_is_weighed_per_flop() -> None:
    answers, predictions = committee()
    # u + w tells half as much about u; at a tenth of the cost it is the better buy
    assert choose_runs(answers, predictions, [1.0, 1.0, 0.1], 1e-4, 1).candidates == [2]
    assert choose_runs(answers, predictions, [1.0, 1.0, 1.0], 1e-4, 1).candidates == [0]


def test_a_repeat_is_worth_less_than_the_first_measurement_and_noise_makes_repeats_worth_taking() -> None:
    answers, predictions = committee()
    noisy = choose_runs(answers, predictions, [1.0, 1.0, 1.0], noise_variance=0.01, runs=3)
    gains = [pick.variance_reduction for pick in noisy.picks]
    assert noisy.candidates[:2] == [0, 0] and gains[0] > gains[1] > 0  # seed noise: repeat the informative point
    # with w measured, u + w becomes as informative as u itself
    exact = choose_runs(answers, predictions, [1.0, 1.0, 1.0], noise_variance=1e-6, runs=2)
    assert exact.candidates[0] == 0 and exact.picks[1].variance_reduction < 1e-3 * exact.picks[0].variance_reduction


def test_the_expected_variance_is_the_gaussian_posteriors() -> None:
    rng = np.random.default_rng(3)
    members = rng.normal(size=(200, 5)) @ rng.normal(size=(5, 5))
    answers, predictions = members[:, :2], members[:, 2:]
    noise = 0.3
    choice = choose_runs(answers, predictions, [1.0, 2.0, 3.0], noise, runs=2)
    sigma = joint_covariance(answers, predictions)
    picked = [2 + c for c in choice.candidates]
    # the posterior covariance of the answers given the picked (noisy) observations, in closed form
    observed = sigma[np.ix_(picked, picked)] + noise * np.eye(len(picked))
    cross = sigma[np.ix_([0, 1], picked)]
    posterior = sigma[:2, :2] - cross @ np.linalg.solve(observed, cross.T)
    np.testing.assert_allclose(choice.variance_after, np.diag(posterior), rtol=1e-10)
    np.testing.assert_allclose(choice.variance_before, np.diag(sigma)[:2])


def test_members_that_cannot_answer_are_left_out_and_bad_inputs_refused() -> None:
    answers, predictions = committee(members=50)
    answers[0, 0] = np.nan
    assert joint_covariance(answers, predictions).shape == (4, 4)
    with pytest.raises(ValueError, match="one positive cost per candidate"):
        choose_runs(answers, predictions, [1.0, 0.0, 1.0], 1e-4, 1)
    with pytest.raises(ValueError, match="noise_variance"):
        choose_runs(answers, predictions, [1.0, 1.0, 1.0], 0.0, 1)
    with pytest.raises(ValueError, match="at least two members"):
        choose_runs(answers[:1], predictions[:1], [1.0, 1.0, 1.0], 1e-4, 1)


# ------------------------------------------------------------------------------ the committee's answers


@pytest.fixture(scope="module")
def committee_context():
    """A law on seeded synthetic curves with 6 bootstrap replicates (as tests/test_law_bootstrap.py's)."""
    from figure_context import PHYSICAL_BATCH, SEQ_LEN, SETTINGS

    from dpscaling.report.figures.context import AnalysisContext
    from dpscaling.law import LawSettings
    from dpscaling.law.artifact import fit_law
    from dpscaling.law.bootstrap import REPLICATE, Replicates, replicate_grids
    from dpscaling.law.interpolation import LossFunction
    from dpscaling.law.synthetic import DeterministicGaussianSigma, seeded_results

    settings = LawSettings(warmup_steps=100, rolling_window=3)
    results = seeded_results(steps=2000, log_every=20, seed=6)
    law = fit_law(results, settings, seq_len=SEQ_LEN, physical_batch=PHYSICAL_BATCH)
    grids = replicate_grids(results, settings, range(6))
    replicates = Replicates([LossFunction.from_grid(grid) for _, grid in grids.groupby(REPLICATE)])
    return AnalysisContext(law, DeterministicGaussianSigma(), SETTINGS, delta=1e-8, sampling="deterministic",
                           replicates=replicates)


def test_each_member_answers_each_target_with_its_own_optimum(committee_context) -> None:
    from dpscaling.design.answers import Target, answers_of, target_optima

    targets = [Target(8.0, 1e5, 1e13), Target(1.0, 1e5, 1e13), Target(8.0, 1e5, 1e14), Target(8.0, 1e6, 1e13)]
    answers = answers_of(target_optima(committee_context, targets), len(committee_context.replicates))
    assert answers.shape == (6, 4) and np.isfinite(answers).all()
    assert (answers[:, 1] > answers[:, 0]).all()  # stronger privacy costs loss, in every member
    assert (answers[:, 2] <= answers[:, 0] + 1e-9).all()  # more compute never hurts the optimum
    assert answers.std(axis=0).max() > 0  # the members disagree: there is something to learn
    for member, loss in enumerate(committee_context.replicates.losses):  # the member's own optimum, recomputed
        best = committee_context.best_per_compute(8.0, 1e5, budgets=np.array([1e13]))
        candidates = committee_context._priced_candidates(8.0, 1e5, np.array([1e13]))
        own = np.nanmin(loss(candidates["Model Size"].to_numpy(float), candidates["Iterations"].to_numpy(float),
                             candidates["Noise Batch Ratio"].to_numpy(float)))
        assert answers[member, 0] == pytest.approx(own, abs=1e-12)
        assert abs(answers[member, 0] - float(best["Cross Entropy"].iloc[0])) < 0.2


def test_the_jackknife_covariance_is_n_minus_1_over_n_times_the_summed_deviations() -> None:
    from dpscaling.design.choice import choose_from_covariance, jackknife_covariance

    rng = np.random.default_rng(5)
    members = rng.normal(size=(7, 3))
    deviations = members - members.mean(axis=0)
    wanted = (7 - 1) / 7 * deviations.T @ deviations
    np.testing.assert_allclose(jackknife_covariance(members[:, :1], members[:, 1:]), wanted, rtol=1e-12)
    # the rule on a covariance is the rule on members
    answers, predictions = committee()
    sigma = joint_covariance(answers, predictions)
    assert choose_from_covariance(sigma, 1, [1.0, 1.0, 1.0], 1e-4, 2).candidates == choose_runs(
        answers, predictions, [1.0, 1.0, 1.0], 1e-4, 2).candidates


def test_the_contenders_are_the_members_choices_most_frequent_first_and_the_consensus_leads() -> None:
    import pandas as pd

    from dpscaling.design.answers import contenders

    def chosen(*points):
        return pd.DataFrame(points, columns=["Model Size", "Iterations", "Noise Batch Ratio"])

    bootstrap = chosen((1e6, 500.0, 0.01), (1e6, 500.0, 0.01), (4e6, 250.0, 0.02), (1e6, 1000.0, 0.01))
    forms = chosen((4e6, 250.0, 0.02), (1e6, 500.0, 0.01), (2e6, 250.0, 0.04))
    rows = contenders([bootstrap, forms, pd.DataFrame()], limit=5)
    np.testing.assert_array_equal(rows[:2], [[1e6, 500.0, 0.01], [4e6, 250.0, 0.02]])  # chosen 3 and 2 times
    assert len(rows) == 4 and {tuple(r) for r in rows[2:]} == {(1e6, 1000.0, 0.01), (2e6, 250.0, 0.04)}
    assert len(contenders([bootstrap, forms], limit=1)) == 2  # the consensus and one rival
    assert contenders([pd.DataFrame()], limit=3).shape == (0, 3)


def test_a_decision_column_is_a_contenders_loss_less_the_consensus_in_every_member(committee_context) -> None:
    from dpscaling.design.committee import decision_columns

    members = committee_context.replicates
    consensus, rival, other = [4e5, 2000.0, 2.0**-10], [1.6e6, 1000.0, 2.0**-6], [1.6e6, 500.0, 2.0**-8]
    columns = decision_columns(members, [np.array([consensus, rival, other]), np.array([consensus])])
    losses = members.loss_matrix(*np.array([consensus, rival, other]).T)
    assert columns.shape == (6, 2)  # a target without a rival adds nothing
    np.testing.assert_allclose(columns, losses[:, 1:] - losses[:, :1], rtol=0, atol=1e-12)
    assert np.isfinite(columns).all() and columns.std(axis=0).min() > 0  # the members disagree on the gaps
