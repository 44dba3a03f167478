from dpscaling.report.figures import ALL_FIGURES, FIGURES, LENGTH_FIGURES
from dpscaling.report.figures.nonprivate import NONPRIVATE
from dpscaling.report.figures.seq_len_tradeoff import SEQ_LEN_TRADEOFF
from dpscaling.report.figures.training_curves import TRAINING
from dpscaling.findings import paper as findings_check
from dpscaling.report.tables import inflection_points, models, throughput

ANALYSIS = analysis_settings(CFG)
LAW = rules.fit_law.output[0]
SIGMA_TABLE = rules.accounting_table.output.table
FIGURE_FILES = ["pdf", "png", "csv"]


# The training curves behind the run-measured tables; none when the law comes from results_csv.
rule figure:
    input:
        unpack(figure_inputs),
    output:
        pdf=report(
            f"{RESULTS}/{layout.FIGURE}.pdf",
            caption="../report/figure.rst",
            category="Figures",
        ),
        png=f"{RESULTS}/{layout.FIGURE}.png",
        data=f"{RESULTS}/{layout.FIGURE}.csv",
    log:
        f"{RESULTS}/{layout.log_path(layout.FIGURES, '{figure}')}",
    wildcard_constraints:
        figure=alternation(ALL_FIGURES),
    conda:
        "../envs/dpscaling.yaml"
    resources:
        mem_mb=6000,
        runtime=30,
    params:
        analysis=ANALYSIS,
        sampling=config["accounting"]["sampling"],
        results_format="reference" if config["results_csv"] else "dpscaling",
        caption=lambda wildcards: ALL_FIGURES[wildcards.figure].caption,
        # Why a banded figure has no bootstrap band ("" when it has one, and for figures without bands).
        no_interval=lambda wildcards: (
            bootstrap_status(CFG)
            if NEEDS_BOOTSTRAP in ALL_FIGURES[wildcards.figure].needs
            else ""
        ),
    script:
        "../scripts/figure.py"


rule table_models:
    input:
        run_metrics,
    output:
        **table_outputs(models.LABEL),
    log:
        f"{RESULTS}/{layout.log_path(layout.TABLES, 'models')}",
    conda:
        "../envs/dpscaling.yaml"
    params:
        # the shapes of the run's models only (an unused models.custom entry changes no table)
        custom={
            name: shape
            for name, shape in config["models"]["custom"].items()
            if name in config["models"]["names"]
        },
        caption=models.CAPTION,
    script:
        "../scripts/table_models.py"


rule table_throughput:
    input:
        run_metrics,
    output:
        **table_outputs(throughput.LABEL),
    log:
        f"{RESULTS}/{layout.log_path(layout.TABLES, 'throughput')}",
    conda:
        "../envs/dpscaling.yaml"
    params:
        caption=throughput.CAPTION,
    script:
        "../scripts/table_throughput.py"


rule table_inflection_points:
    input:
        law=LAW,
        sigma_table=SIGMA_TABLE,
    output:
        **table_outputs(inflection_points.LABEL),
    log:
        f"{RESULTS}/{layout.log_path(layout.TABLES, 'inflection_points')}",
    conda:
        "../envs/dpscaling.yaml"
    resources:
        mem_mb=6000,
        runtime=30,
    params:
        analysis=ANALYSIS,
        sampling=config["accounting"]["sampling"],
        caption=inflection_points.CAPTION,
    script:
        "../scripts/table_inflection_points.py"


# The paper's qualitative claims checked on this run's law (docs/appendix-experiments.md).
rule findings_table:
    input:
        law=LAW,
        sigma_table=SIGMA_TABLE,
        inflection_points=rules.table_inflection_points.output.csv,
        results=FIT_RESULTS,
    output:
        **table_outputs(findings_check.LABEL),
    log:
        f"{RESULTS}/{layout.log_path(layout.TABLES, 'findings')}",
    conda:
        "../envs/dpscaling.yaml"
    resources:
        mem_mb=6000,
        runtime=30,
    params:
        analysis=ANALYSIS,
        sampling=config["accounting"]["sampling"],
        results_format="reference" if config["results_csv"] else "dpscaling",
        caption=findings_check.CAPTION,
    script:
        "../scripts/findings.py"


# Runs with several sequence lengths (training.seq_lens) also draw fig:seq_len_tradeoff and check whether
# the compute-optimal length is shorter under DP (docs/fit.md "Sequence length").
RUN_FIGURES = list(FIGURES) + (list(LENGTH_FIGURES) if OTHER_SEQ_LENS else [])


rule seq_len_finding:
    input:
        f"{RESULTS}/{layout.FIGURES}/{SEQ_LEN_TRADEOFF.name}.csv",
    output:
        **table_outputs(findings_check.SEQ_LEN_LABEL),
    log:
        f"{RESULTS}/{layout.log_path(layout.TABLES, 'seq_len_finding')}",
    conda:
        "../envs/dpscaling.yaml"
    params:
        caption=findings_check.SEQ_LEN_CAPTION,
    script:
        "../scripts/seq_len_finding.py"


SEQ_LEN_FINDING = rules.seq_len_finding.output if OTHER_SEQ_LENS else []


rule findings:
    input:
        rules.findings_table.output,
        SEQ_LEN_FINDING,
        RUN_CONFIG,


rule figures:
    input:
        expand(
            f"{RESULTS}/{layout.FIGURE}.{{ext}}",
            figure=RUN_FIGURES,
            ext=FIGURE_FILES,
        ),
        RUN_CONFIG,


# The appendix experiments drawn from the main grid, one named target each (docs/appendix-experiments.md).
rule lr_curves:
    input:
        expand(f"{RESULTS}/{layout.FIGURES}/{TRAINING.name}.{{ext}}", ext=FIGURE_FILES),
        RUN_CONFIG,


rule throughput:
    input:
        rules.table_throughput.output,
        RUN_CONFIG,


rule nonprivate:
    input:
        expand(
            f"{RESULTS}/{layout.FIGURES}/{NONPRIVATE.name}.{{ext}}", ext=FIGURE_FILES
        ),
        RUN_CONFIG,


rule tables:
    input:
        rules.table_inflection_points.output,
        *(
            []
            if config["results_csv"]
            else [rules.table_models.output, rules.table_throughput.output]
        ),
        RUN_CONFIG,


rule report_html:
    input:
        rules.figures.input,
        rules.explorer_page.output,
        rules.tables.input,
        rules.findings_table.output,
        SEQ_LEN_FINDING,
        rules.validate_law.output,
        VALIDATE_LENGTHS,
        RUN_CONFIG,
    output:
        f"{RESULTS}/{layout.REPORT}",
    log:
        f"{RESULTS}/{layout.log_path('', 'report')}",
    conda:
        "../envs/dpscaling.yaml"
    params:
        snakefile=workflow.main_snakefile,
        config=config,
        # The targets whose outputs the report shows.
        targets=["figures", "tables", "findings", "validate", "explorer", "run_config"],
    script:
        "../scripts/report.py"


rule report:
    input:
        rules.report_html.output,
