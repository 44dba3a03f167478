"""Noise mechanisms: DP-SGD's independent noise, or DP-BandMF's correlated noise (the paper's second open
question, "better underlying mechanisms"; docs/mechanisms.md).

A run's mechanism is a name, the value of the ``mech`` run axis and of ``training.mechanisms``:

* ``dpsgd`` — independent N(0, σ̄²) noise on each step's clipped mean gradient (paper Algorithm 1).
* ``bandmf-b<b>`` (b ≥ 2) — banded matrix factorization (Choquette-Choo et al. 2023, arXiv 2306.08153):
  step t adds σ̄·(C⁻¹z)_t, z_t ~ N(0, I) i.i.d., where C is the lower-triangular b-banded Toeplitz strategy
  whose coefficients jax-privacy optimises for the run's T steps (``training.bandmf_strategy``) and scales
  to unit L2 norm. b = 1 would be C = I, i.e. DP-SGD, so it is spelled ``dpsgd``.
* ``uls-m<m>`` (m ≥ 1) — DP-SGD at the user level (user-level sampling, ULS; Charles et al. 2024, arXiv
  2407.07737): each step draws users of ``data.users`` the way the configured sampler draws sequences
  (``shuffle`` → ``user_shuffle``, ``truncated_poisson`` → ``user_poisson``), m of each drawn user's sequences,
  their mean loss clipped as one contribution (:mod:`dpscaling.train.units`); N and B count users, a step
  computes B·m sequences. Its σ̄ is DP-SGD's, priced over users: its table is DP-SGD's.

Sequence-level DP-SGD protects a user of k sequences too, accounted for the k (example-level sampling, ELS:
:mod:`dpscaling.accounting.user_level`): not a mechanism of its own, DP-SGD's runs and law priced per user.

**What σ̄ means for every mechanism.** σ̄ is the standard deviation of z, the noise on the *mean* clipped
gradient before it is correlated, with every column of C at L2 norm ≤ 1: one example's participation then
has sensitivity ≤ 1/B in C-space, and σ̄·B is the noise multiplier of jax-privacy's amplified BandMF event
(``noise_multiplier``, "assuming the strategy matrix has maximum L2 column norm of one"), exactly as it is
DP-SGD's. So a σ̄ is priced per participation identically for every b, and the b-specific part of the
privacy cost (b groups, ⌈T/b⌉ participations at rate b·q) lives in each mechanism's accounting table,
σ(ε, T, q, b), not in the training curve. That keeps the study's decoupling (paper §3.1): a law per
mechanism is fitted in σ̄, and the query converts a budget into σ̄ with that mechanism's accountant. The
per-step marginal noise std is σ̄·‖(C⁻¹)_t‖₂ (larger than σ̄ for b ≥ 2: 1/c₀ at t = 0), anti-correlated
across steps, so the noise on sums of updates is smaller.

This module is JAX-free (the workflow imports it to check configs and size jobs); the noise transform and
the strategy come from :mod:`dpscaling.dp.correlated`, imported when a run builds them.
"""

from __future__ import annotations

import importlib
import re
from dataclasses import dataclass
from collections.abc import Mapping
from typing import Any

from dpscaling.core.errors import UserError

__all__ = ["CHOOSE", "DPSGD", "REGISTERED", "STRATEGIES", "Mechanism", "bandmf_name", "mechanism_named", "state_copies", "uls_name"]

# jax-privacy's optimize_banded_toeplitz reduction of the per-step squared error of the prefix sums:
# mean (its default, RMSE-optimal), max, or the last iterate's.
STRATEGIES: tuple[str, ...] = ("mean_error", "max_error", "last_iterate")
_BANDMF = re.compile(r"^bandmf-b(\d+)$")
_ULS = re.compile(r"^uls-m(\d+)$")
# training.clipping's names (dpscaling.dp.CLIPPED_SUMS, not imported here: it loads JAX)
GHOST_CLIPPING, VMAP_CLIPPING = "ghost", "vmap"


@dataclass(frozen=True)
class Mechanism:
    """One noise mechanism: its name (``dpsgd``, ``bandmf-b<b>`` or ``uls-m<m>``), its number of bands b, and
    what one clipped contribution is: a sequence, or m sequences of one user."""

    name: str
    bands: int
    # "package.module:function" building its optax noise transform from (mechanism, σ̄, key, T, strategy,
    # layer_prefix: a scanned model's, whose noise is the unrolled model's draw; dpscaling.dp.layers)
    noise_builder: str = "dpscaling.dp.correlated:correlated_noise"
    unit: str = "sequence"  # "user": its runs sample users (N, B count users), each clipped over m sequences
    examples_per_user_per_batch: int = 1  # m, a drawn user's sequences per step (1 for a sequence unit)

    def noise_transform(self, stddev: Any, key: Any, steps: int, strategy: str, layer_prefix: str | None = None
                        ) -> Any:
        """Its optax transform adding noise of scale ``stddev`` (σ̄) keyed by ``key`` to a T-step run
        (imported on demand: it needs JAX); ``layer_prefix``: the model's layers are scanned
        (:mod:`dpscaling.dp.layers`), and its noise is drawn as the unrolled model's."""
        module, _, name = self.noise_builder.partition(":")
        return getattr(importlib.import_module(module), name)(self, stddev, key, steps, strategy, layer_prefix)

    @property
    def correlated(self) -> bool:
        """Whether its noise is correlated across steps (b ≥ 2): the state carries b − 1 past draws."""
        return self.bands > 1

    @property
    def cycle_length(self) -> int:
        """The groups cyclic Poisson sampling splits the data into: b (every example in every b-th step)."""
        return self.bands

    def noise_history(self) -> int:
        """How many past noise draws its optimiser state keeps: b − 1 (one parameter-sized array each)."""
        return self.bands - 1

    @property
    def sampling_unit(self) -> tuple[str, int]:
        """(unit, m): two mechanisms of one sampling unit train the same run where they add no noise (σ̄ = 0),
        so that run is trained once (:func:`dpscaling.workflow.grid.trains`)."""
        return self.unit, self.examples_per_user_per_batch

    @property
    def sequences_per_unit(self) -> int:
        """Sequences one sampled unit brings to a step: m for a user unit, 1 for a sequence (compute per step
        is B·m sequences)."""
        return self.examples_per_user_per_batch

    def training(self, training: Mapping[str, Any], block: str = "training") -> dict[str, Any]:
        """A run's ``training`` mapping as this mechanism trains it: for a user unit, the configured sampler's
        user-level form (:func:`dpscaling.privacy.samplers.user_level_sampler`) with m sequences per user; otherwise
        unchanged."""
        if self.unit == "sequence":
            return dict(training)
        from dpscaling.privacy.samplers import SHUFFLE, user_level_sampler

        sampler = user_level_sampler(str(training.get("sampling", SHUFFLE.name)), block)
        user_level = {**training, "sampling": sampler.name, "examples_per_user_per_batch": self.examples_per_user_per_batch}
        if training.get("clipping") == GHOST_CLIPPING:  # ghost norms are a sequence's: a user's m are clipped as one
            user_level["clipping"] = VMAP_CLIPPING
        return user_level


DPSGD = Mechanism("dpsgd", 1, noise_builder="dpscaling.dp.noise:gaussian_noise")

# The registry: the mechanisms known by their name, beside BandMF's family (``bandmf-b<b>``, any b ≥ 2). A new
# mechanism is one entry here: its name, its bands (what its accounting reduces to: 1 = Poisson DP-SGD's
# events, b = cyclic Poisson in b groups; dpscaling.accounting.pricing) and its noise builder. The schema takes
# any safe name; :func:`mechanism_named` refuses the others, naming the key (the config's checks call it).
REGISTERED: dict[str, Mechanism] = {DPSGD.name: DPSGD}
# A private budget's mechanism that asks every mechanism's law to plan it (docs/mechanisms.md): not a mechanism.
CHOOSE = "choose"


def uls_name(examples_per_user_per_batch: int) -> str:
    """The name of user-level DP-SGD with m sequences of each drawn user per step (m ≥ 1)."""
    return f"uls-m{int(examples_per_user_per_batch)}"


def bandmf_name(bands: int) -> str:
    """The name of BandMF with ``bands`` bands (b ≥ 2)."""
    return f"bandmf-b{int(bands)}"


def mechanism_named(name: str, block: str = "training.mechanisms") -> Mechanism:
    """The mechanism called ``name``; ``block`` names the key in the message."""
    if name in REGISTERED:
        return REGISTERED[name]
    user_level = _ULS.match(str(name))
    if user_level is not None and int(user_level.group(1)) >= 1:
        return Mechanism(str(name), 1, noise_builder=DPSGD.noise_builder, unit="user",
                         examples_per_user_per_batch=int(user_level.group(1)))
    found = _BANDMF.match(str(name))
    if found is None or int(found.group(1)) < 2:
        known = " or ".join(repr(known) for known in REGISTERED)
        raise UserError(f"{block}: must be {known}, 'bandmf-b<b>' with b >= 2 bands (b = 1 is dpsgd) or "
                        f"'uls-m<m>' with m >= 1 sequences per user, got {name!r}")
    return Mechanism(str(name), int(found.group(1)))


def state_copies(name: str) -> int:
    """Parameter-sized float32 arrays of a run's state beyond the parameters: Adam's two moments plus
    the mechanism's noise history (b − 1): memory O(b·M) (:mod:`dpscaling.workflow.cluster` sizes jobs with it)."""
    return 2 + mechanism_named(name).noise_history()
