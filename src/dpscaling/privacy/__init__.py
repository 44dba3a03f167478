"""What a private run promises and how it is kept: the noise mechanisms (:mod:`.mechanisms`: DP-SGD, DP-BandMF),
the batch samplers whose participations the accountant prices (:mod:`.samplers`), what an ε covers and what it
does not (:mod:`.epsilon_scope`) and the canary audit of a trained run (:mod:`.audit`). The accountant itself is
:mod:`dpscaling.accounting`; the clipped, noised step is :mod:`dpscaling.dp`."""
