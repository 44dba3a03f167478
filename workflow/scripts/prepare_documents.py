from dpscaling.data.documents import CorpusSpec
from dpscaling.data.stage import prepare_documents
from dpscaling.core.logs import log_to_file

with log_to_file(snakemake.log[0]) as log:
    spec = snakemake.params.spec
    frame = prepare_documents(
        CorpusSpec.from_record(spec),
        heldout_fraction=snakemake.params.heldout_fraction,
        seed=snakemake.params.seed,
        output=snakemake.output[0],
    )
    log.info("documents per split: %s", frame["split"].value_counts().to_dict())
