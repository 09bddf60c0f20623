"""Preflight: every reason the paid window could be wasted, checked before deploying onto it.

Each check yields PASS, WARN or FAIL with the fix. A missing IAM permission fails its own row
instead of aborting the run, so one report shows everything; expired credentials or an
unreachable endpoint abort with one line (aws_errors), because every row would fail the same way.
A stale or expired reservation id leaves the Auto Scaling group retrying forever
(pytorch/ci-infra#1065), hence state, AZ, type and count are checked here with the rules the
deploy-time guard applies (pdkit/model/reservation.py), so preflight predicts its verdict.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any, Literal

import yaml

from pdkit.console import span, when
from pdkit.errors import KitError
from pdkit.model import reservation as reservation_rules
from pdkit.model.catalog import DATA
from pdkit.model.plan import Plan
from pdkit.ops import addon_versions, capacity, readiness, scaledown
from pdkit.ops.aws_clients import Aws
from pdkit.ops.aws_errors import CREDENTIALS, RESERVATION_UNKNOWN, THROTTLED, error_code, iam_action, is_denied
from pdkit.ops.capacity import Reservation
from pdkit.render import ami

Status = Literal["PASS", "WARN", "FAIL"]
ADDON_PINS = DATA / "addons.yaml"
# Service Quotas code of "Running On-Demand P instances" (vCPUs) in EC2. The EC2 docs do not say
# whether instances in a Capacity Block count against it, so a shortfall is a WARN, not a FAIL.
P_INSTANCE_VCPU_QUOTA = "L-417A185B"
# Lambda "Concurrent executions". Lambda refuses a reservation that leaves fewer than 100 executions
# unreserved, or fewer than the whole quota below 100: a new account's quota of 10 allows none
# (https://docs.aws.amazon.com/lambda/latest/dg/configuration-concurrency.html; PutFunctionConcurrency
# answers "decreases account's UnreservedConcurrentExecution below its minimum value of [10]").
LAMBDA_CONCURRENCY_QUOTA = "L-B99A9384"
LAMBDA_MIN_UNRESERVED = 100


@dataclass(frozen=True)
class Check:
    name: str
    status: Status
    detail: str
    fix: str = ""

    def to_dict(self) -> dict[str, str]:
        return asdict(self)


def pinned_addons(path: Path | None = None) -> dict[str, str] | None:
    """The kit's managed EKS add-on pins (name -> version) from pdkit/model/data/addons.yaml; None until that file exists.

    The pins sit under `managed:` (charts and other pins live beside them); a flat name -> version
    mapping is read the same way.
    """
    path = path or ADDON_PINS
    if not path.is_file():
        return None
    raw = yaml.safe_load(path.read_text()) or {}
    pins = raw.get("managed", raw) if isinstance(raw, dict) else None
    if not isinstance(pins, dict) or not all(isinstance(v, str) for v in pins.values()):
        raise KitError(
            f"{path}: expected `managed:` with add-on name: version string (vpc-cni: v1.23.0-eksbuild.1). Fix: correct that file"
        )
    return {str(k): v for k, v in pins.items()}


class Preflight:
    def __init__(self, plan: Plan, aws: Aws, *, now: datetime, addon_pins: Path | None = None) -> None:
        self.plan = plan
        self.aws = aws
        self.now = now
        self.addon_pins = addon_pins
        self.checks: list[Check] = []

    def run(self) -> list[Check]:
        self._guarded("AWS credentials", self._credentials)
        self._guarded("CDK bootstrap", lambda: self._add(*readiness.cdk_bootstrap(self.aws.client("ssm"), self.aws.region)))
        reservation = self._reservation()
        if reservation is not None:
            self._guarded("Interconnect", lambda: self._interconnect(reservation))
            self._guarded("Reservation topology", lambda: self._topology(reservation))
        self._add(*readiness.cluster_admins(self.plan))
        self._guarded("GPU vCPU quota", self._quota, denied="WARN")
        if self.plan.rehearses is not None:
            self._guarded("Block images", self._block_images)
        self._guarded("Lambda concurrency", self._lambda_concurrency)
        self._guarded("EKS add-ons", self._addons)
        self._guarded("GPU node image", self._node_image)
        self._guarded("EKS cluster", self._cluster)
        self._guarded("EKS scale-down", lambda: scaledown.report(self.plan, self.aws, reservation, self._add, now=self.now))
        if self.plan.rehearses is None:  # a rehearsal builds no image: "Block images" above checks the ones it pulls
            self._guarded("Serving images", lambda: self._add(*readiness.serving_images(self.plan, self.aws.client("ecr"))))
        self._add(*readiness.kubectl(self.plan))
        return self.checks

    @property
    def ok(self) -> bool:
        return all(c.status != "FAIL" for c in self.checks)

    def _add(self, name: str, status: Status, detail: str, fix: str = "") -> None:
        self.checks.append(Check(name, status, detail, fix))

    def _guarded(self, name: str, check: Callable[[], None], *, denied: Status = "FAIL") -> None:
        """Run a check; a missing IAM permission becomes its own row (FAIL, or WARN for advisory checks) instead of ending the run."""
        try:
            check()
        except Exception as err:
            if not is_denied(err):
                raise
            action = iam_action(err)
            self._add(name, denied, f"not allowed to call {action}", f"add {action} to your IAM role, or use credentials that have it")

    def _credentials(self) -> None:
        who = self.aws.sts.get_caller_identity()
        account, arn = who.get("Account", "?"), who.get("Arn", "?")
        wanted = self.plan.account
        if wanted and wanted != account:
            self._add(
                "AWS credentials",
                "FAIL",
                f"account {account}, but the profile says aws.account {wanted}",
                f"use credentials for {wanted} (--aws-profile), or correct aws.account",
            )
        else:
            self._add("AWS credentials", "PASS", f"account {account} as {arn}")

    def _reservation(self) -> Reservation | None:
        plan = self.plan
        if plan.market == "on-demand":
            self._add("Reservation", "PASS", f"none: an on-demand rehearsal of {plan.rehearses or 'a block profile'} (capacity.market)")
            return None
        if plan.purchase is not None:
            # The block the capacity stack bought (capacity.purchase); every later check reads this plan.
            rows = len(self.checks)
            self._guarded("Reservation", lambda: setattr(self, "plan", capacity.with_bought_block(plan, self.aws)))
            if len(self.checks) > rows:  # not allowed to read the stack: that row says which action is missing
                return None
            plan = self.plan
            if plan.reservation_is_placeholder:  # nothing to check yet: the deploy buys the block the profile confirms
                self._add("Reservation", "PASS", capacity.missing_reservation(plan) or "")
                return None
        if plan.reservation_is_placeholder:
            self._add(
                "Reservation",
                "FAIL",
                f"the profile still has the synth-only placeholder {plan.reservation_id}",
                "pdkit capacity offerings  (then `pdkit capacity buy OFFERING_ID` and put the cr- id in capacity.reservation_id)",
            )
            return None
        found: list[Reservation] = []

        def fetch() -> None:
            try:
                found.append(capacity.describe_reservation(self.aws.ec2, plan.reservation_id))
            except Exception as err:
                if error_code(err) not in RESERVATION_UNKNOWN:
                    raise
                self._add(
                    "Reservation",
                    "FAIL",
                    f"{plan.reservation_id} does not exist in {self.aws.region} for this account ({error_code(err)})",
                    f"check capacity.reservation_id, --region and --aws-profile: `aws ec2 describe-capacity-reservations --region {self.aws.region}`",
                )

        self._guarded("Reservation", fetch)
        if not found:
            return None
        res = found[0]
        self._add("Reservation", "PASS", f"{res.id} found (block {res.capacity_block_id or 'id not reported yet'})")
        self._kind(res)
        self._state(res)
        self._match("Availability Zone", res.availability_zone, plan.block_az, "aws.availability_zone")
        self._match("Instance type", res.instance_type, plan.instance.name, "capacity.instance_type")
        self._count(res)
        self._window(res)
        return res

    def _kind(self, res: Reservation) -> None:
        if res.is_capacity_block:
            self._add("Reservation kind", "PASS", "a Capacity Block for ML")
        else:
            self._add(
                "Reservation kind",
                "FAIL",
                f"{res.id} is an On-Demand Capacity Reservation ({res.reservation_type}); the kit launches with MarketType=capacity-block",
                "buy a Capacity Block: pdkit capacity offerings",
            )

    def _state(self, res: Reservation) -> None:
        """PASS for a paid and dated block, WARN for one the deploy guard lets through but EC2 has not confirmed yet,
        FAIL for the rest: the state table of pdkit/model/reservation.py, the one the guard applies."""
        rule = reservation_rules.state_rule(res.state)
        if res.state == "active":
            self._add("Reservation state", "PASS", f"active since {when(res.start)}")
        elif res.state == "scheduled":
            starts = res.starts_in(self.now)
            self._add("Reservation state", "PASS", f"scheduled: starts {when(res.start)}" + (f" (in {span(starts)})" if starts else ""))
        elif rule.live:
            self._add("Reservation state", "WARN", f"{res.state}: {rule.meaning}", rule.todo)
        else:
            self._add("Reservation state", "FAIL", f"{res.state}: {rule.meaning}", rule.todo)

    def _match(self, name: str, actual: str, wanted: str, field: str) -> None:
        if actual == wanted:
            self._add(name, "PASS", actual)
        else:
            self._add(
                name, "FAIL", f"the block is {actual}, the profile says {wanted}", f"set {field}: {actual} in {self.plan.profile_path}"
            )

    def _count(self, res: Reservation) -> None:
        """The count the block has or will have (pdkit/model/reservation.py: before the start EC2 reports 0 and the
        tag carries it), held to the roles' exactly, as the deploy-time guard does."""
        need, count = self.plan.instance_count, res.count
        has = count.describe()
        note = f"; EC2 reports {count.note}" if count.note else ""
        if count.instances is None:
            self._add(
                "Instance count",
                "FAIL",
                f"{res.id} reports {has}",
                "run pdkit preflight again in a few minutes; if it persists, check the block: `pdkit capacity status`",
            )
        elif count.instances == need:
            self._add("Instance count", "PASS", f"{has}, as the roles need{note}")
        elif count.instances < need:
            self._add(
                "Instance count",
                "FAIL",
                f"the block has {has}, the roles need {need}{note}",
                "buy a block of the right size, or shrink roles.*.replicas / nodes_per_replica and capacity.instance_count",
            )
        else:
            # The deploy-time guard (pdkit/model/reservation.py) refuses any other size, so this is a FAIL too.
            self._add(
                "Instance count",
                "FAIL",
                f"the block has {has}, the roles use {need}: the deploy guard refuses a block of another size{note}",
                f"add replicas to the profile so the roles use {count.instances} nodes, and set capacity.instance_count: {count.instances}",
            )

    def _window(self, res: Reservation) -> None:
        if res.state not in capacity.USABLE_STATES:
            return
        drain = self.plan.drain_lead_minutes
        minimum = self.plan.minimum_serving_hours
        window = res.serving_window(self.now, drain_minutes=drain)
        if window is None:
            self._add("Serving window", "WARN", "the reservation reports no end date", "check it: pdkit capacity status")
        elif window >= timedelta(hours=minimum):
            self._add("Serving window", "PASS", f"{span(window)} of serving before the kit drains at T-{drain} min (ends {when(res.end)})")
        else:
            self._add(
                "Serving window",
                "FAIL",
                f"only {span(window)} of serving left before the T-{drain} min drain; the profile wants at least {minimum:g} h",
                "pdkit capacity extend  (or lower capacity.minimum_serving_hours)",
            )

    def _interconnect(self, res: Reservation) -> None:
        if not res.capacity_block_id:
            self._add("Interconnect", "WARN", "EC2 has not reported the block's cb- id yet", "run pdkit preflight again in a few minutes")
            return
        status = capacity.interconnect_status(self.aws.ec2, res.capacity_block_id)
        if status == "ok":
            self._add("Interconnect", "PASS", f"{res.capacity_block_id}: ok")
        elif status == "impaired":
            self._add(
                "Interconnect",
                "FAIL",
                f"{res.capacity_block_id}: impaired (EFA between the instances is degraded)",
                f"open an AWS Support case naming {res.capacity_block_id} and {res.id}; re-run preflight before serving",
            )
        else:
            self._add(
                "Interconnect",
                "WARN",
                f"{res.capacity_block_id}: {status or 'not reported'} (normal before the block starts)",
                "run pdkit preflight again once the block is active",
            )

    def _topology(self, res: Reservation) -> None:
        try:
            nodes = capacity.reservation_topology(self.aws.ec2, res.id)
        except Exception as err:
            code = error_code(err)
            if code is None or code in CREDENTIALS | THROTTLED or is_denied(err):
                raise
            self._add(
                "Reservation topology", "WARN", f"not available ({code})", "after launch, `pdkit topology` shows where each node sits"
            )
            return
        if not nodes:
            self._add("Reservation topology", "WARN", "EC2 has not placed the block yet", "run pdkit preflight again once it is active")
            return
        layers = self.plan.instance.topology_layers
        self._add("Reservation topology", "PASS", f"{len(nodes)} of {layers} network layers: " + " > ".join(nodes) + " (top to bottom)")

    def _quota(self) -> None:
        need = self.plan.instance_count * self.plan.instance.vcpus
        value = _quota_value(self.aws.quotas, "ec2", P_INSTANCE_VCPU_QUOTA)
        quota, region = f"--service-code ec2 --quota-code {P_INSTANCE_VCPU_QUOTA}", self.aws.region
        how = f"`aws service-quotas get-service-quota {quota} --region {region}`"
        raise_it = f"`aws service-quotas request-service-quota-increase {quota} --desired-value {need} --region {region}`"
        if value is None:
            self._add("GPU vCPU quota", "WARN", f"Running On-Demand P instances ({P_INSTANCE_VCPU_QUOTA}) not reported", f"check it: {how}")
        elif value >= need:
            self._add("GPU vCPU quota", "PASS", f"Running On-Demand P instances: {value:g} vCPUs >= {need} needed")
        elif self.plan.market == "on-demand":
            # On-demand P instances count against it for certain: EC2 refuses the launch beyond it (VcpuLimitExceeded).
            # https://docs.aws.amazon.com/ec2/latest/instancetypes/ec2-instance-quotas.html
            self._add(
                "GPU vCPU quota",
                "FAIL",
                f"Running On-Demand P instances is {value:g} vCPUs; the rehearsal's {self.plan.instance_count} x "
                f"{self.plan.instance.name} need {need}",
                f"{raise_it}, then run pdkit preflight again",
            )
        else:
            self._add(
                "GPU vCPU quota",
                "WARN",
                f"Running On-Demand P instances is {value:g} vCPUs, {need} needed if it applies to Capacity Blocks (AWS does not document it)",
                f"if nodes fail with VcpuLimitExceeded: {raise_it}",
            )

    def _block_images(self) -> None:
        """A rehearsal builds no image: it pulls its block's from the block's registry (plan.image_region), so they must
        be there before it deploys. DescribeImages answers ImageNotFoundException for a missing tag and
        RepositoryNotFoundException for a missing repository
        (https://docs.aws.amazon.com/AmazonECR/latest/APIReference/API_DescribeImages.html)."""
        from pdkit.ops import aws_clients

        plan = self.plan
        ecr = aws_clients.make_client("ecr", aws_profile=self.aws.aws_profile, region=plan.image_region)
        missing = []
        for image in plan.images.values():
            try:
                ecr.describe_images(repositoryName=image.repository, imageIds=[{"imageTag": image.tag}])
            except Exception as err:
                if error_code(err) not in ("ImageNotFoundException", "RepositoryNotFoundException"):
                    raise
                missing.append(f"{image.repository}:{image.tag}")
        where = f"the registry of {plan.rehearses} in {plan.image_region}"
        if missing:
            self._add(
                "Block images",
                "FAIL",
                f"not in {where}: {', '.join(missing)}",
                f"build them: `make images PROFILE={plan.rehearses}` (the block profile's images stack and its network, built "
                "in CodeBuild; no cluster, no GPU), then run pdkit preflight again",
            )
        else:
            self._add("Block images", "PASS", f"all {len(plan.images)} images the rehearsal runs are in {where}")

    def _lambda_concurrency(self) -> None:
        """Room in the account's Lambda quota for the profile's opt-in reserved concurrency (none by default)."""
        wanted = self.plan.function_concurrency
        lam = self.aws.client("lambda")
        limit = lam.get_account_settings()["AccountLimit"]
        quota = int(limit["ConcurrentExecutions"])
        unreserved = int(limit.get("UnreservedConcurrentExecutions", quota))
        if not wanted.total:
            self._add(
                "Lambda concurrency", "PASS", f"nothing reserved; the kit's functions share {unreserved} of {quota} concurrent executions"
            )
            return
        minimum = min(LAMBDA_MIN_UNRESERVED, quota)
        held = self._kit_reservations(lam)  # a redeploy gives these back before it reserves again
        left = unreserved + held - wanted.total
        asked = f"{wanted.per_function} for each of {len(wanted.functions)} functions ({wanted.total})"
        if left >= minimum:
            self._add("Lambda concurrency", "PASS", f"reserving {asked} leaves {left} of {quota} unreserved (Lambda keeps {minimum})")
            return
        raised = quota + LAMBDA_MIN_UNRESERVED - left  # above 100 the floor is 100
        self._add(
            "Lambda concurrency",
            "FAIL",
            f"reserving {asked} would leave {left} of {quota} unreserved; Lambda refuses below {minimum}, so the deploy would fail",
            f"remove cluster.lambda_reserved_concurrency from {self.plan.profile_path}, or raise the quota: "
            f"`aws service-quotas request-service-quota-increase --service-code lambda --quota-code {LAMBDA_CONCURRENCY_QUOTA} "
            f"--desired-value {raised} --region {self.aws.region}`",
        )

    def _kit_reservations(self, lam: Any) -> int:
        """Concurrency the kit's deployed functions already reserve (their descriptions start with the deployment name)."""
        prefix = f"{self.plan.name}: "
        held = 0
        for page in lam.get_paginator("list_functions").paginate():
            for fn in page.get("Functions", []):
                if fn.get("Description", "").startswith(prefix):
                    held += int(lam.get_function_concurrency(FunctionName=fn["FunctionName"]).get("ReservedConcurrentExecutions", 0))
        return held

    def _addons(self) -> None:
        try:
            pins = pinned_addons(self.addon_pins)
        except KitError as err:
            self._add(
                "EKS add-ons", "FAIL", str(err).split(". Fix:")[0], "write pdkit/model/data/addons.yaml as add-on name: version string"
            )
            return
        version = self.plan.kubernetes_version
        if pins is None:
            self._add(
                "EKS add-ons",
                "WARN",
                "add-on versions are not pinned yet (pdkit/model/data/addons.yaml is missing)",
                "nothing to do until it exists",
            )
            return
        verdicts = addon_versions.check(self.aws.eks, pins, version)  # the deploy gate's reading (pdkit deploy-check)
        bad = [v for v in verdicts if not v.compatible]
        if bad:
            self._add("EKS add-ons", "FAIL", "; ".join(v.problem() for v in bad), "; ".join(v.fix() for v in bad))
        else:
            pinned = ", ".join(f"{v.name} {v.pinned}" for v in verdicts)
            self._add("EKS add-ons", "PASS", f"EKS lists every pin as compatible with Kubernetes {version}: {pinned}")

    def _node_image(self) -> None:
        """The SSM parameter the GPU node groups' image comes from exists here and names an available AMI."""
        plan, name = self.plan, "GPU node image"
        custom = plan.custom_ami
        parameter = ami.image_parameter(plan.name) if custom else ami.parent_image_parameter(plan.kubernetes_version)
        try:
            image_id = self.aws.client("ssm").get_parameter(Name=parameter)["Parameter"]["Value"]
        except Exception as err:
            if error_code(err) != "ParameterNotFound":
                raise
            if custom:
                self._add(
                    name,
                    "FAIL",
                    f"ami.source is custom but {parameter} does not exist in {self.aws.region}: no image was promoted",
                    "build and promote one (runbooks/05-node-image.md, steps 1-3), or set ami.source: eks-optimized",
                )
            else:
                self._add(
                    name,
                    "FAIL",
                    f"EKS publishes no AL2023 NVIDIA AMI for Kubernetes {plan.kubernetes_version} in {self.aws.region} ({parameter})",
                    "use a region and cluster.kubernetes_version that EKS publishes the NVIDIA AMI for",
                )
            return
        if not custom:
            self._add(name, "PASS", f"EKS AL2023 NVIDIA AMI for Kubernetes {plan.kubernetes_version}: {image_id}")
            return
        try:
            images = self.aws.ec2.describe_images(ImageIds=[image_id])["Images"]
        except Exception as err:
            # A deregistered AMI answers InvalidAMIID.NotFound (or .Unavailable) instead of an empty list.
            if not str(error_code(err)).startswith("InvalidAMIID."):
                raise
            images = []
        state = images[0].get("State", "?") if images else "gone"
        if state == "available":
            self._add(name, "PASS", f"{parameter} = {image_id} ({images[0].get('Name', '?')}), available")
        else:
            self._add(
                name,
                "FAIL",
                f"{parameter} = {image_id}, which is {state} in {self.aws.region}",
                "promote an available image (runbooks/05-node-image.md, step 3, or step 5 to roll back)",
            )

    def _cluster(self) -> None:
        name = self.plan.cluster_name
        try:
            cluster = self.aws.eks.describe_cluster(name=name)["cluster"]
        except Exception as err:
            if error_code(err) != "ResourceNotFoundException":
                raise
            self._add("EKS cluster", "WARN", f"{name} is not deployed yet", "make deploy  (once the rows above pass)")
            return
        status, version = cluster.get("status", "?"), cluster.get("version", "?")
        if status == "ACTIVE" and version == self.plan.kubernetes_version:
            self._add("EKS cluster", "PASS", f"{name}: ACTIVE, Kubernetes {version}")
        elif status == "ACTIVE":
            self._add(
                "EKS cluster",
                "WARN",
                f"{name} runs Kubernetes {version}, the profile says {self.plan.kubernetes_version}",
                "make diff  (a deploy upgrades the control plane; never during a paid window)",
            )
        elif status in ("CREATING", "UPDATING", "PENDING"):
            self._add("EKS cluster", "WARN", f"{name}: {status}", "wait for ACTIVE, then run pdkit preflight again")
        else:
            self._add("EKS cluster", "FAIL", f"{name}: {status}", f"look at the stack events: `aws eks describe-cluster --name {name}`")


def _quota_value(quotas: Any, service: str, code: str) -> float | None:
    """The applied quota, else AWS's default (GetServiceQuota has no value for quotas never changed in some accounts)."""
    try:
        return float(quotas.get_service_quota(ServiceCode=service, QuotaCode=code)["Quota"]["Value"])
    except Exception as err:
        if error_code(err) != "NoSuchResourceException":
            raise
    return float(quotas.get_aws_default_service_quota(ServiceCode=service, QuotaCode=code)["Quota"]["Value"])
