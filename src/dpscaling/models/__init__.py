"""BERT masked-language models (paper §3.2, Table 1)."""

from dpscaling.models.bert import BertMlm
from dpscaling.models.family import (
    FAMILY,
    PAPER_PARAMS,
    BertConfig,
    ParamCount,
    bert_config,
    count_params,
)

__all__ = [
    "FAMILY",
    "PAPER_PARAMS",
    "BertConfig",
    "BertMlm",
    "ParamCount",
    "bert_config",
    "count_params",
]
