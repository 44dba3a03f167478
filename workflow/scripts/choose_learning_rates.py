import json

import pandas as pd

from dpscaling.grid import learning_rate_protocol_grid
from dpscaling.logs import log_to_file
from dpscaling.rate_protocol import choice_table, choose_rates, write_choice
from dpscaling.tables.write import write_table
from dpscaling.workflow import learning_rate_protocol_cost

with log_to_file(snakemake.log[0]):
    settings = snakemake.params.settings
    points = learning_rate_protocol_grid(snakemake.config)
    curves = [(point.model, point.learning_rate, pd.read_parquet(path)) for point, path in zip(points, snakemake.input.curves)]
    choices = choose_rates(curves, settings["steps"], settings["window"], settings["tolerance"])
    chosen = {choice.model: choice.rate for choice in choices}
    cost = learning_rate_protocol_cost(snakemake.config, chosen)
    table = choice_table(choices, settings["rates_below"])
    write_table(table, snakemake.output.csv.removesuffix(".csv"), snakemake.params.caption, "tab:learning-rates")
    write_choice(choices, settings, cost, snakemake.output.chosen)
