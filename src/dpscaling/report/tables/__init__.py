"""The paper's tables (docs/figures.md): each written as CSV, Markdown and LaTeX by :func:`write.write_table`.

- ``table:models`` (:mod:`.models`) and ``tab:throughput`` (:mod:`.throughput`) from the training curves;
- ``table:inflection_points`` (:mod:`.inflection_points`) from the fitted law and the accounting;
- ``tab:physical-batch-size-sweep-loss-entire-train-set`` (:mod:`.physical_batch`) from the physical-batch
  ablation's evaluated final models (target ``ablation_batch``).
"""
