# What changes with a better mechanism (docs/mechanisms.md "What changes"): DP-BandMF's laws against DP-SGD's,
# each answering with its own accounting table; the literature's claims checked, the comparison and its figure.
from dpscaling.findings import mechanisms as mechanism_findings
from dpscaling.report.figures.mechanisms import NAME as MECHANISM_FIGURE

MECHANISM_COMPARISON = f"{RESULTS}/{layout.table(mechanism_findings.COMPARISON_LABEL)}"
# The noise mechanisms compared with DP-SGD at the sequence level (a user-level one is compared with ELS by the
# user-level findings instead).
COMPARED_MECHANISMS = [
    name for name in OTHER_MECHANISMS if mechanism_named(name).unit == "sequence"
]


rule mechanism_findings:
    input:
        laws=[
            MECHANISM_LAWS[name] for name in [PRIMARY_MECHANISM, *COMPARED_MECHANISMS]
        ],
        sigma_tables=[
            mechanism_sigma_table(name)
            for name in [PRIMARY_MECHANISM, *COMPARED_MECHANISMS]
        ],
        results=[FIT_RESULTS]
        + expand(
            rules.collect_curves_for_mechanism.output[0], mech=COMPARED_MECHANISMS
        ),
    output:
        **table_outputs(mechanism_findings.LABEL),
        comparison=f"{MECHANISM_COMPARISON}.csv",
        comparison_md=f"{MECHANISM_COMPARISON}.md",
        comparison_tex=f"{MECHANISM_COMPARISON}.tex",
        figure=f"{RESULTS}/{layout.FIGURES}/{MECHANISM_FIGURE}.pdf",
        figure_png=f"{RESULTS}/{layout.FIGURES}/{MECHANISM_FIGURE}.png",
        figure_data=f"{RESULTS}/{layout.FIGURES}/{MECHANISM_FIGURE}.csv",
    log:
        f"{RESULTS}/{layout.log_path(layout.TABLES, 'mechanism_findings')}",
    conda:
        "../envs/dpscaling.yaml"
    resources:
        mem_mb=6000,
        runtime=30,
    params:
        analysis=ANALYSIS,
        sampling=config["accounting"]["sampling"],
        mechanisms=[PRIMARY_MECHANISM, *COMPARED_MECHANISMS],
    script:
        "../scripts/mechanism_findings.py"


# The privacy unit (docs/private-training.md "User-level sampling"): a user-level mechanism's law against DP-SGD's
# priced by ELS, at budgets per user of the run's data; finding:user-level and the comparison it reads.
from dpscaling.findings import user_level as user_level_findings

USER_LEVEL_MECHANISMS = [
    name for name in MECHANISMS if mechanism_named(name).unit == "user"
]
USER_LEVEL_COMPARISON = (
    f"{RESULTS}/{layout.table(user_level_findings.COMPARISON_LABEL)}"
)


rule user_level_findings:
    input:
        bundle=rules.law_bundle.output[0],
        meta=PRIMARY_PACKED["meta"],
    output:
        **table_outputs(user_level_findings.LABEL),
        comparison=f"{USER_LEVEL_COMPARISON}.csv",
        comparison_md=f"{USER_LEVEL_COMPARISON}.md",
        comparison_tex=f"{USER_LEVEL_COMPARISON}.tex",
    log:
        f"{RESULTS}/{layout.log_path(layout.TABLES, 'user_level_findings')}",
    conda:
        "../envs/dpscaling.yaml"
    resources:
        mem_mb=6000,
        runtime=60,
    params:
        analysis=ANALYSIS,
    script:
        "../scripts/user_level_findings.py"


# Everything the mechanism axis adds: each mechanism's law, validation and the comparison (with several).
rule mechanisms:
    input:
        rules.law_bundle.output,
        VALIDATE_MECHANISMS,
        # the comparison is against DP-SGD: with it and another mechanism
        (
            rules.mechanism_findings.output
            if PRIMARY_MECHANISM == DPSGD.name and COMPARED_MECHANISMS
            else []
        ),
        # the user-level findings: ULS against DP-SGD's law priced by ELS
        (
            rules.user_level_findings.output
            if DPSGD.name in MECHANISMS and USER_LEVEL_MECHANISMS
            else []
        ),
        RUN_CONFIG,
