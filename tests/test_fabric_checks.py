"""PASS/FAIL per check from the Jobs' logs, each failure with its next step (fixtures: SYNTHETIC)."""

from __future__ import annotations

import pytest

from pdkit.ops.fabric import checks
from pdkit.ops.fabric.checks import FAIL, PASS, SKIP
from pdkit.ops.kube import JobRun
from tests.fixtures.fabric.fakes import fixture, nodes


def _by_name(rows):
    return {(r.name, r.target): r for r in rows}


def _efa(logs, **kw):
    return JobRun(logs=logs, nodes={0: "node-a", 1: "node-b"}, finished=True, **kw)


def test_efa_all_good(plan, th):
    rows = checks.efa_checks(plan, th, "decode", _efa({0: fixture("efa-ok-0.log"), 1: fixture("efa-ok-1.log")}), 2)
    assert [r.status for r in rows] == [PASS] * 5
    r = _by_name(rows)
    assert r[("EFA devices in pod", "node-a")].measured == "16 uverbs, 16 efa domains (node shows 16)"
    assert r[("fi_pingpong (efa)", "node-a <-> node-b")].measured.startswith("14.2 us")
    assert r[("locked-memory limit", "node-b")].measured == "unlimited"


def test_efa_wrong_count_memlock_and_no_provider(plan, th):
    rows = checks.efa_checks(plan, th, "decode", _efa({0: fixture("efa-broken-0.log"), 1: fixture("efa-broken-1.log")}), 2)
    r = _by_name(rows)
    devices = r[("EFA devices in pod", "node-a")]
    assert devices.status == FAIL
    assert "8 uverbs" in devices.measured
    assert "#wrong-efa-count" in devices.next_step
    assert r[("locked-memory limit", "node-a")].status == FAIL
    assert "#locked-memory" in r[("locked-memory limit", "node-a")].next_step
    pingpong = r[("fi_pingpong (efa)", "node-a <-> node-b")]
    assert pingpong.status == FAIL
    assert "no efa provider" in pingpong.measured
    assert "#fi_pingpong-fails" in pingpong.next_step


def test_pingpong_over_the_latency_limit_fails(plan, th):
    rows = checks.efa_checks(plan, th, "prefill", _efa({0: fixture("efa-ok-0.log"), 1: fixture("efa-slow-1.log")}), 2)
    pp = next(r for r in rows if r.name == "fi_pingpong (efa)")
    assert pp.status == FAIL
    assert pp.measured.startswith("41.7 us")
    assert pp.threshold == "<= 28 us one-way at 64 B"
    assert "pdkit topology" in pp.next_step


def test_efa_pod_without_output(plan, th):
    rows = checks.efa_checks(plan, th, "decode", _efa({0: "", 1: fixture("efa-ok-1.log")}), 2)
    assert _by_name(rows)[("EFA devices in pod", "node-a")].status == FAIL


def test_efa_job_that_never_ran(plan, th):
    run = JobRun(problem="pod efa-decode-x-0 cannot be scheduled: 0/6 nodes are available: 2 Insufficient vpc.amazonaws.com/efa.")
    rows = checks.efa_checks(plan, th, "decode", run, 2)
    assert len(rows) == 1
    assert rows[0].status == FAIL
    assert "#wrong-efa-count" in rows[0].next_step


def test_nccl_over_efa_passes(plan, th):
    rows = checks.nccl_checks(plan, th, JobRun(logs={0: fixture("nccl-efa.log")}, finished=True))
    assert [r.status for r in rows] == [PASS] * 6
    r = {row.name: row for row in rows}
    assert r["all_reduce_perf bus bandwidth"].measured.startswith("361.02 GB/s at 16 GiB")
    assert r["all_reduce_perf bus bandwidth"].threshold == ">= 200 GB/s"
    assert r["alltoall_perf bus bandwidth"].threshold == ">= 16.1 GB/s"
    assert r["all_reduce_perf network"].measured == "provider efa (fabric efa), 16 nics; network Libfabric"


def test_nccl_on_sockets_fails_network_and_bandwidth(plan, th):
    rows = checks.nccl_checks(plan, th, JobRun(logs={0: fixture("nccl-socket.log")}, finished=True))
    r = {row.name: row for row in rows}
    for test in ("all_reduce_perf", "alltoall_perf"):
        assert r[f"{test} network"].status == FAIL
        assert "#nccl-on-sockets" in r[f"{test} network"].next_step
        assert r[f"{test} bus bandwidth"].status == FAIL
        assert "#low-nccl-bandwidth" in r[f"{test} bus bandwidth"].next_step
        assert r[f"{test} data check"].status == PASS


def test_nccl_wrong_values_fail_the_data_check(plan, th):
    log = fixture("nccl-efa.log").replace("# Out of bounds values : 0 OK", "# Out of bounds values : 2 FAILED", 1)
    rows = checks.nccl_checks(plan, th, JobRun(logs={0: log}, finished=True))
    data = {r.name: r for r in rows}["all_reduce_perf data check"]
    assert data.status == FAIL
    assert "#wrong-results" in data.next_step


def test_nccl_agents_unreachable(plan, th):
    rows = checks.nccl_checks(plan, th, JobRun(logs={0: "pdkit-end test=setup status=1\n"}, finished=True))
    assert [r.status for r in rows] == [FAIL]
    assert "#nccl-job-does-not-start" in rows[0].next_step


def test_nccl_missing_test_output(plan, th):
    log = fixture("nccl-efa.log").split("pdkit-begin test=alltoall_perf")[0]
    rows = checks.nccl_checks(plan, th, JobRun(logs={0: log}, problem="still running after 40 min"))
    r = {row.name: row for row in rows}
    assert r["alltoall_perf"].status == FAIL
    assert r["all_reduce_perf bus bandwidth"].status == PASS


def test_nccl_pending_for_gpus_says_to_scale_serving_down(plan, th):
    run = JobRun(problem="pod nccl-x-0 cannot be scheduled: 0/6 nodes are available: 4 Insufficient nvidia.com/gpu.")
    rows = checks.nccl_checks(plan, th, run)
    assert rows[0].status == FAIL
    assert "kubectl -n pd-serving patch disaggregatedset glm51-2p2d-pd --type=json -p '[" in rows[0].next_step


def test_uccl_within_budget_passes(plan, th):
    run = JobRun(logs={0: fixture("uccl-ok-0.log"), 1: fixture("uccl-ok-1.log")}, finished=True)
    rows = checks.uccl_checks(plan, th, "uccl-decode-0", run)
    assert [r.status for r in rows] == [PASS, PASS]
    assert rows[1].threshold == "<= 533.3 us (40 ms TPOT / 75 MoE layers)"
    assert "worst of 16 ranks" in rows[1].measured
    assert "32 tokens/rank" in rows[1].measured


def test_uccl_over_budget_fails(plan, th):
    run = JobRun(logs={0: fixture("uccl-ok-0.log"), 1: fixture("uccl-slow-1.log")}, finished=True)
    rows = checks.uccl_checks(plan, th, "uccl-decode-0", run)
    assert rows[0].status == PASS
    assert rows[1].status == FAIL
    assert "#uccl-ep-fails-or-is-slow" in rows[1].next_step


def test_uccl_crash_fails_both(plan, th):
    run = JobRun(logs={0: fixture("uccl-broken-0.log"), 1: ""}, finished=True)
    rows = checks.uccl_checks(plan, th, "uccl-decode-0", run)
    assert [r.status for r in rows] == [FAIL, FAIL]
    assert rows[0].measured.startswith("Traceback")
    assert "selftest.py" in rows[0].next_step


def test_nodes_allocatable(plan, th):
    ok = checks.node_checks(plan, th, nodes())
    assert all(r.status == PASS for r in ok)
    assert len(ok) == 2 + 4 * 2
    bad = checks.node_checks(plan, th, nodes(efa=8))
    efa = [r for r in bad if r.name == "EFA devices allocatable"]
    assert all(r.status == FAIL and r.measured == "8" for r in efa)


def test_missing_nodes_fail_with_the_joining_playbook(plan, th):
    rows = checks.node_checks(plan, th, nodes(per_role=1))
    ready = {r.target: r for r in rows if r.name == "GPU nodes Ready"}
    assert ready["decode"].status == FAIL
    assert ready["decode"].measured == "1 of 2"
    assert "#node-not-joining" in ready["decode"].next_step


def test_evaluate_and_passed(plan, th):
    runs = {
        "efa-decode": _efa({0: fixture("efa-ok-0.log"), 1: fixture("efa-ok-1.log")}),
        "nccl": JobRun(logs={0: fixture("nccl-efa.log")}, finished=True),
    }
    rows = checks.evaluate(plan, th, nodes=nodes(), runs=runs, pods={"efa-decode": 2, "nccl": 4}, skipped={"uccl-decode-0": "not asked"})
    assert checks.passed(rows)
    assert any(r.status == SKIP for r in rows)
    runs["nccl"] = JobRun(logs={0: fixture("nccl-socket.log")}, finished=True)
    assert not checks.passed(checks.evaluate(plan, th, nodes=None, runs=runs, pods={"efa-decode": 2, "nccl": 4}))


def test_nothing_run_is_not_a_pass(plan, th):
    assert not checks.passed(checks.evaluate(plan, th, nodes=None, runs={}, pods={}, skipped={"x": "y"}))


@pytest.mark.parametrize(
    ("problem", "anchor"),
    [
        ("0/6 nodes are available: 6 node(s) didn't match Pod's node affinity/selector.", "#node-not-joining"),
        ("ImagePullBackOff: Back-off pulling image", "CodeBuild"),
        ("still running after 40 min", "#a-check-times-out"),
        ("something else", "describe job"),
    ],
)
def test_stuck_next_steps(plan, problem, anchor):
    assert anchor in checks.stuck_next_step(plan, problem)
