import pandas as pd

from dpscaling.findings.paper import (
    SEQ_LEN_CAPTION,
    SEQ_LEN_LABEL,
    findings_table,
    shorter_length_under_dp,
)
from dpscaling.core.logs import log_to_file
from dpscaling.report.tables.write import write_table

with log_to_file(snakemake.log[0]) as log:
    finding = shorter_length_under_dp(pd.read_csv(snakemake.input[0]))
    log.info("%s: %s\n    %s", finding.claim, finding.holds, finding.measured)
    write_table(
        findings_table([finding], ["seq_len"]),
        snakemake.output.csv.removesuffix(".csv"),
        SEQ_LEN_CAPTION,
        SEQ_LEN_LABEL,
    )
