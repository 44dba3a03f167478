"""What a run shows a reader: every figure of the paper (:mod:`.figures`), every table (:mod:`.tables`) and the
interactive explorer of a law bundle's answers (:mod:`.explorer`), each drawn from the pipeline's own files."""
