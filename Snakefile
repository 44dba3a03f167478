# dpscaling: scaling laws of differentially private language-model training.
# The stages live in workflow/rules/; the code behind them in src/dpscaling/.


# Config layering (README "Configurations"): unset keys take the schema's defaults, which
# are the paper's values. The CPU default (config/config.yaml) is loaded only when no
# --configfile is given, so config/paper.yaml and the configs layered on it never inherit
# laptop settings. Found next to this file, so `snakemake --directory DIR` works.
if not workflow.overwrite_configfiles:

    configfile: os.path.join(workflow.basedir, "config", "config.yaml")


include: "workflow/rules/common.smk"
include: "workflow/rules/run_config.smk"
include: "workflow/rules/data.smk"
include: "workflow/rules/train.smk"
include: "workflow/rules/learning_rates.smk"
include: "workflow/rules/accounting.smk"
include: "workflow/rules/fit.smk"
include: "workflow/rules/explorer.smk"
include: "workflow/rules/figures.smk"
include: "workflow/rules/ablation.smk"
include: "workflow/rules/audit.smk"
include: "workflow/rules/private_model.smk"
include: "workflow/rules/savings.smk"
include: "workflow/rules/finetune.smk"
include: "workflow/rules/mechanisms.smk"
include: "workflow/rules/adaptive.smk"


localrules:
    all,
    data,
    train,
    learning_rates,
    accounting,
    fit,
    figures,
    tables,
    findings,
    validate,
    report,
    report_html,
    run_config,
    lr_curves,
    throughput,
    nonprivate,
    ablation_batch,
    private_model,
    savings,
    finetune,
    mechanisms,
    bundle,
    explorer,
    adaptive,


rule all:
    default_target: True
    input:
        rules.data.input,
        rules.learning_rates.input,
        rules.train.input,
        rules.accounting.input,
        rules.fit.input,
        rules.figures.input,
        rules.tables.input,
        rules.findings.input,
        rules.validate.input,
        rules.bundle.input,
        rules.explorer.input,
        # DP fine-tuning from public pretraining, with a finetune block (docs/finetune.md).
        rules.finetune.input if CFG.finetune else [],
        # DP-BandMF and DP-SGD compared, with more than one training.mechanisms (docs/mechanisms.md).
        rules.mechanisms.input if OTHER_MECHANISMS else [],
