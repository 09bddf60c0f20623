"""Issue 14 item 8: `pdkit validate` runs Mooncake's own transfer benchmark from a prefill node into a
decode node, each in its role's serving pod spec, and judges it from Mooncake's own output lines
(tests/fixtures/fabric/README.md cites each): EFA or a FAIL naming the TCP fallback, registration
failures, a rate below the floor, or output it did not understand; never a PASS on anything else."""

from __future__ import annotations

import pytest
import yaml

from pdkit.model import plan as plan_mod
from pdkit.model import profile_files
from pdkit.model.thresholds import derive
from pdkit.ops.fabric import checks, parsers
from pdkit.ops.fabric.checks import FAIL, PASS, SKIP
from pdkit.ops.kube import JobRun
from pdkit.render import fabric as manifests
from tests.fixtures.fabric.fakes import fixture

SERVING_IMAGE = "registry.example/sglang-efa:v1"


@pytest.fixture(scope="module")
def nixl():
    """The default profile on serving.kv_transfer: nixl."""
    raw = yaml.safe_load(profile_files.resolve(None).read_text())
    raw.setdefault("serving", {})["kv_transfer"] = "nixl"
    return plan_mod.build(profile_files.parse(raw))


def _jobs(plan):
    bundle = manifests.render(
        plan, derive(plan), image="registry.example/validation:v1", run_id="abc", role_images=dict.fromkeys(plan.roles, SERVING_IMAGE)
    )
    return {spec.key: spec for spec in bundle.jobs}


def _pod(spec):
    return spec.job["spec"]["template"]["spec"]


# --- the pods are the roles' serving pods -------------------------------------------------------------


def test_mooncake_phase_runs_the_bench_as_prefill_writing_into_decode(plan, th):
    """Mooncake's EFA guide (doc/en/efa_transport.md) runs `transfer_engine_bench --mode=target` and
    `--mode=initiator --operation=write` with `--protocol=efa --metadata_server=P2PHANDSHAKE --gpu_id=-1`;
    the kit takes the protocol from the role's MOONCAKE_PROTOCOL as SGLang does, so an unset one shows."""
    jobs = _jobs(plan)
    assert [s.phase for s in jobs.values() if s.key.startswith("mooncake")] == ["mooncake", "mooncake"]
    target = _pod(jobs["mooncake-decode"])["containers"][0]["command"][2]
    initiator = _pod(jobs["mooncake-prefill"])["containers"][0]["command"][2]
    assert "transfer_engine_bench --mode=target" in target
    assert f"MC_MIN_RPC_PORT={manifests.MOONCAKE_RPC_PORT} MC_MAX_RPC_PORT={manifests.MOONCAKE_RPC_PORT}" in target
    assert "transfer_engine_bench --mode=initiator" in initiator
    for flag in (
        '--protocol="${MOONCAKE_PROTOCOL:-rdma}"',
        "--metadata_server=P2PHANDSHAKE",
        "--operation=write",
        f"--segment_id=$ip:{manifests.MOONCAKE_RPC_PORT}",
        f"--block_size={th.mooncake_block_bytes}",
        f"--buffer_size={th.mooncake_buffer_bytes_per_gpu}",
        "--gpu_id=-1",
    ):
        assert flag in initiator
    assert "mooncake-decode-abc-0.mooncake-decode-abc" in initiator
    for script in (target, initiator):
        assert "TransferEngine().initialize(" in script
        assert "'P2PHANDSHAKE'" in script


def test_bench_stays_under_the_efa_work_request_cap(plan, th):
    """Mooncake's EFA guide: threads x batch beyond NICs x 256 in-flight WRs backs off and times out."""
    assert th.mooncake_threads * th.mooncake_batch <= th.efa_devices_per_node * 256
    assert th.mooncake_min_gbps == round(0.5 * th.node_line_rate_gbps, 1) == 200.0
    assert th.mooncake_buffer_bytes_per_gpu >= th.mooncake_threads * th.mooncake_batch * th.mooncake_block_bytes


def test_no_mooncake_job_with_nixl(plan, nixl):
    """serving.kv_transfer: nixl moves KV without Mooncake: no Mooncake Job to run (the seed, on
    Mooncake, has both)."""
    assert {"mooncake-decode", "mooncake-prefill"} <= set(_jobs(plan))
    assert not any(k.startswith("mooncake") for k in _jobs(nixl))


# --- the parser ---------------------------------------------------------------------------------------


def test_parser_reads_the_bench_result_and_the_efa_lines():
    """transfer_engine_bench.cpp: `Test completed: duration %.2f, batch count N, throughput X GB/s`;
    transfer_engine_py.cpp initializeExt: `EFA transport installed successfully`."""
    r = parsers.parse_mooncake(fixture("mooncake-ok-initiator.log"))
    assert (r.role, r.protocol, r.init_rc, r.efa_installed, r.tcp_installed) == ("initiator", "efa", 0, True, False)
    assert r.gbps == 352.59
    assert r.duration_s == 10.01
    assert r.devices == ("rdmap79s0", "rdmap80s0")


def test_parser_converts_the_report_unit():
    """RATE_UNIT_MP in transfer_engine_bench.cpp: Gb is 10^9/8 bytes."""
    r = parsers.parse_mooncake("I1201 x.cpp:1] Test completed: duration 10.00, batch count 1, throughput 800.00 Gb/s")
    assert r.gbps == 100.0


# --- the checks ---------------------------------------------------------------------------------------


def _rows(plan, th, initiator, target="mooncake-ok-target.log"):
    ini = JobRun(logs={0: fixture(initiator)}, nodes={0: "prefill-node"}, finished=True)
    tgt = JobRun(logs={0: fixture(target)}, nodes={0: "decode-node"}, finished=True)
    rows = checks.evaluate(plan, th, nodes=None, runs={"mooncake-decode": tgt, "mooncake-prefill": ini}, pods={})
    return {r.name: r for r in rows}


def test_efa_at_line_rate_passes(plan, th):
    rows = _rows(plan, th, "mooncake-ok-initiator.log")
    assert {n: r.status for n, r in rows.items()} == {
        "Mooncake transport (prefill)": PASS,
        "Mooncake transport (decode)": PASS,
        "Mooncake KV write": PASS,
    }
    assert "352.59 GB/s" in rows["Mooncake KV write"].measured


def test_tcp_fallback_fails_naming_it(plan, th):
    """Without MOONCAKE_PROTOCOL=efa SGLang passes "rdma" and Mooncake's EFA build installs TCP
    (transfer_engine_py.cpp): the row names the fallback and the variable."""
    rows = _rows(plan, th, "mooncake-tcp-initiator.log")
    transport = rows["Mooncake transport (prefill)"]
    assert transport.status == FAIL
    assert "TCP fallback (MOONCAKE_PROTOCOL=rdma)" in transport.measured
    assert "MOONCAKE_PROTOCOL=efa" in transport.next_step
    assert rows["Mooncake KV write"].status == FAIL


def test_registration_failure_fails_naming_it(plan, th):
    """efa_context.cpp `fi_mr_regattr failed for GPU memory` / efa_transport.cpp `EfaTransport: Failed to
    register memory`, then the bench's LOG_ASSERT(!rc): FI_HMEM or locked memory, not bandwidth."""
    rows = _rows(plan, th, "mooncake-register-initiator.log")
    write = rows["Mooncake KV write"]
    assert write.status == FAIL
    assert write.measured.startswith("memory registration failed: fi_mr_regattr failed")
    assert write.measured.endswith("(libfabric refuses GPU memory: FI_HMEM must be exactly cuda, efa_nv_peermem loaded)")
    assert "FI_HMEM" in write.next_step


def test_below_the_floor_fails(plan, th):
    rows = _rows(plan, th, "mooncake-slow-initiator.log")
    write = rows["Mooncake KV write"]
    assert write.status == FAIL
    assert "12.87 GB/s" in write.measured
    assert write.threshold.startswith(">= 200 GB/s")


def test_unrecognized_result_line_never_passes(plan, th):
    """A result line in a format the kit does not know is a FAIL saying so, even with EFA installed."""
    rows = _rows(plan, th, "mooncake-unrecognized-initiator.log")
    write = rows["Mooncake KV write"]
    assert write.status == FAIL
    assert "no 'Test completed" in write.measured


def test_job_that_never_ran(plan, th):
    run = JobRun(problem="pod mooncake-prefill-x-0 cannot be scheduled: 0/6 nodes are available: 2 Insufficient nvidia.com/gpu.")
    rows = checks.mooncake_checks(plan, th, run, None)
    assert all(r.status == FAIL for r in rows)
    assert "Insufficient nvidia.com/gpu" in rows[0].measured


def test_nixl_skips_the_phase(nixl):
    """With serving.kv_transfer: nixl, `pdkit validate` says why there is no Mooncake row instead of
    leaving it out silently."""
    from pdkit.ops.fabric import validate
    from tests.fixtures.fabric import fakes

    clock = fakes.Clock()
    outcome = validate.run(nixl, fakes.FakeCluster(logs={}), image="v", phases=("mooncake",), waiting=lambda _p: fakes.waiting(clock))
    (row,) = [c for c in outcome.checks if c.name == "Mooncake KV write"]
    assert row.status == SKIP
    assert "nixl" in row.measured


STUB_BENCH = """#!/usr/bin/env python3
import os, signal, socket, sys
args = dict(a.lstrip("-").split("=", 1) for a in sys.argv[1:])
print("stub-args", " ".join(f"{k}={v}" for k, v in sorted(args.items())), "rpc", os.environ.get("MC_MIN_RPC_PORT"), os.environ.get("MC_MAX_RPC_PORT"), flush=True)
if args["mode"] == "target":
    server = socket.create_server(("127.0.0.1", int(os.environ["MC_MIN_RPC_PORT"])))
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while True:
        server.accept()[0].close()
print("I1201 16:02:25.077414 57 transfer_engine_bench.cpp:404] Test completed: duration 10.01, batch count 26912, throughput 352.59 GB/s")
"""
STUB_ENGINE = """import sys
class TransferEngine:
    def initialize(self, host, metadata, protocol, device):
        print("EFA transport installed successfully" if protocol == "efa" else "TCP transport installed successfully", file=sys.stderr)
        return 0
"""


def _free_port():
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_target_and_initiator_scripts_hand_off_and_stop(plan, th, tmp_path, monkeypatch):
    """The two pods' scripts as bash runs them, with stand-ins for Mooncake's bench and engine: the
    target pins its handshake port (MC_MIN_RPC_PORT = MC_MAX_RPC_PORT, Mooncake's P2P port range), the
    initiator waits for it, writes to `<ip>:<port>` (the P2P segment name), then stops the target."""
    import os
    import subprocess

    monkeypatch.setattr(manifests, "MOONCAKE_RPC_PORT", _free_port())
    monkeypatch.setattr(manifests, "MOONCAKE_DONE_PORT", _free_port())
    (tmp_path / "bin").mkdir()
    bench = tmp_path / "bin" / "transfer_engine_bench"
    bench.write_text(STUB_BENCH)
    bench.chmod(0o755)
    (tmp_path / "py" / "mooncake").mkdir(parents=True)
    (tmp_path / "py" / "mooncake" / "__init__.py").write_text("")
    (tmp_path / "py" / "mooncake" / "engine.py").write_text(STUB_ENGINE)
    env = {**os.environ, "PATH": f"{tmp_path / 'bin'}:{os.environ['PATH']}", "PYTHONPATH": str(tmp_path / "py")}
    env |= {"NODE_NAME": "node", "MOONCAKE_PROTOCOL": "efa"}
    target_job = manifests.mooncake_job_name("decode", "t")
    target = manifests.mooncake_target_script(th)
    initiator = manifests.mooncake_initiator_script(th, target_job=target_job)
    initiator = initiator.replace(f"getent hosts {target_job}-0.{target_job}", "echo 127.0.0.1")
    server = subprocess.Popen(["bash", "-c", target], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    client = subprocess.run(["bash", "-c", initiator], env=env, capture_output=True, text=True, timeout=60, check=True)
    target_log, _ = server.communicate(timeout=30)
    port = manifests.MOONCAKE_RPC_PORT
    assert f"rpc {port} {port}" in target_log
    assert "pdkit-exit role=target status=0" in target_log
    assert f"segment_id=127.0.0.1:{port}" in client.stdout
    r = parsers.parse_mooncake(client.stdout)
    assert r.efa_installed
    assert r.gbps == 352.59
    assert r.exit_status == "0"
