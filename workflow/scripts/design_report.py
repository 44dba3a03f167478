from dpscaling.design.rounds import draw_rounds, read_round, rounds_table
from dpscaling.core.io import write_text_atomic
from dpscaling.core.logs import log_to_file

with log_to_file(snakemake.log[0]) as log:
    out = snakemake.output
    table = rounds_table([read_round(path) for path in snakemake.input.records])
    write_text_atomic(out.csv, table.to_csv(index=False))
    write_text_atomic(out.md, table.to_markdown(index=False, floatfmt=".4g") + "\n")
    draw_rounds(table, out.pdf.removesuffix(".pdf"))
    log.info("%d rounds", table["round"].nunique() if len(table) else 0)
