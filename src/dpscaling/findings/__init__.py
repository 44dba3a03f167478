"""The paper's claims checked on the run's own law, each a table of verdicts: the paper's findings (:mod:`.paper`),
fine-tuning from public pretraining (:mod:`.finetune`), the mechanisms (:mod:`.mechanisms`) and user-level DP
(:mod:`.user_level`), the last three over one comparison of a configuration against its baseline
(:mod:`.comparison`: the "<measure> (<side>)" columns and the gain)."""
