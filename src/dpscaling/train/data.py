"""Which sequences form each physical batch.

Each step's batch is a slice of a seeded per-epoch permutation of the training rows
(shuffling without replacement, epoch after epoch), a pure function of (seed, step) so
a resumed run sees exactly the batches of an uninterrupted one.

Privacy accounting is post-hoc (paper §3.1, "Decoupling Noise Calibration"): the
curves are indexed by the noise-batch ratio σ̄, and the ε of a hypothetical
(B, N, T) is computed afterwards by the accountant. The accountant does not model
this shuffled sampling; like the paper, treat it as the physical-batch stand-in.
"""

from __future__ import annotations

import numpy as np

from dpscaling.core.errors import UserError
from dpscaling.core.streams import Stream



class BatchSampler:
    """Row indices of the physical batch of any step; batches never straddle epochs."""

    def __init__(self, n_rows: int, batch_size: int, seed: int, reshuffle: bool = True):
        if n_rows < batch_size:
            raise UserError(
                f"train.batch_size: {batch_size} exceeds the {n_rows} training sequences"
            )
        self.n_rows, self.batch_size, self.seed = n_rows, batch_size, seed
        self.reshuffle = reshuffle  # False: every epoch in the first epoch's order (the cyclic sampler)
        self.steps_per_epoch = n_rows // batch_size
        self._epoch, self._order = -1, np.empty(0, np.int64)

    def indices(self, step: int) -> np.ndarray:
        epoch, within = divmod(step, self.steps_per_epoch)
        epoch = epoch if self.reshuffle else 0
        if epoch != self._epoch:
            rng = np.random.default_rng([self.seed, Stream.DATA, epoch])
            self._epoch, self._order = epoch, rng.permutation(self.n_rows)
        start = within * self.batch_size
        return self._order[start : start + self.batch_size]
