"""A budget per user priced by the one pricing module (docs/accounting.md, "Pricing a user"): user-level sampling
(ULS, a ``uls-m<m>`` mechanism) as DP-SGD's events over users, example-level sampling (ELS) as jax-privacy's
user-level mixture, and ELS's σ table; every σ recomputed here with dp-accounting, without the project's
accountant."""

from __future__ import annotations

import dataclasses
import math

import dp_accounting
import numpy as np
import pytest
from dp_accounting.pld import pld_privacy_accountant
from scipy import stats

from dpscaling.accounting import pricing
from dpscaling.accounting.table_spec import TableSpec
from dpscaling.accounting.user_level import TRUNCATION_DELTA_SHARE, els_run
from dpscaling.core.errors import UserError
from dpscaling.privacy.mechanisms import mechanism_named, uls_name
from dpscaling.privacy.samplers import sampler_named, user_level_sampler

DELTA = 1e-6


def _pld(events, compositions: int, delta: float) -> float:
    accountant = pld_privacy_accountant.PLDAccountant(value_discretization_interval=1e-3)
    for event in events:
        accountant.compose(event, compositions)
    return accountant.get_epsilon(delta)


def poisson_epsilon(sigma: float, q: float, steps: int, delta: float = DELTA) -> float:
    return _pld([dp_accounting.PoissonSampledDpEvent(q, dp_accounting.GaussianDpEvent(sigma))], steps, delta)


def mixture_epsilon(sigma: float, q: float, k: int, steps: int, delta: float) -> float:
    """ε of T example-level steps for a user of k sequences: the mixture of Gaussians of sensitivity j with
    probability Binomial(k, q)(j) (Chua et al. 2024), built here from SciPy's binomial."""
    probs = [float(stats.binom.pmf(j, k, q)) for j in range(k + 1)]
    return _pld([dp_accounting.dp_event.MixtureOfGaussiansDpEvent(sigma, list(range(k + 1)), probs)], steps, delta)


def test_a_user_level_mechanism_is_named_and_trains_users_as_its_sampler_draws_sequences() -> None:
    uls = mechanism_named(uls_name(4))
    assert (uls.name, uls.unit, uls.examples_per_user_per_batch, uls.bands, uls.sequences_per_unit) == (
        "uls-m4", "user", 4, 1, 4)
    assert uls.sampling_unit != mechanism_named("dpsgd").sampling_unit  # its σ̄ = 0 runs are its own
    assert uls.training({"sampling": "shuffle", "steps": 40}) == {
        "sampling": "user_shuffle", "steps": 40, "examples_per_user_per_batch": 4}
    assert uls.training({"sampling": "truncated_poisson"})["sampling"] == "user_poisson"
    assert uls.training({})["sampling"] == "user_shuffle"  # the schema's default sampler, shuffle
    assert mechanism_named("dpsgd").training({"sampling": "shuffle"}) == {"sampling": "shuffle"}
    with pytest.raises(UserError, match=r"training\.sampling: a user-level mechanism.*'cyclic' has no user-level"):
        uls.training({"sampling": "cyclic"})
    assert user_level_sampler("shuffle") is sampler_named("user_shuffle")
    for bad in ("uls-m0", "uls", "uls-m-1"):
        with pytest.raises(UserError, match=r"'uls-m<m>' with m >= 1"):
            mechanism_named(bad)


def test_uls_is_dp_sgd_over_users_whatever_each_user_wrote() -> None:
    """ULS's σ spends ε as T Poisson-subsampled Gaussians at q = B/U over U users (dp-accounting), and does not
    depend on k: a user's m sequences are one clipped contribution."""
    users, batch, steps, epsilon = 5_000, 50, 400, 4.0
    priced = pricing.price("uls-m2", "poisson", epsilon, DELTA, users, batch, steps, examples_per_user=16)
    assert (priced.sampler, priced.privacy_unit, priced.examples_per_user) == ("user_poisson", "user", 16)
    assert priced.event.population == users and math.isclose(priced.event.sampling_probability, batch / users)
    assert poisson_epsilon(priced.sigma, batch / users, steps) == pytest.approx(epsilon, rel=5e-3)
    assert priced.sigma == pricing.price("uls-m2", "poisson", epsilon, DELTA, users, batch, steps).sigma
    fixed = pricing.price("uls-m2", "deterministic", epsilon, DELTA, users, batch, steps)
    assert fixed.sampler == "user_shuffle" and fixed.event.participations == math.ceil(steps / (users // batch))


def test_els_is_priced_for_the_user_s_k_sequences_with_its_truncation_in_delta() -> None:
    """ELS's σ spends ε for a user of k sequences at the mixture's share of δ (recomputed with dp-accounting's
    mixture event), more than one sequence's σ and ELS's at k = 1 is the sequence-level price."""
    sequences, batch, steps, epsilon, k = 20_000, 100, 300, 4.0, 4
    priced = pricing.price("dpsgd", "min", epsilon, DELTA, sequences, batch, steps, examples_per_user=k)
    assert (priced.sampler, priced.branch, priced.privacy_unit, priced.event.kind) == (
        "els_poisson", "poisson", "user", pricing.USER_LEVEL_EVENT)
    assert priced.event.examples_per_user == k and priced.event.population == sequences
    mixture_delta = DELTA * (1 - TRUNCATION_DELTA_SHARE)
    assert mixture_epsilon(priced.sigma, batch / sequences, k, steps, mixture_delta) == pytest.approx(epsilon, rel=1e-2)
    one = pricing.price("dpsgd", "poisson", epsilon, DELTA, sequences, batch, steps)
    assert priced.sigma > 1.05 * one.sigma
    assert pricing.price("dpsgd", "poisson", epsilon, DELTA, sequences, batch, steps, examples_per_user=1).sigma == \
        one.sigma
    with pytest.raises(UserError, match="ELS .* Poisson sampling only"):
        pricing.price("dpsgd", "deterministic", epsilon, DELTA, sequences, batch, steps, examples_per_user=k)
    with pytest.raises(UserError, match="bandmf-b4 has no user-level accountant"):
        pricing.price("bandmf-b4", "poisson", epsilon, DELTA, sequences, batch, steps, examples_per_user=k)


def test_els_sigma_table_matches_the_run_s_calibration() -> None:
    """The σ table the query searches (walked with dp-accounting's mixture PLD at a coarser discretisation)
    reads within 1% of the σ an ``els_poisson`` run calibrates, never more than 0.1% below it, and has no
    fixed-batch branch."""
    from dpscaling.accounting.table import SigmaTable, compute_chunk
    from dpscaling.accounting.table_spec import Chunk

    k = 3
    spec = TableSpec(epsilon_min=2.0, epsilon_max=8.0, epsilon_per_octave=2, steps_min=128, steps_max=512,
                     steps_per_octave=1, q_min_log2=-7, q_per_octave=1,
                     delta=DELTA * (1 - TRUNCATION_DELTA_SHARE), examples_per_user=k)
    assert spec.to_mapping()["examples_per_user"] == k and "examples_per_user" not in TableSpec().to_mapping()
    rates = (2.0**-7, 2.0**-6)
    table = SigmaTable(compute_chunk(spec, Chunk(0, rates)), examples_per_user=k)
    for epsilon, steps, q in ((4.0, 256, rates[0]), (2.0, 128, rates[1]), (8.0, 512, rates[0])):
        wanted = els_run(q=q, steps=steps, dataset_size=12_800, examples_per_user=k, delta=DELTA,
                         target_epsilon=epsilon).sigma
        found = float(table.sigma(epsilon, steps, q, sampling="poisson"))  # a grid point: the slab's own σ
        assert found == pytest.approx(wanted, rel=1e-2) and found >= wanted * 0.999
    assert np.isnan(table.deterministic(4.0, 256, rates[0]))
    assert float(table.sigma(4.0, 256, rates[0])) == float(table.sigma(4.0, 256, rates[0], sampling="poisson"))
    with pytest.raises(UserError, match="ELS .* DP-SGD only"):
        TableSpec(bands=4, examples_per_user=2)


@pytest.mark.parametrize(("sigma", "q", "k"), [(0.3, 2.0**-8, 8), (1.0, 2.0**-4, 4), (2.5, 0.01, 16), (0.5, 0.5, 2)])
def test_the_tables_mixture_is_dp_accountings_bit_for_bit(sigma: float, q: float, k: int) -> None:
    """The ELS table's one-step PLD (its loss inverted by a vectorised bisection) is dp-accounting's own
    ``from_mixture_gaussian_mechanism`` at the same discretisation: every bin, both directions, and ε."""
    from dp_accounting.pld import privacy_loss_distribution

    from dpscaling.accounting.user_level import DISCRETISATION, mixture_losses

    ours = mixture_losses(sigma, q, k)
    sensitivities = list(range(k + 1))
    theirs = privacy_loss_distribution.from_mixture_gaussian_mechanism(
        sigma, sensitivities, [float(p) for p in stats.binom.pmf(sensitivities, k, q)],
        value_discretization_interval=DISCRETISATION)
    for mine, reference in ((ours._pmf_remove, theirs._pmf_remove), (ours._pmf_add, theirs._pmf_add)):
        mine, reference = mine.to_dense_pmf(), reference.to_dense_pmf()
        assert mine._lower_loss == reference._lower_loss and mine._infinity_mass == reference._infinity_mass
        np.testing.assert_array_equal(mine._probs, reference._probs)
    reference_epsilon = theirs.self_compose(500).get_epsilon_for_delta(DELTA)
    assert ours.self_compose(500).get_epsilon_for_delta(DELTA) == reference_epsilon
    # the table composes it with the Poisson tables' vectorised composer: within 1e-4 of dp-accounting's; above
    # ε ≈ 745, where dp-accounting's loop returns a grid point above the root (accounting/hockey_stick.py), within
    # 1e-3 and not above it
    from dpscaling.accounting import composition, pld

    composed = pld.composed_epsilon(composition.directions(ours), 500, DELTA)
    if reference_epsilon < 745:
        assert composed == pytest.approx(reference_epsilon, rel=1e-4)
    else:
        assert composed == pytest.approx(reference_epsilon, rel=1e-3) and composed <= reference_epsilon


def test_els_without_the_users_sequences_is_priced_at_one_sequence_a_user(tmp_path) -> None:
    """A budget per user without ``sequences`` (``--sequences``) is searched and priced on S = N, the fewest
    sequences N users can hold: the highest rate q = B/N at a batch, the largest σ of any S in N..N·k. The law's
    query and the plan take it alike (:func:`dpscaling.law.budget.held_sequences`); ELS's σ at S = N spends the
    ε (dp-accounting's mixture at q = B/N) and exceeds the σ at N·k, which spends more at that rate."""
    import dpscaling
    from dpscaling.cli.answer_text import _data_budget
    from dpscaling.law.budget import Budget, held_sequences
    from law_bundle_data import write_run, write_run_bundle

    users, k, batch, steps, epsilon = 2_000, 4, 40, 200, 4.0
    assert held_sequences(users, k, None) == users and held_sequences(users, k, 5_000) == 5_000
    for outside in (users - 1, users * k + 1):
        with pytest.raises(UserError, match=r"--sequences: the sequences the 2000 users hold.*\(2000\.\.8000\)"):
            held_sequences(users, k, outside)
    run = write_run(tmp_path / "run")
    law = dpscaling.load_law(write_run_bundle(run, run / "bundle").root)
    asked = Budget.asked(1e12, epsilon, float(users), None, examples_per_user=k)
    assert law._user_budget(asked, None)[1] == 1  # S = N: one sampled sequence a user
    assert law._user_budget(dataclasses.replace(asked, sequences=5_000.0), None)[1] == 5_000 / users
    conservative = pricing.price("dpsgd", "poisson", epsilon, DELTA, users, batch, steps, examples_per_user=k)
    assert conservative.event.population == users and math.isclose(conservative.event.sampling_probability,
                                                                    batch / users)
    mixture_delta = DELTA * (1 - TRUNCATION_DELTA_SHARE)
    assert mixture_epsilon(conservative.sigma, batch / users, k, steps, mixture_delta) == pytest.approx(
        epsilon, rel=1e-2)
    # at N·k's lower rate the same σ spends well under ε: N·k's own σ is smaller, too small wherever S < N·k
    assert mixture_epsilon(conservative.sigma, batch / (users * k), k, steps, mixture_delta) < 0.5 * epsilon
    query = {"privacy_unit": "user", "users": float(users), "examples_per_user": k, "data_budget_units": users,
             "sequences": float(users), "sequences_assumed": True}
    assert "ELS sampling the 2,000 they hold (assumed: one each" in _data_budget(query)


def test_the_els_truncation_term_above_eps_700_is_computed_in_log_space() -> None:
    """At S 4,000, k 4, B 128, T 300 and ε 800 the term (1 + e^ε)·T·P(Binomial(S + k, q) > L) is about 1e34 at
    L = 732 (where e^min(ε, 700) and an underflowing tail once read 3.8e-10); L is the smallest whose term fits,
    recomputed here by summing SciPy's log-pmf over the whole tail; and where nothing smaller fits, L = S + k cuts
    nothing (term 0)."""
    from scipy.special import logsumexp

    from dpscaling.accounting.user_level import els_truncated_batch_size, log_truncation_delta, truncation_delta

    sequences, k, batch, steps, epsilon, budget = 4_000, 4, 128, 300, 800.0, 1e-9
    q = batch / sequences

    def log10_term(size: int) -> float:  # independently: the whole tail, term by term
        tail = logsumexp(stats.binom.logpmf(np.arange(size + 1, sequences + k + 1), sequences + k, q))
        return float((np.logaddexp(0, epsilon) + math.log(steps) + tail) / math.log(10))

    assert log10_term(732) == pytest.approx(34.0, abs=0.1)
    assert log_truncation_delta(sequences, q, k, steps, 732, epsilon) / math.log(10) == pytest.approx(
        log10_term(732), abs=1e-3)
    assert truncation_delta(sequences, q, k, steps, 732, epsilon) == 1.0  # a probability's bound: at most 1
    size = els_truncated_batch_size(sequences, q, k, steps, epsilon, budget)
    assert log10_term(size) <= math.log10(budget) < log10_term(size - 1)
    assert truncation_delta(sequences, q, k, steps, size, epsilon) >= 10 ** log10_term(size)  # never understated
    assert size == 783
    # no L below S + k fits (an infinite ε): nothing cut, the term 0
    assert els_truncated_batch_size(sequences, q, k, steps, math.inf, budget) == sequences + k
    assert truncation_delta(sequences, q, k, steps, sequences + k, math.inf) == 0.0
    run = els_run(q=q, steps=steps, dataset_size=sequences, examples_per_user=k, delta=1e-8, sigma=0.0)
    assert (run.epsilon, run.truncated_batch_size, run.truncation_delta) == (math.inf, sequences + k, 0.0)


@pytest.mark.parametrize("sigma,batch,k,steps,users", [(1.2, 100, 4, 60, 5000), (0.7, 45, 8, 11, 3323)])
def test_els_epsilon_is_jax_privacys_user_level_accountant_bit_for_bit(sigma, batch, k, steps, users) -> None:
    """ELS's ε is jax-privacy's DpsgdTrainingUserLevelAccountant's, exactly: the same mixture distribution
    (built by MixtureLoss) composed the same way."""
    from jax_privacy.accounting import accountants, analysis

    from dpscaling.accounting.user_level import DISCRETISATION, els_epsilon

    accountant = analysis.DpsgdTrainingUserLevelAccountant(
        dp_accountant_config=accountants.PldAccountantConfig(value_discretization_interval=DISCRETISATION))
    params = analysis.DpParams(noise_multipliers=sigma, num_samples=users, delta=9e-9, batch_size=batch,
                               examples_per_user=k, sampling_method=analysis.SamplingMethod.POISSON)
    assert els_epsilon(sigma, batch / users, k, steps, users, 9e-9) == float(accountant.compute_epsilon(steps, params))
