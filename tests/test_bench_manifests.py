"""The benchmark Job: valid, on a system node, no GPU, and bench_serving flags that SGLang 0.5.23 accepts."""

from __future__ import annotations

import re
import shlex

import pytest

from pdkit.errors import KitError
from pdkit.model import plan as plan_mod
from pdkit.model import profile_files
from pdkit.ops.bench.run import deadline_seconds
from pdkit.render import bench as manifests
from pdkit.render.serving import manifests as serving
from tests.fixtures.fabric.fakes import BENCH

IMAGE = "registry.example/sglang-efa:v1"


@pytest.fixture(scope="module")
def objs(plan):
    return manifests.render(plan, image=IMAGE, run_id="r1", levels=plan.bench.concurrency, deadline_s=7200)


def _container(objs):
    return objs[1]["spec"]["template"]["spec"]["containers"][0]


def _argv_lines(objs):
    return [shlex.split(line) for line in _container(objs)["command"][2].splitlines() if "sglang.bench_serving" in line]


def test_one_bench_serving_run_per_profile_concurrency_level(plan, objs):
    runs = _argv_lines(objs)
    assert [int(a[a.index("--max-concurrency") + 1]) for a in runs] == list(plan.bench.concurrency)


def test_pd_mode_random_fixed_lengths_and_warmup(plan, objs):
    b = plan.bench
    argv = _argv_lines(objs)[0]
    assert argv[:5] == ["python3", "-m", "sglang.bench_serving", "--backend", "sglang"]
    assert "--pd-separated" in argv
    opts = {argv[i]: argv[i + 1] for i in range(len(argv) - 1) if argv[i].startswith("--") and not argv[i + 1].startswith("--")}
    assert opts["--dataset-name"] == "random"
    assert opts["--random-range-ratio"] == "1.0"
    assert opts["--random-input-len"] == str(b.input_len)
    assert opts["--random-output-len"] == str(b.output_len)
    assert opts["--num-prompts"] == str(b.prompts_per_level)
    assert opts["--warmup-requests"] == str(b.warmup_requests)
    assert opts["--output-file"] == "/results/bench-c1.jsonl"
    assert "--output-details" in argv  # per-request ITLs: the only source of max ITL in JSON
    assert opts["--model"] == plan.model.id
    assert opts["--tokenizer"] == plan.model.id


def test_every_flag_is_one_sglang_0_5_23_accepts(objs):
    """Checked against the real `--help` of bench_serving (fixture copied from the 0.5.23 wheel)."""
    help_text = (BENCH / "bench_serving_help.txt").read_text()
    known = set(re.findall(r"--[a-z][a-z0-9-]*", help_text))
    for argv in _argv_lines(objs):
        flags = {a for a in argv if a.startswith("--")}
        assert flags <= known, flags - known


def test_unknown_workload_is_one_line(plan):
    with pytest.raises(KitError, match=r"unknown workload 'sharegpt'\. Fix: use one of random, shared-prefix"):
        manifests.render(plan, image=IMAGE, run_id="r1", levels=(1,), deadline_s=60, workload="sharegpt")


def test_the_flag_check_can_fail():
    help_text = (BENCH / "bench_serving_help.txt").read_text()
    assert "--random-range" not in set(re.findall(r"--[a-z][a-z0-9-]*", help_text))
    assert "--pd-separated" in help_text


def test_targets_the_router_service_the_serving_renderer_makes(plan, objs):
    svc = serving.router_service(plan)
    url = f"http://{svc['metadata']['name']}.{svc['metadata']['namespace']}.svc:{svc['spec']['ports'][0]['port']}"
    assert manifests.router_url(plan) == url
    assert f"--base-url {url}" in _container(objs)["command"][2]
    assert objs[1]["metadata"]["namespace"] == plan.namespace


def test_runs_on_a_system_node_without_gpu_or_efa(plan, objs):
    pod = objs[1]["spec"]["template"]["spec"]
    assert pod["nodeSelector"] == plan.system_node_labels
    assert "tolerations" not in pod
    res = _container(objs)["resources"]
    assert not any("nvidia.com" in k or "efa" in k for k in {**res["requests"], **res["limits"]})


def test_pod_security_is_restricted(objs):
    """No privilege and no host access: tests/test_pod.py, for every renderer; here the pod's own context."""
    assert objs[1]["spec"]["template"]["spec"]["securityContext"] == {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}


def test_compact_script_is_mounted_from_the_config_map(objs):
    cm, job = objs
    assert cm["data"]["compact.py"] == manifests.COMPACT_SOURCE.read_text()
    volume = next(v for v in job["spec"]["template"]["spec"]["volumes"] if v["name"] == "scripts")
    assert volume["configMap"]["name"] == cm["metadata"]["name"]
    assert "python3 /opt/pdkit/compact.py /results/bench-c64.jsonl 64" in _container(objs)["command"][2]


def test_deadline_and_levels(plan):
    objs = manifests.render(plan, image=IMAGE, run_id="r", levels=(16, 4, 4), deadline_s=123)
    assert objs[1]["spec"]["activeDeadlineSeconds"] == 123
    assert [int(a[a.index("--max-concurrency") + 1]) for a in _argv_lines(objs)] == [4, 16]
    with pytest.raises(KitError, match="must be positive"):
        manifests.render(plan, image=IMAGE, run_id="r", levels=(0,), deadline_s=1)


def test_deadline_from_the_profile(plan):
    """Every request at the p99 alarm limits: 10 s + 512 x 40 ms, ceil((200+16)/c) requests in series, plus slack."""
    per_request = 10 + 512 * 0.04
    expected = sum(-(-216 // c) * per_request for c in (1, 4, 16, 64))
    assert deadline_seconds(plan, (1, 4, 16, 64)) == int(expected) + 1800


def test_arm_system_nodes_are_refused(raw_with):
    p = plan_mod.build(profile_files.parse(raw_with("cluster.system_nodes.instance_type", "m7g.2xlarge")))
    with pytest.raises(KitError, match="serving image is linux/amd64"):
        manifests.render(p, image=IMAGE, run_id="r", levels=(1,), deadline_s=1)


def test_tokenizer_override(plan):
    objs = manifests.render(plan, image=IMAGE, run_id="r", levels=(1,), deadline_s=1, tokenizer="/models/tok")
    assert "--tokenizer /models/tok" in _container(objs)["command"][2]
