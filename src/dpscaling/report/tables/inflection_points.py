"""table:inflection_points — saturating compute budgets and their optimal configurations (paper Table 2).

For each (data budget, privacy budget): the smallest compute budget whose best
loss is within 1% of the best over all budgets, with the compute-optimal
configuration there (:func:`dpscaling.law.queries.saturating_table`).
"""

from __future__ import annotations

import pandas as pd

from dpscaling.report.figures.context import AnalysisContext
from dpscaling.law.queries import saturating_table

LABEL = "table:inflection_points"
CAPTION = ("Saturating compute budgets, and the optimal training configurations at those budgets, across data "
           "and privacy budgets.")


def inflection_points_table(context: AnalysisContext) -> pd.DataFrame:
    law, settings = context.law, context.settings
    return saturating_table(context.compute_budgets(), settings.privacy_budgets, settings.table_data_budgets,
                            law.loss, context.sigma, law.seq_len, context.model_sizes, context.iteration_bounds)
