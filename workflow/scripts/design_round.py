from dpscaling.design.rounds import write_round
from dpscaling.core.logs import log_to_file
from dpscaling.tuning.rule import read_chosen

with log_to_file(snakemake.log[0]) as log:
    given = snakemake.input
    index = int(snakemake.wildcards.round)
    record = write_round(
        snakemake.config,
        index,
        snakemake.output[0],
        chosen_rates=read_chosen(given.chosen[0]) if given.chosen else None,
        previous=given.get("previous"),
        curve=snakemake.params.curve,
        sigma_table=given.get("sigma_table"),
    )
    log.info(
        "round %d: %d runs trained, %d chosen%s",
        index,
        len(record["trained"]),
        len(record["chosen"]),
        f"; stopped: {record['stopped']}" if record["stopped"] else "",
    )
