"""The data stage: real text -> documents -> WordPiece tokens -> fixed-length sequences.

One packed sequence is one privacy unit ("user", paper §2: each individual
contributes a single sequence of S tokens).
"""

from dpscaling.core.errors import UserError

SPLITS = ("train", "heldout")


def check_split(split: str) -> None:
    """A split's name, refused naming the accepted ones (imported by the training path: no pandas here)."""
    if split not in SPLITS:
        raise UserError(f"split: {split!r} is not one of {list(SPLITS)}")
