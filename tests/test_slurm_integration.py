"""The workflow on a REAL single-node Slurm (docs/cluster.md): tests/slurm/up.sh starts munge,
slurmctld and slurmd (fake GPUs as character devices) in a private directory; jobs go
through snakemake-executor-plugin-slurm with ``--profile profiles/slurm-gpu --profile
tests/profiles/slurm-ci``; tests/slurm/down.sh stops exactly the daemons it started.

Needs root and Debian's slurm-wlm + munge (.ci/run installs them when CI=true). Without
them the module is skipped with the reason — except under CI=true, where that fails.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pandas as pd
import pytest

from conftest import REPO
from dpscaling.workflow.layout import RUN_AXES

SCRIPTS = REPO / "tests" / "slurm"
SMOKE = REPO / "tests" / "configs" / "smoke.yaml"
# The smoke grid (two training jobs), 160 steps each: room to cancel one mid-run.
CONFIG = ["--configfile", str(SMOKE), str(REPO / "tests" / "configs" / "slurm-grid.yaml")]
RUN_NAME = "slurm-grid"
SLURM_PROFILES = ["--profile", str(REPO / "profiles" / "slurm-gpu"), "--profile", str(REPO / "tests" / "profiles" / "slurm-ci")]
LOCAL_PROFILE = ["--profile", str(REPO / "profiles" / "local")]
TOOLS = ("slurmctld", "slurmd", "munged", "sbatch", "squeue", "scancel", "setpriv", "unshare")
# Throughput and wall-clock columns differ between any two runs; everything else must not.
TIMING_COLUMNS = re.compile(r"per_s$|seconds|wall")

pytestmark = pytest.mark.slow(minutes=6)


def cannot_run_reason() -> str | None:
    if os.geteuid() != 0:
        return "needs root (slurmd owns the node; fake GPUs need mknod)"
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        return f"{', '.join(missing)} not installed (apt-get install -y --no-install-recommends slurm-wlm munge)"
    return None


@dataclass
class LocalSlurm:
    state: Path
    env: dict[str, str]

    def run(self, *command: str, check: bool = True, timeout: int = 60) -> subprocess.CompletedProcess:
        result = subprocess.run(command, env=self.env, capture_output=True, text=True, timeout=timeout)
        if check and result.returncode != 0:
            raise AssertionError(f"{command} failed:\n{result.stdout}\n{result.stderr}")
        return result

    def jobcomp(self) -> dict[str, dict[str, str]]:
        """slurmctld's record of every finished job: {job id: fields}."""
        path = self.state / "log" / "jobcomp.log"
        records = {}
        for line in path.read_text().splitlines() if path.exists() else []:
            fields = dict(item.split("=", 1) for item in line.split() if "=" in item)
            records[fields["JobId"]] = fields
        return records

    def squeue(self) -> list[dict[str, str]]:
        out = self.run("squeue", "-h", "-o", "%i|%j|%T|%P|%k").stdout
        return [dict(zip(("id", "name", "state", "partition", "comment"), line.split("|"))) for line in out.splitlines()]

    def running_steps(self) -> list[str]:
        """Job ids with a running srun step (``N.0``; the batch step alone does not count)."""
        out = self.run("squeue", "-h", "-s", "-o", "%i").stdout.split()
        return sorted({step.split(".")[0] for step in out if step.endswith(".0")})

    def restart_controller(self) -> None:
        """Stop our slurmctld (by its PID) and start it again; it recovers its saved state."""
        subprocess.run([str(SCRIPTS / "down.sh"), str(self.state), "slurmctld"], check=True, timeout=30)
        subprocess.run([str(SCRIPTS / "start-daemons.sh"), str(self.state), "slurmctld"], check=True, timeout=60)


@pytest.fixture(scope="module")
def slurm() -> Iterator[LocalSlurm]:
    reason = cannot_run_reason()
    if reason:
        if os.environ.get("CI") == "true":
            pytest.fail(f"CI=true but the Slurm integration test cannot run: {reason}")
        pytest.skip(f"real-Slurm integration test: {reason}")
    # Under /tmp (not pytest's 0700 tmp dir): munged wants its socket's directories searchable.
    state = Path(tempfile.mkdtemp(prefix="dpscaling-slurm-", dir="/tmp"))
    started = subprocess.run([str(SCRIPTS / "up.sh"), str(state), "2"], capture_output=True, text=True, timeout=120)
    try:
        assert started.returncode == 0, f"tests/slurm/up.sh failed:\n{started.stdout}\n{started.stderr}"
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("DPSCALING_", "SBATCH_", "SLURM_"))},
            "SLURM_CONF": str(state / "etc" / "slurm.conf"),
            "PYTHONUNBUFFERED": "1",
            # As a user would configure a site: partitions and GPU node shape via the environment.
            "DPSCALING_CPU_PARTITION": "debug",
            "DPSCALING_GPU_PARTITION": "gpu",
            "DPSCALING_CPUS_PER_GPU": "1",  # two 1-CPU jobs at once on this 2-core node
        }
        yield LocalSlurm(state, env)
    finally:
        subprocess.run([str(SCRIPTS / "down.sh"), str(state)], timeout=60)


def snakemake(workdir: Path, *args: str, env: dict[str, str], timeout: int = 420) -> subprocess.CompletedProcess:
    command = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), *args]
    result = subprocess.run(command, cwd=workdir, env=env, capture_output=True, text=True, timeout=timeout)
    assert result.returncode == 0, f"snakemake {' '.join(args)} failed:\n{result.stdout[-5000:]}\n{result.stderr[-5000:]}"
    return result


def submissions(log: str) -> dict[str, str]:
    """{Slurm job id: rule} from Snakemake's log."""
    pattern = r"has been submitted with SLURM jobid (\d+) \(log: .*?/rule_(\w+)/"
    return {job: rule for job, rule in re.findall(pattern, log)}


def planned_remote_jobs(log: str) -> dict[str, int]:
    """{rule: jobs} from Snakemake's "Job stats" table, without local rules."""
    table = log.split("Job stats:", 1)[1].split("total", 1)[0]
    counts = {rule: int(n) for rule, n in re.findall(r"^(\w+)\s+(\d+)$", table, re.M)}
    # Failed jobs' logs (show-failed-logs) are quoted between lines of "="; skip them.
    own = re.sub(r"^={20,}\n.*?^={20,}\n", "", log, flags=re.M | re.S)
    local = set(re.findall(r"^localrule (\w+):$", own, re.M))
    return {rule: n for rule, n in counts.items() if rule not in local}


def outputs(workdir: Path, run_name: str) -> dict[str, object]:
    """Everything the workflow wrote, comparable between runs (timing columns dropped)."""
    root = workdir / "results" / run_name
    found: dict[str, object] = {}
    for path in sorted(root.rglob("*")):
        key = str(path.relative_to(root))
        if key.startswith(("logs/", "checkpoints/")) or not path.is_file() or path.name.startswith("."):
            continue
        if path.suffix == ".parquet":
            frame = pd.read_parquet(path)
            found[key] = frame.drop(columns=[c for c in frame.columns if TIMING_COLUMNS.search(c)])
        elif path.suffix == ".json":
            found[key] = json.loads(path.read_text())
    return found


def assert_same_outputs(ours: dict[str, object], reference: dict[str, object]) -> None:
    assert sorted(ours) == sorted(reference)
    for key, value in reference.items():
        if isinstance(value, pd.DataFrame):
            pd.testing.assert_frame_equal(ours[key], value, check_exact=True, obj=key)
        else:
            assert ours[key] == value, key


@pytest.fixture(scope="module")
def local_reference(tmp_path_factory):
    """``reference(target)``: the outputs of the same grid run locally with profiles/local."""
    done: dict[str, dict[str, object]] = {}

    def reference(name: str) -> dict[str, object]:
        if name not in done:
            workdir = tmp_path_factory.mktemp(f"local-{name}")
            env = {k: v for k, v in os.environ.items() if not k.startswith(("DPSCALING_", "SLURM_"))}
            snakemake(workdir, name, *LOCAL_PROFILE, *CONFIG, env=env)
            done[name] = outputs(workdir, RUN_NAME)
        return done[name]

    return reference


def test_grid_through_slurm_equals_local_run(slurm: LocalSlurm, local_reference, tmp_path: Path) -> None:
    """The grid through sbatch gives the local run's results. One training job is cancelled
    (scancel) after its first checkpoint: the profile's retry resubmits it with a doubled time
    limit and it resumes to the same curve."""
    command = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "train", *SLURM_PROFILES, *CONFIG]
    log_path = tmp_path / "snakemake.log"
    with open(log_path, "w") as log_file:
        run = subprocess.Popen(command, cwd=tmp_path, env=slurm.env, stdout=log_file, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        cancelled = cancel_after_first_checkpoint(slurm, tmp_path)
        assert run.wait(timeout=420) == 0, log_path.read_text()[-5000:]
    finally:
        if run.poll() is None:
            os.killpg(run.pid, signal.SIGKILL)
            run.wait()
    log = log_path.read_text()
    jobs = submissions(log)
    # Every non-local job went through sbatch (retries included), and slurmctld itself
    # recorded each under this run's job name.
    expected = planned_remote_jobs(log)
    expected["train_run"] = expected.get("train_run", 0) + log.count("Trying to restart job")
    assert sorted(jobs.values()) == sorted(rule for rule, n in expected.items() for _ in range(n))
    run_id = re.search(r"SLURM run ID: (\S+)", log).group(1)
    recorded = slurm.jobcomp()
    for job, rule in jobs.items():
        expected_state = "CANCELLED" if job == cancelled else "COMPLETED"
        assert recorded[job]["JobState"] == expected_state and recorded[job]["Name"] == run_id, recorded.get(job)
        # Training on the GPU partition (with a GPU), everything else on the CPU partition.
        assert recorded[job]["Partition"] == ("gpu" if rule == "train_run" else "debug"), (rule, recorded[job])
    train_jobs = sorted((j for j, r in jobs.items() if r == "train_run"), key=int)
    assert len(train_jobs) == 3, jobs  # two grid points + one retry
    retry = train_jobs[-1]
    # Retries scale the time limit with the attempt (runtime × 2 on the second).
    assert int(recorded[retry]["TimeLimit"]) == 2 * int(recorded[cancelled]["TimeLimit"])
    logs = "".join(p.read_text() for p in (tmp_path / "results" / RUN_NAME / "logs" / "train").rglob("*.log"))
    assert "resuming from verified step" in logs
    assert_same_outputs(outputs(tmp_path, RUN_NAME), local_reference("train"))


def cancel_after_first_checkpoint(slurm: LocalSlurm, workdir: Path) -> str:
    """scancel the first running training job once its first checkpoint is committed."""
    checkpoints = workdir / "results" / RUN_NAME / "checkpoints"

    def ready() -> str | None:
        for job in slurm.squeue():
            if job["state"] != "RUNNING" or "train_run" not in job["comment"]:
                continue
            # The plugin's comment: rule_train_run_wildcards_<mech>_<seq>_<model>_<batch>_<seed>_<nbr>_<lr>, the run
            # id's levels in order (dpscaling.workflow.layout.RUN_AXES).
            values = job["comment"].split("_wildcards_", 1)[1].split("_")
            keys = tuple(axis.name for axis in RUN_AXES)
            run_dir = checkpoints.joinpath(*(f"{k}={v}" for k, v in zip(keys, values)))
            if list((run_dir / "state").glob("*/commit_success.txt")):
                return job["id"]
        return None

    job = wait_for(ready, timeout=300)
    slurm.run("scancel", job)
    return job


def test_rerun_incomplete_after_controller_restart(slurm: LocalSlurm, local_reference, tmp_path: Path) -> None:
    """The head node dies with the controller mid-job: Snakemake is killed, slurmctld
    restarts and recovers its state, the running job finishes under it; then
    ``--unlock`` and ``--rerun-incomplete`` finish the workflow with the local results."""
    command = [sys.executable, "-m", "snakemake", "--snakefile", str(REPO / "Snakefile"), "data", *SLURM_PROFILES, *CONFIG]
    log_path = tmp_path / "first.log"
    with open(log_path, "w") as log:
        first = subprocess.Popen(command, cwd=tmp_path, env=slurm.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        # Wait for the job's own step (N.0): a controller that dies while srun is still
        # creating the step leaves that srun hanging until the job's time limit (measured).
        running = wait_for(slurm.running_steps, timeout=120)
    finally:
        os.killpg(first.pid, signal.SIGKILL)  # our own child's session: Snakemake and its helpers
        first.wait()
    slurm.restart_controller()
    assert {j["id"] for j in slurm.squeue()} >= set(running), "controller lost the running job"
    # The orphaned job runs on and finishes under the restarted controller.
    wait_for(lambda: not slurm.squeue(), timeout=120)
    (job,) = running
    assert slurm.jobcomp()[job]["JobState"] == "COMPLETED"

    snakemake(tmp_path, "--unlock", *SLURM_PROFILES, *CONFIG, env=slurm.env)
    result = snakemake(tmp_path, "data", "--rerun-incomplete", *SLURM_PROFILES, *CONFIG, env=slurm.env)
    # Recovery redoes only what the dead run had not finished: the orphaned job's output
    # was recorded as complete by its own job-side Snakemake (measured), so only
    # pack_sequences and the floor computed from its shards are submitted.
    assert sorted(submissions(result.stdout + result.stderr).values()) == ["pack_sequences", "unigram_floor"]
    assert_same_outputs(outputs(tmp_path, RUN_NAME), local_reference("data"))


MULTI_PROCESS_SNAKEFILE = """
rule all:
    input: "collective.json"

rule collective:
    output: "collective.json"
    resources:
        nodes=1, tasks=2, mpi="srun", tasks_per_gpu=0, gres="gpu:1",
        cpus_per_task=1, mem_mb=1500, runtime=10, slurm_partition="gpu",
    script: "collective.py"
"""

MULTI_PROCESS_SCRIPT = """
import json, sys
import numpy as np
from dpscaling.workflow.launch import launch_environment, relaunch_per_node
from dpscaling.train.distributed import maybe_initialize_distributed

code = relaunch_per_node()      # batch step: start one copy per task under srun
if code is not None:
    sys.exit(code)
assert launch_environment().multiprocess, launch_environment()
maybe_initialize_distributed(None)  # the training job's own start-up path
import jax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
mesh = Mesh(jax.devices(), ("data",))
local = np.full((1,), jax.process_index() + 1.0)
x = jax.make_array_from_process_local_data(NamedSharding(mesh, P("data")), local, (jax.process_count(),))
total = jax.jit(lambda a: a.sum(), out_shardings=NamedSharding(mesh, P()))(x)
if jax.process_index() == 0:
    with open(snakemake.output[0], "w") as f:
        json.dump({"processes": jax.process_count(), "devices": jax.device_count(), "sum": float(total)}, f)
"""


def test_multi_process_job_launches_one_jax_process_per_task(slurm: LocalSlurm, tmp_path: Path) -> None:
    """The multi-node shape of a training job (tasks>1, mpi, gres) through the plugin: the
    job re-executes itself under srun and the copies form one jax.distributed runtime.
    (One node here, two tasks standing in for two nodes.)"""
    (tmp_path / "Snakefile").write_text(MULTI_PROCESS_SNAKEFILE)
    (tmp_path / "collective.py").write_text(MULTI_PROCESS_SCRIPT)
    command = [sys.executable, "-m", "snakemake", "--executor", "slurm", "--jobs", "1",
               "--profile", str(REPO / "tests" / "profiles" / "slurm-ci")]
    result = subprocess.run(command, cwd=tmp_path, env=slurm.env, capture_output=True, text=True, timeout=300)
    log = result.stdout + result.stderr
    assert result.returncode == 0, log[-5000:]
    (job,) = submissions(log)
    assert slurm.jobcomp()[job]["ProcCnt"] == "2"
    # Two processes, one CPU device each, summed 1 + 2 across processes.
    assert json.loads((tmp_path / "collective.json").read_text()) == {"processes": 2, "devices": 2, "sum": 3.0}


def wait_for(condition, timeout: float, interval: float = 0.2):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := condition():
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {condition}")
