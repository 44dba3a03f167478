"""The sampling branches a calibrated σ comes from (paper §3.4 and appendix "Notes on Generalized
DP-SGD"): Poisson sampling's PLD, deterministic batches' Gaussian, and the paper's min rule over the two.
Names only, so code that labels a branch need not import the accountants."""

POISSON_BRANCH, DETERMINISTIC_BRANCH, MIN_RULE = "poisson", "deterministic", "min"
SAMPLINGS: tuple[str, ...] = (POISSON_BRANCH, DETERMINISTIC_BRANCH, MIN_RULE)

# The neighbouring relation a guarantee holds under: one example added or removed (Poisson DP-SGD), or
# replaced by a null one (fixed batches; BandMF's equal split into b groups, jax-privacy's EQUAL_SPLIT).
ADD_REMOVE, ZERO_OUT = "add/remove", "zero-out"
