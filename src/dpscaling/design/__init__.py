"""The adaptive experiment design (``design: adaptive``; not in the paper): seed runs, then rounds that fit the
law, choose the runs expected to shrink the answers' uncertainty most per FLOP (:mod:`dpscaling.design.choice`),
and train them."""
