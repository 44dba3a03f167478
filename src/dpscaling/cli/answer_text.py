"""How an answer of ``dpscaling query`` reads for a person (docs/query.md): what to train, what to expect, how
far to trust it; a mechanism choice with every mechanism's answer beside it; the config block that trains the
answer as YAML. The JSON form is the answer's own (:meth:`dpscaling.law.answer_types.Answer.to_json`)."""

from __future__ import annotations

import math
import textwrap
from typing import Any

import yaml

from dpscaling.law.answer_types import Answer
from dpscaling.law.decision import CHARGES
from dpscaling.law.mechanisms import MechanismChoice
from dpscaling.privacy.mechanisms import mechanism_named


def render_choice(choice: MechanismChoice) -> str:
    """The chosen mechanism's answer, then every mechanism's predicted loss at its own optimum."""
    decision = choice.answer.runnable.decision
    rule = decision.rule if decision is not None else "point"
    lines = [f"mechanism    {choice.mechanism} (b = {mechanism_named(choice.mechanism).bands}), the decision rule's "
             f"({rule}) choice of {len(choice.answers)} answered; the lowest predicted loss alone: "
             f"{choice.point_choice}", render_answer(choice.answer), "", "mechanisms compared:"]
    for row in choice.comparison():
        interval = row["calibrated_interval"]
        lines.append(f"  {row['mechanism']:<12} loss {row['predicted_loss']:.4g}"
                     + (f" [{interval[0]:.4g}, {interval[1]:.4g}]" if interval else "")
                     + f"  score {row['decision_score']:.4g}"
                     + f"  M {row['model_size']:,}  B {row['batch_size']}  T {row['iterations']}"
                     + f"  sigma-bar {row['noise_batch_ratio']:.3g}")
    for name, reason in choice.without_answer.items():
        lines.append(f"  {name:<12} no answer: {reason}")
    return "\n".join(lines)


def train_config_yaml(answer: Answer, block: dict[str, Any]) -> str:
    """The config ``block`` that trains ``answer`` (:meth:`~dpscaling.law.answer_types.Runnable.train_config`, or a
    mechanism choice's) as YAML, with a header saying what it trains."""
    runnable = answer.runnable
    header = (f"# Trains the answer of `dpscaling query` (compute {answer.query['compute']:g}, epsilon "
              f"{runnable.epsilon:g}, delta {runnable.delta:g}) with `snakemake private_model`: layer this file over\n"
              f"# the run's config (snakemake private_model --configfile <run config> this.yaml). B is a multiple of\n"
              f"# training.microbatch_size = {runnable.microbatch_size}; the private run trains on data_budget "
              "sequences of the run's corpus.\n")
    return header + yaml.safe_dump(block, sort_keys=False)


def _interval(pair) -> str:
    return "none" if pair is None else f"[{pair[0]:.4g}, {pair[1]:.4g}]"


def _data_budget(query: dict[str, Any]) -> str:
    """N as the query counted it; a budget per user priced by ELS also names the S sequences it sampled, and
    says where S was assumed (S = N, the conservative end: :func:`dpscaling.law.budget.held_sequences`)."""
    if query["privacy_unit"] == "sequence":
        return f"{query['tokens']:,.0f} tokens = {query['data_budget_units']:,.0f} sequences"
    if query.get("sequences") is None:
        return f"{query['data_budget_units']:,.0f} users"
    assumed = (" (assumed: one each, the conservative end; give --sequences for what they hold)"
               if query["sequences_assumed"] else "")
    return (f"{query['users']:,.0f} users of up to k = {query['examples_per_user']} sequences, ELS sampling the "
            f"{query['sequences']:,.0f} they hold{assumed}")


def _margin_lines(answer: Answer) -> list[str]:
    """The answer's predicted margin over each rule of thumb (:mod:`dpscaling.law.margins`)."""
    lines = []
    for index, margin in enumerate(answer.margins):
        head = "vs rules     " if index == 0 else " " * 13
        where = f"{margin.model or f'{margin.model_size:,} parameters'}, B = {margin.batch_size:,}, T = {margin.iterations:,}"
        if not math.isfinite(margin.margin):
            lines.append(f"{head}{margin.rule} ({where}): {margin.verdict}")
            continue
        interval = "" if margin.interval is None else f" [{margin.interval[0]:+.3g}, {margin.interval[1]:+.3g}]"
        lines.append(f"{head}{margin.rule} ({where}): predicted {margin.predicted_loss:.4g}, margin "
                     f"{margin.margin:+.3g}{interval}: {margin.verdict}")
    return lines


def render_answer(answer: Answer) -> str:
    """The answer for a person: what to train, what to expect, how far to trust it."""
    query, runnable, optimum = answer.query, answer.runnable, answer.optimum
    budget = _data_budget(query)
    shape = runnable.model
    model = (f"{shape.name}: {shape.family}, {shape.layers} layers, {shape.heads} heads, hidden {shape.hidden}"
             if shape is not None else runnable.model_note)
    batches = runnable.batch_size // runnable.microbatch_size
    lines = [
        f"query        compute {query['compute']:.3g} FLOPs, ε = {query['epsilon']:g}, δ = {query['delta']:g}, "
        f"N = {budget}, S = {runnable.seq_len}",
        f"model        {runnable.model_size:,} parameters ({model})",
        *([f"start        fine-tuned from the pretrained checkpoint {runnable.init_checkpoint} (public "
           + (f"pretraining: {query['pretraining_compute']:.4g} of the {query['compute']:.3g} FLOPs, "
              f"{query['finetuning_compute']:.4g} left to fine-tune)" if "pretraining_compute" in query
              else "pretraining; its compute is not in this answer's)")] if runnable.init_checkpoint else []),
        f"batch        B = {runnable.batch_size:,} sequences ({batches:,} microbatches of {runnable.microbatch_size})",
        f"steps        T = {runnable.iterations:,}   (compute {runnable.compute:.4g} FLOPs, "
        f"{runnable.tokens / runnable.model_size:.3g} tokens per parameter)",
        f"learning     rate {runnable.learning_rate:g}" if runnable.learning_rate is not None
        else "learning     rate: none measured for this model",
        f"noise        σ = {runnable.sigma:.5g} on the summed clipped gradients ({runnable.sampling} batches, "
        f"{runnable.mechanism}), σ̄ = σ/B = {runnable.noise_batch_ratio:.4g}" if runnable.priced else
        f"noise        none priced: the accountant refused this configuration; the σ table interpolates σ = "
        f"{runnable.sigma:.5g} (σ̄ {runnable.noise_batch_ratio:.4g}), which no run can train with",
        *([f"             {runnable.price.truncation}"] if runnable.price is not None and runnable.price.truncation
          else []),
        *([f"privacy      sampler {runnable.price.sampler}, {runnable.price.adjacency} adjacency, "
           + _event_line(runnable.price.event.to_json())] if runnable.price is not None else []),
        f"loss         {runnable.predicted_loss:.4g}   seed-only 90% {_interval(runnable.seed_only_interval)}   "
        f"calibrated 90% {_interval(runnable.calibrated_interval)}" if math.isfinite(runnable.predicted_loss)
        else f"loss         none: {runnable.model_note}",
        f"             {answer.loss_units}",
    ]
    if runnable.calibrated_interval is None and math.isfinite(runnable.predicted_loss):
        lines.append(f"             calibrated interval: {answer.calibration_note}")
    if runnable.decision is not None:
        decision = runnable.decision
        lines.append(f"chosen by    {decision.applied}: score {decision.score:.4g}"
                     + (f" = predicted {decision.predicted_loss:.4g} + {CHARGES[decision.applied]} "
                        f"{decision.charge:.3g}" if decision.charge is not None else "")
                     + ("" if decision.applied == decision.rule else
                        f" ({decision.rule} asked; this law's calibration cannot price it)"))
    if answer.flags:
        lines += [f"flag         {flag.code}: {flag.message}" for flag in answer.flags]
    else:
        lines.append("flags        none: inside the measured and validated ranges")
    lines += _margin_lines(answer)
    lines.append(f"law optimum  M = {optimum.model_size:,.0f}, B = {optimum.batch_size:,.4g}, "
                 f"T = {optimum.iterations:,.1f}, "
                 f"predicted {optimum.predicted_loss:.4g}; {answer.near_optimal_count} configurations within "
                 f"{query['tolerance']:.0%} ({answer.candidates} candidates)")
    if answer.saturation is not None:
        best = answer.saturation["answer"]
        lines.append(f"saturation   at {answer.saturation['compute']:.3g} FLOPs: M = {best['model_size']:,.0f}, "
                     f"B = {best['batch_size']:,.4g}, T = {best['iterations']:,.1f}, "
                     f"predicted {best['predicted_loss']:.4g}")
    if answer.per_length is not None:
        lines.append("lengths      " + ", ".join(f"S={row['seq_len']}: {row['predicted_loss']:.4g}"
                                               for row in answer.per_length))
    if answer.inference is not None:
        choice = answer.inference.choice
        lines.append(f"inference    with {answer.inference.inference_tokens:.3g} tokens served: M = "
                     f"{float(choice['Model Size']):,.0f}, T = {float(choice['Iterations']):,.1f}, total FLOPs "
                     f"{float(choice['Total FLOPs']):.4g}")
    lines.append(f"accounting   {answer.accounting}; exact σ: {runnable.accountant}")
    lines.append(textwrap.fill(answer.epsilon_covers["statement"], width=118, initial_indent="ε covers     ",
                               subsequent_indent=" " * 13))
    lines.append(f"interval     {answer.interval_note}")
    block = runnable.train_config()
    if block:
        lines.append("train with   snakemake private_model, this block layered over the run's config "
                     "(--train-config FILE writes it):")
        lines += ["  " + line for line in yaml.safe_dump(block, sort_keys=False).splitlines()]
    return "\n".join(lines)


def _event_line(event: dict[str, Any]) -> str:
    """An accounting event in one line."""
    if "sampling_probability" in event:
        return (f"{event['compositions']:,} Poisson-subsampled Gaussian steps at q = {event['sampling_probability']:.4g} "
                f"of {event['population']:,} examples")
    return (f"one Gaussian of sensitivity {event['sensitivity']:.4g} ({event['participations']} participations, "
            f"{event['min_separation']} steps apart)")
