"""How an adaptive design runs (not in the paper): its horizons, rounds, cap, stopping width and committee."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DesignSettings:
    """How a simulated (or trained) adaptive design runs; see :mod:`dpscaling.design.runs` for the seed design."""

    seed_steps: int
    horizon: int
    runs_per_round: int
    max_rounds: int
    compute_cap: float  # FLOPs
    stop_width: float  # nats: the widest 90% committee band at a target that lets the design stop
    replicates: int
    batch: int
    seq_len: int
    seed: int = 0
    repeat_seeds: tuple[int, ...] = (1, 2)
    coverage: bool = False  # every grid point's loss at three horizons is a target beside the answers
    fill_forms: bool = False  # the model forms include the fills' alternatives (FILL_FORMS)
    model_forms: bool = True  # the committee also holds the law under other extrapolation choices (MODEL_FORMS)
    jackknife: bool = False  # the committee also holds the laws refitted with one trained point left out each
    contenders: int = 0  # per target, how many rival answers' loss gaps to the consensus are targets too
    spent_before: float = 0.0  # FLOPs the design spent before its runs: the learning-rate protocol's, counted once
