"""mpirun's rsh agent for the nccl phase (containers/kit/bin/kubectl-rsh.sh), run for real with a stand-in
`kubectl` on PATH that records its arguments and runs the exec'd command locally."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from pdkit.render import fabric as manifests

ROOT = Path(__file__).resolve().parents[1]
RSH = ROOT / "containers" / "kit" / "bin" / manifests.RSH_AGENT

# `kubectl get pods --selector S --output jsonpath=...` prints the pod name; `kubectl exec POD --container C
# -- /bin/sh -c CMD` runs CMD here. Every call is appended to $KUBECTL_LOG.
FAKE_KUBECTL = """#!/usr/bin/env bash
printf '%s\\n' "$*" >>"$KUBECTL_LOG"
if [ "$1" = get ]; then
  [ -n "${NO_POD:-}" ] || printf 'nccl-abc123-2-x7k2p'
  exit 0
fi
while [ "$1" != -- ]; do shift; done
shift
exec "$@"
"""


@pytest.fixture
def run(tmp_path):
    (tmp_path / "kubectl").write_text(FAKE_KUBECTL)
    (tmp_path / "kubectl").chmod(0o755)
    log = tmp_path / "calls.log"

    def _run(*args: str, **env: str) -> tuple[subprocess.CompletedProcess[str], list[str]]:
        full_env = {"PATH": f"{tmp_path}:{os.environ['PATH']}", "KUBECTL_LOG": str(log), **env}
        done = subprocess.run(["bash", str(RSH), *args], env=full_env, capture_output=True, text=True, timeout=30, check=False)
        return done, log.read_text().splitlines() if log.exists() else []

    return _run


def test_finds_the_pod_of_a_job_index_by_the_job_controllers_labels(run):
    """Indexed Job pods are named <job>-<index>-<random> and labelled batch.kubernetes.io/job-name and
    batch.kubernetes.io/job-completion-index (Kubernetes >= 1.28, https://kubernetes.io/docs/concepts/workloads/controllers/job/#completion-mode);
    mpirun names the host by the DNS name <job>-<index>.<service> the headless Service gives it."""
    done, calls = run("nccl-abc123-2.nccl-abc123", "true")
    assert done.returncode == 0, done.stderr
    assert calls[0] == (
        "get pods --selector batch.kubernetes.io/job-name=nccl-abc123,batch.kubernetes.io/job-completion-index=2 "
        "--output jsonpath={.items[0].metadata.name}"
    )
    assert calls[1].startswith("exec nccl-abc123-2-x7k2p --container check -- /bin/sh -c ")


def test_runs_the_command_like_ssh_and_returns_its_exit_code(run):
    """Open MPI's rsh launcher passes the orted command as several words that ssh joins for the remote
    shell (orte/mca/plm/rsh); the agent must do the same and hand back the exit status."""
    done, _ = run("nccl-abc123-2.nccl-abc123", "echo", "hello;", "exit", "3")
    assert done.returncode == 3
    assert done.stdout == "hello\n"


def test_container_name_is_the_one_the_job_renders(run, plan, th):
    """kubectl exec without --container picks the default container; name it, so a sidecar never gets the daemon."""
    spec = next(s for s in manifests.render(plan, th, image="i", run_id="abc123").jobs if s.key == "nccl")
    name = spec.job["spec"]["template"]["spec"]["containers"][0]["name"]
    _, calls = run("nccl-abc123-1.nccl-abc123", "true")
    assert f"--container {name} --" in calls[1]


def test_a_missing_pod_fails_without_exec(run):
    done, calls = run("nccl-abc123-2.nccl-abc123", "true", NO_POD="1")
    assert done.returncode == 255
    assert "no pod for nccl-abc123 index 2" in done.stderr
    assert len(calls) == 1


@pytest.mark.parametrize("host", ["nccl", "nccl-abc.svc", "-3"])
def test_a_host_that_is_not_job_index_is_refused(run, host):
    done, calls = run(host, "true")
    assert done.returncode == 2
    assert calls == []


def test_launcher_script_waits_for_every_worker_runs_both_tests_then_releases_the_workers(tmp_path):
    """Pod 0's script (manifests.nccl_script) run in bash with stand-ins for the rsh agent and mpirun:
    it reaches each worker before mpirun, runs each nccl test once, and drops the done file in every worker."""
    log = tmp_path / "calls.log"
    for tool in (manifests.RSH_AGENT, "mpirun"):
        (tmp_path / tool).write_text(f'#!/usr/bin/env bash\nprintf "{tool} %s\\n" "$*" >>"{log}"\n')
        (tmp_path / tool).chmod(0o755)
    script = manifests.nccl_script(job="nccl-x", pods=3, gpus_per_node=8)
    env = {"PATH": f"{tmp_path}:{os.environ['PATH']}", "JOB_COMPLETION_INDEX": "0", "NODE_NAME": "n0"}
    done = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    calls = [[*line.split(" ", 2)[:2], line.split(" ", 2)[2][:40]] for line in log.read_text().splitlines()]
    rsh = manifests.RSH_AGENT
    assert [c[:2] for c in calls] == [
        [rsh, "nccl-x-1.nccl-x"],
        [rsh, "nccl-x-2.nccl-x"],
        ["mpirun", "-np"],
        ["mpirun", "-np"],
        [rsh, "nccl-x-1.nccl-x"],
        [rsh, "nccl-x-2.nccl-x"],
    ]
    assert calls[-1][2].startswith(f"touch {manifests.WORKER_DONE_FILE}")
    assert "pdkit-end test=all_reduce_perf status=0" in done.stdout
    assert "pdkit-end test=alltoall_perf status=0" in done.stdout


def test_launcher_releases_the_workers_it_can_reach_when_one_never_answers(tmp_path):
    """A worker that never becomes reachable fails the setup row; the others must not idle until the
    Job's deadline, so pod 0 still drops the done file in every worker before it exits."""
    log = tmp_path / "calls.log"
    # The rsh agent fails `true` on worker 2 (never reachable) and succeeds otherwise.
    (tmp_path / manifests.RSH_AGENT).write_text(f'#!/usr/bin/env bash\nprintf "%s\\n" "$*" >>"{log}"\n[ "$1 $2" != "x-2.x true" ]\n')
    (tmp_path / manifests.RSH_AGENT).chmod(0o755)
    script = manifests.nccl_script(job="x", pods=3, gpus_per_node=8).replace(f"SECONDS + {manifests.WORKER_WAIT_SECONDS}", "SECONDS + 0")
    env = {"PATH": f"{tmp_path}:{os.environ['PATH']}", "JOB_COMPLETION_INDEX": "0", "NODE_NAME": "n0"}
    done = subprocess.run(["bash", "-c", script], env=env, capture_output=True, text=True, timeout=60, check=False)
    assert "pdkit-end test=setup status=1" in done.stdout
    calls = log.read_text().splitlines()
    assert calls[-2:] == [f"x-1.x touch {manifests.WORKER_DONE_FILE}", f"x-2.x touch {manifests.WORKER_DONE_FILE}"]
