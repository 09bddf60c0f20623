"""A rehearsal on on-demand GPUs, from deploy to verified teardown: its cost estimate, its steps, its teardown check.

Each step is a function that returns PASS or FAIL; the subprocess steps take an injected runner and the teardown
check takes the AWS clients, so tests drive both with fakes and botocore Stubbers.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from functools import cache
from pathlib import Path
from typing import TYPE_CHECKING, Any

import yaml

from pdkit.errors import KitError
from pdkit.model.catalog import DATA, GB
from pdkit.model.plan import Plan
from pdkit.model.topology import CLUSTER_TAG
from pdkit.ops.aws_errors import stack_missing

if TYPE_CHECKING:
    from pdkit.ops.timeline.phases import Timeline

DEPLOYMENT_TAG = "pdkit:deployment"  # every resource of the stacks carries it (stacks/kit.py)
LBC_CLUSTER_TAG = "elbv2.k8s.aws/cluster"
DEFAULT_HOURS = 2.0
Runner = Callable[[Sequence[str]], int]


# --- the market ------------------------------------------------------------------------------------------


def require_rehearsal(plan: Plan) -> None:
    """Only an on-demand profile is rehearsed: its teardown ends the bill, a Capacity Block's does not."""
    if plan.market != "on-demand":
        raise KitError(
            f"profile {plan.name} buys {plan.market} capacity; `pdkit rehearse` deploys and tears down on-demand GPUs only. "
            "Fix: pass a rehearsal profile (capacity.market: on-demand), e.g. --profile config/rehearsal-<name>.yaml"
        )


# --- the cost estimate ------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CostLine:
    what: str
    usd_per_hour: float
    hours: float

    @property
    def usd(self) -> float:
        return self.usd_per_hour * self.hours


@dataclass(frozen=True)
class Estimate:
    lines: tuple[CostLine, ...]
    hours: float
    as_of: str
    source: str

    @property
    def usd(self) -> float:
        return sum(line.usd for line in self.lines)


@cache
def prices() -> dict[str, Any]:
    data: dict[str, Any] = yaml.safe_load((DATA / "prices.yaml").read_text())
    return data


UNCONFIRMED = "unconfirmed price"


def confirmed(table: dict[str, Any], key: str) -> bool:
    """False for a number pdkit/model/data/prices.yaml lists under `unconfirmed` (no source confirmed it)."""
    return key not in table.get("unconfirmed", [])


def _flag(table: dict[str, Any], *keys: str) -> str:
    return f", {UNCONFIRMED}" if not all(confirmed(table, key) for key in keys) else ""


def estimate(plan: Plan, *, hours: float, gpu_usd_per_hour: float | None = None, table: dict[str, Any] | None = None) -> Estimate:
    """On-demand price of the plan's GPU instances x count x hours, plus the EKS cluster hour and the NAT gateway hours."""
    table = table if table is not None else prices()
    name, region = plan.instance.name, plan.region
    gpu_flag = ""
    if gpu_usd_per_hour is None:
        gpu_flag = _flag(table, f"on_demand_usd_per_hour.{region}")
        gpu_usd_per_hour = table["on_demand_usd_per_hour"].get(region, {}).get(name)
        if gpu_usd_per_hour is None:
            raise KitError(
                f"no on-demand price for {name} in {region} in pdkit/model/data/prices.yaml. "
                f"Fix: look it up on {table['sources']['on_demand']} and pass --gpu-usd-per-hour PRICE (or add it to the file)"
            )
    nat_prices = table["nat_gateway_usd_per_hour"]
    nat, nat_note = (nat_prices[region], "") if region in nat_prices else (nat_prices["default"], f", {region} not priced: US East price")
    nat_note += _flag(table, f"nat_gateway_usd_per_hour.{region if region in nat_prices else 'default'}")
    gateways = plan.network.nat_gateways
    lines = (
        CostLine(
            f"{plan.instance_count} x {name} on-demand (${gpu_usd_per_hour:,.2f}/h each{gpu_flag})",
            gpu_usd_per_hour * plan.instance_count,
            hours,
        ),
        CostLine("EKS cluster" + _flag(table, "eks_cluster_usd_per_hour"), float(table["eks_cluster_usd_per_hour"]), hours),
        CostLine(f"{gateways} NAT gateway(s), hours only{nat_note}", float(nat) * gateways, hours),
    )
    return Estimate(lines=lines, hours=hours, as_of=str(table["as_of"]), source=str(table["sources"]["on_demand"]))


# --- the steps --------------------------------------------------------------------------------------------

PASS, FAIL, SKIPPED, NOT_RUN = "PASS", "FAIL", "skipped", "not run"
TEARDOWN_STEPS = ("destroy", "verify-teardown")


@dataclass(frozen=True)
class Step:
    name: str
    what: str
    run: Callable[[], tuple[bool, str]]  # (passed, one line of detail)


@dataclass(frozen=True)
class Outcome:
    step: str
    what: str
    state: str
    detail: str = ""


def command_step(name: str, what: str, argv: Sequence[str], runner: Runner) -> Step:
    def run() -> tuple[bool, str]:
        code = runner(argv)
        return code == 0, shlex.join(argv) + ("" if code == 0 else f" exited {code}")

    return Step(name, what, run)


def startup_markdown(timeline: Timeline) -> str:
    """The measured start-up beside the plan's start-up model, per phase (pdkit.ops.timeline's budget rows)."""

    def mins(value: float | None) -> str:
        return "-" if value is None else f"{value:.1f}"

    lines = [
        f"# {timeline.deployment}: start-up, measured against the plan",
        "",
        "| phase | planned min | measured min (worst) | worst | state |",
        "|---|---|---|---|---|",
        *(
            f"| {b.phase} | {mins(b.planned_minutes)} | {mins(b.measured_minutes)} | {b.worst or '-'} | {b.state} |"
            for b in timeline.budget
        ),
        "",
    ]
    if timeline.first_token_minutes is None:
        lines.append("No first token in the captured bundle: the router registered no worker.")
    else:
        verdict = "met" if timeline.goal_met else "missed"
        lines.append(
            f"First token possible at +{timeline.first_token_minutes:.1f} min ({timeline.origin_label}): the {timeline.goal_minutes:g}-minute goal was {verdict}."
        )
    return "\n".join(lines) + "\n"


def write_startup(plan: Plan, bundle_dir: Path, target: Path) -> Path:
    """startup.md from a `pdkit timeline --capture` bundle, offline."""
    from pdkit.ops.timeline import bundle, phases

    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(startup_markdown(phases.build(plan, bundle.read(bundle_dir))))
    return target


def timeline_step(argv: Sequence[str], runner: Runner, *, bundle_dir: Path, startup: Callable[[Path], Path]) -> Step:
    capture = command_step("timeline", "", argv, runner)

    def run() -> tuple[bool, str]:
        ok, detail = capture.run()
        if not ok:
            return ok, detail
        return True, f"wrote {startup(bundle_dir)}"

    return Step("timeline", "measured start-up beside the plan's model", run)


def steps(
    *,
    profile: str,
    out: Path,
    runner: Runner,
    verify: Callable[[], tuple[bool, str]],
    startup: Callable[[Path], Path],
    pdkit: Sequence[str] = ("pdkit",),
    admin_key_shell: str | None = None,
) -> list[Step]:
    """The rehearsal in order: the existing make targets and pdkit commands, each run as the operator would.

    The GPU nodes come up with serving held back: `pdkit validate` refuses to run beside serving pods
    (they hold the GPUs and EFA devices), so serving is restored only after it, once SGLang's admin-key
    Secret exists (the pods cannot start without it: runbooks/02-serve.md, Prerequisites 5)."""
    p = ["--profile", profile]
    admin_key = (
        [command_step("admin-key", "SGLang's admin-key Secret (created once)", ["sh", "-c", admin_key_shell], runner)]
        if admin_key_shell
        else []
    )
    return [
        command_step("deploy", "make deploy (synth, deploy-check, cdk deploy)", ["make", "deploy", f"PROFILE={profile}"], runner),
        command_step("nodes-up", "GPU node groups up, serving held back for validate", [*pdkit, "nodes", "up", *p, "--no-serving"], runner),
        command_step("validate", "fabric checks", [*pdkit, "validate", *p, "--out", str(out / "validate.json")], runner),
        *admin_key,
        command_step("serving-up", "serving restored on the validated nodes", [*pdkit, "nodes", "up", *p], runner),
        command_step("bench", "benchmark sweep", [*pdkit, "bench", *p, "--out", str(out / "bench")], runner),
        command_step(
            "report",
            "report beside the seed and the latency model",
            [*pdkit, "report", *p, "--bench", str(out / "bench"), "--validate", str(out / "validate.json"), "--out", str(out / "report")],
            runner,
        ),
        timeline_step([*pdkit, "timeline", *p, "--capture", str(out / "timeline")], runner, bundle_dir=out / "timeline", startup=startup),
        command_step("destroy", "cdk destroy every stack", ["make", "destroy", f"PROFILE={profile}"], runner),
        Step("verify-teardown", "nothing left running; what is kept and its monthly cost", verify),
    ]


def select(all_steps: Sequence[Step], *, from_step: str | None = None, only: Sequence[str] = ()) -> list[Step]:
    names = [s.name for s in all_steps]
    for name in [*only, *([from_step] if from_step else [])]:
        if name not in names:
            raise KitError(f"no rehearsal step {name!r}. Fix: use one of {', '.join(names)}")
    if only:
        return [s for s in all_steps if s.name in only]
    start = names.index(from_step) if from_step else 0
    return list(all_steps[start:])


def run(chosen: Sequence[Step], *, offer_teardown: Callable[[str], bool]) -> list[Outcome]:
    """Run the steps in order; the first FAIL stops the run, then the teardown steps are offered (never skipped silently)."""
    outcomes: list[Outcome] = []
    failed: str | None = None
    for step in chosen:
        if failed is not None and (step.name not in TEARDOWN_STEPS or not offer_teardown(failed)):
            outcomes.append(Outcome(step.name, step.what, NOT_RUN))
            continue
        ok, detail = step.run()
        outcomes.append(Outcome(step.name, step.what, PASS if ok else FAIL, detail))
        if not ok and failed is None:
            failed = step.name
    return outcomes


def first_failure(outcomes: Iterable[Outcome]) -> str | None:
    return next((o.step for o in outcomes if o.state == FAIL), None)


# --- the teardown check -----------------------------------------------------------------------------------

_LIVE_STATES = ["pending", "running", "stopping", "stopped", "shutting-down"]


@dataclass(frozen=True)
class Kept:
    kind: str
    name: str
    usd_per_month: float
    detail: str


@dataclass
class Teardown:
    left: list[str] = field(default_factory=list)
    kept: list[Kept] = field(default_factory=list)

    @property
    def clean(self) -> bool:
        return not self.left

    @property
    def usd_per_month(self) -> float:
        return sum(k.usd_per_month for k in self.kept)


def check_teardown(plan: Plan, clients: Callable[[str], Any], *, table: dict[str, Any] | None = None) -> Teardown:
    """What still runs (and bills by the hour) after `make destroy`, and what the stacks keep on purpose.

    Running: EC2 instances of the cluster (the tag EKS puts on node group instances), the EKS cluster and node
    groups, NAT gateways and load balancers of the deployment, and any of its CloudFormation stacks not deleted.
    Kept: the KMS keys, ECR repositories, S3 buckets and log groups that carry the deployment tag, found through
    the Resource Groups Tagging API (https://docs.aws.amazon.com/resourcegroupstagging/latest/APIReference/API_GetResources.html).
    """
    import botocore.exceptions

    table = table if table is not None else prices()
    result = Teardown()
    ec2 = clients("ec2")
    for page in ec2.get_paginator("describe_instances").paginate(
        Filters=[{"Name": f"tag:{CLUSTER_TAG}", "Values": [plan.cluster_name]}, {"Name": "instance-state-name", "Values": _LIVE_STATES}]
    ):
        for reservation in page["Reservations"]:
            for i in reservation["Instances"]:
                result.left.append(f"EC2 instance {i['InstanceId']} ({i.get('InstanceType', '?')}, {i['State']['Name']})")
    for page in ec2.get_paginator("describe_nat_gateways").paginate(
        Filter=[{"Name": f"tag:{DEPLOYMENT_TAG}", "Values": [plan.name]}, {"Name": "state", "Values": ["pending", "available"]}]
    ):
        for nat in page["NatGateways"]:
            result.left.append(f"NAT gateway {nat['NatGatewayId']} ({nat['State']})")
    try:
        groups = clients("eks").list_nodegroups(clusterName=plan.cluster_name)["nodegroups"]
        result.left.append(f"EKS cluster {plan.cluster_name}")
        result.left.extend(f"EKS node group {g}" for g in groups)
    except botocore.exceptions.ClientError as err:
        if err.response["Error"]["Code"] != "ResourceNotFoundException":
            raise
    cfn = clients("cloudformation")
    for stack in plan.stack_names.values():
        try:
            status = cfn.describe_stacks(StackName=stack)["Stacks"][0]["StackStatus"]
        except botocore.exceptions.ClientError as err:
            if stack_missing(err):  # deleted
                continue
            raise
        if status != "DELETE_COMPLETE":
            result.left.append(f"CloudFormation stack {stack} ({status})")
    tagging = clients("resourcegroupstaggingapi").get_paginator("get_resources")
    arns = [
        r["ResourceARN"]
        for page in tagging.paginate(TagFilters=[{"Key": DEPLOYMENT_TAG, "Values": [plan.name]}])
        for r in page["ResourceTagMappingList"]
    ]
    # The serving Service's NLB is made by the AWS Load Balancer Controller, not by a stack: it carries the
    # controller's cluster tag, not ours, and outlives a destroy that removed the controller before the Service.
    # https://github.com/kubernetes-sigs/aws-load-balancer-controller/issues/3701 (elbv2.k8s.aws/cluster: <cluster>)
    arns += [
        arn
        for page in tagging.paginate(
            TagFilters=[{"Key": LBC_CLUSTER_TAG, "Values": [plan.cluster_name]}], ResourceTypeFilters=["elasticloadbalancing:loadbalancer"]
        )
        for r in page["ResourceTagMappingList"]
        if (arn := r["ResourceARN"]) not in arns
    ]
    for arn in arns:
        service, resource = arn.split(":")[2], arn.split(":", 5)[5]
        if service == "elasticloadbalancing":
            result.left.append(f"load balancer {resource}")
        elif service == "kms" and resource.startswith("key/"):
            result.kept.append(_key(clients("kms"), arn, float(table["kept_usd_per_month"]["kms_key"])))
        elif service == "ecr" and resource.startswith("repository/"):
            name = resource.removeprefix("repository/")
            try:
                size = sum(
                    image.get("imageSizeInBytes", 0)
                    for page in clients("ecr").get_paginator("describe_images").paginate(repositoryName=name)
                    for image in page["imageDetails"]
                )
            except botocore.exceptions.ClientError as err:
                # DescribeImages is also an EC2 operation, so pdkit.ops.aws_errors would name ec2:DescribeImages.
                if err.response["Error"]["Code"] not in ("AccessDeniedException", "AccessDenied"):
                    raise
                raise KitError(
                    f"your AWS identity is not allowed to call ecr:DescribeImages on {name}. Fix: add ecr:DescribeImages to your IAM role or policy"
                ) from None
            result.kept.append(_sized("ECR repository", name, size, table, "ecr_gb"))
        elif service == "s3":
            size = sum(
                o["Size"]
                for page in clients("s3").get_paginator("list_objects_v2").paginate(Bucket=resource)
                for o in page.get("Contents", [])
            )
            result.kept.append(_sized("S3 bucket", resource, size, table, "s3_gb"))
        elif service == "logs" and resource.startswith("log-group:"):
            name = resource.removeprefix("log-group:").removesuffix(":*")
            groups = clients("logs").describe_log_groups(logGroupNamePrefix=name)["logGroups"]
            size = sum(g.get("storedBytes", 0) for g in groups if g["logGroupName"] == name)
            result.kept.append(_sized("log group", name, size, table, "logs_gb"))
    return result


def _key(kms: Any, arn: str, usd: float) -> Kept:
    meta = kms.describe_key(KeyId=arn)["KeyMetadata"]
    if meta["KeyState"] == "PendingDeletion":
        # No charge while a customer managed key waits for deletion (https://aws.amazon.com/kms/pricing/).
        return Kept("KMS key", meta["KeyId"], 0.0, f"pending deletion until {meta.get('DeletionDate', '?')}")
    return Kept("KMS key", meta["KeyId"], usd, meta["KeyState"].lower())


def _sized(kind: str, name: str, size_bytes: int, table: dict[str, Any], price: str) -> Kept:
    """What `size_bytes` kept costs a month at the price table's kept_usd_per_month.<price> (per GB)."""
    gb = size_bytes / GB
    return Kept(kind, name, gb * float(table["kept_usd_per_month"][price]), f"{gb:,.1f} GB{_flag(table, f'kept_usd_per_month.{price}')}")
