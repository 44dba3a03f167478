"""The sampler registry: every sampler's record is complete and used, and no module outside the
registry tests which sampler a run uses."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from dpscaling.accounting.matched import _ACCOUNTED_BY, ACCOUNTANT_ASSUMES, MATCHED_ACCOUNTANT, account_run
from dpscaling.config.schema import schema
from dpscaling.core.errors import UserError
from dpscaling.privacy.samplers import (
    CYCLIC, SAMPLERS, SHUFFLE, TRUNCATED_POISSON, USER_POISSON, USER_SHUFFLE, sampler_named, shuffle_max_participations)
from dpscaling.dp.per_example import microbatches
from dpscaling.train.data import BatchSampler
from dpscaling.train.sampling import PADDING_INDEX, PoissonBatches

SRC = Path(__file__).resolve().parents[1] / "src" / "dpscaling"


def test_schema_offers_exactly_the_registered_samplers() -> None:
    sampling = schema()["properties"]["training"]["properties"]["sampling"]
    assert sampling["enum"] == list(SAMPLERS)
    assert sampling["default"] in SAMPLERS


@pytest.mark.parametrize("sampler", SAMPLERS.values(), ids=list(SAMPLERS))
def test_each_sampler_names_an_accountant_that_accounts_it(sampler) -> None:
    assert sampler.accountant in ACCOUNTANT_ASSUMES and sampler.accountant in _ACCOUNTED_BY
    assert MATCHED_ACCOUNTANT[sampler.name] == sampler.accountant
    # a sampler accounted per sequence of a user (ELS) is given k, the most sequences one user has
    users = {"examples_per_user": 3} if sampler.protects == "user" and sampler.unit == "sequence" else {}
    privacy = account_run(sampler.name, None, dataset_size=200, expected_batch_size=20, steps=30, delta=1e-5,
                          target_epsilon=4.0, **users)
    assert privacy.accountant == sampler.accountant and privacy.epsilon == pytest.approx(4.0, rel=0.05)
    # A bounded sampler's bound is what its accountant composes; an unbounded one is truncated at L.
    bounded = sampler.participation_bound is not None
    assert (privacy.max_participations is not None) == bounded
    assert (privacy.truncated_batch_size is not None) == sampler.truncated


def test_batch_sources_draw_the_samplers_batches() -> None:
    rows = np.arange(40 * 3, dtype=np.int32).reshape(40, 3)
    shuffled = SHUFFLE.batch_source()(rows, 0, 8, 8, 5)
    assert np.array_equal(shuffled.indices(3), BatchSampler(40, 8, 5).indices(3))
    key = np.array([1, 2], np.uint32)
    poisson = TRUNCATED_POISSON.batch_source()(rows, 0, 8, 16, 5, key)
    assert np.array_equal(poisson.indices(3), PoissonBatches(40, 8, 16, key).indices(3))
    assert len(poisson.indices(3)) == 16 and PADDING_INDEX in poisson.indices(3)
    with pytest.raises(ValueError, match="secret key"):
        TRUNCATED_POISSON.batch_source()(rows, 0, 8, 16, 5)


@pytest.mark.parametrize("cycle_length", [1, 2])
def test_a_padded_batch_puts_its_padding_in_whole_trailing_microbatches(cycle_length) -> None:
    """Laid out for microbatches of 4, each step's batch holds the draw of the unlaid-out sampler (same key), its
    real examples filling the leading microbatches: only the last one holding a real example may hold padding."""
    key = np.array([3, 9], np.uint32)
    laid_out = PoissonBatches(400, 20, 32, key, cycle_length, microbatch_size=4)
    plain = PoissonBatches(400, 20, 32, key, cycle_length)
    computed = 0
    for step in range(50):
        indices, drawn = laid_out.indices(step), plain.indices(step)
        assert sorted(indices) == sorted(drawn)
        real = int(np.sum(indices != PADDING_INDEX))
        holds_real = (np.asarray(microbatches(indices, 4)) != PADDING_INDEX).any(axis=1)
        assert holds_real.tolist() == [k < -(-real // 4) for k in range(8)]
        computed += 4 * holds_real.sum() - real
    assert computed / 50 < 4  # under one microbatch of padding computed per step, against 32 − 20 expected


def test_records_say_what_each_sampler_is() -> None:
    assert not SHUFFLE.private and not SHUFFLE.truncated
    assert TRUNCATED_POISSON.private and TRUNCATED_POISSON.truncated
    assert SHUFFLE.participation_bound(1000, 300, 10) == 4 == shuffle_max_participations(1000, 300, 10)
    assert SHUFFLE.physical_batch(8, None) == 8 and TRUNCATED_POISSON.physical_batch(8, None) is None
    with pytest.raises(UserError, match=r"training\.sampling: must be one of \('shuffle', 'cyclic', 'truncated_poisson', "
                                        r"'user_shuffle', 'user_poisson', 'els_poisson'\), got 'x'"):
        sampler_named("x", "training")
    assert SHUFFLE.min_separation(1000, 300) == 1 and CYCLIC.min_separation(1000, 300) == 3
    assert (SHUFFLE.unit, USER_SHUFFLE.unit, USER_POISSON.unit) == ("sequence", "user", "user")
    assert USER_POISSON.private and USER_POISSON.truncated and not USER_SHUFFLE.private


def test_the_cyclic_sampler_repeats_one_order_so_participations_lie_n_over_b_apart() -> None:
    """Every example of the first ⌊N/B⌋ · B joins exactly every ⌊N/B⌋-th step (the separation BandMF's
    deterministic price assumes); the shuffled sampler reorders epochs, so it places some two apart by less."""
    rows = np.arange(50 * 2, dtype=np.int32).reshape(50, 2)
    cyclic, shuffled = CYCLIC.batch_source()(rows, 0, 8, 8, 5), SHUFFLE.batch_source()(rows, 0, 8, 8, 5)
    assert np.array_equal(cyclic.indices(0), shuffled.indices(0))  # the same first epoch
    steps = {}
    for step in range(60):
        for example in cyclic.indices(step):
            steps.setdefault(int(example), []).append(step)
    gaps = {gap for joined in steps.values() for gap in np.diff(joined)}
    assert gaps == {CYCLIC.min_separation(50, 8)} == {6}
    assert max(map(len, steps.values())) == CYCLIC.participation_bound(50, 8, 60) == 10
    shuffled_gaps = [gap for step in [sorted(s for s in range(60) if e in shuffled.indices(s)) for e in range(50)]
                     for gap in np.diff(step)]
    assert min(shuffled_gaps) < 6


def test_no_module_outside_the_registry_compares_sampler_names() -> None:
    names = "|".join(SAMPLERS)
    comparison = re.compile(rf"""(==|!=|\bin)\s*\(?[^)\n]*["']({names})["']""")
    found = [f"{path.relative_to(SRC)}:{number}: {line.strip()}"
             for path in sorted(SRC.rglob("*.py")) if path.name != "samplers.py"
             for number, line in enumerate(path.read_text().splitlines(), 1)
             if comparison.search(line)]
    assert not found, "sampler names compared outside dpscaling.privacy.samplers:\n" + "\n".join(found)
