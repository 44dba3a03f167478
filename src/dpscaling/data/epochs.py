"""The one-epoch guard (paper §3.2 and §3.3: the training loss stands in for the evaluation loss).

The paper reads the training loss as the evaluation loss because no sequence is seen twice: its largest
run, 128K steps of 1024 sequences, stays within one pass over BooksCorpus + Wikipedia. A config whose
steps × physical batch exceeds the training sequences breaks that argument silently, so it stops
before anything trains unless ``training.allow_repeats`` says repeats are intended; then every curve
records how many epochs it saw.
"""

from __future__ import annotations

from dpscaling.core.errors import UserError


def epochs_seen(steps: int, batch_size: int, n_train: int) -> float:
    """Passes over the training sequences that ``steps`` batches of ``batch_size`` make."""
    if n_train <= 0:
        raise UserError(f"data: the training split has {n_train} sequences; rebuild the data stage")
    return steps * batch_size / n_train


def check_one_epoch(steps: int, batch_size: int, n_train: int, allow_repeats: bool,
                    keys: tuple[str, str] = ("steps", "physical batch")) -> float:
    """Epochs seen; raises :class:`UserError` naming the numbers when above one and repeats are not allowed.

    ``keys`` name the config keys behind ``steps`` and ``batch_size`` in the message.
    """
    epochs = epochs_seen(steps, batch_size, n_train)
    if epochs > 1 and not allow_repeats:
        raise UserError(
            f"{keys[0]} x {keys[1]} = {steps:,} x {batch_size:,} = {steps * batch_size:,} sequences exceed the "
            f"{n_train:,} training sequences ({epochs:.3g} epochs). The paper's 'training loss = evaluation "
            "loss' reading needs at most one epoch: lower the steps or the batch, give the data stage more "
            "text (data.source / data.paths / data.max_documents), or set training.allow_repeats: true")
    return epochs
