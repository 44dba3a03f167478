from dpscaling.law import calibration, heldout_length, validation

# The law is fitted to our training curves, or to a results.csv in the authors' analysis code's
# format when config results_csv is set (docs/results-format.md).
# The primary length's law directory (dpscaling.workflow.layout): its curves, fit and bootstrap replicates.
LAW_DIR = f"{RESULTS}/{layout.PRIMARY_LAW}"
FIT_RESULTS = config["results_csv"] or f"{LAW_DIR}/{layout.CURVES}"
# Bootstrap replicates of the law (docs/fit.md "Intervals"): one job per chunk, planned only when the
# run trains repeated seeds (training.repeat_seeds x training.repeat_points) and fit.bootstrap.replicates > 0.
BOOTSTRAP_CHUNKS = bootstrap_chunks(CFG)
BOOTSTRAP = [f"{LAW_DIR}/{layout.REPLICATES}"] if BOOTSTRAP_CHUNKS else []
# The physical-batch correction's file when it is enabled (an extension; docs/fit.md).
CORRECTION = [f"{RESULTS}/{layout.CORRECTION}"] if CORRECTION_ENABLED else []


rule collect_curves:
    input:
        # The primary length's curves only: the `train` target also lists the other lengths' and the run's
        # config.yaml, which is no curve.
        lambda wildcards: run_outputs(f"{RESULTS}/{RUN_PATHS.curve}", primary_grid()),
    output:
        f"{LAW_DIR}/{layout.CURVES}",
    log:
        f"{RESULTS}/{layout.log_path(layout.LAW_LOGS, 'collect_curves')}",
    conda:
        "../envs/dpscaling.yaml"
    resources:
        mem_mb=4000,
        runtime=30,
    script:
        "../scripts/collect_curves.py"


rule fit_law:
    input:
        results=FIT_RESULTS,
    output:
        directory(f"{LAW_DIR}/{layout.FIT}"),
    log:
        f"{RESULTS}/{layout.log_path(layout.LAW_LOGS, 'fit_law')}",
    conda:
        "../envs/dpscaling.yaml"
    threads: 1
    resources:
        mem_mb=8000,
        runtime=60,
    params:
        settings=law_settings(CFG),
        results_format="reference" if config["results_csv"] else "dpscaling",
        parametric=config["fit"]["parametric"],
        # The law points to its run's accounting table (built by `accounting`, not needed to fit), so
        # `dpscaling query --law` answers compute-optimal queries with the run's sigma and sampling rule.
        sigma_table=rules.accounting_table.output.table,
        sampling=config["accounting"]["sampling"],
    script:
        "../scripts/fit_law.py"


# Replicates 'chunk' * chunk_size ... of the law, refitted on curves perturbed with seed-to-seed residuals.
rule bootstrap_chunk:
    input:
        results=FIT_RESULTS,
    output:
        f"{LAW_DIR}/{layout.BOOTSTRAP_CHUNK}",
    log:
        f"{RESULTS}/{layout.log_path(layout.LAW_LOGS, 'bootstrap_chunk{chunk}')}",
    wildcard_constraints:
        chunk=r"\d+",
    conda:
        "../envs/dpscaling.yaml"
    threads: 1
    resources:
        mem_mb=4000,
        runtime=60,
    params:
        settings=law_settings(CFG),
        results_format="reference" if config["results_csv"] else "dpscaling",
        bootstrap=config["fit"]["bootstrap"],
    script:
        "../scripts/bootstrap_law.py"


# The replicates in one file next to the law: `dpscaling query --law <run>/law/fit` finds them.
rule bootstrap:
    input:
        expand(rules.bootstrap_chunk.output[0], chunk=BOOTSTRAP_CHUNKS),
    output:
        f"{LAW_DIR}/{layout.REPLICATES}",
    log:
        f"{RESULTS}/{layout.log_path(layout.LAW_LOGS, 'bootstrap')}",
    conda:
        "../envs/dpscaling.yaml"
    resources:
        mem_mb=2000,
        runtime=10,
    script:
        "../scripts/bootstrap_combine.py"


# Not in the paper (fit.physical_batch_correction, off by default): the slope of the law's correction
# for the physical batch, fitted on the pairs of runs at the grid's batch and a larger one (docs/fit.md).
rule physical_batch_correction:
    input:
        lambda wildcards: run_outputs(
            f"{RESULTS}/{RUN_PATHS.curve}", correction_points()
        ),
    output:
        correction=f"{RESULTS}/{layout.CORRECTION}",
        pairs=f"{RESULTS}/{layout.CORRECTION_PAIRS}",
    log:
        f"{RESULTS}/{layout.log_path(layout.LAW_LOGS, 'physical_batch_correction')}",
    conda:
        "../envs/dpscaling.yaml"
    resources:
        mem_mb=2000,
        runtime=10,
    params:
        grid_batch=config["training"]["physical_batch"],
        warmup_steps=config["training"]["warmup_steps"],
    script:
        "../scripts/physical_batch_correction.py"


# Not in the paper (training.seq_lens with more than one length; docs/fit.md "Sequence length"): each
# other length's curves, law and bootstrap under law/lengths/seq=S/, as the primary length's under law/.
LENGTH_LAW = f"{RESULTS}/{layout.LENGTH_LAW}"


use rule collect_curves as collect_curves_at_length with:
    input:
        lambda wildcards: run_outputs(
            f"{RESULTS}/{RUN_PATHS.curve}",
            points_at_length(grid_points(), int(wildcards.seq)),
        ),
    output:
        f"{LENGTH_LAW}/{layout.CURVES}",
    log:
        f"{RESULTS}/{layout.log_path(layout.LENGTH_LAW_LOGS, 'collect_curves')}",


use rule fit_law as fit_law_at_length with:
    input:
        results=rules.collect_curves_at_length.output[0],
    output:
        directory(f"{LENGTH_LAW}/{layout.FIT}"),
    log:
        f"{RESULTS}/{layout.log_path(layout.LENGTH_LAW_LOGS, 'fit_law')}",


use rule bootstrap_chunk as bootstrap_chunk_at_length with:
    input:
        results=rules.collect_curves_at_length.output[0],
    output:
        f"{LENGTH_LAW}/{layout.BOOTSTRAP_CHUNK}",
    log:
        f"{RESULTS}/{layout.log_path(layout.LENGTH_LAW_LOGS, 'bootstrap_chunk{chunk}')}",


use rule bootstrap as bootstrap_at_length with:
    input:
        expand(
            rules.bootstrap_chunk_at_length.output[0],
            chunk=BOOTSTRAP_CHUNKS,
            allow_missing=True,
        ),
    output:
        f"{LENGTH_LAW}/{layout.REPLICATES}",
    log:
        f"{RESULTS}/{layout.log_path(layout.LENGTH_LAW_LOGS, 'bootstrap')}",


# Every length's law (and its replicates), and lengths.json naming them: `dpscaling query --law
# <run>/law/lengths` answers which (M, S, B, T) to train. Planned only when the run has several lengths.
LENGTH_LAWS = {
    PRIMARY_SEQ_LEN: rules.fit_law.output[0],
    **{
        length: expand(rules.fit_law_at_length.output[0], seq=length)[0]
        for length in OTHER_SEQ_LENS
    },
}
LENGTH_BOOTSTRAPS = (
    BOOTSTRAP + expand(rules.bootstrap_at_length.output[0], seq=OTHER_SEQ_LENS)
    if BOOTSTRAP
    else []
)
LAW_ACROSS_LENGTHS = (
    [f"{RESULTS}/{layout.LAW_ACROSS_LENGTHS}"] if OTHER_SEQ_LENS else []
)


rule law_across_lengths:
    input:
        laws=list(LENGTH_LAWS.values()),
        bootstrap=LENGTH_BOOTSTRAPS,
    output:
        f"{RESULTS}/{layout.LAW_ACROSS_LENGTHS}",
    log:
        f"{RESULTS}/{layout.log_path(layout.LAW_LOGS, 'law_across_lengths')}",
    localrule: True
    conda:
        "../envs/dpscaling.yaml"
    params:
        lengths=list(LENGTH_LAWS),
    script:
        "../scripts/law_across_lengths.py"


# Not in the paper (training.mechanisms with more than one; docs/mechanisms.md): each other mechanism's
# curves, law and bootstrap under law/mechanisms/mech=M/, at the primary length, fitted with its own sigma table.
MECHANISM_LAW = f"{RESULTS}/{layout.MECHANISM_LAW}"


use rule collect_curves as collect_curves_for_mechanism with:
    input:
        lambda wildcards: run_outputs(
            f"{RESULTS}/{RUN_PATHS.curve}",
            law_points(primary_length_grid(), wildcards.mech, MECHANISMS),
        ),
    output:
        f"{MECHANISM_LAW}/{layout.CURVES}",
    log:
        f"{RESULTS}/{layout.log_path(layout.MECHANISM_LAW_LOGS, 'collect_curves')}",


use rule fit_law as fit_law_for_mechanism with:
    input:
        results=rules.collect_curves_for_mechanism.output[0],
    output:
        directory(f"{MECHANISM_LAW}/{layout.FIT}"),
    log:
        f"{RESULTS}/{layout.log_path(layout.MECHANISM_LAW_LOGS, 'fit_law')}",
    params:
        settings=law_settings(CFG),
        results_format="dpscaling",
        parametric=config["fit"]["parametric"],
        sigma_table=lambda wildcards: mechanism_sigma_table(wildcards.mech),
        sampling=config["accounting"]["sampling"],


use rule bootstrap_chunk as bootstrap_chunk_for_mechanism with:
    input:
        results=rules.collect_curves_for_mechanism.output[0],
    output:
        f"{MECHANISM_LAW}/{layout.BOOTSTRAP_CHUNK}",
    log:
        f"{RESULTS}/{layout.log_path(layout.MECHANISM_LAW_LOGS, 'bootstrap_chunk{chunk}')}",


use rule bootstrap as bootstrap_for_mechanism with:
    input:
        expand(
            rules.bootstrap_chunk_for_mechanism.output[0],
            chunk=BOOTSTRAP_CHUNKS,
            allow_missing=True,
        ),
    output:
        f"{MECHANISM_LAW}/{layout.REPLICATES}",
    log:
        f"{RESULTS}/{layout.log_path(layout.MECHANISM_LAW_LOGS, 'bootstrap')}",


# Every mechanism's law (the primary's is fit_law's): mechanism_findings compares them, and rule law_bundle
# bundles each other mechanism's with its sigma table, replicates and calibration under mechanisms/M/.
MECHANISM_LAWS = {
    PRIMARY_MECHANISM: rules.fit_law.output[0],
    **{
        name: expand(rules.fit_law_for_mechanism.output[0], mech=name)[0]
        for name in OTHER_MECHANISMS
    },
}
OTHER_MECHANISM_BOOTSTRAP = (
    expand(rules.bootstrap_for_mechanism.output[0], mech=OTHER_MECHANISMS)
    if BOOTSTRAP
    else []
)


rule fit:
    input:
        rules.fit_law.output,
        BOOTSTRAP,
        CORRECTION,
        LAW_ACROSS_LENGTHS,
        [MECHANISM_LAWS[name] for name in OTHER_MECHANISMS],
        OTHER_MECHANISM_BOOTSTRAP,
        RUN_CONFIG,


# The law's prediction error on held-out measurements, paper and reference-compatible modes (docs/fit.md, `validate`).
rule validate_law:
    input:
        results=FIT_RESULTS,
    output:
        **validation_outputs(f"{RESULTS}/{layout.CALIBRATION}"),
    log:
        f"{RESULTS}/{layout.log_path(layout.LAW_LOGS, 'validate')}",
    conda:
        "../envs/dpscaling.yaml"
    resources:
        mem_mb=6000,
        runtime=60,
    params:
        modes=validation_modes(CFG),
        results_format="reference" if config["results_csv"] else "dpscaling",
        caption=validation.CAPTION,
        coverage_caption=calibration.CAPTION,
        # Seed-only intervals of each held-out fit: bootstrap refits, resampled like fit.bootstrap's.
        replicates=config["fit"]["validation"]["replicates"],
        seed=config["fit"]["bootstrap"]["seed"],
        # How the calibrated half-width varies with the point: q·(1 + distance) or q.
        interval_scale=config["fit"]["validation"]["interval_scale"],
    script:
        "../scripts/validate.py"


# Not in the paper (runs with three or more sequence lengths): each interior length predicted from its
# neighbours' laws, blended in log S (docs/fit.md "Sequence length").
rule validate_lengths:
    input:
        results=[FIT_RESULTS]
        + expand(rules.collect_curves_at_length.output[0], seq=OTHER_SEQ_LENS),
    output:
        csv=report(
            f"{RESULTS}/{layout.LENGTH_HOLDOUT}.csv",
            caption="../report/table.rst",
            category="Validation",
        ),
        md=f"{RESULTS}/{layout.LENGTH_HOLDOUT}.md",
        tex=f"{RESULTS}/{layout.LENGTH_HOLDOUT}.tex",
        points=f"{RESULTS}/{layout.LENGTH_HOLDOUT_POINTS}",
    log:
        f"{RESULTS}/{layout.log_path(layout.LAW_LOGS, 'validate_lengths')}",
    conda:
        "../envs/dpscaling.yaml"
    resources:
        mem_mb=6000,
        runtime=60,
    params:
        modes=validation_modes(CFG),
        caption=heldout_length.CAPTION,
    script:
        "../scripts/validate_lengths.py"


VALIDATE_LENGTHS = rules.validate_lengths.output if len(SEQ_LENS) >= 3 else []


# Each other mechanism's law validated like the primary one's (docs/mechanisms.md), under validate/mech=M/.
use rule validate_law as validate_law_for_mechanism with:
    input:
        results=rules.collect_curves_for_mechanism.output[0],
    output:
        **validation_outputs(f"{RESULTS}/{layout.MECHANISM_CALIBRATION}"),
    log:
        f"{RESULTS}/{layout.log_path(layout.MECHANISM_LAW_LOGS, 'validate')}",
    params:
        modes=validation_modes(CFG),
        results_format="dpscaling",
        caption=validation.CAPTION,
        coverage_caption=calibration.CAPTION,
        replicates=config["fit"]["validation"]["replicates"],
        seed=config["fit"]["bootstrap"]["seed"],
        interval_scale=config["fit"]["validation"]["interval_scale"],


VALIDATE_MECHANISMS = expand(
    rules.validate_law_for_mechanism.output.calibration, mech=OTHER_MECHANISMS
)


rule validate:
    input:
        rules.validate_law.output,
        VALIDATE_LENGTHS,
        VALIDATE_MECHANISMS,
        RUN_CONFIG,


# The law bundle (docs/query.md): the law with its sigma table, bootstrap replicates, calibration,
# physical-batch correction, the laws at other lengths and each other mechanism's law (with its own sigma
# table, replicates and calibration) in one portable directory, with its provenance and validated ranges;
# `dpscaling query --law <run>/law/bundle` answers from it alone.
rule law_bundle:
    input:
        law=rules.fit_law.output[0],
        sigma_table=rules.accounting_table.output.table,
        bootstrap=BOOTSTRAP,
        calibration=rules.validate_law.output.calibration,
        correction=CORRECTION,
        lengths=LAW_ACROSS_LENGTHS,
        data_meta=[] if config["results_csv"] else PRIMARY_PACKED["meta"],
        mechanism_laws=[MECHANISM_LAWS[name] for name in OTHER_MECHANISMS],
        mechanism_sigma_tables=[
            mechanism_sigma_table(name) for name in OTHER_MECHANISMS
        ],
        mechanism_bootstrap=OTHER_MECHANISM_BOOTSTRAP,
        mechanism_calibrations=[
            mechanism_calibration(name) for name in OTHER_MECHANISMS
        ],
    output:
        directory(f"{LAW_DIR}/{layout.BUNDLE}"),
    log:
        f"{RESULTS}/{layout.log_path(layout.LAW_LOGS, 'law_bundle')}",
    localrule: True
    conda:
        "../envs/dpscaling.yaml"
    params:
        provenance=bundle_provenance(CFG),
        mechanisms=OTHER_MECHANISMS,
    script:
        "../scripts/law_bundle.py"


rule bundle:
    input:
        rules.law_bundle.output,
        RUN_CONFIG,
