"""Per-node and per-pod start-up phases from a bundle, set against the plan's start-up model."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from pdkit.model.plan import ROLE_LABEL, WARMUP_MINUTES, Plan
from pdkit.ops.timeline.bundle import NODEGROUP_TAG, Bundle
from pdkit.ops.timeline.marks import Mark, condition, event_last_time, event_time, log_marks, parse_time
from pdkit.render.observability.alarms import NODES_READY_MINUTES
from pdkit.render.serving import names

# The kit's goal: the first token within this many minutes of the block's start (issue 15).
FIRST_TOKEN_GOAL_MINUTES = 15.0
# kube-apiserver --event-ttl default (https://kubernetes.io/docs/reference/command-line-tools-reference/kube-apiserver/).
EVENT_TTL_MINUTES = 60
STAGING_CONTAINER = "stage-weights"
SGLANG_CONTAINER = "sglang"
ROUTER_CONTAINER = "router"

# (phase, what it spans); the order is the order of a start-up.
PHASES: tuple[tuple[str, str], ...] = (
    ("node join", "EC2 LaunchTime -> node Ready"),
    ("pod start", "node Ready -> first image Pulling event (scheduling, volume attach)"),
    ("image pull", "first Pulling -> last Pulled event of the pod"),
    ("weights staging", "stage-weights init container, stager log lines"),
    ("DeepGEMM precompile", "compile-cache step: 'cold compile cache: running the DeepGEMM precompile' -> 'finished'"),
    ("model load", "SGLang 'Load weight begin.' -> last 'Load weight end.'"),
    ("JIT, CUDA graphs, warm-up", "last 'Load weight end.' -> 'The server is fired up and ready to roll!'"),
    ("router registration", "server ready -> router 'Registered worker <url>'"),
)


@dataclass
class Phase:
    name: str
    start: datetime | None
    end: datetime | None
    detail: str = ""

    @property
    def minutes(self) -> float | None:
        if self.start is None or self.end is None:
            return None
        return max((self.end - self.start).total_seconds(), 0.0) / 60


@dataclass
class Subject:
    """One node or one pod, with its phases."""

    kind: str  # "node" | "pod"
    name: str
    role: str
    where: str  # the instance of a node, the node of a pod
    phases: list[Phase] = field(default_factory=list)

    def phase(self, name: str) -> Phase | None:
        return next((p for p in self.phases if p.name == name), None)

    @property
    def end(self) -> datetime | None:
        ends = [p.end for p in self.phases if p.end]
        return max(ends) if ends else None


@dataclass
class BudgetRow:
    phase: str
    planned_minutes: float | None
    measured_minutes: float | None
    worst: str
    seen: bool = True  # some node or pod has started the phase

    @property
    def state(self) -> str:
        if not self.seen:
            return "-"
        if self.measured_minutes is None:
            return "WAIT"
        if self.planned_minutes is None:
            return "-"
        return "OVER" if self.measured_minutes > self.planned_minutes else "OK"


@dataclass
class Timeline:
    deployment: str
    origin: datetime | None
    origin_label: str
    first_token: datetime | None
    missing_workers: list[str]
    nodes: list[Subject]
    pods: list[Subject]
    budget: list[BudgetRow]
    critical_path: list[Phase]
    captures: list[str]
    warnings: list[str] = field(default_factory=list)
    goal_minutes: float = FIRST_TOKEN_GOAL_MINUTES

    @property
    def first_token_minutes(self) -> float | None:
        if self.origin is None or self.first_token is None:
            return None
        return (self.first_token - self.origin).total_seconds() / 60

    @property
    def goal_met(self) -> bool | None:
        minutes = self.first_token_minutes
        return None if minutes is None else minutes <= self.goal_minutes

    def at(self, moment: datetime | None) -> float | None:
        """Minutes after the origin."""
        if moment is None or self.origin is None:
            return None
        return (moment - self.origin).total_seconds() / 60

    def to_dict(self) -> dict[str, Any]:
        def phases(chain: list[Phase]) -> list[dict[str, Any]]:
            return [{"phase": p.name, "start": p.start, "end": p.end, "minutes": _round(p.minutes), "detail": p.detail} for p in chain]

        return {
            "deployment": self.deployment,
            "origin": {"at": self.origin, "what": self.origin_label},
            "first_token": {
                "at": self.first_token,
                "minutes_after_origin": _round(self.first_token_minutes),
                "goal_minutes": self.goal_minutes,
                "goal_met": self.goal_met,
                "workers_not_registered": self.missing_workers,
            },
            "nodes": [{"name": s.name, "role": s.role, "instance": s.where, "phases": phases(s.phases)} for s in self.nodes],
            "pods": [{"name": s.name, "role": s.role, "node": s.where, "phases": phases(s.phases)} for s in self.pods],
            "budget": [
                {
                    "phase": b.phase,
                    "planned_minutes": b.planned_minutes,
                    "measured_minutes": _round(b.measured_minutes),
                    "worst": b.worst,
                    "state": b.state,
                }
                for b in self.budget
            ],
            "critical_path": phases(self.critical_path),
            "captures": self.captures,
            "warnings": self.warnings,
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 1)


def planned_minutes(plan: Plan, *, server_compiled: bool = False) -> dict[str, float | None]:
    """The plan's start-up model per phase (its estimates; None where the plan budgets nothing).

    On a cold compile cache whose precompile step did not run, SGLang JIT-compiles DeepGEMM's kernels
    itself before it is ready: the plan's first-boot budget then gives that phase the precompile's minutes too.
    """
    est = plan.estimates
    warmup = WARMUP_MINUTES + (est.precompile_minutes if server_compiled else 0.0)
    return {
        "node join": float(NODES_READY_MINUTES),
        "pod start": None,
        "image pull": est.image_ready_minutes[plan.ami_source],
        "weights staging": est.staging_minutes,
        "DeepGEMM precompile": est.precompile_minutes,
        "model load": est.load_minutes,
        "JIT, CUDA graphs, warm-up": warmup,
        "router registration": None,
    }


def build(plan: Plan, bundle: Bundle) -> Timeline:
    roles = {r.node_group_name: name for name, r in plan.roles.items()}
    node_ready = {n["metadata"]["name"]: condition(n, "Ready") for n in bundle.nodes}
    node_of_instance = {_instance_id(n): n["metadata"]["name"] for n in bundle.nodes}
    nodes = [_node(i, roles, node_of_instance, node_ready) for i in bundle.instances]
    nodes.sort(key=lambda s: (s.role, s.name))

    registrations = _registrations(bundle)
    events = _events_by_pod(bundle)
    pods, registered = [], {}
    for pod in _current_pods(bundle.pods):
        role = (pod["metadata"].get("labels") or {}).get(ROLE_LABEL)
        if role not in plan.roles:
            continue
        name, since = pod["metadata"]["name"], parse_time(pod["metadata"].get("creationTimestamp"))
        # The router discovers workers by label and registers them by pod IP (smg --service-discovery);
        # bundles from before the DisaggregatedSet name the leader's DNS host instead.
        ip = (pod.get("status") or {}).get("podIP") or ""
        after = [t for t in registrations.get(name, []) + registrations.get(ip, []) if since is None or t >= since]
        if after:
            registered[name] = min(after)
        uid = pod["metadata"].get("uid")
        own = [e for e in events.get(name, []) if (e.get("involvedObject") or {}).get("uid") in (None, uid)]
        pods.append(_pod(pod, role, own, bundle, node_ready, registered.get(name)))
    pods.sort(key=lambda s: (s.role, s.name))

    origin, label = _origin(bundle, nodes)
    leaders = _leaders(plan, _current_pods(bundle.pods))
    missing = [leader for leader in leaders if leader not in registered]
    first_token = max(registered[leader] for leader in leaders) if leaders and not missing else None

    planned = planned_minutes(plan, server_compiled=_server_compiled(bundle, pods))
    budget = []
    for name, _ in PHASES:
        subjects = nodes if name == "node join" else pods
        timed = [(p.minutes, s.name) for s in subjects if (p := s.phase(name)) and p.minutes is not None]
        worst = max(timed, default=(None, ""))
        seen = any(p.start for s in subjects if (p := s.phase(name)))
        budget.append(BudgetRow(name, planned[name], worst[0], worst[1], seen))
    return Timeline(
        deployment=plan.name,
        origin=origin,
        origin_label=label,
        first_token=first_token,
        missing_workers=missing,
        nodes=nodes,
        pods=pods,
        budget=budget,
        critical_path=_critical_path(origin, nodes, pods, leaders),
        captures=bundle.captures,
        warnings=_warnings(bundle, nodes),
    )


def _warnings(bundle: Bundle, nodes: list[Subject]) -> list[str]:
    launches = [p.start for s in nodes for p in s.phases if p.name == "node join" and p.start]
    captures = sorted(t for c in bundle.captures if (t := parse_time(c)))
    if not launches or not captures:
        return []
    late = (captures[0] - min(launches)).total_seconds() / 60
    if late <= EVENT_TTL_MINUTES:
        return []
    return [
        f"the first capture came {late:.0f} min after the first instance launched: Kubernetes keeps events for "
        f"{EVENT_TTL_MINUTES} min, so scheduling and image-pull events may be missing. Next time, capture from the moment the nodes come up"
    ]


def _server_compiled(bundle: Bundle, pods: list[Subject]) -> bool:
    """SGLang logged DeepGEMM JIT compiles and no pod ran the precompile step (it compiled while starting)."""
    if any(s.phase("DeepGEMM precompile") for s in pods):
        return False
    return any(m.kind == "deepgemm" for (_, c), lines in bundle.logs.items() if c == SGLANG_CONTAINER for m in log_marks(lines))


def _instance_id(node: dict[str, Any]) -> str:
    return str((node.get("spec") or {}).get("providerID", "")).rsplit("/", 1)[-1]


def _node(instance: dict[str, Any], roles: dict[str, str], node_of: dict[str, str], ready: dict[str, datetime | None]) -> Subject:
    tags = {t.get("Key"): t.get("Value") for t in instance.get("Tags") or []}
    instance_id = instance.get("InstanceId", "?")
    node = node_of.get(instance_id, "")
    subject = Subject("node", node or f"({instance_id} not joined)", roles.get(tags.get(NODEGROUP_TAG, ""), "?"), instance_id)
    subject.phases.append(Phase("node join", parse_time(instance.get("LaunchTime")), ready.get(node), instance.get("InstanceType", "")))
    return subject


def _events_by_pod(bundle: Bundle) -> dict[str, list[dict[str, Any]]]:
    found: dict[str, list[dict[str, Any]]] = {}
    for e in bundle.events:
        involved = e.get("involvedObject") or {}
        if involved.get("kind") == "Pod":
            found.setdefault(involved.get("name", ""), []).append(e)
    return found


def _current_pods(pods: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """One pod per name, the newest: LeaderWorkerSet recreates a failed group's pods under the same names,
    and the bundle keeps the earlier ones."""
    newest: dict[str, dict[str, Any]] = {}
    for pod in pods:
        name = pod["metadata"]["name"]
        created = parse_time(pod["metadata"].get("creationTimestamp"))
        kept = newest.get(name)
        if kept is None or (created and (parse_time(kept["metadata"].get("creationTimestamp")) or created) <= created):
            newest[name] = pod
    return list(newest.values())


def _leaders(plan: Plan, pods: list[dict[str, Any]]) -> list[str]:
    """Each role's leader pods (LWS worker index 0; the DisaggregatedSet names them per revision), and a
    placeholder for each one the plan wants that is not there yet."""
    leaders: list[str] = []
    for role, r in plan.roles.items():
        found = []
        for pod in pods:
            labels = pod["metadata"].get("labels") or {}
            index = labels.get(names.LWS_WORKER_INDEX_LABEL)
            name = pod["metadata"]["name"]
            # Bundles from before the DisaggregatedSet: the leader of group i was <deployment>-<role>-<i>.
            legacy = index is None and re.fullmatch(rf"{re.escape(plan.name)}-{role}-[0-9]+", name)
            if labels.get(ROLE_LABEL) == role and (index == "0" or legacy):
                found.append(name)
        found = sorted(found)[: r.replicas]
        leaders += found + [f"{role} leader {i} (no pod)" for i in range(len(found), r.replicas)]
    return leaders


def _registrations(bundle: Bundle) -> dict[str, list[datetime]]:
    """Worker host -> the times a router registered it: a pod IP (label discovery), or the leader pod's
    name from its DNS host <leader>.<lws>.<ns>.svc (static URLs, bundles from before the DisaggregatedSet)."""
    found: dict[str, list[datetime]] = {}
    for (_, container), lines in bundle.logs.items():
        if container != ROUTER_CONTAINER:
            continue
        for mark in log_marks(lines):
            if mark.kind != "registered":
                continue
            host = re.sub(r"^[a-z]+://", "", mark.detail).split(":", 1)[0].split("/", 1)[0]
            key = host if re.fullmatch(r"[0-9.]+", host) else host.split(".", 1)[0]
            found.setdefault(key, []).append(mark.at)
    return found


def _pod(
    pod: dict[str, Any],
    role: str,
    events: list[dict[str, Any]],
    bundle: Bundle,
    node_ready: dict[str, datetime | None],
    registered: datetime | None,
) -> Subject:
    name = pod["metadata"]["name"]
    since = parse_time(pod["metadata"].get("creationTimestamp"))

    def marks(*containers: str) -> list[Mark]:
        """This pod's lines (a recreated pod's log file also holds its predecessor's)."""
        lines = [
            line for (pod_name, c), log in bundle.logs.items() if pod_name == name and (not containers or c in containers) for line in log
        ]
        return [m for m in log_marks(lines) if since is None or m.at >= since]

    node = (pod.get("spec") or {}).get("nodeName", "")
    subject = Subject("pod", name, role, node)
    pulling = sorted(t for e in events if e.get("reason") == "Pulling" and (t := event_time(e)))
    pulled = [(t, e.get("message", "")) for e in events if e.get("reason") == "Pulled" and (t := event_last_time(e))]
    pulled.sort(key=lambda x: x[0])
    # "already present on machine" is also a Pulled event (a later container of the pod): not a pull.
    fetched = [t for t, message in pulled if message.startswith("Successfully pulled")]
    scheduled = condition(pod, "PodScheduled")
    start_from = max((t for t in (node_ready.get(node), parse_time(pod["metadata"].get("creationTimestamp"))) if t), default=None)
    subject.phases.append(Phase("pod start", start_from, pulling[0] if pulling else scheduled, ""))
    if pulling or pulled:
        detail = "; ".join(_pull_detail(m) for _, m in pulled)
        end = fetched[-1] if fetched else (pulled[0][0] if pulled and not pulling else None)
        subject.phases.append(Phase("image pull", pulling[0] if pulling else end, end, detail))

    stager = marks(STAGING_CONTAINER)
    begin, end = _first(stager, "stage_begin", "stage_skip"), _last(stager, "stage_end", "stage_skip")
    init = _container_times(pod, STAGING_CONTAINER, init=True)
    staging_detail = next((m.detail for m in stager if m.kind in ("stage_end", "stage_skip")), "")
    subject.phases.append(Phase("weights staging", begin or init[0], end or init[1], staging_detail))

    every = marks()
    pre_begin, pre_end = _first(every, "precompile_begin"), _last(every, "precompile_end")
    if pre_begin or pre_end:
        subject.phases.append(Phase("DeepGEMM precompile", pre_begin, pre_end, "cold compile cache"))

    sglang = marks(SGLANG_CONTAINER)
    load_begin, load_end = _first(sglang, "load_begin"), _last(sglang, "load_end")
    subject.phases.append(Phase("model load", load_begin, load_end))
    ready_line = _first(sglang, "ready")
    graphs = [m for m in sglang if m.kind in ("graph_begin", "graph_end")]
    kernels = sum(1 for m in sglang if m.kind == "deepgemm")
    graph_minutes = (max(m.at for m in graphs) - min(m.at for m in graphs)).total_seconds() / 60 if len(graphs) > 1 else None
    detail = ", ".join(
        part
        for part in (
            f"CUDA graph capture {graph_minutes:.1f} min" if graph_minutes is not None else "",
            f"{kernels} DeepGEMM JIT compile lines" if kernels else "",
        )
        if part
    )
    warm_end = ready_line or (_last(sglang, "graph_end") if not _is_leader(name) else None)
    subject.phases.append(Phase("JIT, CUDA graphs, warm-up", load_end, warm_end, detail))
    if _is_leader(name):
        subject.phases.append(Phase("router registration", ready_line or condition(pod, "Ready"), registered))
    return subject


def _is_leader(pod_name: str) -> bool:
    """LeaderWorkerSet pods: the leader is <lws>-<group>, a worker <lws>-<group>-<index>."""
    return re.search(r"-\d+-\d+$", pod_name) is None


def _pull_detail(message: str) -> str:
    """The kubelet's 'Successfully pulled image "X" in D (D including waiting). Image size: N bytes.'"""
    m = re.search(r'image "([^"]+)" in (\S+) \((\S+) including waiting\)', message)
    if m:
        return f"{m.group(1).rsplit('/', 1)[-1]} pulled in {m.group(2)} ({m.group(3)} with waiting)"
    m = re.search(r'Container image "([^"]+)" already present on machine', message)
    if m:
        return f"{m.group(1).rsplit('/', 1)[-1]} already on the node"
    return message[:120]


def _container_times(pod: dict[str, Any], container: str, *, init: bool) -> tuple[datetime | None, datetime | None]:
    key = "initContainerStatuses" if init else "containerStatuses"
    for s in (pod.get("status") or {}).get(key) or []:
        if s.get("name") != container:
            continue
        state = s.get("state") or {}
        if "terminated" in state:
            return parse_time(state["terminated"].get("startedAt")), parse_time(state["terminated"].get("finishedAt"))
        if "running" in state:
            return parse_time(state["running"].get("startedAt")), None
    return None, None


def _first(marks: list[Mark], *kinds: str) -> datetime | None:
    return min((m.at for m in marks if m.kind in kinds), default=None)


def _last(marks: list[Mark], *kinds: str) -> datetime | None:
    return max((m.at for m in marks if m.kind in kinds), default=None)


def _origin(bundle: Bundle, nodes: list[Subject]) -> tuple[datetime | None, str]:
    for r in (bundle.reservation or {}).get("CapacityReservations", []):
        start = parse_time(r.get("StartDate"))
        if start:
            return start, f"Capacity Block {r.get('CapacityReservationId', '')} start"
    launches = [p.start for s in nodes for p in s.phases if p.name == "node join" and p.start]
    if launches:
        return min(launches), "first GPU instance launch (no block in the bundle)"
    return None, "unknown (no instances in the bundle)"


def _critical_path(origin: datetime | None, nodes: list[Subject], pods: list[Subject], leaders: list[str]) -> list[Phase]:
    """The chain of the leader that was served last: from the origin through its node to its registration."""
    candidates = [p for p in pods if p.name in leaders] or pods
    if not candidates:
        return []
    last = max(candidates, key=lambda p: p.end.timestamp() if p.end else float("-inf"))
    node = next((n for n in nodes if n.name == last.where), None)
    chain: list[Phase] = []
    join = node.phase("node join") if node else None
    if origin and join and join.start and join.start > origin:
        chain.append(Phase("waiting for the instance", origin, join.start, "block start -> EC2 LaunchTime"))
    if join:
        chain.append(join)
    chain += [p for p in last.phases if p.minutes is not None]
    return chain
