"""Where the output bias starts: zero (the paper's BERT), or the public domain's unigram (not in the paper;
docs/train.md, "Where the output bias starts").

A masked LM whose output bias starts at zero first spends its early steps learning how often each token
occurs, and at CPU scale that costs the small models 0.12–0.13 nats at 400 steps (docs/design-study.md, "The
non-private plateau"). ``training.output_bias: public_unigram`` starts the bias at the centred add-one
log-frequencies of the *public* domain's train split (``data.public_sources``), under the run's vocabulary:

    b(v) = log(count_public(v) + 1) − mean_u log(count_public(u) + 1)

counted over the family's targets (:data:`dpscaling.data.floor.TARGETS`); ids that are never a target keep
the pseudo-count only. It is a statistic of public data, so it spends no privacy budget: the private run's
guarantee is that of its own steps, as with a public tokenizer. The pack step writes it beside each length's
private shards (:data:`FILE`), so every training job that reads those shards finds it.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from dpscaling.data.floor import add_one_log_counts, never_target_mask, objective_targets
from dpscaling.data.shards import DatasetMeta, load_meta, load_split
from dpscaling.core.errors import UserError
from dpscaling.core.io import write_json_atomic
from dpscaling.workflow.layout import PUBLIC_UNIGRAM_FILE as FILE

ZEROS, PUBLIC_UNIGRAM = "zeros", "public_unigram"
OUTPUT_BIAS_STARTS = (ZEROS, PUBLIC_UNIGRAM)


@dataclass(frozen=True)
class PublicUnigram:
    """The centred log-frequencies of the public train split's targets and what they were counted from."""

    vocab_size: int
    vocab_sha256: str  # the vocabulary the ids belong to (the private shards' must match)
    sources: tuple[str, ...]  # the public domain's sources
    objective: str  # whose targets were counted
    tokens: int  # counted public tokens
    log_frequencies: tuple[float, ...]  # b(v), mean zero over the vocabulary
    smoothing: str = "add-one"

    def to_dict(self) -> dict:
        return {**asdict(self), "sources": list(self.sources), "log_frequencies": list(self.log_frequencies)}


def count_public_unigram(public_dir: str | Path, objective: str) -> PublicUnigram:
    """The public packed train split's :class:`PublicUnigram` under ``objective``'s targets."""
    targets, never = objective_targets(objective)
    meta = load_meta(public_dir)
    ids = targets(load_split(public_dir, "train"), meta)
    ids = ids[~never_target_mask(meta.vocab_size, never(meta))[ids]]
    log_counts = add_one_log_counts(ids, meta.vocab_size)
    centred = log_counts - log_counts.mean()
    sources = tuple((meta.source or {}).get("sources") or ())
    return PublicUnigram(meta.vocab_size, meta.vocab_sha256, sources, objective, int(ids.size),
                         tuple(float(x) for x in centred))


def check_output_bias_start(start: str, family, key: str) -> None:
    """Refuse, naming ``key``, an output-bias start that is unknown or that ``family`` (a
    :class:`dpscaling.models.family.Family`) has no output bias for."""
    if start not in OUTPUT_BIAS_STARTS:
        raise UserError(f"{key}: {start!r} is not one of {list(OUTPUT_BIAS_STARTS)}")
    if start != ZEROS and family.output_bias is None:
        raise UserError(f"{key}: {start!r} starts the output bias, which the {family.name} family does not have; "
                        f"set it to {ZEROS!r}")


def write_public_unigram(public_dir: str | Path, data_dir: str | Path, objective: str) -> PublicUnigram:
    """Count the public domain in ``public_dir`` and write it beside the private shards in ``data_dir``
    (atomically). Refused where the two were packed with different vocabularies."""
    unigram = count_public_unigram(public_dir, objective)
    private = load_meta(data_dir)
    _check_vocabulary(unigram, private, Path(data_dir) / FILE)
    write_json_atomic(Path(data_dir) / FILE, unigram.to_dict())
    return unigram


def load_public_unigram(data_dir: str | Path, meta: DatasetMeta | None = None) -> np.ndarray:
    """The output bias's start (float32, one entry per vocabulary id) written beside ``data_dir``'s shards,
    checked to be of the shards' vocabulary."""
    path = Path(data_dir) / FILE
    if not path.is_file():
        raise UserError(f"training.output_bias: {PUBLIC_UNIGRAM} needs {str(path)!r}, which the data stage writes "
                        "when data.public_sources names a public domain; name one, or set training.output_bias: "
                        f"{ZEROS}")
    values = json.loads(path.read_text(encoding="utf-8"))
    unigram = PublicUnigram(**{**values, "sources": tuple(values["sources"]),
                               "log_frequencies": tuple(values["log_frequencies"])})
    _check_vocabulary(unigram, meta or load_meta(data_dir), path)
    return np.asarray(unigram.log_frequencies, dtype=np.float32)


def _check_vocabulary(unigram: PublicUnigram, meta: DatasetMeta, path: Path) -> None:
    if (unigram.vocab_sha256, unigram.vocab_size) != (meta.vocab_sha256, meta.vocab_size):
        raise UserError(f"training.output_bias: {str(path)!r} was counted under the vocabulary sha256 "
                        f"{unigram.vocab_sha256} ({unigram.vocab_size} entries), but the private shards use "
                        f"{meta.vocab_sha256} ({meta.vocab_size}); rerun the data stage")
