"""Each profile resolves the resources its comments promise (docs/cluster.md).

A dry run prints every job's resolved resources without Slurm or a TPU, so these
tests guard against the ways a profile silently loses settings: top-level-only
profile merging, a stray profiles/default/, hard-coded accounts or partitions.
The sizing itself (dpscaling.workflow.cluster) is checked against the real model code.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO
from dpscaling.models.family import configured_model
from dpscaling.workflow.cluster import Site, train_resources
from dpscaling.workflow.launch import LaunchEnvironment, SlurmAllocation, launch_environment, srun_command

pytestmark = pytest.mark.slow(minutes=1.5)  # orders this module among the long ones (tests/conftest.py)

# smoke.yaml + slurm-grid.yaml: two BertNano jobs, 160 steps, batch 8, seq_len 64 (pinned).
SMALL = ["--configfile", str(REPO / "tests" / "configs" / "smoke.yaml"), str(REPO / "tests" / "configs" / "slurm-grid.yaml")]
PAPER = REPO / "config" / "paper.yaml"
SLURM = ["--profile", str(REPO / "profiles" / "slurm-gpu")]
SLURM_CI = [*SLURM, "--profile", str(REPO / "tests" / "profiles" / "slurm-ci")]
CLUSTER_ENV = {
    "DPSCALING_SLURM_ACCOUNT": "proj42",
    "DPSCALING_CPU_PARTITION": "cpu",
    "DPSCALING_GPU_PARTITION": "gpu",
}


def paper_models(tmp_path: Path) -> list[str]:
    """``--configfile`` args: the paper's config with one job per model (sizing depends on the model only)."""
    one_point = tmp_path / "one-point.yaml"
    one_point.write_text("training:\n  noise_batch_ratios: [0.0]\n  learning_rates: [0.0078125]\n")
    return ["--configfile", str(PAPER), str(one_point)]


def clean_env(**extra: str) -> dict[str, str]:
    """The environment without any site variable that would change the resources."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("DPSCALING_", "SBATCH_", "SLURM_")) and k != "TPU_WORKER_HOSTNAMES"
    }
    return {**env, **extra}


_DRY_RUNS: dict[tuple, dict[str, list[dict[str, str]]]] = {}


def dry_run(tmp_path: Path, *args: str, env: dict[str, str]) -> dict[str, list[dict[str, str]]]:
    """``snakemake -n`` → {rule: [resources of each job, as printed]} (plus ``threads``).

    Cached per arguments and environment: a dry run costs seconds on a busy 2-core box."""
    key = (args, tuple(sorted(env.items())))
    if key not in _DRY_RUNS:
        _DRY_RUNS[key] = _dry_run(tmp_path, *args, env=env)
    return _DRY_RUNS[key]


def _dry_run(tmp_path: Path, *args: str, env: dict[str, str]) -> dict[str, list[dict[str, str]]]:
    command = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "-n", *args]
    result = subprocess.run(command, cwd=tmp_path, capture_output=True, text=True, env=env, timeout=300)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    jobs: dict[str, list[dict[str, str]]] = {}
    current: dict[str, str] | None = None
    for line in result.stdout.splitlines():
        if match := re.match(r"^(?:local)?rule (\w+):$", line):
            current = {}
            jobs.setdefault(match.group(1), []).append(current)
        elif current is not None and (match := re.match(r"^\s+(threads|wildcards|resources): (.*)$", line)):
            key, value = match.groups()
            if key == "threads":
                current["threads"] = value
            else:
                for item in value.split(", "):
                    name, _, val = item.partition("=")
                    current[("wc:" if key == "wildcards" else "") + name] = val
    assert jobs, result.stdout[-3000:]
    # Snakemake prints independent jobs in no fixed order: compare them as sorted lists.
    return {rule: sorted(found, key=lambda job: sorted(job.items())) for rule, found in jobs.items()}


def only(jobs: list[dict[str, str]]) -> dict[str, str]:
    """The resources shared by all jobs of a rule (they must agree; wildcards aside)."""
    plain = [{k: v for k, v in j.items() if not k.startswith("wc:")} for j in jobs]
    assert all(p == plain[0] for p in plain), plain
    return plain[0]


def by_model(jobs: list[dict[str, str]]) -> dict[str, dict[str, str]]:
    return {j["wc:model"]: {k: v for k, v in j.items() if not k.startswith("wc:")} for j in jobs}


def test_no_default_workflow_profile() -> None:
    # profiles/default is loaded automatically and its set-resources would replace the
    # chosen profile's (measured: training lost its GPU and partition).
    assert not (REPO / "profiles" / "default").exists()


def test_local_profile(tmp_path: Path) -> None:
    jobs = dry_run(tmp_path, "--profile", str(REPO / "profiles" / "local"), *SMALL, env=clean_env())
    train = only(jobs["train_run"])
    # Two single-threaded training jobs at a time (the profile offers 2 `tpu` slots).
    assert train["tpu"] == "1" and train.get("threads", "1") == "1"  # snakemake -n omits threads: 1
    assert re.search(r"^resources:\n\s+tpu: 2$", (REPO / "profiles" / "local" / "config.yaml").read_text(), re.M)
    assert only(jobs["pack_sequences"])["mem_mb"] == "8000"
    assert not any(k.startswith("slurm_") for j in jobs.values() for r in j for k in r)


def test_plain_run_takes_threads_from_the_config(tmp_path: Path) -> None:
    # `snakemake --cores 2` without a profile: the default's host_threads = 1 lets two
    # training jobs share the two cores; a config asking for more gets them.
    plain = dry_run(tmp_path, "--cores", "2", *SMALL, env=clean_env())
    assert only(plain["train_run"]).get("threads", "1") == "1"
    wider = dry_run(tmp_path, "--cores", "2", *SMALL, "--config", "host_threads=2", env=clean_env())
    assert only(wider["train_run"])["threads"] == "2"


def test_tpu_profile(tmp_path: Path) -> None:
    jobs = dry_run(tmp_path, "--profile", str(REPO / "profiles" / "tpu"), *paper_models(tmp_path), env=clean_env())
    # Every training job claims the single `tpu` the profile offers: one at a time owns the chips.
    assert {j["tpu"] for j in jobs["train_run"]} == {"1"}
    assert len(jobs["train_run"]) == 6
    text = (REPO / "profiles" / "tpu" / "config.yaml").read_text()
    assert re.search(r"^resources:\n\s+tpu: 1$", text, re.M)


def test_slurm_profile_names_no_account_or_partition(tmp_path: Path) -> None:
    jobs = dry_run(tmp_path, *SLURM, *SMALL, env=clean_env())
    for rule, rule_jobs in jobs.items():
        for resources in rule_jobs:
            assert "slurm_account" not in resources and "slurm_partition" not in resources, rule


def test_slurm_profile_resources_from_environment(tmp_path: Path) -> None:
    jobs = dry_run(tmp_path, *SLURM, *SMALL, env=clean_env(**CLUSTER_ENV))
    prepare, pack = only(jobs["prepare_documents"]), only(jobs["pack_sequences"])
    assert prepare | {"tmpdir": ""} == prepare | {
        "slurm_account": "proj42",
        "slurm_partition": "cpu",
        "mem_mb": "4000",
        "runtime": "30",
        "cpus_per_task": "1",
        "tmpdir": "",
    }
    assert (pack["slurm_partition"], pack["mem_mb"], pack["runtime"], pack["cpus_per_task"]) == ("cpu", "8000", "60", "2")
    train = only(jobs["train_run"])
    # BertNano at the pinned small size: one GPU on one node, sized by dpscaling.workflow.cluster.
    n_params = configured_model("BertNano", {"BertNano": {"layers": 1, "heads": 2, "hidden": 32}}, 8192, 64).param_count()
    expected = train_resources(n_params.total, steps=160, batch=8, seq_len=64, site=Site())
    assert train["slurm_partition"] == "gpu" and train["slurm_account"] == "proj42"
    assert (train["gpu"], train["nodes"], train["cpus_per_task"]) == ("1", "1", "4")
    assert (int(train["mem_mb"]), int(train["runtime"])) == (expected.mem_mb, expected.runtime)
    assert "mpi" not in train and "gres" not in train and "tasks" not in train


def test_slurm_paper_grid_sizes_by_model(tmp_path: Path) -> None:
    jobs = dry_run(tmp_path, *SLURM, "train", *paper_models(tmp_path), env=clean_env(**CLUSTER_ENV))
    models = by_model(jobs["train_run"])
    # The paper's own rule: more devices for larger models (BertTiny 16 TPUv3 cores,
    # BertLarge 128); here 4 GPUs/node, at most 8 nodes, 8 h target.
    assert (models["BertTiny"]["gpu"], models["BertTiny"]["nodes"]) == ("4", "1")
    for name, nodes in [("BertMini", 2), ("BertSmall", 4), ("BertMedium", 8), ("BertBase", 8), ("BertLarge", 8)]:
        multi = models[name]
        # One task (= one JAX process) per node, GPUs per node as gres, launched by the job's srun.
        assert (multi["nodes"], multi["tasks"], multi["gres"], multi["mpi"]) == (str(nodes), str(nodes), "gpu:4", "srun")
        assert multi["tasks_per_gpu"] == "0" and "gpu" not in multi
        assert multi["slurm_partition"] == "gpu"
    sizes = [int(models[m]["mem_mb"]) for m in ("BertTiny", "BertBase", "BertLarge")]
    assert sizes == sorted(sizes) and sizes[0] < sizes[-1]


def test_slurm_decoder_paper_grid_plans_gpt2_sizes_from_flops(tmp_path: Path) -> None:
    """config/decoder-paper.yaml plans on the Slurm profile: larger GPT-2s get more GPU time and
    memory, sized from 6*M*S FLOPs per sequence (a 4x FLOP rate cuts the request, docs/cluster.md)."""
    one_point = tmp_path / "one-point.yaml"
    one_point.write_text("training:\n  noise_batch_ratios: [0.0]\n  learning_rates: [0.0078125]\n")
    args = ("train", "--configfile", str(REPO / "config" / "decoder-paper.yaml"), str(one_point))
    models = by_model(dry_run(tmp_path, *SLURM, *args, env=clean_env(**CLUSTER_ENV))["train_run"])
    assert set(models) == {"GPT2Small", "GPT2Medium", "GPT2Large"}
    for name in models:
        assert models[name]["slurm_partition"] == "gpu", models[name]
    def gpu_hours(job: dict[str, str]) -> float:
        gpus = int(job.get("gpu", 0)) or int(job.get("gres", "gpu:0").split(":")[-1]) * int(job.get("nodes", 1))
        return gpus * int(job["runtime"]) / 60
    hours = [gpu_hours(models[m]) for m in ("GPT2Small", "GPT2Medium", "GPT2Large")]
    memory = [int(models[m]["mem_mb"]) for m in ("GPT2Small", "GPT2Medium", "GPT2Large")]
    assert hours == sorted(hours) and hours[0] < hours[-1], hours
    assert memory == sorted(memory), memory
    faster = by_model(dry_run(tmp_path, *SLURM, *args, env=clean_env(**CLUSTER_ENV, DPSCALING_GPU_FLOPS="4e14"))["train_run"])
    assert gpu_hours(faster["GPT2Large"]) < gpu_hours(models["GPT2Large"])


def test_slurm_finetune_paper_plans_pretraining_and_fine_tuning_like_the_grid(tmp_path: Path) -> None:
    """config/finetune-paper.yaml plans on the Slurm profile: each model's pretraining (the paper's batch and
    horizon, no noise) and fine-tuning jobs get its grid job's GPUs, nodes and time; the analysis stays on CPUs."""
    args = ("finetune", *paper_models(tmp_path), str(REPO / "config" / "finetune-paper.yaml"))
    jobs = dry_run(tmp_path, *SLURM, *args, env=clean_env(**CLUSTER_ENV))
    grid, pretrain = by_model(jobs["train_run"]), by_model(jobs["pretrain"])
    tuned = {model: only([job for job in jobs["finetune_run"] if job["wc:model"] == model]) for model in grid}
    assert set(pretrain) == set(tuned) == set(grid) == {"BertTiny", "BertMini", "BertSmall", "BertMedium",
                                                        "BertBase", "BertLarge"}
    assert len(jobs["finetune_run"]) == 6 * 2  # the fine-tuning rates are their own axis
    for model in grid:
        assert pretrain[model] == grid[model] == tuned[model], model
        assert grid[model]["slurm_partition"] == "gpu"
    for rule in ("finetune_fit_law", "finetune_findings", "finetune_law_bundle"):
        assert "gpu" not in only(jobs[rule]) and only(jobs[rule]).get("slurm_partition", "cpu") == "cpu", rule


# The rules that train or score a model; each is sized by dpscaling.workflow.cluster.job_resources.
# The smoke config's training-like jobs (its training.runs_per_job: shape trains the grid's noise levels and the
# ablation's seeds in train_noise_levels and ablation_seeds jobs).
TRAINING_LIKE = ("train_run", "train_noise_levels", "ablation_seeds", "ablation_evaluate", "private_model_train",
                 "private_model_twin", "private_model_evaluate")


def test_every_rule_sized_by_job_resources_is_sent_to_the_gpu_partition() -> None:
    """A training-like rule the profile forgets would queue on the CPU partition (as the fine-tuning rules
    once did): every rule whose resources come from job_resources has its GPU-partition entry."""
    sized = set()
    for path in (REPO / "workflow" / "rules").glob("*.smk"):
        rule = None
        for line in path.read_text().splitlines():
            if match := re.match(r"^\s*(?:use rule \w+ as (\w+) with|rule (\w+)):", line):
                rule = match.group(1) or match.group(2)
            elif "job_resources(CFG" in line:
                sized.add(rule)
    profile = (REPO / "profiles" / "slurm-gpu" / "config.yaml").read_text()
    routed = set(re.findall(r"^    (\w+):\n      slurm_partition: \?repr\(gpu_partition\)", profile, re.M))
    assert {"train_run", "pretrain", "finetune_run", "savings_train"} <= sized
    assert sized == routed, (sorted(sized - routed), sorted(routed - sized))


def test_every_training_like_job_requests_a_gpu_on_the_gpu_partition(tmp_path: Path) -> None:
    targets = ["all", "ablation_batch", "private_model"]
    jobs = dry_run(tmp_path, *SLURM, *targets, "--configfile", str(REPO / "tests" / "configs" / "smoke.yaml"),
                   env=clean_env(**CLUSTER_ENV))
    assert set(TRAINING_LIKE) <= set(jobs), sorted(jobs)
    for rule, found in jobs.items():
        for job in found:
            # job_resources marks every job it sizes with tpu=1: a training-like rule that forgot it would
            # show here without a GPU
            gpus = int(job.get("gpu", 0)) or int(job.get("gres", "gpu:0").split(":")[-1])
            assert (rule in TRAINING_LIKE) == ("tpu" in job), (rule, job)
            if rule in TRAINING_LIKE:
                assert gpus >= 1 and job["slurm_partition"] == "gpu", (rule, job)
            else:
                assert gpus == 0 and job.get("slurm_partition", "cpu") == "cpu", (rule, job)


def test_ci_layer_keeps_every_resource_of_the_real_profile(tmp_path: Path) -> None:
    # The CI profile must only add status/poll settings: were it to set default- or
    # set-resources, the real profile's mapping would be replaced wholesale.
    env = clean_env(**CLUSTER_ENV)
    alone = dry_run(tmp_path, *SLURM, *SMALL, env=env)
    layered = dry_run(tmp_path, *SLURM_CI, *SMALL, env=env)
    assert alone == layered


def test_site_environment_changes_sizing(tmp_path: Path) -> None:
    env = clean_env(**CLUSTER_ENV, DPSCALING_GPUS_PER_NODE="8", DPSCALING_TARGET_HOURS="24")
    models = by_model(dry_run(tmp_path, *SLURM, "train", *paper_models(tmp_path), env=env)["train_run"])
    assert (models["BertTiny"]["gpu"], models["BertTiny"]["nodes"]) == ("2", "1")
    assert (models["BertBase"]["nodes"], models["BertBase"]["gres"]) == ("2", "gpu:8")
    assert models["BertLarge"]["nodes"] == "8"  # capped by DPSCALING_MAX_NODES (8)


# ---------------------------------------------------------------- dpscaling.workflow.cluster


@pytest.mark.parametrize("layers,hidden,vocab,positions,types,inner", [
    (2, 128, 30522, 512, 2, None), (1, 32, 8192, 64, 1, None), (12, 768, 30522, 512, 2, None),
    (4, 256, 8192, 128, 1, 300)])
def test_closed_form_param_count_matches_the_model(layers, hidden, vocab, positions, types, inner) -> None:
    from dpscaling.models.bert import count_params
    from dpscaling.models.family import bert_config

    config = bert_config("custom", vocab_size=vocab, max_positions=positions, num_layers=layers, num_heads=2,
                         hidden_size=hidden, type_vocab_size=types, intermediate_size=inner)
    assert config.param_count() == count_params(config)


def test_retries_scale_time_and_memory() -> None:
    first, third = (train_resources(4_416_698, steps=128_000, batch=1024, seq_len=512, attempt=a, site=Site()) for a in (1, 3))
    assert (third.runtime, third.mem_mb) == (3 * first.runtime, 3 * first.mem_mb)
    assert (third.gpus, third.nodes) == (first.gpus, first.nodes)


def test_a_measured_device_kind_sizes_bert_jobs_from_its_measured_throughput(monkeypatch) -> None:
    """An H100 (DPSCALING_DEVICE_KIND) sizes a BERT job from its measured records/s, not from the paper's TPUv3
    table × tpu_cores_per_gpu; a kind never measured, and a decoder on any kind, keep the assumptions."""
    from dpscaling.workflow.cluster import MEASURED_THROUGHPUT, param_tokens_per_gpu_second, param_tokens_per_core_second

    monkeypatch.setenv("DPSCALING_DEVICE_KIND", "NVIDIA H100 80GB HBM3")
    h100 = Site.from_env()
    row, = MEASURED_THROUGHPUT["NVIDIA H100 80GB HBM3"]
    tiny = 4.52e6
    assert param_tokens_per_gpu_second("paper_table", tiny, h100) == pytest.approx(row.records_per_s * 512 * tiny)
    assert param_tokens_per_gpu_second("paper_table", 335e6, h100) == pytest.approx(row.records_per_s * 512 * tiny)
    unmeasured = Site(device_kind="NVIDIA A100-SXM4-40GB")
    assert param_tokens_per_gpu_second("paper_table", tiny, unmeasured) == pytest.approx(
        param_tokens_per_core_second(tiny) * unmeasured.tpu_cores_per_gpu)
    assert param_tokens_per_gpu_second("flops", 124e6, h100) == h100.gpu_flops / 6
    work = dict(steps=128_000, batch=1024, seq_len=512)
    measured, assumed = (train_resources(4_416_698, **work, site=site) for site in (h100, unmeasured))
    assert measured.gpus * measured.runtime < assumed.gpus * assumed.runtime  # 9x the assumed throughput


@pytest.mark.parametrize("batch,per_node,max_nodes", [(96, 4, 64), (1024, 6, 8), (1024, 8, 3), (8, 4, 8)])
def test_devices_divide_the_batch_and_fit_the_site(batch: int, per_node: int, max_nodes: int) -> None:
    # Pure data parallelism splits the physical batch evenly over devices.
    site = Site(gpus_per_node=per_node, max_nodes=max_nodes)
    sized = train_resources(335_000_000, steps=128_000, batch=batch, seq_len=512, site=site)
    assert batch % sized.gpus == 0
    assert sized.nodes <= max_nodes and sized.gpus_per_node <= per_node


def test_launch_environment_classification() -> None:
    batch = {"SLURM_JOB_ID": "7", "SLURM_NTASKS": "2"}
    step = {**batch, "SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "2", "SLURM_PROCID": "1"}
    assert launch_environment(batch) == LaunchEnvironment("slurm-batch", 2) and not launch_environment(batch).multiprocess
    assert launch_environment(step).multiprocess
    # The executor plugin's own single-task step: no jax.distributed.
    assert not launch_environment({"SLURM_JOB_ID": "7", "SLURM_STEP_ID": "0", "SLURM_STEP_NUM_TASKS": "1"}).multiprocess
    assert launch_environment({"TPU_WORKER_HOSTNAMES": "a,b,c,d"}) == LaunchEnvironment("tpu-pod", 4)
    assert launch_environment({"TPU_WORKER_HOSTNAMES": "localhost"}).kind == "single"
    # As measured with `scontrol show job -o` for --nodes=1 --ntasks=2 --gres=gpu:1 (Slurm 22.05).
    allocation = SlurmAllocation.parse("JobId=9 NumNodes=1 NumCPUs=2 NumTasks=2 CPUs/Task=1 TresPerNode=gres:gpu:1")
    assert allocation == SlurmAllocation(tasks=2, nodes=1, cpus_per_task=1, gres_per_node="gpu:1")
    four_nodes = SlurmAllocation(tasks=4, nodes=4, cpus_per_task=16, gres_per_node="gpu:4")
    assert srun_command(["python", "x.py"], four_nodes) == [
        "srun", "--ntasks=4", "--nodes=4", "--ntasks-per-node=1", "--cpus-per-task=16",
        "--kill-on-bad-exit=1", "--cpu-bind=none", "--gres=gpu:4", "python", "x.py",
    ]


def test_command_line_set_resources_replaces_the_profiles_mapping(tmp_path: Path) -> None:
    # Measured Snakemake behaviour the profile comments warn about (and why partitions
    # come from the environment): one --set-resources entry drops all of the profile's.
    jobs = dry_run(tmp_path, *SLURM, "data", *SMALL, "--set-resources", "prepare_documents:runtime=5", env=clean_env())
    assert only(jobs["prepare_documents"])["runtime"] == "5"
    assert only(jobs["pack_sequences"])["cpus_per_task"] == "1"  # the profile's 2 is gone


def test_every_sized_rule_starts_its_largest_jobs_first() -> None:
    """A rule sized by job_resources also takes its priority from the same work, and the priority orders jobs
    by parameter·tokens: on two cores the default's largest model's jobs then start before the small ones
    rather than last (docs/cluster.md)."""
    import yaml

    from dpscaling.workflow.cluster import Work, job_priority
    from dpscaling.config.blocks import typed
    from dpscaling.config.schema import validate_config

    for path in (REPO / "workflow" / "rules").glob("*.smk"):
        # Each rule's text: its priority's work is its resources' work.
        for rule in re.split(r"^\s*(?:rule|checkpoint|use rule) ", path.read_text(), flags=re.M)[1:]:
            sized = re.findall(r"\*\*job_resources\(CFG, (\w+)\)", rule)
            assert re.findall(r"priority: job_priority\(CFG, (\w+)\)", rule) == sized, (path.name, rule[:40])
    config = yaml.safe_load((REPO / "config" / "config.yaml").read_text())
    validate_config(config)
    run = typed(config)
    priority = lambda work: job_priority(run, lambda wildcards, input: work)(None, None, 1)  # noqa: E731
    nano, slim = Work("BertNano", 500, 40), Work("BertSlim", 500, 40)
    assert priority(slim) > priority(Work("BertNano", 500 * 5, 40)) > priority(nano)
    assert priority(Work("BertNano", 500, 192)) > priority(nano)
    # log10 of steps x batch x length x parameters
    assert priority(nano) == pytest.approx(math.log10(500 * 40 * 64 * configured_model(
        "BertNano", config["models"]["custom"], 1024, 64).param_count().total), abs=1e-3)
