"""The learning-rate protocol (paper §3.2 "Learning Rates"), in one home: the choice rule (:mod:`.rule`), its
workflow step from the protocol runs' curves to the record and its cost (:mod:`.stage`), the runs it trains
(:func:`dpscaling.workflow.grid.learning_rate_protocol_grid`) and its evidence figure (:mod:`.figure`)."""
