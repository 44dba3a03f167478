"""Column names of the law's tidy tables (the authors' ``results.csv`` names, so imports need no renaming).

Also the BERT model-size table (paper Table "Models used in this study"; the
authors' analysis code uses the same numbers, plus BertMega).
"""

from __future__ import annotations

MODEL = "Model"
MODEL_SIZE = "Model Size"
LEARNING_RATE = "Learning Rate"
ITERATIONS = "Iterations"
NOISE_BATCH_RATIO = "Noise Batch Ratio"
CROSS_ENTROPY = "Cross Entropy"
STATUS = "Status"
SEED = "Seed"
FAMILY = "Family"  # the model family a curve was trained with (dpscaling.models.family); a law fits one
# Where a grid value came from: measured (smoothed), extrapolated, or filled across σ̄.
SOURCE = "Source"

BATCH_SIZE = "Batch Size"
PRIVACY_BUDGET = "Privacy Budget"
DATA_BUDGET = "Data Budget"
COMPUTE = "Compute"
SIGMA = "Sigma"
TOKENS = "Tokens"
TOKENS_PER_PARAMETER = "Token / Model Ratio"
REASON = "Reason"

# Paper Table "Models used in this study" = the authors' code's _MODEL_SIZES.
BERT_MODEL_SIZES: dict[str, float] = {
    "BertTiny": 4.5e6,
    "BertMini": 11.4e6,
    "BertSmall": 29e6,
    "BertMedium": 41e6,
    "BertBase": 109e6,
    "BertLarge": 335e6,
    "BertMega": 778e6,
}
# Ends of the candidate model-size grid that reproduce the paper's Table 2
# exactly (docs/fit.md, "The authors' analysis code", step 8): BertTiny enters as 4.52e6, not 4.5e6.
TABLE2_MODEL_SIZE_RANGE: tuple[float, float] = (4.52e6, 335e6)
# The paper's sequence length S (C = 6·M·B·S·T).
PAPER_SEQUENCE_LENGTH = 512
PAPER_PHYSICAL_BATCH = 1024
