"""Alarm definitions, from the plan and the profile's thresholds. The stack turns each into a
CloudWatch alarm that notifies the kit's encrypted SNS topic (on ALARM and on OK).

Per-node alarms are CloudWatch Metrics Insights queries grouped by node, so nodes that join with
the block are covered without redeploying (each node is a contributor of the alarm).
Alarms that only make sense while a block is serving are gated with the block clock: they wait out
the start-up budget of the plan and stop before the drain.
https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/Create_Metrics_Insights_Alarm.html

An on-demand rehearsal has no block and so no block clock (no function publishes it): the block-ending alarm and
the clock's pipeline alarm are left out, and the healthy-replica alarms wait the same grace as consecutive
minutes instead of reading a clock that would never report.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Literal

from pdkit.model.plan import Plan
from pdkit.render.observability import catalog as c

RUNBOOK = "runbooks/06-observability.md"
# Share of router responses that are 5xx before paging: a few failed requests during a client burst
# are normal, a sustained 5% is not.
ROUTER_ERROR_RATIO = 0.05
# From "Capacity Block Delivered" to GPU nodes Ready: the lifecycle function scales the node groups at
# once; p5en boot, NVMe RAID and kubelet join take 10-15 minutes.
NODES_READY_MINUTES = 15
# Expert balancedness is noisy per forward pass and at low load: page on a quarter hour of it, not a burst.
EXPERT_IMBALANCE_MINUTES = 15

Area = Literal["infrastructure", "serving", "capacity", "pipeline"]
Purpose = Literal["serving-metrics", "block-clock"]
FUNCTIONS: tuple[tuple[Purpose, str], ...] = (("serving-metrics", "serving figures"), ("block-clock", "block clock"))


@dataclass(frozen=True)
class Query:
    id: str
    expression: str | None = None  # metric math or a Metrics Insights query
    namespace: str | None = None  # or one metric
    metric: str | None = None
    dimensions: tuple[tuple[str, str], ...] = ()
    stat: str = "Average"
    return_data: bool = True


@dataclass(frozen=True)
class Alarm:
    key: str
    name: str
    area: Area
    summary: str
    first_step: str
    queries: tuple[Query, ...]
    comparison: Literal["GreaterThanThreshold", "GreaterThanOrEqualToThreshold", "LessThanThreshold", "LessThanOrEqualToThreshold"]
    threshold: float
    evaluation_periods: int  # all of them breaching: datapoints_to_alarm is the same number
    period: int = 60

    @property
    def datapoints_to_alarm(self) -> int:
        return self.evaluation_periods

    @property
    def description(self) -> str:
        return f"{self.summary} First step: {self.first_step} ({RUNBOOK}#{self.key})"


def function_name(plan: Plan, purpose: Purpose) -> str:
    return f"{plan.name}-{purpose}"


def functions(plan: Plan) -> tuple[tuple[Purpose, str], ...]:
    """The metric-publishing functions this plan deploys: no block clock without a block."""
    return tuple(f for f in FUNCTIONS if plan.market == "capacity-block" or f[0] != "block-clock")


def serving_grace_minutes(plan: Plan) -> int:
    """Minutes into a block before serving must be up: nodes joining, staging the weights, the start-up budget."""
    return math.ceil(NODES_READY_MINUTES + plan.estimates.staging_minutes + plan.estimates.startup_budget_minutes)


def _per_node(metric: str, fn: str, plan: Plan) -> Query:
    # A CloudWatch Metrics Insights query built from the kit's own constants (no user input reaches it).
    sql = (
        f'SELECT {fn}({metric}) FROM SCHEMA("{c.CONTAINER_INSIGHTS}", {", ".join(c.NODE_DIMS)}) '  # noqa: S608 - CloudWatch Metrics Insights, built from the metric catalog, not SQL
        f"WHERE ClusterName = '{plan.cluster_name}' GROUP BY NodeName"
    )
    return Query("nodes", expression=sql)


def _block(plan: Plan, ident: str, metric: str, *, return_data: bool = False) -> Query:
    dims = (("CapacityReservationId", plan.reservation_id), ("ClusterName", plan.cluster_name))
    return Query(ident, namespace=c.BLOCK_NAMESPACE, metric=metric, dimensions=dims, stat="Minimum", return_data=return_data)


def _figure(plan: Plan, ident: str, metric: str, role: str | None, stat: str, *, return_data: bool = True) -> Query:
    dims = (("ClusterName", plan.cluster_name),) + ((("Role", role),) if role else ())
    return Query(ident, namespace=c.SERVING_NAMESPACE, metric=metric, dimensions=dims, stat=stat, return_data=return_data)


def alarms(plan: Plan) -> list[Alarm]:
    p = plan.alarms
    name = plan.name
    out = [
        Alarm(
            "node-not-ready",
            f"{name}-node-not-ready",
            "infrastructure",
            "A node's Ready condition has been false for 3 minutes.",
            "`kubectl describe node NODE` (conditions, events); GPU nodes: check auto repair in the node group's health.",
            (_per_node("node_status_condition_ready", "MIN", plan),),
            "LessThanThreshold",
            1,
            3,
        ),
        Alarm(
            "gpus-missing",
            f"{name}-gpus-missing",
            "infrastructure",
            f"A GPU node advertises fewer than {plan.instance.gpus} GPUs (nvidia.com/gpu capacity).",
            "`kubectl -n nvidia-device-plugin logs` on that node's device-plugin pod, then `nvidia-smi` via SSM; an Xid or a GPU off the bus means a replacement.",
            (_per_node("node_gpu_limit", "MIN", plan),),
            "LessThanThreshold",
            plan.instance.gpus,
            3,
        ),
        Alarm(
            "efa-devices-missing",
            f"{name}-efa-devices-missing",
            "infrastructure",
            f"A GPU node advertises fewer than {plan.efa_devices_per_node} EFA devices: NCCL and UCCL-EP would lose rails or fall back to TCP.",
            "`kubectl -n kube-system logs` of the EFA device plugin on that node; `fi_info -p efa` on the node.",
            (_per_node("node_efa_limit", "MIN", plan),),
            "LessThanThreshold",
            plan.efa_devices_per_node,
            3,
        ),
        Alarm(
            "efa-drops",
            f"{name}-efa-drops",
            "infrastructure",
            "A node's EFA devices have been dropping received packets for 15 minutes.",
            "Compare nodes on the infrastructure dashboard; `pdkit validate` (fi_pingpong / nccl-tests) between the affected pair.",
            (_per_node("node_efa_rx_dropped", "SUM", plan),),
            "GreaterThanThreshold",
            0,
            3,
            period=300,
        ),
    ]
    if plan.market == "capacity-block":
        out.append(_block_ending(plan))
    grace = serving_grace_minutes(plan)
    for role in plan.roles.values():
        out.append(_no_healthy(plan, role.name, grace))
    out += [
        Alarm(
            "router-errors",
            f"{name}-router-errors",
            "serving",
            f"More than {ROUTER_ERROR_RATIO:.0%} of the router's responses have been 5xx for 3 minutes.",
            "Router logs (`kubectl logs deploy/ROUTER`), then the healthy-replica and KV-failure panels.",
            (_figure(plan, "ratio", "RouterErrorRatio", None, "Average"),),
            "GreaterThanThreshold",
            ROUTER_ERROR_RATIO,
            3,
        ),
        Alarm(
            "tpot-p99",
            f"{name}-tpot-p99",
            "serving",
            f"Decode time per output token p99 above {p.tpot_p99_ms:g} ms (observability.tpot_p99_ms) for 5 minutes.",
            "Check running/queued requests and KV usage (overload?), then EFA drops/retransmits (fabric?).",
            (_figure(plan, "tpot", "TpotP99Ms", "decode", "Average"),),
            "GreaterThanThreshold",
            p.tpot_p99_ms,
            5,
        ),
        Alarm(
            "ttft-p99",
            f"{name}-ttft-p99",
            "serving",
            f"Time to first token p99 (decode side, as clients see it) above {p.ttft_p99_ms:g} ms (observability.ttft_p99_ms) for 5 minutes.",
            "Check prefill queued requests and KV transfer latency/failures; prefill may be the bottleneck.",
            (_figure(plan, "ttft", "TtftP99Ms", "decode", "Average"),),
            "GreaterThanThreshold",
            p.ttft_p99_ms,
            5,
        ),
    ]
    for role in plan.roles.values():
        if not role.reports_expert_balancedness:
            continue
        out.append(
            Alarm(
                f"expert-imbalance-{role.name}",
                f"{name}-expert-imbalance-{role.name}",
                "serving",
                f"{role.name}: SGLang's expert balancedness (mean/max tokens per EP rank, 1 = even) below "
                f"{p.expert_balancedness_min:g} (observability.expert_balancedness_min) for {EXPERT_IMBALANCE_MINUTES} minutes: "
                f"the busiest of {role.ep} EP ranks sets the pace of every MoE layer.",
                "Compare the per-DP-rank panels (one hot rank, or a skewed workload?), then consider EPLB "
                "(--enable-eplb with redundant experts) for this workload.",
                (_figure(plan, "balancedness", "ExpertBalancedness", role.name, "Average"),),
                "LessThanThreshold",
                p.expert_balancedness_min,
                EXPERT_IMBALANCE_MINUTES,
            )
        )
    for purpose, what in functions(plan):
        fn = function_name(plan, purpose)
        out.append(
            Alarm(
                f"{purpose}-failing",
                f"{name}-{purpose}-failing",
                "pipeline",
                f"The {what} function has failed for 5 minutes: the alarms that read its metrics see no data and stay silent.",
                f"Read its log (`aws lambda get-function-configuration --function-name {fn} --query LoggingConfig.LogGroup`, then `aws logs tail`).",
                (Query("errors", namespace=c.LAMBDA_NAMESPACE, metric="Errors", dimensions=(("FunctionName", fn),), stat="Sum"),),
                "GreaterThanThreshold",
                0,
                5,
            )
        )
    return out


def _block_ending(plan: Plan) -> Alarm:
    return Alarm(
        "block-ending",
        f"{plan.name}-block-ending",
        "capacity",
        f"The Capacity Block ends in {plan.drain_lead_minutes} minutes or less: GPU node groups are draining to 0.",
        "Save benchmark results and logs now; extend the block if you need more time (`pdkit capacity extend`).",
        (_block(plan, "left", c.BLOCK_MINUTES_LEFT, return_data=True),),
        "LessThanOrEqualToThreshold",
        plan.drain_lead_minutes,
        1,
    )


def _no_healthy(plan: Plan, role: str, grace: int) -> Alarm:
    first_step = f"`kubectl -n {plan.namespace} get lws,pods -L pdkit/role`; logs of the {role} leader pod."
    if plan.market == "on-demand":
        return Alarm(
            f"no-healthy-{role}",
            f"{plan.name}-no-healthy-{role}",
            "serving",
            f"The router has seen no healthy {role} replica for {grace} minutes in a row "
            "(nodes joining + staging + start-up budget of the plan; a rehearsal has no block clock to gate on).",
            first_step,
            (_figure(plan, "healthy", "HealthyWorkers", role, "Minimum"),),
            "LessThanThreshold",
            1,
            grace,
        )
    return Alarm(
        f"no-healthy-{role}",
        f"{plan.name}-no-healthy-{role}",
        "serving",
        f"The router sees no healthy {role} replica, {grace}+ minutes into the block (nodes joining + staging + start-up budget of the plan).",
        first_step,
        (
            _figure(plan, "healthy", "HealthyWorkers", role, "Minimum", return_data=False),
            _block(plan, "elapsed", c.BLOCK_MINUTES_ELAPSED),
            _block(plan, "left", c.BLOCK_MINUTES_LEFT),
            Query("gated", expression=f"IF(elapsed > {grace} AND left > {plan.drain_lead_minutes} AND healthy < 1, 1, 0)"),
        ),
        "GreaterThanOrEqualToThreshold",
        1,
        3,
    )
