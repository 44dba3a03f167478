"""The laws of several noise mechanisms, and answers that choose the mechanism (not in the paper: its second
open question, "better underlying mechanisms"; docs/mechanisms.md).

Each mechanism of ``training.mechanisms`` has its own law L_m(M, T, σ̄), fitted on its own curves in the
same pipeline, and its own accounting table σ_m(ε, T, q) (:mod:`dpscaling.privacy.mechanisms`: σ̄ prices one
participation the same in every mechanism; b groups, ⌈T/b⌉ participations at rate b·q are in the table).
A budget (C, ε, N) is answered by every mechanism's law with its own σ_m, each runnable answer priced for
its mechanism (:mod:`dpscaling.accounting.pricing`), and the decision rule's lowest score wins
(:func:`choose_mechanism`, :mod:`dpscaling.law.decision`): :class:`LawAcrossMechanisms`, what
``dpscaling.load_law`` returns for a run's bundle of several mechanisms (each other mechanism's law, σ table,
replicates and calibration under the bundle's ``mechanisms/M/``: :mod:`dpscaling.law.bundle`), so
``dpscaling query --law <run>/law/bundle`` chooses among them.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dpscaling.core.errors import UserError
from dpscaling.law.decision import Scored, comparable_scores
from dpscaling.privacy.mechanisms import mechanism_named

if TYPE_CHECKING:
    from dpscaling.law.answers import Answer, ScalingLaw

@dataclass
class MechanismChoice:
    """The mechanism whose answer the decision rule scores best, and what every other mechanism's law
    answered (each runnable, priced by its own mechanism)."""

    mechanism: str
    answer: Answer
    answers: dict[str, Answer]
    without_answer: dict[str, str] = field(default_factory=dict)
    # The score each answer was compared by (dpscaling.law.decision.comparable_scores), and why one differs from
    # its own rule's.
    scores: dict[str, float] = field(default_factory=dict)
    score_notes: dict[str, str] = field(default_factory=dict)

    @property
    def point_choice(self) -> str:
        """The mechanism the lowest predicted loss alone would choose (the rule's choice is shown beside it)."""
        return min(self.answers, key=lambda name: self.answers[name].predicted_loss)

    def comparison(self) -> list[dict[str, Any]]:
        """One row per answered mechanism: its bands, runnable configuration, predicted loss and the rule's score."""
        rows = []
        for name, answer in self.answers.items():
            runnable = answer.runnable
            rows.append({"mechanism": name, "bands": mechanism_named(name).bands,
                         "privacy_unit": runnable.privacy_unit, "sequences_per_unit": runnable.sequences_per_unit,
                         "sampler": None if runnable.price is None else runnable.price.sampler,
                         "predicted_loss": answer.predicted_loss, "model_size": runnable.model_size,
                         "batch_size": runnable.batch_size, "iterations": runnable.iterations,
                         "noise_batch_ratio": runnable.noise_batch_ratio,
                         "calibrated_interval": (None if answer.calibrated_interval is None
                                                 else list(answer.calibrated_interval)),
                         "decision_score": self.scores.get(name, _score(answer)),
                         "decision_note": self.score_notes.get(name),
                         "flags": [flag.code for flag in answer.flags]})
        return rows

    def train_config(self) -> dict[str, Any]:
        """The chosen answer's ``private_model`` block, its budget naming the chosen mechanism (DP-SGD too: a
        run of several mechanisms trains the one named); {} where the answer has none."""
        block = self.answer.runnable.train_config()
        if block:
            block["private_model"]["budgets"][0]["mechanism"] = self.mechanism
        return block

    def to_json(self) -> dict[str, Any]:
        """The chosen answer's JSON with its mechanism and bands, and the comparison beside it."""
        return {**self.answer.to_json(), "mechanism": self.mechanism, "bands": mechanism_named(self.mechanism).bands,
                "mechanisms": self.comparison(), "mechanisms_without_answer": self.without_answer,
                "decision_notes": self.score_notes,
                "point_prediction_choice": self.point_choice}


def _score(answer: Answer) -> float:
    decision = answer.runnable.decision
    return float(answer.predicted_loss) if decision is None else decision.score


def scored(answer: Answer) -> Scored:
    """What a choice across laws reads of one law's answer (:func:`dpscaling.law.decision.comparable_scores`)."""
    decision, interval = answer.runnable.decision, answer.runnable.calibrated_interval
    return Scored(float(answer.predicted_loss), _score(answer), None if decision is None else decision.rule,
                  None if decision is None else decision.applied,
                  None if interval is None else (interval[1] - interval[0]) / 2)


def choose_mechanism(laws: Mapping[str, ScalingLaw], query: Callable[[ScalingLaw], Answer]) -> MechanismChoice:
    """``query`` asked of every mechanism's law; the lowest decision-rule score of the runnable answers wins,
    like with like (:func:`dpscaling.law.decision.comparable_scores`; ties: the earlier, i.e. the primary mechanism). A mechanism whose
    law refuses the budget is listed with its reason; if all refuse, the first refusal is raised."""
    answers: dict[str, Answer] = {}
    refused: dict[str, str] = {}
    first_error: UserError | None = None
    for name, law in laws.items():
        try:
            answers[name] = query(law)
        except UserError as error:
            refused[name] = str(error)
            first_error = first_error or error
    if not answers:
        assert first_error is not None
        raise first_error
    scores, notes = comparable_scores({name: scored(answer) for name, answer in answers.items()})
    best = min(answers, key=scores.__getitem__)
    return MechanismChoice(best, answers[best], answers, refused, scores, notes)


class LawAcrossMechanisms:
    """The laws of a run's mechanisms (its bundle's), answering as one: :meth:`query` asks every mechanism's
    law (or ``mechanism``'s) and chooses with the decision rule, exactly as ``dpscaling query`` does.
    ``dpscaling.load_law`` returns one for a bundle of several mechanisms."""

    def __init__(self, laws: Mapping[str, ScalingLaw], directory: str | os.PathLike[str] | None = None):
        self.laws = dict(laws)  # the primary mechanism first
        self.directory = None if directory is None else Path(directory)

    @property
    def mechanisms(self) -> list[str]:
        return list(self.laws)

    def law(self, mechanism: str) -> ScalingLaw:
        if mechanism not in self.laws:
            raise UserError(f"--mechanism: must be one of {list(self.laws)} (the mechanisms this run measured), "
                            f"got {mechanism!r}")
        return self.laws[mechanism]

    def query(self, compute: float, epsilon: float, users: float | None = None, tokens: float | None = None, *,
              mechanism: str | None = None, **options: Any) -> MechanismChoice:
        """:meth:`dpscaling.law.answers.ScalingLaw.query` of every mechanism's law (``mechanism``: that one's
        only), the decision rule choosing. A user-level mechanism's law answers only a budget in users; a
        budget per user (``examples_per_user``) is answered by every law that can price it: ULS against ELS."""
        laws = self.laws if mechanism is None else {mechanism: self.law(mechanism)}
        if mechanism is None and tokens is not None:  # a budget per sequence: the user-level laws cannot answer it
            laws = {name: law for name, law in laws.items() if mechanism_named(name).unit == "sequence"} or laws
        return choose_mechanism(laws, lambda law: law.query(compute, epsilon, users, tokens, **options))

    def info(self) -> dict[str, Any]:
        return {"mechanisms": {name: law.info() for name, law in self.laws.items()}}
