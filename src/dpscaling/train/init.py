"""Starting a run from something other than its random initialisation: a pretrained checkpoint of this project
(the first step towards DP fine-tuning, the paper's first open question, §6, "how do the scaling laws change
when doing finetuning instead of pretraining"; docs/train.md, "Starting from a pretrained checkpoint"), or an
output bias at the public domain's unigram (:func:`with_output_bias`; not in the paper).

``train.init_checkpoint`` names a training job's checkpoint directory (its ``config.json`` and ``state/``).
Its latest checkpoint is restored only after its arrays are proven to be the ones saved
(:func:`dpscaling.train.evaluate.restore_params`), and only its parameters are taken: the optimiser starts
fresh (Adam's moments at zero, step 0), as a fine-tuning run does. A checkpoint of another family or of
another shape, or one trained on another vocabulary (its ``vocabulary.json`` against the run's data), is
refused before anything trains, naming both.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jax

from dpscaling.core.errors import UserError
from dpscaling.models.family import Family
from dpscaling.models.stacking import in_layout, unrolled_twin
from dpscaling.train.config import TrainConfig


def with_output_bias(params: Any, family: Family, bias: Any) -> Any:
    """``params`` with ``family``'s output bias (:attr:`Family.output_bias`) replaced by ``bias``, of its shape."""
    if family.output_bias is None:
        raise UserError(f"training.output_bias: the {family.name} family has no output bias to start")
    *parents, leaf = family.output_bias
    tree = dict(params)
    node = tree
    for key in parents:  # copy the path down to the bias, leaving the rest of the tree shared
        node[key] = dict(node[key])
        node = node[key]
    if tuple(node[leaf].shape) != tuple(bias.shape):
        raise UserError(f"training.output_bias: the start has {bias.shape[0]} entries, the model's bias "
                        f"{node[leaf].shape[0]} (another vocabulary)")
    node[leaf] = jax.numpy.asarray(bias, dtype=node[leaf].dtype)
    return tree


def pretrained_params(checkpoint_dir: str | Path, config: TrainConfig, model, objective, vocab_size: int,
                      seq_len: int, vocab_sha256: str | None = None) -> tuple[Any, int]:
    """(parameters, step) of the checkpoint in ``checkpoint_dir``, checked to fit ``config``'s model
    (``model``, built at ``vocab_size``): the same vocabulary (``vocab_sha256``, the run's data's; one of the
    same size but other tokens would start it on scrambled embeddings), family, parameter tree and shapes."""
    from dpscaling.train.checkpoint import VOCABULARY_FILE, recorded_vocabulary
    from dpscaling.train.evaluate import load_run_config, restore_params

    if vocab_sha256 is not None:
        recorded = recorded_vocabulary(checkpoint_dir)
        found = None if recorded is None else recorded.get("vocab_sha256")
        if found != vocab_sha256:
            held = (f"records no vocabulary ({VOCABULARY_FILE}: written before checkpoints recorded theirs; "
                    "retrain it)" if found is None else f"was trained on the vocabulary sha256 {found}")
            raise UserError(f"train.init_checkpoint: {checkpoint_dir} {held}, but this run's data uses the "
                            f"vocabulary sha256 {vocab_sha256}: its embeddings would start on other tokens")
    source = load_run_config(checkpoint_dir)
    where = f"train.init_checkpoint: {checkpoint_dir} holds {_described(source, vocab_size)}"
    wanted = f"this run trains {_described(config, vocab_size)}"
    if source.family != config.family:
        raise UserError(f"{where}, but {wanted}: a checkpoint of another family cannot start it")
    source_model = source.model_family.module_class()(source.model_config(vocab_size))
    # compared unrolled: a checkpoint of either layer layout starts either (dpscaling.models.stacking)
    expected, found = (_shapes(jax.eval_shape(lambda m=m: unrolled_twin(m).init(
        jax.random.PRNGKey(0), *objective.init_inputs(seq_len)))) for m in (model, source_model))
    if found != expected:
        raise UserError(f"{where}, but {wanted}: the parameters differ ({_first_difference(found, expected)})")
    params, step = restore_params(checkpoint_dir, source_model, objective, source, seq_len)
    return in_layout(params, model), step


def _described(config: TrainConfig, vocab_size: int) -> str:
    """A model as a message names it: its name, family and size."""
    count = config.model_config(vocab_size).param_count().total
    return f"{config.display_name} ({config.family}, {count:,} parameters)"


def _shapes(variables: Any) -> dict[str, tuple[int, ...]]:
    """Each parameter's path and shape."""
    leaves = jax.tree_util.tree_leaves_with_path(variables["params"])
    return {jax.tree_util.keystr(path): tuple(leaf.shape) for path, leaf in leaves}


def _first_difference(found: dict[str, tuple[int, ...]], expected: dict[str, tuple[int, ...]]) -> str:
    """The first parameter that is missing, extra or of another shape, in path order."""
    for name in sorted(set(found) | set(expected)):
        if found.get(name) != expected.get(name):
            return f"{name}: checkpoint {found.get(name, 'absent')}, this run {expected.get(name, 'absent')}"
    return "none"
