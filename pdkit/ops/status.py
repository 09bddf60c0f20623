"""`pdkit status` as data: the deployment measured against its plan, from AWS and from Kubernetes.

Every row is OK, WAIT (not there yet, e.g. nodes still joining) or FAIL (there but wrong, e.g. a
node that advertises fewer EFA devices than planned: NCCL would fall back to TCP silently).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, Literal

from pdkit.console import span
from pdkit.errors import KitError
from pdkit.model import reservation as reservation_rules
from pdkit.model.plan import Plan
from pdkit.ops import capacity
from pdkit.ops.aws_clients import Aws
from pdkit.ops.aws_errors import error_code
from pdkit.ops.kube import Kube, KubeUnreachable, Node

State = Literal["OK", "WAIT", "FAIL"]


METRICS = "metrics"


@dataclass(frozen=True)
class Row:
    area: str
    item: str
    state: State
    detail: str


@dataclass
class Report:
    rows: list[Row] = field(default_factory=list)
    kube_error: str | None = None

    @property
    def ok(self) -> bool:
        # Metrics read WAIT outside a block or without traffic: that is no failure of the deployment.
        return self.kube_error is None and all(r.state == "OK" or (r.area == METRICS and r.state == "WAIT") for r in self.rows)

    def add(self, area: str, item: str, state: State, detail: str) -> None:
        self.rows.append(Row(area, item, state, detail))

    def to_dict(self) -> dict[str, Any]:
        return {"ok": self.ok, "rows": [asdict(r) for r in self.rows], "kubernetes_error": self.kube_error}


def gather(plan: Plan, aws: Aws, *, now: datetime, kube: Callable[[], Kube]) -> Report:
    report = Report()
    _aws(plan, aws, now, report)
    try:
        _kubernetes(plan, kube(), report)
    except KubeUnreachable as err:
        report.kube_error = str(err)
    return report


def _aws(plan: Plan, aws: Aws, now: datetime, report: Report) -> None:
    try:
        cluster = aws.eks.describe_cluster(name=plan.cluster_name)["cluster"]
    except Exception as err:
        if error_code(err) != "ResourceNotFoundException":
            raise
        raise KitError(f"cluster {plan.cluster_name} is not deployed in {aws.region}. Fix: `pdkit preflight`, then `make deploy`") from None
    report.add(
        "aws",
        "cluster",
        "OK" if cluster.get("status") == "ACTIVE" else "WAIT",
        f"{cluster.get('status')}, Kubernetes {cluster.get('version')}",
    )
    if not plan.reservation_is_placeholder:
        res = capacity.describe_reservation(aws.ec2, plan.reservation_id)
        left = res.time_left(now)
        rule = reservation_rules.state_rule(res.state)
        # The state table of pdkit/model/reservation.py: a block that is still coming is WAIT, one that is gone FAIL.
        detail = res.state if res.state == "active" else f"{res.state} ({rule.meaning}; {rule.todo})"
        if res.end:
            detail += f", ends {res.end:%Y-%m-%d %H:%M} UTC" + (f" ({span(left)} left)" if left else "")
        verdict: State = "OK" if res.state == "active" else "WAIT" if rule.live else "FAIL"
        report.add("aws", f"block {res.id}", verdict, detail)
    elif plan.purchase is not None:
        report.add("aws", "block", "WAIT", capacity.missing_reservation(plan) or "")
    for role in plan.roles.values():
        group = aws.eks.describe_nodegroup(clusterName=plan.cluster_name, nodegroupName=role.node_group_name)["nodegroup"]
        scaling = group.get("scalingConfig", {})
        desired = int(scaling.get("desiredSize", 0))
        issues = group.get("health", {}).get("issues", [])
        detail = f"{group.get('status')}, desired {desired} of {role.nodes} planned"
        if issues:
            detail += "; " + "; ".join(f"{i.get('code')}: {i.get('message', '')}" for i in issues)
            state: State = "FAIL"
        elif desired == 0:
            detail += " (scaled down: pdkit nodes up)"
            state = "WAIT"
        else:
            state = "OK" if desired == role.nodes and group.get("status") == "ACTIVE" else "WAIT"
        report.add("aws", f"node group {role.node_group_name}", state, detail)


def _kubernetes(plan: Plan, kube: Kube, report: Report) -> None:
    nodes = kube.gpu_nodes()
    for name, role in plan.roles.items():
        mine = [n for n in nodes if n.role == name]
        ready = sum(n.ready for n in mine)
        report.add("kubernetes", f"{name} nodes", "OK" if ready == role.nodes else "WAIT", f"{ready} Ready of {role.nodes} planned")
    for n in nodes:
        wrong = []
        if n.gpus != plan.instance.gpus:
            wrong.append(f"{n.gpus} of {plan.instance.gpus} GPUs allocatable (NVIDIA device plugin)")
        if n.efa != plan.efa_devices_per_node:
            wrong.append(f"{n.efa} of {plan.efa_devices_per_node} EFA devices allocatable (EFA device plugin)")
        state: State = "OK" if n.ready and not wrong else ("WAIT" if not n.ready else "FAIL")
        detail = "; ".join(wrong) or f"{n.gpus} GPUs, {n.efa} EFA devices"
        report.add(
            "kubernetes", f"node {n.name} ({n.role}, {n.instance_id or '?'})", state, ("not Ready; " if not n.ready else "") + detail
        )
    _placement(plan, nodes, report)
    namespace = plan.namespace
    sets = kube.leader_worker_sets(namespace)
    if sets is None:
        report.add("serving", "LeaderWorkerSet", "FAIL", "the LeaderWorkerSet CRD is not installed (the cluster stack installs it)")
    else:
        for name, role in plan.roles.items():
            groups = [s for s in sets if s.role == name]
            ready = sum(s.ready for s in groups)
            detail = (
                f"{ready} of {role.replicas} groups ready ({', '.join(s.name for s in groups)})"
                if groups
                else f"no LeaderWorkerSet labelled pdkit/role={name} in {namespace} yet (the DisaggregatedSet creates them)"
            )
            report.add("serving", f"{name} groups", "OK" if groups and ready == role.replicas else "WAIT", detail)
    routers = kube.routers(namespace)
    want = plan.router.replicas
    ready = sum(r.ready for r in routers)
    detail = f"{ready} of {want} replicas ready" if routers else f"no router Deployment labelled pdkit/role=router in {namespace} yet"
    report.add("serving", "router", "OK" if routers and ready >= want else "WAIT", detail)


def _placement(plan: Plan, nodes: list[Node], report: Report) -> None:
    """Which node serves which role and whether decode shares a bottom network node, from the Node labels:
    pdkit/placed-role (pdkit topology --assign) and EKS's topology.k8s.aws/network-node-layer-N
    (https://docs.aws.amazon.com/eks/latest/userguide/ml-workload-topology.html). Informational: the
    serving pods only prefer the placed role, so no placement is a failure."""
    if not nodes:
        return

    def role(n: Node) -> str:
        return n.placed_role or n.role

    parts = [
        f"{name}: "
        + (", ".join(f"{n.name} ({n.instance_id or '?'}) under {n.bottom_network_node or '?'}" for n in nodes if role(n) == name) or "none")
        for name in plan.roles
    ]
    bottoms = {n.bottom_network_node for n in nodes if role(n) == "decode"}
    if len(bottoms) == 1 and None not in bottoms:
        parts.append(f"decode shares bottom network node {next(iter(bottoms))}")
    else:
        parts.append(
            f"decode does NOT share a bottom network node ({', '.join(sorted(b or '?' for b in bottoms))}): `pdkit topology` shows whether the block has a closer set"
        )
    if any(n.placed_role is None for n in nodes):
        parts.append("roles still from the node groups: `pdkit topology --assign` places decode on the closest nodes")
    report.add("kubernetes", "placement", "OK", "; ".join(parts))


def add_metrics(report: Report, plan: Plan, aws: Aws, *, now: datetime) -> None:
    """The dashboards' headline figures (TTFT, TPOT p99, throughput, GPU/EFA, minutes left), from CloudWatch."""
    from pdkit.ops import status_metrics

    answer = aws.client("cloudwatch").get_metric_data(
        MetricDataQueries=status_metrics.queries(plan), StartTime=now - status_metrics.WINDOW, EndTime=now, ScanBy="TimestampDescending"
    )
    for figure in status_metrics.headline(plan, answer["MetricDataResults"]):
        report.add(METRICS, figure.item, figure.state, figure.detail)
