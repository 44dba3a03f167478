"""Every random stream derived from a run's public seed, in one enum.

A stream is ``fold_in(PRNGKey(seed), id)`` (JAX) or ``default_rng([seed, id, ...])`` (NumPy). Two uses
that shared an id would draw the same numbers without anyone noticing (evaluation's masks once
risked colliding with training's), so every id lives here and :func:`enum.unique` refuses a repeat.
The values are fixed: they decide the curves of runs that exist.
"""

from __future__ import annotations

import enum


@enum.unique
class Stream(enum.IntEnum):
    INIT = 0  # parameter initialisation
    MASK = 1  # training's masked-LM masks (per step)
    NOISE = 2  # the study's noise (private runs draw theirs from a secret key instead)
    DATA = 3  # batch order (shuffled epochs; Poisson batches under the secret key)
    SUBSET = 4  # the training subset of train_sequences
    USER_EXAMPLES = 5  # which of a selected user's sequences a step trains on (under the secret key when private)
    USER_SUBSET = 6  # the training subset of train_users (keys of the users' own rows)
    USER_CAP = 7  # which k of a larger user's sequences the cap keeps (keys of the users' own rows)
    USER_HELDOUT = 8  # which users of a user column are held out (keys of their own ids)
    EVAL_SAMPLE = 10  # which held-out sequences an evaluation scores
    EVAL_MASK = 11  # an evaluation's masks
    AUDIT_CANARIES = 16  # which canaries an audit includes
