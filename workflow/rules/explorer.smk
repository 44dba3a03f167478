# The interactive explorer (docs/explorer.md): the bundle's answer at every budget of a grid, in one
# self-contained page. Not in the paper.


rule explorer_page:
    input:
        bundle=rules.law_bundle.output[0],
    output:
        report(
            f"{RESULTS}/{layout.EXPLORER}",
            caption="../report/explorer.rst",
            category="Explorer",
        ),
    log:
        f"{RESULTS}/{layout.log_path('', 'explorer')}",
    conda:
        "../envs/dpscaling.yaml"
    threads: 2
    resources:
        mem_mb=4000,
        runtime=60,
    params:
        grid=config["explorer"],
    script:
        "../scripts/explorer.py"


rule explorer:
    input:
        rules.explorer_page.output,
