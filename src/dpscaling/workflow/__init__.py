"""Step 1–2 of the method as a workflow: the grid a config expands into (:mod:`.grid`, paper §3 "Experimental
setup": model size × noise-batch ratio × learning rate, with sequence length, mechanism, seed and physical
batch), where every job writes (:mod:`.layout`, and :mod:`.migration` for results written by older layouts),
what each rule passes its job (:mod:`.params`) and how jobs are sized for a cluster (:mod:`.cluster`)."""
