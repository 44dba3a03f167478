"""The workflow's configuration: the schema (:mod:`.schema`), the validated config as typed blocks
(:mod:`.blocks`) and the checks a schema cannot express (:mod:`.checks`). JAX-free: the Snakefile
imports it."""
