"""Measured savings and regret: the law's compute-optimal answers trained privately against the baselines a
practitioner would pick and against their own neighbours (paper §4.4, measured; docs/savings.md).

:mod:`dpscaling.savings.plan` plans and trains one budget's runs; :mod:`dpscaling.savings.report` reads what
they measured into the table, the savings and the regret.
"""
