"""Subcommands of the ``dpscaling`` CLI; each module exposes ``register(subparsers)``."""
