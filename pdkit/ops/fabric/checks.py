"""PASS/FAIL for each validation check, from the nodes' allocatable resources and the Jobs' logs.

Every limit comes from pdkit/model/thresholds.py; every failure names the next step, pointing at
the runbook section that handles it.
"""

from __future__ import annotations

import contextlib
import shlex
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from typing import Any

from pdkit.model.plan import Plan
from pdkit.model.thresholds import NCCL_LARGE_MESSAGE_BYTES, Thresholds
from pdkit.ops.fabric import parsers
from pdkit.ops.kube import JobRun, Node
from pdkit.render import ami
from pdkit.render.fabric import NCCL_TESTS, NODE_IMAGE_MODULES
from pdkit.render.pod import EFA, GPU
from pdkit.render.serving.drain import drain_plan

PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"

PLAYBOOK = "runbooks/README.md"
VALIDATE = "runbooks/03-validate.md"
NEXT = {
    "node_not_joining": f"`pdkit status`, then {PLAYBOOK}#node-not-joining",
    "wrong_efa_count": f"`kubectl describe node NODE | grep {EFA}`, then {PLAYBOOK}#wrong-efa-count",
    "memlock": f"give containerd an unlimited RLIMIT_MEMLOCK on the GPU nodes: {VALIDATE}#locked-memory",
    "pingpong_failed": f"efa provider or the EFA security group's self rule: {VALIDATE}#fi_pingpong-fails",
    "pingpong_slow": f"`pdkit topology` (same network node?), then {VALIDATE}#fi_pingpong-fails",
    "nccl_sockets": f"`kubectl exec POD -- python3 /opt/kit/selftest.py` (NCCL_NET_PLUGIN=ofi, ofi-nccl on LD_LIBRARY_PATH), then {PLAYBOOK}#nccl-on-sockets",
    "nccl_provider": f"aws-ofi-nccl bound a libfabric provider other than efa (no EFA device or libfabric efa in the pod): `kubectl exec POD -- fi_info -p efa`, then {VALIDATE}#fi_pingpong-fails",
    "nccl_layout": f"the nccl-tests output is not in a layout the kit reads: {VALIDATE}#low-nccl-bandwidth",
    "nccl_slow": f"every pod needs all EFA devices; `pdkit topology`; then {VALIDATE}#low-nccl-bandwidth",
    "nccl_corrupt": f"a GPU or NVLink fault: `kubectl describe node NODE` and node auto repair, {VALIDATE}#wrong-results",
    "nccl_setup": f"pod 0 could not kubectl exec into the other nccl pods: {VALIDATE}#nccl-job-does-not-start",
    "uccl_failed": f"`kubectl exec POD -- python3 /opt/kit/selftest.py` (deep_ep must be the EFA build of UCCL-EP), then {VALIDATE}#uccl-ep-fails-or-is-slow",
    "uccl_slow": f"decode cannot meet observability.tpot_p99_ms on this fabric: {VALIDATE}#uccl-ep-fails-or-is-slow",
    "mooncake_tcp": f"Mooncake installed its TCP transport, not EFA: set MOONCAKE_PROTOCOL=efa in the role's environment (pdkit/render/serving/environment.py), then {VALIDATE}#mooncake-fails-or-is-slow",
    "mooncake_register": f"Mooncake could not register GPU memory with EFA (FI_HMEM=cuda? unlimited locked memory?): {VALIDATE}#mooncake-fails-or-is-slow",
    "mooncake_permission": f"the role's pod lacks a permission Mooncake needs: set roles.ROLE.security in the profile (runbooks/02-serve.md#when-a-role-needs-more-rolesrolesecurity), then {VALIDATE}#mooncake-fails-or-is-slow",
    "mooncake_failed": f"`kubectl -n NAMESPACE logs job/JOB`, then {VALIDATE}#mooncake-fails-or-is-slow",
    "mooncake_slow": f"every pod needs all EFA devices; `pdkit topology`; then {VALIDATE}#mooncake-fails-or-is-slow",
    "image": "the validation image is not in ECR yet: follow the CodeBuild run (containers/README.md, 'Build in-region')",
    "node_image_driver": f"the node runs another NVIDIA driver than its image recorded: {VALIDATE}#node-image-checks-fail",
    "node_image_branch": f"the node's NVIDIA driver is older than the branch the serving image's CUDA needs: {VALIDATE}#node-image-checks-fail",
    "node_image_gpus": f"`kubectl describe node NODE` (GPU conditions, {GPU}), then {VALIDATE}#node-image-checks-fail",
    "node_image_fabric": f"NVSwitch fabric not ready (fabric manager): {VALIDATE}#node-image-checks-fail",
    "node_image_modules": f"efa / efa_nv_peermem not loaded on the node: {VALIDATE}#node-image-checks-fail",
    "timeout": f"`kubectl -n NAMESPACE logs job/JOB --all-containers`, then {VALIDATE}#a-check-times-out",
    "no_output": f"`kubectl -n NAMESPACE describe job JOB`, then {VALIDATE}#a-check-times-out",
}


@dataclass(frozen=True)
class Check:
    name: str
    target: str
    status: str
    measured: str
    threshold: str
    next_step: str = ""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def _row(ok: bool, name: str, target: str, measured: str, threshold: str, next_step: str) -> Check:
    return Check(name, target, PASS if ok else FAIL, measured, threshold, "" if ok else next_step)


def stuck_next_step(plan: Plan, problem: str) -> str:
    """The next step for a Job that could not run, from the scheduler's or kubelet's message."""
    if f"Insufficient {GPU}" in problem:
        scale = "; ".join(shlex.join(c) for c in drain_plan(plan).kubectl_scale_down())
        return f"serving holds the GPUs: {scale} (restore afterwards), then validate again"
    if f"Insufficient {EFA}" in problem:
        return NEXT["wrong_efa_count"]
    if "didn't match" in problem or "untolerated taint" in problem or "nodes are available: 0" in problem:
        return NEXT["node_not_joining"]
    if "ImagePull" in problem or "ErrImage" in problem:
        return NEXT["image"]
    if "still running" in problem:
        return NEXT["timeout"]
    return NEXT["no_output"]


# --- nodes ----------------------------------------------------------------------------------------------


def node_checks(plan: Plan, th: Thresholds, nodes: list[Node]) -> list[Check]:
    rows = []
    for role in plan.roles.values():
        ready = [n for n in nodes if n.role == role.name and n.ready]
        rows.append(
            _row(
                len(ready) >= role.nodes,
                "GPU nodes Ready",
                role.name,
                f"{len(ready)} of {role.nodes}",
                f"{role.nodes}",
                NEXT["node_not_joining"],
            )
        )
    for n in nodes:
        rows.append(
            _row(
                n.efa == th.efa_devices_per_node,
                "EFA devices allocatable",
                n.name,
                str(n.efa),
                f"= {th.efa_devices_per_node}",
                NEXT["wrong_efa_count"],
            )
        )
        rows.append(
            _row(n.gpus == th.gpus_per_node, "GPUs allocatable", n.name, str(n.gpus), f"= {th.gpus_per_node}", NEXT["node_not_joining"])
        )
    return rows


# --- phase 0: the node image ----------------------------------------------------------------------------

FABRIC_READY = ("Completed", "Success")


def node_image_checks(plan: Plan, th: Thresholds, run: JobRun, pods: int) -> list[Check]:
    if run.problem and not any(run.logs.values()):
        return [Check("node image", "GPU nodes", FAIL, run.problem, "job completes", stuck_next_step(plan, run.problem))]
    rows: list[Check] = []
    for index in range(pods):
        r = parsers.parse_node_image(run.logs.get(index, ""))
        node = run.nodes.get(index) or r.node or f"node-image pod {index}"
        if not r.sections:
            rows.append(Check("node image", node, FAIL, "no output", "4 sections", NEXT["no_output"]))
            continue
        rows += [_driver_branch(r, node), _driver(r, node), _gpus(th, r, node), _fabric(r, node), _modules(r, node)]
    return rows


def _driver_branch(r: parsers.NodeImageReport, node: str) -> Check:
    """On both image sources: CUDA 13 needs the R580 branch or a newer one (pdkit/render/ami.py), never exactly 580."""
    loaded = ", ".join(sorted(set(r.drivers))) or (r.gpu_error or "none")
    ok = bool(r.drivers) and all(ami.driver_branch_ok(d) for d in r.drivers)
    return _row(ok, "NVIDIA driver branch", node, loaded, f">= {ami.NVIDIA_DRIVER_MIN_BRANCH}", NEXT["node_image_branch"])


def _driver(r: parsers.NodeImageReport, node: str) -> Check:
    name = "NVIDIA driver = node image's"
    loaded = ", ".join(sorted(set(r.drivers))) or (r.gpu_error or "none")
    if r.env_absent:
        return Check(name, node, SKIP, f"{loaded}; no /etc/pdkit/node-image.env (EKS-optimized AMI)", "NVIDIA_DRIVER", "")
    recorded = (r.env or {}).get("NVIDIA_DRIVER")
    if recorded is None:
        return Check(name, node, FAIL, f"{loaded}; node-image.env has no NVIDIA_DRIVER", "NVIDIA_DRIVER", NEXT["node_image_driver"])
    ok = bool(r.drivers) and set(r.drivers) == {recorded}
    return _row(ok, name, node, f"loaded {loaded}", f"= {recorded}", NEXT["node_image_driver"])


def _gpus(th: Thresholds, r: parsers.NodeImageReport, node: str) -> Check:
    measured = f"{len(r.drivers)} ({', '.join(sorted(set(r.gpu_names)))})" if r.drivers else (r.gpu_error or "0")
    return _row(
        len(r.drivers) == th.gpus_per_node, "GPUs seen by nvidia-smi", node, measured, f"= {th.gpus_per_node}", NEXT["node_image_gpus"]
    )


def _fabric(r: parsers.NodeImageReport, node: str) -> Check:
    threshold = "State Completed, Status Success on every GPU"
    if not r.fabric:
        return Check("NVSwitch fabric", node, FAIL, "no Fabric section from nvidia-smi -q", threshold, NEXT["node_image_fabric"])
    bad = [f for f in r.fabric if (f.state, f.status) != FABRIC_READY]
    if not bad:
        return Check("NVSwitch fabric", node, PASS, f"Completed/Success on {len(r.fabric)} GPUs", threshold, "")
    first = bad[0]
    measured = f"{len(bad)} of {len(r.fabric)} GPUs not ready (GPU {first.gpu}: State {first.state}, Status {first.status})"
    return Check("NVSwitch fabric", node, FAIL, measured, threshold, NEXT["node_image_fabric"])


def _modules(r: parsers.NodeImageReport, node: str) -> Check:
    threshold = " and ".join(NODE_IMAGE_MODULES) + " loaded"
    if r.modules is None:
        return Check("EFA kernel modules", node, FAIL, "cannot read /proc/modules", threshold, NEXT["node_image_modules"])
    missing = [m for m in NODE_IMAGE_MODULES if m not in r.modules]
    measured = f"missing {', '.join(missing)}" if missing else "both loaded"
    return _row(not missing, "EFA kernel modules", node, measured, threshold, NEXT["node_image_modules"])


# --- phase 1 ----------------------------------------------------------------------------------------------


def efa_checks(plan: Plan, th: Thresholds, role: str, run: JobRun, pods: int) -> list[Check]:
    rows: list[Check] = []
    if run.problem and not any(run.logs.values()):
        return [Check("EFA probe and fi_pingpong", role, FAIL, run.problem, "job completes", stuck_next_step(plan, run.problem))]
    for index in range(pods):
        node = run.nodes.get(index, f"{role} pod {index}")
        probes = parsers.marker_lines(run.logs.get(index, ""), "pdkit-probe")
        if not probes:
            rows.append(Check("EFA devices in pod", node, FAIL, "no probe output", f"= {th.efa_devices_per_node}", NEXT["no_output"]))
            continue
        p = probes[-1]
        uverbs, domains = _int(p.get("uverbs")), _int(p.get("efa_domains"))
        ok = uverbs == th.efa_devices_per_node and domains == th.efa_devices_per_node
        measured = f"{uverbs} uverbs, {domains} efa domains (node shows {p.get('sysfs_devices', '?')})"
        rows.append(_row(ok, "EFA devices in pod", node, measured, f"= {th.efa_devices_per_node}", NEXT["wrong_efa_count"]))
        memlock = p.get("memlock", "?")
        rows.append(_row(memlock == th.memlock, "locked-memory limit", node, memlock, th.memlock, NEXT["memlock"]))
    for server in range(0, pods - 1, 2):
        client = server + 1
        pair = f"{run.nodes.get(server, f'{role} pod {server}')} <-> {run.nodes.get(client, f'{role} pod {client}')}"
        rows.append(_pingpong(th, pair, run.logs.get(client, "")))
    return rows


def _pingpong(th: Thresholds, pair: str, log: str) -> Check:
    limit = f"<= {th.pingpong_max_latency_us:g} us one-way at {th.pingpong_bytes} B"
    exits = parsers.marker_lines(log, "pdkit-exit")
    status = exits[-1].get("status", "?") if exits else "?"
    result = parsers.parse_fi_pingpong(log)
    latency = result.latency_us(th.pingpong_bytes)
    if status != "0" or latency is None:
        reason = result.errors[-1] if result.errors else f"fi_pingpong exit status {status}"
        if not result.errors and status == "0":
            sizes = ", ".join(str(r.size) for r in result.rows)
            reason = f"no {th.pingpong_bytes} B row (sizes read: {sizes})" if sizes else "no fi_pingpong result row understood"
        return Check("fi_pingpong (efa)", pair, FAIL, reason, limit, NEXT["pingpong_failed"])
    biggest = max(result.rows, key=lambda r: r.size)
    measured = f"{latency:.1f} us; {biggest.mb_per_s:.0f} MB/s at {biggest.size} B"
    return _row(latency <= th.pingpong_max_latency_us, "fi_pingpong (efa)", pair, measured, limit, NEXT["pingpong_slow"])


def _int(value: str | None) -> int | None:
    return int(value) if value is not None and value.isdigit() else None


# --- phase 2 ----------------------------------------------------------------------------------------------


def nccl_checks(plan: Plan, th: Thresholds, run: JobRun) -> list[Check]:
    target = f"{th.nccl_gpus} GPUs"
    launcher = run.logs.get(0, "")
    if run.problem and not launcher:
        return [Check("nccl-tests", target, FAIL, run.problem, "job completes", stuck_next_step(plan, run.problem))]
    found = parsers.sections(launcher, "pdkit-begin", "pdkit-end", "test")
    json_found = parsers.sections(launcher, "pdkit-begin", "pdkit-end", "json")
    setup = [m for m in parsers.marker_lines(launcher, "pdkit-end") if m.get("test") == "setup"]
    if setup:
        return [
            Check(
                "nccl-tests", target, FAIL, "pod 0 could not kubectl exec into every worker pod", "all pods reachable", NEXT["nccl_setup"]
            )
        ]
    floors = {"all_reduce_perf": th.allreduce_min_busbw_gbps, "alltoall_perf": th.alltoall_min_busbw_gbps}
    rows: list[Check] = []
    for test in NCCL_TESTS:
        if test not in found:
            rows.append(Check(test, target, FAIL, run.problem or "did not run", "runs to the end", NEXT["no_output"]))
            continue
        text, end = found[test]
        r = parsers.parse_nccl_tests(text)
        if test in json_found:
            # The kit's own runs also write nccl-tests' -J document: its numbers need no column guessing. A
            # document cut short (the pod killed mid-write) leaves the table read from the text output.
            with contextlib.suppress(ValueError, KeyError, TypeError):
                r = parsers.parse_nccl_tests_json(json_found[test][0], r)
        rows.append(_nccl_network(test, target, r))
        best = r.large_message_busbw(NCCL_LARGE_MESSAGE_BYTES)
        floor = floors[test]
        if r.unknown_header is not None and not r.rows:
            tail = f"unrecognised nccl-tests column header {r.unknown_header!r}: no row read"
            rows.append(Check(f"{test} bus bandwidth", target, FAIL, tail, f">= {floor:g} GB/s", NEXT["nccl_layout"]))
        elif best is None:
            why = "no column header line" if r.layout is None else f"no result rows in the {r.layout} layout"
            tail = r.warnings[-1] if r.warnings else f"exit status {end.get('status', '?')}, {why}"
            rows.append(Check(f"{test} bus bandwidth", target, FAIL, tail, f">= {floor:g} GB/s", NEXT["nccl_slow"]))
        else:
            size, busbw = best
            avg = f"; average over sizes {r.avg_busbw:g}" if r.avg_busbw is not None else ""
            measured = f"{busbw:g} GB/s at {_size(size)}{avg}"
            rows.append(_row(busbw >= floor, f"{test} bus bandwidth", target, measured, f">= {floor:g} GB/s", NEXT["nccl_slow"]))
        wrong = (r.out_of_bounds or 0) + r.wrong
        # The footer alone proves nothing when no row was understood (an unread layout would PASS).
        ok = r.out_of_bounds is not None and wrong == 0 and bool(r.rows)
        measured = (
            "no result footer"
            if r.out_of_bounds is None
            else f"{wrong} wrong values"
            if r.rows
            else f"footer says {r.out_of_bounds} out of bounds, but no result row was understood"
        )
        rows.append(_row(ok, f"{test} data check", target, measured, "0 wrong", NEXT["nccl_corrupt"]))
    return rows


def _nccl_network(test: str, target: str, r: parsers.NcclResult) -> Check:
    threshold = "NET/OFI provider efa, no NET/Socket"
    provider = ", ".join(r.providers) or "none"
    fabric = f" (fabric {', '.join(r.fabrics)})" if r.fabrics else ""
    nics = f", {r.nics} nics" if r.nics is not None else ""
    network = f"; network {', '.join(r.networks)}" if r.networks else ""
    measured = f"provider {provider}{fabric}{nics}{network}"
    ok = not r.socket_fallback and bool(r.providers) and all(p == "efa" for p in r.providers)
    # A provider other than efa (e.g. "tcp;ofi_rxm") means the plugin loaded but libfabric found no EFA:
    # another cause, another runbook section than NCCL's own socket transport.
    other = r.providers and not r.socket_fallback
    return _row(ok, f"{test} network", target, measured, threshold, NEXT["nccl_provider" if other else "nccl_sockets"])


def _size(size: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if size >= scale:
            return f"{size / scale:g} {unit}"
    return f"{size} B"


# --- phase 3 ----------------------------------------------------------------------------------------------


def uccl_checks(plan: Plan, th: Thresholds, key: str, run: JobRun) -> list[Check]:
    target = f"{key} ({th.uccl_nodes} nodes)"
    text = "\n".join(run.logs[i] for i in sorted(run.logs))
    if run.problem and not text:
        return [Check("UCCL-EP low latency", target, FAIL, run.problem, "job completes", stuck_next_step(plan, run.problem))]
    r = parsers.parse_uccl_low_latency(text)
    reason = r.errors[0] if r.errors else "no 'All correctness tests passed'"
    if not r.errors and not r.ranks:
        reason = "no UCCL-EP result line ('[rank N] Dispatch + combine bandwidth' or 'Dispatch bandwidth') understood"
    correctness = Check("UCCL-EP correctness", target, PASS, "all correctness tests passed", "passes", "")
    if not r.correctness_passed:
        correctness = Check("UCCL-EP correctness", target, FAIL, reason, "passes", NEXT["uccl_failed"])
    limit = f"<= {th.uccl_max_dispatch_combine_us:g} us ({th.tpot_budget_ms:g} ms TPOT / {th.moe_layers} MoE layers)"
    worst = r.worst_dispatch_combine_us
    if worst is None:
        timing = Check("UCCL-EP dispatch+combine", target, FAIL, reason, limit, NEXT["uccl_failed"])
    else:
        split = ""
        if r.worst_dispatch_us is not None and r.worst_combine_us is not None:
            split = f" (dispatch {r.worst_dispatch_us:g}, combine {r.worst_combine_us:g})"
        if not r.combined_printed:
            split += ", dispatch + combine summed: no combined line printed"
        measured = f"{worst:g} us worst of {len(r.ranks)} ranks{split}, {th.uccl_num_tokens} tokens/rank"
        timing = _row(worst <= th.uccl_max_dispatch_combine_us, "UCCL-EP dispatch+combine", target, measured, limit, NEXT["uccl_slow"])
    return [correctness, timing]


# --- phase 4 ----------------------------------------------------------------------------------------------


def mooncake_checks(plan: Plan, th: Thresholds, initiator: JobRun | None, target: JobRun | None) -> list[Check]:
    """One row per pod for the transport Mooncake installed as SGLang initializes it, and one for the
    KV write from prefill into decode: PASS only on an understood result line over EFA at the floor."""
    rows: list[Check] = []
    parsed: dict[str, parsers.MooncakeResult] = {}
    for role, run in (("prefill", initiator), ("decode", target)):
        log = run.logs.get(0, "") if run else ""
        node = (run.nodes.get(0) if run else None) or f"{role} (mooncake)"
        if run is None or (run.problem and not log):
            problem = (run.problem if run else None) or "did not run"
            rows.append(Check("Mooncake transport", node, FAIL, problem, "EFA", stuck_next_step(plan, problem)))
            continue
        r = parsed[role] = parsers.parse_mooncake(log)
        rows.append(_mooncake_transport(role, node, r))
    limit = f">= {th.mooncake_min_gbps:g} GB/s write ({_size(th.mooncake_block_bytes)} blocks, {th.mooncake_threads} threads x {th.mooncake_batch})"
    target_name = "prefill -> decode"
    if "prefill" not in parsed:
        return [*rows, Check("Mooncake KV write", target_name, FAIL, "the initiator did not run", limit, NEXT["mooncake_failed"])]
    ini = parsed["prefill"]
    tgt = parsed.get("decode")
    both = [ini, *([tgt] if tgt else [])]
    register = [e for r in both for e in r.registration_errors]
    permission = [e for r in both for e in r.permission_errors]
    if ini.gbps is not None and not ini.registration_errors and not ini.transfer_errors and ini.efa_installed:
        kv_s = th.mooncake_request_kv_bytes / (ini.gbps * 1e9)
        measured = (
            f"{ini.gbps:g} GB/s over {ini.duration_s:g} s; one {_size(th.mooncake_request_kv_bytes)} request's KV in {kv_s * 1000:.0f} ms"
        )
        rows.append(_row(ini.gbps >= th.mooncake_min_gbps, "Mooncake KV write", target_name, measured, limit, NEXT["mooncake_slow"]))
        return rows
    if register:
        why = register[0]
        said = " ".join(register)
        hint = ""
        if "Cannot allocate memory" in said:
            hint = " (ENOMEM: the locked-memory limit)"
        elif "Function not implemented" in said or "Operation not supported" in said:
            hint = " (libfabric refuses GPU memory: FI_HMEM must be exactly cuda, efa_nv_peermem loaded)"
        rows.append(
            Check("Mooncake KV write", target_name, FAIL, f"memory registration failed: {why}{hint}", limit, NEXT["mooncake_register"])
        )
    elif permission:
        rows.append(Check("Mooncake KV write", target_name, FAIL, f"not permitted: {permission[0]}", limit, NEXT["mooncake_permission"]))
    elif ini.tcp_installed or not ini.efa_installed:
        rows.append(Check("Mooncake KV write", target_name, FAIL, "not over EFA (see the transport rows)", limit, NEXT["mooncake_tcp"]))
    else:
        problems = [*ini.transport_errors, *ini.transfer_errors, *ini.errors, *((tgt.transport_errors + tgt.errors) if tgt else ())]
        why = (
            problems[0]
            if problems
            else f"no 'Test completed: duration ..., throughput ...' line understood (exit status {ini.exit_status or '?'})"
        )
        rows.append(Check("Mooncake KV write", target_name, FAIL, why, limit, NEXT["mooncake_failed"]))
    return rows


def _mooncake_transport(role: str, node: str, r: parsers.MooncakeResult) -> Check:
    name = f"Mooncake transport ({role})"
    threshold = "'EFA transport installed successfully'"
    devices = f", {len(r.devices)} EFA devices" if r.devices else ""
    if r.efa_installed and not r.tcp_installed and r.init_rc == 0:
        return Check(name, node, PASS, f"EFA (MOONCAKE_PROTOCOL={r.protocol}{devices})", threshold, "")
    if r.tcp_installed:
        return Check(name, node, FAIL, f"TCP fallback (MOONCAKE_PROTOCOL={r.protocol})", threshold, NEXT["mooncake_tcp"])
    if r.registration_errors:
        return Check(name, node, FAIL, f"memory registration failed: {r.registration_errors[0]}", threshold, NEXT["mooncake_register"])
    if r.permission_errors:
        step = NEXT["mooncake_permission"].replace("ROLE", role)
        return Check(name, node, FAIL, f"not permitted: {r.permission_errors[0]}", threshold, step)
    problems = [*r.transport_errors, *r.errors]
    why = problems[0] if problems else f"no transport line understood (initialize rc {r.init_rc if r.init_rc is not None else '?'})"
    return Check(name, node, FAIL, why, threshold, NEXT["mooncake_failed"])


# --- all of it ----------------------------------------------------------------------------------------------


def evaluate(
    plan: Plan,
    th: Thresholds,
    *,
    nodes: list[Node] | None,
    runs: Mapping[str, JobRun],
    pods: Mapping[str, int],
    skipped: Mapping[str, str] | None = None,
) -> list[Check]:
    """Rows for the nodes (when listed), each Job that ran, and a SKIP row for each that did not."""
    rows = node_checks(plan, th, nodes) if nodes is not None else []
    for key, reason in (skipped or {}).items():
        rows.append(Check(key, "-", SKIP, reason, "-", ""))
    for key, run in runs.items():
        if key == "node-image":
            rows += node_image_checks(plan, th, run, pods[key])
        elif key.startswith("efa-"):
            rows += efa_checks(plan, th, key.removeprefix("efa-"), run, pods[key])
        elif key == "nccl":
            rows += nccl_checks(plan, th, run)
        elif key.startswith("uccl-"):
            rows += uccl_checks(plan, th, key, run)
        elif key == "mooncake-prefill":  # judged with its target's log (mooncake-decode)
            rows += mooncake_checks(plan, th, run, runs.get("mooncake-decode"))
    return rows


def passed(rows: list[Check]) -> bool:
    return all(r.status != FAIL for r in rows) and any(r.status == PASS for r in rows)
