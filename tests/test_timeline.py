"""`pdkit timeline`: start-up phases read from EC2, Kubernetes objects and events, and the programs' own log lines.

The fixture bundle (tests/fixtures/timeline/cold-boot, README there) is built in the real formats:
the DescribeInstances / DescribeCapacityReservations response shapes of the EC2 API model, Node, Pod
and Event objects as the Kubernetes API serves them (camelCase JSON), the kubelet's event messages,
and log lines with the exact text of SGLang 0.5.23, smg 1.13.0 and pdkit's stager.
"""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pdkit.cli.context import load_plan
from pdkit.cli.main import main
from pdkit.ops.timeline import bundle as bundles
from pdkit.ops.timeline import phases
from pdkit.ops.timeline.marks import log_marks, parse_time
from tests.fixtures.cmd_support import CR, real_profile

pytest_plugins = ["tests.fixtures.cmd_fixtures"]

FIXTURE = Path(__file__).parent / "fixtures" / "timeline" / "cold-boot"
PROFILE = "glm51-fp8-2p2d"


def _timeline(bundle: Path = FIXTURE) -> phases.Timeline:
    return phases.build(load_plan(PROFILE), bundles.read(bundle))


def _minutes(start: str, end: str) -> float:
    return (parse_time(end) - parse_time(start)).total_seconds() / 60  # type: ignore[operator]


def _copy(tmp_path: Path) -> Path:
    copy = tmp_path / "bundle"
    shutil.copytree(FIXTURE, copy)
    return copy


def _edit(path: Path, change: Any) -> None:
    data = json.loads(path.read_text())
    change(data)
    path.write_text(json.dumps(data))


def test_sglang_startup_lines_are_recognised_with_their_exact_text():
    """SGLang 0.5.23 prints these (model_runner.py load_model; cuda_graph_setup.py capture_decode_graph;
    deep_gemm_wrapper/compile_utils.py; http_server.py _wait_and_warmup), each behind configure_logger's
    "[%(asctime)s TPn] " prefix; Kubernetes adds its RFC 3339 time with timestamps=true."""
    lines = [
        "2026-12-01T14:17:30.010000000Z [2026-12-01 14:17:30 TP0] Load weight begin. avail mem=138.92 GB",
        "2026-12-01T14:19:05.300000000Z [2026-12-01 14:19:05 TP0] Load weight end. elapsed=88.21 s, type=GlmMoeDsaForCausalLM, "
        "avail mem=91.05 GB, mem usage=47.87 GB.",
        "2026-12-01T14:19:20.100000000Z [2026-12-01 14:19:20 TP0] Try DeepGEMM JIT Compiling for <GEMM_NT_F8F8BF16> N=7168, K=2048, "
        "num_groups=1 with all Ms. It only takes a little time (typically 1 sec) if you have run `python3 -m sglang.compile_deep_gemm`. ",
        "2026-12-01T14:29:45.000000000Z [2026-12-01 14:29:45 TP0] Capture target decode CUDA graph begin. backend=full, "
        "num_tokens_per_req=1, avail mem=20.31 GB",
        "2026-12-01T14:31:02.000000000Z [2026-12-01 14:31:02 TP0] Capture target decode CUDA graph end. bs=[1, 2, 4], elapsed=77.40 s, "
        "mem usage=1.92 GB, avail mem=18.39 GB.",
        "2026-12-01T14:31:40.500000000Z [2026-12-01 14:31:40] The server is fired up and ready to roll!",
    ]
    marks = log_marks(lines)
    assert [m.kind for m in marks] == ["load_begin", "load_end", "deepgemm", "graph_begin", "graph_end", "ready"]
    assert marks[0].at == datetime(2026, 12, 1, 14, 17, 30, 10000, tzinfo=UTC)


def test_older_sglang_graph_lines_and_router_registration():
    """Before the prefill/decode graph split SGLang printed "Capture cuda graph begin." (cuda_graph_runner.py);
    smg 1.13.0 prints "Registered worker {url} (model: {model}) with ID {id}" (strings of smg_rs.abi3.so)."""
    marks = log_marks(
        [
            "2026-12-01T14:29:45Z [2026-12-01 14:29:45 TP0] Capture cuda graph begin. This can take up to several minutes. avail mem=20.31 GB",
            "2026-12-01T14:32:10.771204Z 2026-12-01T14:32:10.771180Z  INFO smg::workflow: Registered worker "
            "http://glm51-2p2d-prefill-0.glm51-2p2d-prefill.pd-serving.svc:30000 (model: zai-org/GLM-5.1-FP8) with ID 6f1c",
        ]
    )
    assert next((m.kind, m.detail) for m in marks)[0] == "graph_begin"
    assert marks[1].kind == "registered"
    assert marks[1].detail == "http://glm51-2p2d-prefill-0.glm51-2p2d-prefill.pd-serving.svc:30000"


def test_stager_lines_mark_begin_and_end_not_progress():
    """pdkit/pods/staging.py logs "staging N files (...)" before, "staged X/Y GB (...)" as progress and
    "staged N files (X GB) in S s; ..." at the end (format "%(asctime)s %(message)s")."""
    marks = log_marks(
        [
            "2026-12-01T14:11:24.4Z 2026-12-01 14:11:24,148 staging 142 files (756.9 GB) from s3://b/models/m/main/ to /models/m; "
            "0 files (0.0 GB) already verified",
            "2026-12-01T14:11:29.5Z 2026-12-01 14:11:29,333 staged 21.4/756.9 GB (3%), 2.38 GB/s, ETA 5.1 min, 3/142 files",
            "2026-12-01T14:16:35.2Z 2026-12-01 14:16:35,185 staged 142 files (756.9 GB) in 311 s; 0 reused, 0 stray files removed",
        ]
    )
    assert [m.kind for m in marks] == ["stage_begin", "stage_end"]
    assert marks[1].detail.startswith("staged 142 files (756.9 GB) in 311 s")


def test_node_join_runs_from_ec2_launch_time_to_the_ready_condition():
    """EC2 LaunchTime (DescribeInstances) to the node's Ready condition lastTransitionTime; the instance is
    matched to its node through spec.providerID (aws:///<az>/<instance id>)."""
    node = next(n for n in _timeline().nodes if n.where == "i-0a1b2c3d4e5f60004")
    assert node.role == "decode"
    assert node.phases[0].minutes == pytest.approx(_minutes("2026-12-01T14:01:12Z", "2026-12-01T14:09:31Z"))


def test_image_pull_ends_at_the_successful_pull_not_at_a_later_already_present_event():
    """The kubelet records a Pulled event for every container: "Successfully pulled image ... in D (D including
    waiting)" when it fetched, "Container image ... already present on machine" otherwise (kubelet images/image_manager.go)."""
    pod = next(p for p in _timeline().pods if p.name == "glm51-2p2d-decode-0")
    pull = pod.phase("image pull")
    assert pull is not None
    assert pull.minutes == pytest.approx(_minutes("2026-12-01T14:09:01Z", "2026-12-01T14:11:40Z"))
    assert "pulled in 2m38.118s" in pull.detail


def test_leader_phases_from_stager_and_sglang_lines_and_router_registration():
    t = _timeline()
    pod = next(p for p in t.pods if p.name == "glm51-2p2d-decode-0")
    assert pod.phase("weights staging").minutes == pytest.approx(  # type: ignore[union-attr]
        _minutes("2026-12-01T14:11:43.412345Z", "2026-12-01T14:17:05.202Z")
    )
    assert pod.phase("model load").minutes == pytest.approx(_minutes("2026-12-01T14:18:02.01Z", "2026-12-01T14:19:40.7Z"))  # type: ignore[union-attr]
    assert pod.phase("JIT, CUDA graphs, warm-up").end == parse_time("2026-12-01T14:33:38.5Z")  # type: ignore[union-attr]
    assert pod.phase("router registration").end == parse_time("2026-12-01T14:34:12.771204Z")  # type: ignore[union-attr]
    worker = next(p for p in t.pods if p.name == "glm51-2p2d-decode-0-1")
    assert worker.phase("router registration") is None  # only leaders are router workers


def test_first_token_is_measured_from_the_block_start_and_the_goal_is_judged():
    """Origin: the reservation's StartDate (DescribeCapacityReservations); first token: the last leader registered."""
    t = _timeline()
    assert t.origin == datetime(2026, 12, 1, 14, 0, tzinfo=UTC)
    assert t.first_token_minutes == pytest.approx(_minutes("2026-12-01T14:00:00Z", "2026-12-01T14:34:12.771204Z"))
    assert t.goal_met is False
    assert t.critical_path[0].name == "waiting for the instance"


def test_phases_over_the_plans_budget_are_flagged_and_a_cold_compile_gets_its_minutes():
    plan = load_plan(PROFILE)
    rows = {b.phase: b for b in _timeline().budget}
    assert rows["weights staging"].planned_minutes == plan.estimates.staging_minutes
    assert rows["weights staging"].state == "OVER"  # 5.4 min measured against 5.0 planned
    assert rows["node join"].state == "OK"
    # SGLang compiled DeepGEMM itself (no precompile step ran): the first-boot budget applies.
    assert rows["JIT, CUDA graphs, warm-up"].planned_minutes == pytest.approx(phases.WARMUP_MINUTES + plan.estimates.precompile_minutes)
    assert rows["DeepGEMM precompile"].state == "-"


def test_without_a_router_registration_there_is_no_first_token(tmp_path: Path):
    copy = _copy(tmp_path)
    shutil.rmtree(copy / "logs" / "glm51-2p2d-router-7d9c8b6f5-x2x7q")
    t = _timeline(copy)
    assert t.first_token is None
    assert t.goal_met is None
    assert t.missing_workers == ["glm51-2p2d-prefill-0", "glm51-2p2d-decode-0"]


# --- the bundle -------------------------------------------------------------------------------------------


def _api(data: Any) -> SimpleNamespace:
    """What the generated client returns with _preload_content=False: the HTTP response, body in .data."""
    return SimpleNamespace(data=data if isinstance(data, bytes) else json.dumps(data).encode())


class FakeCore:
    """CoreV1Api stand-in serving the fixture's objects as the API server would (raw JSON)."""

    def __init__(self, root: Path, *, drop_events: int = 0) -> None:
        self.root = root
        self.drop_events = drop_events
        self.calls: list[tuple[str, tuple[Any, ...], dict[str, Any]]] = []

    def _json(self, rel: str) -> dict[str, Any]:
        return json.loads((self.root / rel).read_text())

    def list_node(self, **kw: Any) -> SimpleNamespace:
        self.calls.append(("list_node", (), kw))
        return _api(self._json("kube/nodes.json"))

    def list_namespaced_pod(self, namespace: str, **kw: Any) -> SimpleNamespace:
        self.calls.append(("list_namespaced_pod", (namespace,), kw))
        return _api(self._json("kube/pods.json"))

    def list_namespaced_event(self, namespace: str, **kw: Any) -> SimpleNamespace:
        self.calls.append(("list_namespaced_event", (namespace,), kw))
        events = self._json("kube/events.json")
        kind = "Node" if namespace == "default" else "Pod"
        events["items"] = [e for e in events["items"] if e["involvedObject"]["kind"] == kind][self.drop_events :]
        return _api(events)

    def read_namespaced_pod_log(self, name: str, namespace: str, **kw: Any) -> SimpleNamespace:
        self.calls.append(("read_namespaced_pod_log", (name, namespace), kw))
        return _api((self.root / "logs" / name / f"{kw['container']}.log").read_bytes())


def _stub_ec2(aws: Any) -> None:
    ec2 = aws("ec2")
    filters = [
        {"Name": "tag:eks:cluster-name", "Values": ["glm51-2p2d"]},
        {"Name": "tag:eks:nodegroup-name", "Values": ["glm51-2p2d-prefill", "glm51-2p2d-decode"]},
    ]
    ec2.add_response("describe_instances", json.loads((FIXTURE / "ec2/describe-instances.json").read_text()), {"Filters": filters})
    reservation = json.loads((FIXTURE / "ec2/capacity-reservation.json").read_text())
    reservation["CapacityReservations"][0]["CapacityReservationId"] = CR
    ec2.add_response("describe_capacity_reservations", reservation, {"CapacityReservationIds": [CR]})


def _connect(monkeypatch: pytest.MonkeyPatch, core: FakeCore) -> None:
    from pdkit.ops import kube

    monkeypatch.setattr(kube, "connect", lambda context: kube.Kube(core=core, apps=None, custom=None))


def test_capture_writes_a_bundle_the_offline_report_reads(aws, monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """The live path: DescribeInstances by the node groups' tags and DescribeCapacityReservations (Stubber checks
    both against the EC2 model), nodes, pods, events and each started container's log with timestamps=true."""
    _stub_ec2(aws)
    core = FakeCore(FIXTURE)
    _connect(monkeypatch, core)
    out = tmp_path / "bundle"
    assert main(["timeline", "--profile", real_profile(tmp_path), "--capture", str(out), "--output", "json"]) == 0
    aws.verify()
    logs = [c for c in core.calls if c[0] == "read_namespaced_pod_log"]
    assert all(c[2]["timestamps"] is True and c[2]["_preload_content"] is False for c in logs)
    assert {(c[1][0], c[2]["container"]) for c in logs} >= {("glm51-2p2d-decode-0", "stage-weights"), ("glm51-2p2d-decode-0", "sglang")}
    node_events = next(c for c in core.calls if c[0] == "list_namespaced_event" and c[1] == ("default",))
    assert node_events[2]["field_selector"] == "involvedObject.kind=Node"
    assert main(["timeline", "--profile", real_profile(tmp_path), "--from", str(out), "--output", "json"]) == 0
    read_back = bundles.read(out)
    assert len(read_back.events) == len(json.loads((FIXTURE / "kube/events.json").read_text())["items"])
    assert read_back.reservation is not None
    assert read_back.instances[0]["LaunchTime"].startswith("2026-12-01T14:00:41")


def test_repeated_captures_keep_expired_events_once(aws, monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """kube-apiserver drops events an hour after they last occurred (--event-ttl 1h): a later capture that no
    longer sees the first events must not lose them, and events seen twice are kept once (by metadata.uid)."""
    out = tmp_path / "bundle"
    profile = real_profile(tmp_path)
    for drop in (0, 5):
        _stub_ec2(aws)
        _connect(monkeypatch, FakeCore(FIXTURE, drop_events=drop))
        assert main(["timeline", "--profile", profile, "--capture", str(out), "--output", "json"]) == 0
    events = bundles.read(out).events
    assert len(events) == len(json.loads((FIXTURE / "kube/events.json").read_text())["items"])
    assert len({e["metadata"]["uid"] for e in events}) == len(events)
    lines = bundles.read(out).logs[("glm51-2p2d-decode-0", "sglang")]
    assert len(lines) == len(set(lines))


def test_report_from_the_fixture_bundle_says_where_the_minutes_went(capsys: pytest.CaptureFixture[str]):
    assert main(["timeline", "--profile", PROFILE, "--from", str(FIXTURE)]) == 0
    out = capsys.readouterr().out
    assert "the 15-minute goal was MISSED" in out
    assert "Where the minutes went" in out
    assert "weights staging" in out


def test_a_directory_that_is_not_a_bundle_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]):
    assert main(["timeline", "--profile", PROFILE, "--from", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert "not a timeline bundle" in err
    assert "Fix:" in err


def test_a_precompile_step_is_its_own_phase_and_keeps_the_warm_boot_budget(tmp_path: Path):
    """pdkit/pods/compile_cache.py logs "cold compile cache: running the DeepGEMM precompile (up to %.0f min): %s"
    and "DeepGEMM precompile finished in %.1f min" from its init container; the server then finds the kernels."""
    copy = _copy(tmp_path)
    (copy / "logs" / "glm51-2p2d-decode-0" / "warm-compile-cache.log").write_text(
        "2026-12-01T14:17:06.000000000Z 2026-12-01 14:17:06,001 cold compile cache: running the DeepGEMM precompile (up to 40 min): "
        "python3 -m sglang.compile_deep_gemm --model-path /models/zai-org/GLM-5.1-FP8 --tp 16\n"
        "2026-12-01T14:29:06.000000000Z 2026-12-01 14:29:06,001 DeepGEMM precompile finished in 12.0 min\n"
    )
    plan = load_plan(PROFILE)
    t = phases.build(plan, bundles.read(copy))
    pod = next(p for p in t.pods if p.name == "glm51-2p2d-decode-0")
    assert pod.phase("DeepGEMM precompile").minutes == pytest.approx(12.0)  # type: ignore[union-attr]
    rows = {b.phase: b for b in t.budget}
    assert rows["DeepGEMM precompile"].planned_minutes == plan.estimates.precompile_minutes
    assert rows["DeepGEMM precompile"].state == "OK"
    assert rows["JIT, CUDA graphs, warm-up"].planned_minutes == phases.WARMUP_MINUTES


def test_a_recreated_group_is_read_from_its_newest_pods(tmp_path: Path):
    """LeaderWorkerSet recreates a failed group's pods under the same names (RecreateGroupOnPodRestart); the bundle
    keeps the earlier pod objects and the log file holds both incarnations' lines."""
    copy = _copy(tmp_path)
    old_uid = "9b1d3c4e-0000-4000-8000-0000000000aa"

    def add_old_pod(pods: dict[str, Any]) -> None:
        old = json.loads(json.dumps(next(p for p in pods["items"] if p["metadata"]["name"] == "glm51-2p2d-decode-0")))
        old["metadata"]["uid"] = old_uid
        old["metadata"]["creationTimestamp"] = "2026-12-01T12:00:00Z"
        pods["items"].insert(0, old)

    _edit(copy / "kube" / "pods.json", add_old_pod)
    log = copy / "logs" / "glm51-2p2d-decode-0" / "sglang.log"
    log.write_text("2026-12-01T12:20:00.000000000Z [2026-12-01 12:20:00 TP0] Load weight begin. avail mem=138.92 GB\n" + log.read_text())
    router = copy / "logs" / "glm51-2p2d-router-7d9c8b6f5-x2x7q" / "router.log"
    router.write_text(
        "2026-12-01T12:40:00.000000000Z 2026-12-01T12:40:00.000000Z  INFO smg::workflow: Registered worker "
        "http://glm51-2p2d-decode-0.glm51-2p2d-decode.pd-serving.svc:30000 (model: zai-org/GLM-5.1-FP8) with ID 1\n" + router.read_text()
    )
    t = _timeline(copy)
    decode = [p for p in t.pods if p.name == "glm51-2p2d-decode-0"]
    assert len(decode) == 1
    assert decode[0].phase("model load").start == parse_time("2026-12-01T14:18:02.01Z")  # type: ignore[union-attr]
    assert t.first_token == parse_time("2026-12-01T14:34:12.771204Z")


def test_events_k8s_io_events_are_timed_by_event_time(tmp_path: Path):
    """Events written through events.k8s.io/v1 read back in core/v1 with firstTimestamp null and eventTime set
    (Kubernetes API reference, Event v1 core: eventTime "Time when this Event was first observed")."""
    copy = _copy(tmp_path)

    def to_new_api(events: dict[str, Any]) -> None:
        for e in events["items"]:
            if e["reason"] == "Pulling" and e["involvedObject"]["name"] == "glm51-2p2d-decode-0":
                e["eventTime"], e["firstTimestamp"], e["lastTimestamp"] = "2026-12-01T14:09:01.000000Z", None, None
                e["metadata"]["creationTimestamp"] = "2026-12-01T14:09:30Z"  # stored a little later than observed

    _edit(copy / "kube" / "events.json", to_new_api)
    pod = next(p for p in _timeline(copy).pods if p.name == "glm51-2p2d-decode-0")
    assert pod.phase("image pull").start == parse_time("2026-12-01T14:09:01Z")  # type: ignore[union-attr]


def test_without_a_block_the_origin_is_the_first_launch_and_a_late_first_capture_is_flagged(tmp_path: Path):
    copy = _copy(tmp_path)
    (copy / "ec2" / "capacity-reservation.json").unlink()
    _edit(copy / "meta.json", lambda meta: meta.update(captures=["2026-12-01T15:30:00+00:00"]))
    t = _timeline(copy)
    assert t.origin == parse_time("2026-12-01T14:00:41Z")
    assert "first GPU instance launch" in t.origin_label
    assert len(t.warnings) == 1
    assert f"keeps events for {phases.EVENT_TTL_MINUTES} min" in t.warnings[0]


def test_first_token_follows_leaders_the_router_found_by_label(tmp_path: Path):
    """With the DisaggregatedSet the leader pods are named per revision
    (<set>-<slice>-<revision>-<role>-<group>, kubernetes-sigs/lws v0.10.0 docs/examples/disaggregatedset.md)
    and smg's label discovery registers each as http://<pod IP>:<port> (sgl-router service_discovery.rs
    PodInfo::from_pod: `format!("http://{}:{}", pod_ip, config.port)`): the leaders are the pods with
    worker index 0, matched to the router's log by their IP."""
    copy = _copy(tmp_path)
    ips = {"prefill": "10.0.33.11", "decode": "10.0.33.12"}

    def rename(raw: dict[str, Any]) -> None:
        for pod in raw["items"]:
            labels = pod["metadata"].get("labels") or {}
            role = labels.get("pdkit/role")
            if role in ips:
                pod["metadata"]["name"] = pod["metadata"]["name"].replace(f"glm51-2p2d-{role}", f"glm51-2p2d-pd-0-5d8f6c9b7-{role}")
                if labels.get("leaderworkerset.sigs.k8s.io/worker-index") == "0":
                    pod["status"]["podIP"] = ips[role]

    _edit(copy / "kube" / "pods.json", rename)
    log = copy / "logs" / "glm51-2p2d-router-7d9c8b6f5-x2x7q" / "router.log"
    text = log.read_text()
    for role, ip in ips.items():
        text = text.replace(f"http://glm51-2p2d-{role}-0.glm51-2p2d-{role}.pd-serving.svc:30000", f"http://{ip}:30000")
    log.write_text(text)
    t = _timeline(copy)
    assert t.missing_workers == []
    assert t.first_token == _timeline().first_token == parse_time("2026-12-01T14:34:12.771204Z")
