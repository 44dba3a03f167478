"""Closing the loop (beyond the paper): an answer trained as it stands with real DP. A budget's plan
(:mod:`.plans`), its training jobs with truncated Poisson sampling, matched accounting and secret noise
(:mod:`.jobs`), the ``private_model`` stage that trains, evaluates and reports it (:mod:`.model`), and the
``savings`` stage that measures the law's answer against the configurations people would otherwise pick
(:mod:`.savings_plan`, :mod:`.savings_report`)."""
