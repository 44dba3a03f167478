"""What a private run's ε covers, and what it does not (docs/private-training.md, "What ε covers").

A private run's (ε, δ) bounds what its own noisy steps reveal of its training data: the clipped, noised
gradients its accountant priced, over its N private sequences (or users). A choice made from data before
those steps is outside that bound. A choice fitted on public data costs no privacy; one fitted on the private
domain (where the privacy unit lives: ``data.sources``, the run's corpus) without noise is not covered at all
(tuning on private data leaks through the choice: Papernot & Steinke 2022, "Hyperparameter Tuning with Renyi
Differential Privacy"). The choices a run fits on data, and where (:func:`fitted_choices`):

* ``vocabulary`` (``data.tokenizer``): trained on the public domain's train split where ``data.public_sources``
  names one, else on the private one's; a vendored vocabulary on what it was built from (BERT's on BERT's own
  pretraining text; ``wordpiece-core-8192`` on the whole vendored corpus, so on any private domain of it).
* ``output_bias`` (``training.output_bias``): zeros (no data) or the public domain's unigram.
* ``learning_rate``: the learning-rate protocol's clipped, noise-free runs (``learning_rate_protocol.domain``:
  the private domain, the paper's protocol, or the public one), then, where the grid trains several rates at a
  noisy point, the lowest of them on the law's grid; or the config's one rate.
* ``configuration`` (model, batch, steps, σ̄, and the mechanism where one is chosen): the law, fitted on the
  grid's runs on the private domain, σ̄ = 0 among them. Always the private domain: that is the method.

The vocabulary and the output bias are the model's inputs and start: a config whose private runs
(``private_model`` and ``savings`` budgets, budgets per user among them) rest on either fitted on the private
domain is refused (:func:`check_private_runs`). The learning rate and the configuration are the method's
choices: every private answer and run record states them (:func:`epsilon_scope`, one record and one line,
from the config or from a law bundle's provenance, :func:`choices_of_provenance`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from dpscaling.config.training_blocks import PRIVATE_DOMAIN as PRIVATE, PUBLIC_DOMAIN as PUBLIC
from dpscaling.core.errors import UserError

# Where a choice was fitted: the private or the public domain, on no data, or on data the run cannot vouch for.
NO_DATA, UNKNOWN = "no data", "unknown"
DOMAINS = (PRIVATE, PUBLIC, NO_DATA, UNKNOWN)
# The data-dependent choices of a run, in the order every record states them.
CHOICES = ("vocabulary", "output_bias", "learning_rate", "configuration")
# The choices a config whose private runs claim (ε, δ) may not fit on the private domain.
REFUSED = ("vocabulary", "output_bias")
COVERS = ("the private run's own noisy steps (its clipped, noised gradients of its training data, as its "
          "accountant priced them)")
# The vendored vocabularies (resources/vocab/, resources/NOTICE.md) and what each was built from: None where
# that is text outside the vendored corpus, else the corpus's sources it saw (all of them: "*").
VENDORED_VOCABULARY_SOURCES: dict[str, str | None] = {"bert-base-uncased": None, "wordpiece-core-8192": "*"}


@dataclass(frozen=True)
class FittedChoice:
    """One choice fitted on data: the config key that makes it, the domain it was fitted on (:data:`DOMAINS`)
    and how, in words."""

    key: str
    domain: str
    how: str

    def to_json(self) -> dict[str, str]:
        return asdict(self)


def fitted_choices(config: Any) -> dict[str, FittedChoice]:
    """Every data-dependent choice of the run ``config`` (a validated mapping or a RunConfig) and where it is
    fitted: ``vocabulary``, ``output_bias``, ``learning_rate``, ``configuration`` (the module docstring)."""
    from dpscaling.config.blocks import typed

    run = typed(config)
    return {"vocabulary": _vocabulary(run), "output_bias": _output_bias(run), "learning_rate": _learning_rate(run),
            "configuration": _configuration(run)}


def _public(run) -> str:
    return f"data.public_sources {list(run.data.public_sources or ())}"


def _vocabulary(run) -> FittedChoice:
    data = run.data
    if run.results_csv:
        return FittedChoice("results_csv", UNKNOWN, "the authors' runs' vocabulary (results_csv)")
    if data.tokenizer == "train":
        if data.public_sources:
            return FittedChoice("data.tokenizer", PUBLIC, f"trained on the public domain, {_public(run)}")
        return FittedChoice("data.tokenizer", PRIVATE, "trained on the private domain's train split (data.tokenizer: "
                            "train without data.public_sources)")
    if data.tokenizer == "custom":
        return FittedChoice("data.vocab_file", UNKNOWN, f"the file {data.vocab_file}, whose text this run cannot "
                            "vouch for")
    built_from = VENDORED_VOCABULARY_SOURCES[data.tokenizer]
    if built_from is not None and data.source == "core":
        return FittedChoice("data.tokenizer", PRIVATE, f"the vendored {data.tokenizer}, built from the whole vendored "
                            "corpus, the private domain's text included")
    return FittedChoice("data.tokenizer", PUBLIC, f"the vendored {data.tokenizer}, built from text outside this "
                        "run's data")


def _output_bias(run) -> FittedChoice:
    from dpscaling.data.public_unigram import PUBLIC_UNIGRAM

    if run.training.output_bias == PUBLIC_UNIGRAM:
        return FittedChoice("training.output_bias", PUBLIC, f"the public domain's unigram, {_public(run)}")
    return FittedChoice("training.output_bias", NO_DATA, f"{run.training.output_bias}, no data")


def _learning_rate(run) -> FittedChoice:
    training = run.training
    if training.tuned:
        protocol = run.learning_rate_protocol
        compared = 1 + protocol.rates_below + protocol.rates_above
        domain = protocol.domain
        where = _public(run) if domain == PUBLIC else "the private domain"
        how = (f"chosen by the learning-rate protocol's clipped, noise-free runs on {where} "
               f"(learning_rate_protocol.domain: {domain})")
    else:
        compared = len(training.learning_rates)
        domain, how = NO_DATA, "given in the config (training.learning_rates)"
    if compared > 1:
        # the answer's rate is the lowest-loss one of the grid's at its σ̄: a comparison of private runs
        domain = PRIVATE
        how = (f"{how}, then as the lowest-loss of the grid's rates at the answer's σ̄" if training.tuned
               else "chosen as the lowest-loss of the grid's training.learning_rates at the answer's σ̄")
    return FittedChoice("learning_rate_protocol.domain" if training.tuned else "training.learning_rates", domain, how)


def _configuration(run) -> FittedChoice:
    if run.results_csv:
        return FittedChoice("results_csv", PRIVATE, "chosen by the law fitted on the authors' runs on their own data "
                            "(results_csv)")
    return FittedChoice("training", PRIVATE, "chosen by the law fitted on the grid's runs on the private domain, "
                        "σ̄ = 0 among them: model, batch, steps, σ̄ and, where one is chosen, the mechanism")


def check_private_runs(config: Any) -> None:
    """Refuse, naming the key and the fix, a config whose private runs claim (ε, δ) (``private_model`` or
    ``savings`` budgets) while their vocabulary or output bias is fitted on the private domain; and
    ``learning_rate_protocol.domain: public`` without a public domain."""
    from dpscaling.config.blocks import typed

    run = typed(config)
    if run.learning_rate_protocol.domain == PUBLIC and not run.data.public_sources:
        raise UserError("learning_rate_protocol.domain: 'public' trains the protocol's runs on the public domain; "
                        "name it in data.public_sources (sources of the vendored corpus, none of them in "
                        "data.sources), or set the domain to 'private' (the paper's protocol)")
    claims = [f"{block.NAME}.budgets" for block in (run.private_model, run.savings) if block.budgets]
    if not claims:
        return
    choices = fitted_choices(run)
    for name in REFUSED:
        choice = choices[name]
        if choice.domain == PRIVATE:
            raise UserError(f"{choice.key}: the {name} is {choice.how}, and {' and '.join(claims)} claim (ε, δ) for "
                            f"private runs that rest on it: ε does not cover it. {_FIXES[name]}")


_FIXES = {
    "vocabulary": ("Train it on a public domain: data.tokenizer: train with data.public_sources: [wikipedia_sample] "
                   "and data.sources naming the private sources (config/config.yaml); or set data.tokenizer: "
                   "bert-base-uncased (built from text outside the vendored corpus)"),
    "output_bias": "Set training.output_bias: zeros, or public_unigram with data.public_sources",
}


def choices_of_provenance(provenance: Mapping[str, Any]) -> dict[str, FittedChoice]:
    """The choices a law bundle's provenance records (``fitted_on``, written from the run's config by the
    workflow); a bundle without the record: unknown, but for the configuration, which is the law's own."""
    recorded = provenance.get("fitted_on") or {}
    if recorded:  # in the order of CHOICES (a bundle's JSON sorts its keys)
        return {name: FittedChoice(**recorded[name]) for name in sorted(recorded, key=_order)}
    unknown = {name: FittedChoice("fitted_on", UNKNOWN, "not recorded in the law's bundle")
               for name in ("vocabulary", "output_bias", "learning_rate")}
    return {**unknown, "configuration": FittedChoice("fitted_on", PRIVATE, "the law, fitted on its grid's runs on its "
                                                     "own data without noise")}


def _order(name: str) -> int:
    return CHOICES.index(name) if name in CHOICES else len(CHOICES)


def epsilon_scope(choices: Mapping[str, FittedChoice], learning_rate_given: bool = False) -> dict[str, Any]:
    """What ε covers, as every private answer and run record states it: ``covers``, each choice and where it
    was fitted (``chosen_on``), the ones ε does not cover (``not_covered``: fitted on the private domain) or
    cannot vouch for (``unknown``), and the whole in one line (``statement``). ``learning_rate_given``: this
    run's learning rate was given (a budget's or its configuration's), not chosen on data."""
    choices = dict(choices)
    if learning_rate_given:
        choices["learning_rate"] = FittedChoice("learning_rate", NO_DATA, "given for this run")
    not_covered = [name for name, choice in choices.items() if choice.domain == PRIVATE]
    unknown = [name for name, choice in choices.items() if choice.domain == UNKNOWN]
    public = [name for name, choice in choices.items() if choice.domain == PUBLIC]
    statement = " ".join([f"ε covers only {COVERS}, not the choices made before them.", *(
        f"{heading}: " + ", ".join(f"the {name.replace('_', ' ')} ({choices[name].how})" for name in names) + "."
        for heading, names in (("Fitted on the private domain without noise, so not covered", not_covered),
                               ("Fitted on public data, at no privacy cost", public),
                               ("Fitted on data this run cannot vouch for", unknown)) if names)])
    return {"covers": COVERS, "chosen_on": {name: choice.to_json() for name, choice in choices.items()},
            "not_covered": not_covered, "unknown": unknown, "statement": statement}


# The standalone audit (target audit) trains no model on data: the ε it audits is its step's alone.
AUDIT_COVERS = ("the audited training step alone: gradient canaries, no model and no data-dependent choice; a "
                "private run's ε covers its own noisy steps, not the choices made before them")
AUDIT_SCOPE = {"covers": AUDIT_COVERS, "chosen_on": {}, "not_covered": [], "unknown": [],
               "statement": f"ε covers {AUDIT_COVERS}."}


def caption_note(statements: Iterable[Any]) -> str:
    """The statements of a report's runs for its caption: each distinct one once ("" when none)."""
    distinct = list(dict.fromkeys(str(s) for s in statements if isinstance(s, str) and s))
    return "".join(f" {statement}" for statement in distinct)
