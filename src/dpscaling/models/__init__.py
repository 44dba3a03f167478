"""Model families: :mod:`dpscaling.models.family` (configurations and parameter counts, JAX-free) and
the Flax modules (:mod:`dpscaling.models.bert`). Import the modules themselves; this package
imports nothing, so checking a config never pulls in JAX."""
