import json

import pandas as pd

from dpscaling.tuning.figure import plot_learning_rates
from dpscaling.core.logs import log_to_file

with log_to_file(snakemake.log[0]):
    floor = json.loads(open(snakemake.input.floor).read())["nats"]
    plot_learning_rates(pd.read_csv(snakemake.input.table), snakemake.output.pdf.removesuffix(".pdf"), floor)
