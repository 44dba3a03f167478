from dpscaling.law import calibration, validation

# The law is fitted to our training curves, or to the authors' published
# results.csv when config results_csv is set.
FIT_RESULTS = config["results_csv"] or f"{RESULTS}/law/results.parquet"
# Bootstrap replicates of the law (docs/fit.md "Intervals"): one job per chunk, planned only when the
# run trains repeated seeds (training.repeat_seeds x training.repeat_points) and fit.bootstrap.replicates > 0.
BOOTSTRAP_CHUNKS = bootstrap_chunks(CFG)
BOOTSTRAP = [f"{RESULTS}/law/bootstrap/replicates.parquet"] if BOOTSTRAP_CHUNKS else []
# The physical-batch correction's file when it is enabled (an extension; docs/fit.md).
CORRECTION = (
    [f"{RESULTS}/law/physical_batch/correction.json"] if CORRECTION_GRID else []
)


rule collect_curves:
    input:
        # The primary length's curves only: the `train` target also lists the other lengths' and the run's
        # config.yaml, which is no curve.
        run_outputs(f"{RESULTS}/runs/{RUN}/metrics.parquet", PRIMARY_GRID),
    output:
        f"{RESULTS}/law/results.parquet",
    log:
        f"{RESULTS}/logs/fit/collect_curves.log",
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
        directory(f"{RESULTS}/law/fit"),
    log:
        f"{RESULTS}/logs/fit/fit_law.log",
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
        f"{RESULTS}/law/bootstrap/chunks/chunk{{chunk}}.parquet",
    log:
        f"{RESULTS}/logs/fit/bootstrap_chunk{{chunk}}.log",
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
        f"{RESULTS}/law/bootstrap/replicates.parquet",
    log:
        f"{RESULTS}/logs/fit/bootstrap.log",
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
        run_outputs(f"{RESULTS}/runs/{RUN}/metrics.parquet", CORRECTION_GRID),
    output:
        correction=f"{RESULTS}/law/physical_batch/correction.json",
        pairs=f"{RESULTS}/law/physical_batch/pairs.csv",
    log:
        f"{RESULTS}/logs/fit/physical_batch_correction.log",
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


rule fit:
    input:
        rules.fit_law.output,
        BOOTSTRAP,
        CORRECTION,
        RUN_CONFIG,


# The law's prediction error on held-out measurements, paper and reference-compatible modes (docs/fit.md, `validate`).
rule validate_law:
    input:
        results=FIT_RESULTS,
    output:
        csv=report(
            f"{RESULTS}/validate/validation.csv",
            caption="../report/table.rst",
            category="Validation",
        ),
        md=f"{RESULTS}/validate/validation.md",
        tex=f"{RESULTS}/validate/validation.tex",
        pdf=report(
            f"{RESULTS}/validate/predicted_vs_measured.pdf",
            caption="../report/validation.rst",
            category="Validation",
        ),
        png=f"{RESULTS}/validate/predicted_vs_measured.png",
        data=f"{RESULTS}/validate/predicted_vs_measured.csv",
        # How often the seed-only and the calibrated 90% intervals cover (docs/fit.md "Calibrated intervals").
        coverage=report(
            f"{RESULTS}/validate/coverage.csv",
            caption="../report/coverage.rst",
            category="Validation",
        ),
        coverage_md=f"{RESULTS}/validate/coverage.md",
        coverage_tex=f"{RESULTS}/validate/coverage.tex",
        # `dpscaling query --law <run>/law/fit` finds it and prints the calibrated interval.
        calibration=f"{RESULTS}/validate/calibration.json",
    log:
        f"{RESULTS}/logs/fit/validate.log",
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
    script:
        "../scripts/validate.py"


rule validate:
    input:
        rules.validate_law.output,
        RUN_CONFIG,
