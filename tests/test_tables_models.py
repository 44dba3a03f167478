"""table:models shows embedding and non-embedding parameters as separate columns (docs/models.md)."""

from __future__ import annotations

import pandas as pd

from dpscaling.models.bert import count_params
from dpscaling.models.family import bert_config
from dpscaling.report.tables.models import models_table
from dpscaling.train.config import job_train_config

CUSTOM = {"Nano": {"layers": 1, "heads": 2, "hidden": 32}, "Micro": {"layers": 2, "heads": 2, "hidden": 64}}
TRAINING = {"microbatch_size": None, "steps": 10, "warmup_steps": 1, "decay_steps": 10, "decay_factor": 10.0,
            "clip_norm": 1.0, "clipping": "vmap", "mask_rate": 0.15, "log_every": 5, "checkpoint_every": 5}


def test_embedding_and_non_embedding_columns_add_up_to_the_measured_count(tmp_path):
    paths = []
    for name, spec in CUSTOM.items():
        point = {"model": name, "nbr": "0.0", "lr": "0.01", "batch": "4", "seed": "0"}
        counts = count_params(job_train_config(spec, TRAINING, point, seq_len=64).model_config(vocab_size=8192))
        path = tmp_path / f"{name}.parquet"
        pd.DataFrame({"model": [name] * 2, "n_params": [counts.total] * 2,
                      "n_params_non_embedding": [counts.non_embedding] * 2}).to_parquet(path)
        paths.append(path)
    table = models_table(paths, CUSTOM).set_index("Model")
    assert list(table.index) == ["Nano", "Micro"]  # smallest first
    for name, spec in CUSTOM.items():
        row = table.loc[name]
        # independent: the word table (8192 rows), 64 positions and one token type, × hidden
        assert row["Embedding Params"] == (8192 + 64 + 1) * spec["hidden"]
        assert row["Embedding Params"] + row["Non-embedding Params"] == row["Params"]
    assert bert_config("BertTiny").max_positions == 512  # the family keeps BERT's rows
