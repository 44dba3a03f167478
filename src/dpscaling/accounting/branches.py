"""The sampling branches a calibrated σ comes from (paper §3.4 and appendix "Notes on Generalized
DP-SGD"): Poisson sampling's PLD, deterministic batches' Gaussian, and the paper's min rule over the two.
Names only, so code that labels a branch need not import the accountants."""

POISSON_BRANCH, DETERMINISTIC_BRANCH, MIN_RULE = "poisson", "deterministic", "min"
SAMPLINGS: tuple[str, ...] = (POISSON_BRANCH, DETERMINISTIC_BRANCH, MIN_RULE)
