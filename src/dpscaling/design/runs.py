"""The adaptive design's runs: the seed design, the candidates of a round, and what each costs.

Not in the paper, which trains every point of its grid to the full horizon (§3.2). A design run is a grid point
(model, σ̄, learning rate) of one seed trained to a horizon ``steps`` at most the grid's. Under the paper's
schedule (warm-up, then decay over ``training.decay_steps``, fixed for the study) a shorter horizon is exactly
the first steps of a longer one, so a run is extended by continuing it (:mod:`dpscaling.train.prefix`), and an
extension pays only its added steps. Every cost is :func:`dpscaling.law.queries.compute_cost`, the paper's
6·M·B·S·T, the one price of a run for every caller.

The seed design (stated, the cheap end first): the corners and centre of model × noisy σ̄ (the smallest and
largest model at the smallest and largest noisy σ̄, the middle model at the middle σ̄), σ̄ = 0 for each of those
three models, all at the shortest horizon; and the smallest model's three seed points again with each repeat
seed, which measures the seed-to-seed noise the law's bootstrap committee needs.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from dpscaling.law.queries import compute_cost

NEW, EXTEND, REPEAT = "new point", "longer horizon", "repeated seed"


@dataclass(frozen=True, order=True)
class DesignRun:
    """One trained (or to be trained) run: a grid point of one seed, to ``steps``."""

    model: str
    noise_batch_ratio: float
    learning_rate: float
    seed: int
    steps: int

    @property
    def point(self) -> tuple[str, float, float]:
        return self.model, self.noise_batch_ratio, self.learning_rate


@dataclass(frozen=True)
class Candidate:
    """A run a round may train: ``kind`` says why it is one; an extension ``continues`` a trained run."""

    run: DesignRun
    kind: str
    continues: DesignRun | None = None

    def flops(self, sizes: Mapping[str, float], batch: int, seq_len: int) -> float:
        """What training it costs: its steps, less those of the run it continues."""
        start = 0 if self.continues is None else self.continues.steps
        return float(compute_cost(sizes[self.run.model], batch, self.run.steps - start, seq_len))


def longest_runs(runs: Iterable[DesignRun]) -> dict[tuple, DesignRun]:
    """Per (point, seed), its run of the longest horizon: what was trained (a shorter one was its start)."""
    longest: dict[tuple, DesignRun] = {}
    for run in runs:
        key = (*run.point, run.seed)
        if key not in longest or run.steps > longest[key].steps:
            longest[key] = run
    return dict(sorted(longest.items()))


def design_flops(runs: Iterable[DesignRun], sizes: Mapping[str, float], batch: int, seq_len: int) -> float:
    """What a set of trained runs cost: per point and seed, its longest horizon (:func:`longest_runs`)."""
    return float(sum(compute_cost(sizes[run.model], batch, run.steps, seq_len) for run in longest_runs(runs).values()))


def horizons(shortest: int, longest: int) -> tuple[int, ...]:
    """The horizons a design trains to: ``shortest`` doubled up to, and ending at, ``longest``."""
    if not 1 <= shortest <= longest:
        raise ValueError(f"horizons need 1 <= shortest <= longest, got {shortest} and {longest}")
    steps = [shortest]
    while steps[-1] * 2 < longest:
        steps.append(steps[-1] * 2)
    return tuple(sorted({*steps, longest}))


def seed_design(models: Sequence[str], noise_batch_ratios: Sequence[float], rates: Mapping[str, float],
                seed: int, repeat_seeds: Sequence[int], steps: int) -> list[DesignRun]:
    """The seed design (module doc): ``models`` smallest first, ``rates`` each model's learning rate."""
    noisy = sorted(float(value) for value in noise_batch_ratios if float(value) > 0)
    if not models or not noisy:
        raise ValueError("the seed design needs at least one model and one noisy σ̄")
    small, middle, large = models[0], models[len(models) // 2], models[-1]
    points = {(m, s) for m in (small, large) for s in (noisy[0], noisy[-1])}
    points |= {(middle, noisy[len(noisy) // 2])} | {(m, 0.0) for m in (small, middle, large)}
    runs = [DesignRun(m, s, rates[m], seed, steps) for m, s in sorted(points)]
    repeated = [run for run in runs if run.model == small]
    runs += [replace(run, seed=extra) for extra in repeat_seeds for run in repeated]
    return sorted(runs)


def continued(run: DesignRun, ladder: Sequence[int]) -> DesignRun | None:
    """The run that ``run`` continues: the same point and seed one horizon of ``ladder`` shorter (every candidate
    past the shortest horizon extends that one); None at the shortest."""
    if run.steps not in ladder:
        raise ValueError(f"{run.steps} steps is not a horizon of the design {list(ladder)}")
    shorter = [steps for steps in ladder if steps < run.steps]
    return replace(run, steps=shorter[-1]) if shorter else None


def candidates(trained: Sequence[DesignRun], grid: Iterable[tuple[str, float, float]], seed: int,
               repeat_seeds: Sequence[int], ladder: Sequence[int]) -> list[Candidate]:
    """What a round may train next: every grid point not yet trained, at the shortest horizon of ``ladder``;
    each main-seed run extended to the next horizon; each main-seed point with a repeat seed it lacks, at the
    shortest horizon (so every run past it continues the run one horizon shorter: :func:`continued`). ``grid``: the full design's (model, σ̄, learning rate) points."""
    trained_set = set(trained)
    longest = longest_runs(trained)
    points = {run.point for run in trained}
    out = [Candidate(DesignRun(*point, seed, ladder[0]), NEW) for point in sorted(set(grid) - points)]
    for (model, nbr, rate, run_seed), run in longest.items():
        if run_seed != seed:
            continue
        longer = [steps for steps in ladder if steps > run.steps]
        if longer:
            out.append(Candidate(replace(run, steps=longer[0]), EXTEND, continues=run))
        lacking = [extra for extra in repeat_seeds if (model, nbr, rate, extra) not in longest]
        if lacking:
            repeat = replace(run, seed=lacking[0], steps=ladder[0])
            if repeat not in trained_set:
                out.append(Candidate(repeat, REPEAT))
    return out
