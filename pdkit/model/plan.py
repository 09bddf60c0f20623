"""The deployment plan: every decision the kit makes, derived once from a profile.

Stacks, manifests, command lines, runbook tables and CLI output render this plan; none of them
decides anything. Impossible deployments are refused here with the field, the value and the fix.
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass, field, fields, is_dataclass, replace
from datetime import datetime
from decimal import Decimal
from ipaddress import collapse_addresses
from pathlib import Path
from typing import Any, Literal

import annotated_types
from pydantic import BaseModel

from pdkit.errors import ProfileError, short
from pdkit.model import catalog
from pdkit.model.catalog import InstanceType, Model
from pdkit.model.gpu_memory import (
    LL_TOKENS_PER_RANK,
    MIB,
    MemoryBudget,
    RoleShape,
    decode_graph_batch_sizes,
    derived_by_backend,
    derived_fraction,
    reserve_mib,
)
from pdkit.model.images import A2A_IMAGES, ImagePlan, plan_images
from pdkit.model.profile import PLACEHOLDER_RESERVATION, Bench, Network, Parallelism, Profile, Role

ROLES = ("prefill", "decode")
# These stacks exist for every profile; switches change properties, not which stacks exist.
STACKS = ("network", "cluster", "capacity", "images", "serving", "observability", "ami")
# The one exception: the stack that buys the block (capacity.purchase) exists only when the profile buys at deploy
# time. Without a purchase it would hold no resource, and CloudFormation refuses a template without one ("At least
# one Resources member must be defined"), so a placeholder resource would be deployed into every account for nothing.
# Deployed first by `make deploy` (stacks/purchase_stack.py); plan.stack_names has it only when it exists.
PURCHASE_STACK = "purchase"
ROLE_LABEL = "pdkit/role"
# The Kubernetes version the pinned add-ons (pdkit/model/data/addons.yaml) and the kubectl layer (v36) are
# built for. Moving to another version means bumping those pins together with this tuple.
KUBERNETES_VERSIONS = ("1.36",)
# AWS services the nodes reach without the NAT gateway (DESIGN §3.2); interface endpoints.
INTERFACE_ENDPOINTS = (
    "ecr.api",
    "ecr.dkr",
    "sts",
    "ec2",
    "logs",
    "monitoring",
    "ssm",
    "ssmmessages",
    "ec2messages",
    "eks",
    "eks-auth",
    "aps-workspaces",  # the serving-metrics function queries Amazon Managed Service for Prometheus
)
GATEWAY_ENDPOINTS = ("s3",)
# Kubernetes service range, set explicitly: a custom node image's nodeadm config must name it, and
# CloudFormation exposes no attribute to read it back from the cluster.
SERVICE_CIDR = "172.20.0.0/16"
PRIVATE_SUBNET_MASK = 19
PUBLIC_SUBNET_MASK = 24

# The kit's Lambda functions that take cluster.lambda_reserved_concurrency: the ones a block's schedule
# or a deploy onto it waits for. The image build starter runs once per images deploy and takes none.
RESERVED_FUNCTIONS = ("reservation-guard", "block-lifecycle", "block-clock", "serving-metrics")

# The profile model's open bounds on mem_fraction_static, so a suggested value stays inside them.
MEM_FRACTION_RANGE = (
    float(next(b.gt for b in Role.model_fields["mem_fraction_static"].metadata if isinstance(b, annotated_types.Gt))),  # type: ignore[arg-type]
    float(next(b.lt for b in Role.model_fields["mem_fraction_static"].metadata if isinstance(b, annotated_types.Lt))),  # type: ignore[arg-type]
)

# Start-up model (estimates, stated as such in `pdkit plan`): S3 -> node NVMe staging rate per node,
# NVMe read rate while SGLang loads its shard, and CUDA-graph capture plus warm-up.
STAGING_GBPS_PER_NODE = 2.5
NVME_READ_GBPS = 8.0
WARMUP_MINUTES = 10.0
# First boot (estimate): SGLang JIT-compiles DeepGEMM's kernels for the role's shapes (cached under
# SGLANG_CACHE_DIR). AWS's p5en 2P2D runs needed a separate 2-node `sglang.compile_deep_gemm` before
# serving (awslabs/awsome-distributed-ai 3.test_cases/pytorch/sglang/dsr1-deepep-efa/recipe/serve-pd.sh,
# "precompile"). The precompile step gets twice this before it gives up and lets the server compile.
DEEPGEMM_COMPILE_MINUTES = 20.0
# Where a role's warm compile cache is kept between blocks, in the weights bucket (instance store is wiped).
COMPILE_CACHE_PREFIX = "compile-cache/"
# Node image start-up model (estimates, stated as such in `pdkit plan`): how long until a GPU node has the serving
# image. On the EKS-optimized AMI containerd pulls it from ECR and unpacks it onto the NVMe RAID. On the custom AMI it
# is already on the root volume, but a volume restored from a snapshot fetches each block from S3 on first read: at
# best at gp3's baseline throughput, or at a provisioned volume initialization rate (100-300 MiB/s) for the whole
# volume (https://docs.aws.amazon.com/ebs/latest/userguide/initalize-volume.html). The instance store starts empty.
SERVING_IMAGE_GB = 20.0  # unpacked (ami/README.md: "20+ GB")
IMAGE_PULL_GBPS = 0.15  # ECR download and gzip unpack, layer by layer
GP3_BASELINE_MIBPS = 125
GPU_ROOT_GIB = 200
# The highest rate EC2 accepts (LaunchTemplateEbsBlockDeviceRequest.VolumeInitializationRate, 100-300 MiB/s), and a
# gp3 throughput that lets reads keep up with it (125-2000 MiB/s, at most 0.25 MiB/s per IOPS: 3000 IOPS allow 750).
ROOT_VOLUME_INITIALIZATION_MIBPS = 300
ROOT_VOLUME_THROUGHPUT_MIBPS = 300


@dataclass(frozen=True)
class NetworkInterface:
    """One interface of a GPU node's launch template (EC2 efa-acc-inst-types layout)."""

    card: int
    device: int
    kind: str  # "interface" (ENA, carries the node's IPs) or "efa-only" (no IPs)

    @property
    def carries_ips(self) -> bool:
        return self.kind == "interface"


@dataclass(frozen=True)
class RouterPlan:
    """How smg routes (its flag names): per-role policies, rank awareness and the cache-aware thresholds."""

    prefill_policy: str
    decode_policy: str
    dp_aware: bool
    cache_threshold: float
    balance_abs_threshold: int
    balance_rel_threshold: float
    replicas: int


@dataclass(frozen=True)
class RolePlan:
    name: str
    replicas: int
    nodes_per_replica: int
    nodes: int
    gpus_per_node: int
    gpus_per_replica: int
    gpus: int
    tp: int
    pp: int
    ep: int
    attn_cp: int
    attn_dp: int
    attn_tp: int
    moe_a2a_backend: str  # SGLang's --moe-a2a-backend: "deepep" for both DeepEP implementations, or "none"
    deepep_mode: str | None
    a2a_backend: str  # the profile's choice: "uccl-ep", "deepep" (upstream sgl-deep-ep) or "none"
    image: str  # the image (containers/versions.yaml) whose deep_ep is that backend's
    experts_per_gpu: float
    ep_spans_nodes: bool
    cross_node_moe_messages_per_token: int
    pp_transfers_per_chunk: int
    weights_gb_per_gpu: float
    kv_budget_gb_per_gpu: float
    kv_tokens_per_gpu: int
    context_length: int
    mem_fraction_static: float  # the profile's override, or the memory model's derived value
    max_running_requests: int
    # Attention fully data-parallel (attn_dp = tp): the dense MLP layers and the LM head follow it
    # (--moe-dense-tp-size 1 --enable-dp-lm-head), or SGLang runs them TP across every rank of the group.
    moe_dense_tp_size: int | None
    enable_dp_lm_head: bool
    decode_graph_bs: tuple[int, ...]  # decode CUDA graph batch sizes per DP rank (none on prefill)
    memory: MemoryBudget
    node_group_name: str
    labels: dict[str, str]
    taint: dict[str, str]
    efa_devices_per_node: int
    settings: Role = field(repr=False)

    @property
    def reports_expert_balancedness(self) -> bool:
        """The role opted in (roles.<role>.expert_balance_report) and spreads MoE experts over EP ranks: SGLang then
        reports how evenly they are loaded (pdkit/render/observability). Off by default: the recorder's per-forward
        reduce on the WORLD group (sglang 0.5.23 srt/eplb/expert_distribution.py, _append_utilization_rate) is a
        cross-node collective on every decode step, and a deadlock with pipeline parallelism (the build refuses it)."""
        return self.ep > 1 and self.settings.expert_balance_report


@dataclass(frozen=True)
class WeightsPlan:
    """Where `pdkit weights import` puts the checkpoint and the serving pods stage it from."""

    bucket_prefix: str
    region: str
    prefix: str  # one folder per model and revision; re-importing a moved branch overwrites it (old versions expire)
    revision: str  # the Hub revision (branch, tag or commit) the import reads
    hf_token_secret_arn: str | None  # a Secrets Manager secret with a Hub read token, for gated models only
    compile_cache_prefix: str = COMPILE_CACHE_PREFIX  # each role's warm SGLang compile cache, saved at drain

    def bucket(self, account: str) -> str:
        """S3 names are global: the account and region make it unique (a CDK token at deploy time)."""
        return f"{self.bucket_prefix}-{account}-{self.region}"


@dataclass(frozen=True)
class ClusterAccess:
    """Who reaches the Kubernetes API, and from where (cluster.endpoint_access, public_access_cidrs, admin_principal_arns)."""

    endpoint: Literal["private", "public_and_private"]
    public_access_cidrs: tuple[str, ...]  # empty with a private endpoint (_endpoint refuses anything else)
    admin_principal_arns: tuple[str, ...]  # empty: no one is admin (the cluster creator is not, on purpose)


@dataclass(frozen=True)
class SystemNodes:
    """The on-demand node group of the router, the collector, the add-ons and the kit's Jobs."""

    instance_type: str
    count: int
    max_count: int  # room for a rolling update to start the new nodes before draining the old


@dataclass(frozen=True)
class Alarms:
    """Where the alarms go and the serving limits they fire at; `pdkit bench` and the fabric thresholds use the same limits."""

    email: str | None
    tpot_p99_ms: float
    ttft_p99_ms: float
    expert_balancedness_min: float


@dataclass(frozen=True)
class FunctionConcurrency:
    """Reserved concurrency of the kit's Lambda functions: none unless the profile opts in.

    Lambda keeps a minimum unreserved (100, or the whole quota of an account below 100: a new
    account's 10), so a reservation the quota cannot spare fails the deploy
    (https://docs.aws.amazon.com/lambda/latest/dg/configuration-concurrency.html); `pdkit preflight` checks it.
    """

    per_function: int | None
    functions: tuple[str, ...]

    @property
    def total(self) -> int:
        return (self.per_function or 0) * len(self.functions)


@dataclass(frozen=True)
class RepairOverride:
    """One EKS node auto repair override: when the node monitoring agent sets `condition` false with `reason` for
    `wait_minutes`, do `action` (EKS API NodeRepairConfigOverrides; every field is required once one is set)."""

    condition: str
    reason: str
    wait_minutes: int
    action: Literal["Reboot", "Replace", "NoAction"]
    why: str


@dataclass(frozen=True)
class NodeRepair:
    """EKS node auto repair on the GPU node groups (EKS API NodeRepairConfig; runbooks/01-cluster.md, "Node auto repair")."""

    max_parallel_nodes: int  # maxParallelNodesRepairedCount
    max_unhealthy_nodes: int  # maxUnhealthyNodeThresholdCount: above it, repairs stop
    overrides: tuple[RepairOverride, ...]


# EKS stops repairing a managed node group only when it has more than five nodes and more than 20% are unhealthy
# (https://docs.aws.amazon.com/eks/latest/userguide/node-repair.html): a 2-node GPU group would be repaired without
# limit, both nodes at once. A Replace terminates the instance, and a terminated Capacity Block instance can be
# replaced only after "several minutes to clean up" (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-launch.html),
# minutes of a paid block with the role down. So: one repair at a time; more than one unhealthy node in a group is
# taken as a common cause (image, driver, fabric) that replacing instances cannot fix, and left to the operator; and
# Reboot wherever a reboot clears the condition the agent reports. EKS's defaults already reboot for the GPU memory
# and engine XIDs (13, 31, 48, 63, 64, 94, 95) and replace for hardware faults (XID 74 NVLink, 79 off the bus,
# 140, double-bit and NVLink errors, interfaces down), which stay as they are
# (https://docs.aws.amazon.com/eks/latest/userguide/node-health-nma.html). The overrides below turn Replace into
# Reboot for conditions of firmware or software state, with EKS's own wait before acting (10 min for accelerated
# hardware, 30 min otherwise: node-repair.html).
GPU_NODE_REPAIR = NodeRepair(
    max_parallel_nodes=1,
    max_unhealthy_nodes=1,
    overrides=(
        RepairOverride(
            "AcceleratedHardwareReady",
            "NvidiaXID119Error",
            10,
            "Reboot",
            "GSP RPC timeout, 'possibly due to firmware issues': a reboot restarts the GPU System Processor firmware",
        ),
        RepairOverride(
            "AcceleratedHardwareReady",
            "NvidiaXID120Error",
            10,
            "Reboot",
            "GSP error: the GPU System Processor firmware, reinitialised by a reboot",
        ),
        RepairOverride(
            "NetworkingReady", "IPAMDNotRunning", 30, "Reboot", "the VPC CNI process is not running: a process, which a reboot starts again"
        ),
        RepairOverride(
            "NetworkingReady", "IPAMDNotReady", 30, "Reboot", "IPAMD cannot reach the API server: the CNI's state, reset by a reboot"
        ),
        RepairOverride("KernelReady", "ForkFailedOutOfPIDs", 30, "Reboot", "out of PIDs or memory (zombie processes): a reboot frees them"),
        RepairOverride(
            "ContainerRuntimeReady",
            "PodStuckTerminating",
            30,
            "Reboot",
            "a pod stuck in the container runtime: a reboot clears the CRI state",
        ),
    ),
)


@dataclass(frozen=True)
class RootVolume:
    """The GPU launch template's root volume. With the custom AMI it holds the pre-pulled serving image, so it is
    initialized from the snapshot at a provisioned rate instead of block by block on first read."""

    size_gib: int
    throughput_mibps: int | None  # None: gp3's baseline
    initialization_mibps: int | None  # None: EBS's default, lazy initialization


# A GPU pod has its node to itself: it requests this share of the node's CPU and memory (the rest is for kubelet
# and the node's daemons), and /dev/shm (NCCL, Mooncake and SGLang's shared memory) is this fraction of its memory.
POD_SHARE_OF_NODE = 0.75
SHM_SHARE_OF_NODE = 1 / 8


@dataclass(frozen=True)
class GpuPod:
    """What a pod that has a GPU node to itself requests, and its /dev/shm (serving and validation alike)."""

    cpu: int
    memory_mib: int
    shm_mib: int


@dataclass(frozen=True)
class Estimates:
    gpu_cost_per_hour_usd: float | None
    block_cost_usd: float | None
    staging_minutes: float
    load_minutes: float
    startup_budget_minutes: float  # warm boot: compile caches restored, the server only loads and captures graphs
    precompile_minutes: float  # first boot only: the DeepGEMM precompile step before the server starts
    first_boot_budget_minutes: float  # the server on a cold compile cache; the start-up probes allow this
    image_ready_minutes: dict[str, float]  # ami.source -> minutes until a new GPU node has the serving image


@dataclass(frozen=True)
class PurchasePlan:
    """capacity.purchase: the block `cdk deploy` buys (stacks/capacity_purchase.py). Every consumer of the
    reservation id then reads it from that resource, never from the profile."""

    offering_id: str
    upfront_fee_usd: Decimal
    instance_type: str
    instance_count: int
    availability_zone: str
    duration_hours: int
    earliest_start: datetime | None
    latest_end: datetime | None
    # The value of the tag the block is bought with (pdkit.ops.purchase.PURCHASE_TAG): see purchase_id().
    purchase_id: str

    @property
    def instance_hours(self) -> int:
        return self.instance_count * self.duration_hours

    def resource_properties(self) -> dict[str, str]:
        """The custom resource's properties: everything DescribeCapacityBlockOfferings needs to find the offering again."""
        return {
            "OfferingId": self.offering_id,
            "UpfrontFeeUsd": str(self.upfront_fee_usd),
            "InstanceType": self.instance_type,
            "InstanceCount": str(self.instance_count),
            "AvailabilityZone": self.availability_zone,
            "DurationHours": str(self.duration_hours),
            "EarliestStart": self.earliest_start.isoformat() if self.earliest_start else "",
            "LatestEnd": self.latest_end.isoformat() if self.latest_end else "",
        }


@dataclass(frozen=True)
class Plan:
    name: str
    profile_path: str
    region: str
    account: str | None
    block_az: str
    availability_zones: tuple[str, ...]
    reservation_id: str
    reservation_is_placeholder: bool
    instance: InstanceType
    instance_count: int
    # "cluster" or "none" (_placement_group); what the plan report warns about the choice.
    placement_group: str
    placement_warnings: tuple[str, ...]
    serving_warnings: tuple[str, ...]  # known upstream breakage of the chosen layout, with the fallback
    efa_devices_per_node: int
    model: Model
    roles: dict[str, RolePlan]
    cluster_name: str
    kubernetes_version: str
    service_cidr: str
    network_interfaces: tuple[NetworkInterface, ...]
    gpu_node_labels: dict[str, str]
    system_node_labels: dict[str, str]
    system_node_arch: str
    drain_lead_minutes: int
    images: dict[str, ImagePlan]
    # The region whose ECR registry holds the images: this profile's own, or for a rehearsal its block's (it runs
    # the block's images, built once, and builds none; pdkit/deployment.py adopt_block_images).
    image_region: str
    weights: WeightsPlan
    stack_names: dict[str, str]
    interface_endpoints: tuple[str, ...]
    gateway_endpoints: tuple[str, ...]
    private_subnet_mask: int
    public_subnet_mask: int
    estimates: Estimates
    gpu_root_volume: RootVolume
    gpu_node_repair: NodeRepair  # EKS node auto repair on the GPU node groups (GPU_NODE_REPAIR)
    gpu_pod: GpuPod
    function_concurrency: FunctionConcurrency
    # Pod Security level the serving namespace enforces: "baseline" unless hostNetwork or a role's
    # security escape hatch needs "privileged", which the profile must then say (_pod_security).
    pod_security: str
    # Set when the deploy buys the block: stacks then take the reservation id from the purchase resource.
    purchase: PurchasePlan | None
    # capacity-block: GPU nodes on the reserved block. on-demand: a rehearsal, no reservation, guard or block lifecycle.
    market: Literal["capacity-block", "on-demand"]
    rehearses: str | None  # the block profile an on-demand rehearsal stands in for (pdkit/deployment.py)
    router: RouterPlan
    namespace: str  # the serving objects' (and the bench and weights-import Jobs')
    served_model_name: str  # the model name clients send (serving.served_name, else the model id)
    kv_transfer: Literal["mooncake", "nixl"]  # SGLang's --disaggregation-transfer-backend
    runs_mooncake: bool  # KV over Mooncake's EFA transport (its environment, `pdkit validate`'s KV write); else NIXL over libfabric
    host_network: bool  # SGLang pods on the host network (serving.host_network)
    ami_source: Literal["eks-optimized", "custom"]
    custom_ami: bool  # GPU nodes boot the kit's node image with the serving image pre-pulled (pdkit/render/ami.py)
    image_source: Literal["build", "external"]
    versions_file: str  # the image versions the tags come from (containers/versions.yaml)
    network: Network  # the VPC's CIDR, NAT gateways and flow-log retention
    log_retention_days: int  # every log group of the kit but the VPC flow logs
    cluster_access: ClusterAccess
    system_nodes: SystemNodes
    alarms: Alarms
    bench: Bench  # `pdkit bench`'s validated settings
    block_duration_hours: int  # the block length offerings are searched for and cost is estimated over
    minimum_serving_hours: float  # preflight fails with less block time left

    def image_registry(self, account: str) -> str:
        """The ECR registry host of the built images, for `account` (a CDK token in a stack)."""
        return f"{account}.dkr.ecr.{self.image_region}.amazonaws.com"

    def with_reservation_id(self, reservation_id: str) -> Plan:
        """This plan naming the block by `reservation_id`: the purchase resource's token, in a stack that reads it from there."""
        return replace(self, reservation_id=reservation_id)

    @property
    def purchase_stack_name(self) -> str:
        """The purchase stack's name, also when this profile buys nothing (a deployed one may still hold the block)."""
        return stack_name(self.name, PURCHASE_STACK)

    @property
    def reservation_label(self) -> str:
        """The block in descriptions that cannot hold a deploy-time token (a stack's description)."""
        return f"bought at deploy from offering {self.purchase.offering_id}" if self.purchase else self.reservation_id

    @property
    def decode(self) -> RolePlan:
        return self.roles["decode"]

    @property
    def prefill(self) -> RolePlan:
        return self.roles["prefill"]

    def to_dict(self) -> dict[str, Any]:
        plain: dict[str, Any] = _plain(self)
        return plain


def build(profile: Profile, *, profile_path: str | Path = "") -> Plan:
    """Derive the plan of one profile, or raise ProfileError for the first impossible setting.

    A rehearsal is held to its block profile one layer up (pdkit/deployment.py), so the plan never
    imports the serving renderers that compare them."""
    try:
        return _build(profile, str(profile_path))
    except ProfileError as err:
        raise err.with_source(str(profile_path)) from None


def _build(p: Profile, path: str) -> Plan:
    instance = _instance_type(p)
    model = _model(p)
    zones = _zones(p)
    _kubernetes(p)
    efa = _efa_devices(p, instance)
    roles = {name: _role(p, name, getattr(p.roles, name), instance, model, efa) for name in ROLES}
    _node_total(p, roles)
    _mtp_pairing(p)
    if p.network.nat_gateways > len(zones):
        raise ProfileError(
            "network.nat_gateways", p.network.nat_gateways, f"more NAT gateways than AZs ({len(zones)})", f"use 1..{len(zones)}"
        )
    _endpoint(p)
    _drain_lead(p)
    _namespace(p)
    return Plan(
        name=p.name,
        profile_path=path,
        region=p.aws.region,
        account=p.aws.account,
        block_az=p.aws.availability_zone,
        availability_zones=zones,
        reservation_id=p.capacity.reservation_id,
        reservation_is_placeholder=p.capacity.reservation_id == PLACEHOLDER_RESERVATION,
        instance=instance,
        instance_count=p.capacity.instance_count,
        placement_group=_placement_group(p),
        placement_warnings=_placement_warnings(p),
        serving_warnings=_serving_warnings(p),
        efa_devices_per_node=efa,
        model=model,
        roles=roles,
        cluster_name=p.name,
        kubernetes_version=p.cluster.kubernetes_version,
        service_cidr=SERVICE_CIDR,
        network_interfaces=_interfaces(instance, efa),
        # The NVIDIA device plugin chart schedules only on nodes carrying this label (or an NFD one).
        gpu_node_labels={"nvidia.com/gpu.present": "true"},
        system_node_labels={ROLE_LABEL: "system"},
        system_node_arch=_arch(p.cluster.system_nodes.instance_type),
        drain_lead_minutes=p.observability.block_end_warning_minutes,
        images=_role_images(
            roles,
            plan_images(p.name, p.images.versions_file, source=p.images.source, registry=p.images.registry),
            p.images.versions_file,
        ),
        weights=_weights(p),
        stack_names={part: stack_name(p.name, part) for part in (*STACKS, *((PURCHASE_STACK,) if p.capacity.purchase else ()))},
        interface_endpoints=INTERFACE_ENDPOINTS,
        gateway_endpoints=GATEWAY_ENDPOINTS,
        private_subnet_mask=PRIVATE_SUBNET_MASK,
        public_subnet_mask=PUBLIC_SUBNET_MASK,
        estimates=_estimates(p, roles, model),
        gpu_root_volume=_gpu_root_volume(p.ami.source),
        gpu_node_repair=GPU_NODE_REPAIR,
        gpu_pod=GpuPod(
            cpu=int(instance.vcpus * POD_SHARE_OF_NODE),
            memory_mib=int(instance.memory_mib * POD_SHARE_OF_NODE),
            shm_mib=int(instance.memory_mib * SHM_SHARE_OF_NODE),
        ),
        function_concurrency=FunctionConcurrency(p.cluster.lambda_reserved_concurrency, RESERVED_FUNCTIONS),
        pod_security=_pod_security(p),
        purchase=_purchase(p),
        market=_market(p),
        rehearses=p.rehearses,
        image_region=p.aws.region,
        router=_router(p, roles),
        namespace=p.serving.namespace,
        served_model_name=p.model.served_name or model.id,
        kv_transfer=p.serving.kv_transfer,
        runs_mooncake=p.serving.kv_transfer == "mooncake",
        host_network=p.serving.host_network,
        ami_source=p.ami.source,
        custom_ami=p.ami.source == "custom",
        image_source=p.images.source,
        versions_file=p.images.versions_file,
        network=p.network,
        log_retention_days=p.cluster.log_retention_days,
        cluster_access=ClusterAccess(
            p.cluster.endpoint_access, tuple(str(n) for n in p.cluster.public_access_cidrs), p.cluster.admin_principal_arns
        ),
        system_nodes=SystemNodes(p.cluster.system_nodes.instance_type, p.cluster.system_nodes.count, 2 * p.cluster.system_nodes.count),
        alarms=Alarms(
            p.observability.alarm_email, p.observability.tpot_p99_ms, p.observability.ttft_p99_ms, p.observability.expert_balancedness_min
        ),
        bench=p.bench,
        block_duration_hours=p.capacity.duration_hours,
        minimum_serving_hours=p.capacity.minimum_serving_hours,
    )


def _router(p: Profile, roles: dict[str, RolePlan]) -> RouterPlan:
    """Cache-aware on prefill, load-aware on decode, rank-aware where decode runs attention DP.

    SGLang disables the radix cache of a decode server in PD mode unless the experimental
    --disaggregation-decode-enable-radix-cache is given (sglang 0.5.23
    srt/arg_groups/pd_disaggregation_hook.py), so prefix hits happen on prefill only, and
    only a choice between two or more prefill replicas can steer them. Decode balances load instead:
    power_of_two is smg's own PD example (`--prefill-policy cache_aware --decode-policy power_of_two`,
    conformance/help/smg-1.13.0-launch_router.txt). With --dp-aware smg registers each of a worker's
    attention-DP ranks as its own routing target, so the load it compares is per rank.
    """
    r = p.serving.router
    attn_dp = roles["decode"].attn_dp > 1
    if r.dp_aware and not attn_dp:
        raise ProfileError(
            "serving.router.dp_aware",
            r.dp_aware,
            "decode runs no attention DP, so there are no ranks to route to",
            "leave serving.router.dp_aware unset, or set roles.decode.parallelism.attn_dp",
        )
    default_prefill = "cache_aware" if roles["prefill"].replicas >= 2 else "round_robin"
    return RouterPlan(
        prefill_policy=r.prefill_policy or default_prefill,
        decode_policy=r.decode_policy or "power_of_two",
        dp_aware=attn_dp if r.dp_aware is None else r.dp_aware,
        cache_threshold=r.cache_threshold,
        balance_abs_threshold=r.balance_abs_threshold,
        balance_rel_threshold=r.balance_rel_threshold,
        replicas=r.replicas,
    )


def _upstream_deepep_reach(at: str, par: Parallelism, *, spans: bool, gpus_per_node: int) -> None:
    """Upstream DeepEP (the sgl-deep-ep wheel SGLang 0.5.23 pins) runs here only where it needs no NVSHMEM.

    Its Buffer initializes NVSHMEM when the group spans more than one NVLink domain or in low-latency mode
    (deep_ep/buffers/legacy.py of sgl-deep-ep 0.1.2.post1: `if num_rdma_ranks > 1 or low_latency_mode`),
    and its inter-node kernels assume InfiniBand GPUDirect Async, which EFA lacks. AWS ran it across p5en
    nodes only with NVSHMEM rebuilt for libfabric and DeepEP patched for EFA (awslabs/awsome-distributed-ai
    3.test_cases/pytorch/sglang/dsr1-deepep-efa/Dockerfile, setup_deepep_efa.sh), which this kit's image
    does not build: intra-node normal mode (NVLink only) is what the sglang-deepep image can run.
    """
    if par.moe_a2a_backend != "deepep":
        return
    if spans:
        raise ProfileError(
            f"{at}.parallelism.moe_a2a_backend",
            "deepep",
            f"upstream DeepEP across nodes (ep {par.tp} > {gpus_per_node} GPUs per node) needs NVSHMEM over libfabric and "
            "DeepEP's EFA patch, which the kit's sglang-deepep image does not build",
            f"use moe_a2a_backend: uccl-ep, or keep ep within one node (tp: {gpus_per_node} with pp across nodes)",
        )
    if par.deepep_mode != "normal":
        raise ProfileError(
            f"{at}.parallelism.deepep_mode",
            par.deepep_mode,
            "upstream DeepEP's low-latency kernels always start NVSHMEM (InfiniBand GPUDirect Async), which EFA lacks",
            "use deepep_mode: normal, or moe_a2a_backend: uccl-ep",
        )


def _role_images(roles: dict[str, RolePlan], images: dict[str, ImagePlan], versions_file: str) -> dict[str, ImagePlan]:
    for role in roles.values():
        if role.image not in images:
            raise ProfileError(
                f"roles.{role.name}.parallelism.moe_a2a_backend",
                role.a2a_backend,
                f"needs the {role.image} image, which {versions_file} does not define",
                f"add images.{role.image} to {versions_file} (see containers/README.md), or use another backend",
            )
    return images


def _pod_security(p: Profile) -> str:
    """Pod Security "baseline" admits no added capability beyond its default list, no privileged
    container and no Unconfined seccomp (https://kubernetes.io/docs/concepts/security/pod-security-standards/):
    a role's escape hatch is refused unless the profile lowers the namespace explicitly."""
    for name in ROLES:
        sec = getattr(p.roles, name).security
        if sec.relaxed and p.serving.pod_security != "privileged":
            raise ProfileError(
                f"roles.{name}.security",
                sec.model_dump(),
                'needs more than Pod Security "baseline" admits (added capabilities, privileged or an Unconfined seccomp profile)',
                "set serving.pod_security: privileged as well (runbooks/02-serve.md, Pod security), or remove the escape hatch",
            )
    return "privileged" if p.serving.host_network or p.serving.pod_security == "privileged" else "baseline"


def _instance_type(p: Profile) -> InstanceType:
    known = catalog.instance_types()
    if p.capacity.instance_type not in known:
        raise ProfileError(
            "capacity.instance_type",
            p.capacity.instance_type,
            "not in the kit's instance-type table",
            f"use one of {', '.join(known)} (or add a row to pdkit/model/data/instance_types.yaml)",
        )
    return known[p.capacity.instance_type]


def _model(p: Profile) -> Model:
    known = catalog.models()
    if p.model.id not in known:
        raise ProfileError(
            "model.id",
            p.model.id,
            "not in the kit's model table",
            f"use one of {', '.join(known)} (or add it to pdkit/model/data/models.yaml)",
        )
    return known[p.model.id]


def _zones(p: Profile) -> tuple[str, ...]:
    region, az = p.aws.region, p.aws.availability_zone
    table = catalog.region_zones()
    zones = p.aws.availability_zones or table.get(region)
    if zones is None:
        raise ProfileError(
            "aws.region", region, "no AZ list for this region in the kit", "set aws.availability_zones to the region's AZ names"
        )
    for zone in zones:
        if not (zone.startswith(region) and len(zone) == len(region) + 1 and zone[-1].isalpha()):
            raise ProfileError(
                "aws.availability_zones", list(zones), f"{short(zone)} is not an AZ of {region}", f"list AZ names like {region}a"
            )
    if az not in zones:
        raise ProfileError(
            "aws.availability_zone",
            az,
            f"not an Availability Zone of {region} ({', '.join(zones)})",
            "use the AZ that `pdkit capacity offerings` shows for your block",
        )
    return tuple(zones)


def _kubernetes(p: Profile) -> None:
    if p.cluster.kubernetes_version not in KUBERNETES_VERSIONS:
        raise ProfileError(
            "cluster.kubernetes_version",
            p.cluster.kubernetes_version,
            "not a version this kit is pinned and tested for",
            f'use one of {", ".join(KUBERNETES_VERSIONS)} (quote it: "{KUBERNETES_VERSIONS[-1]}"); another version needs new add-on pins',
        )


def _efa_devices(p: Profile, it: InstanceType) -> int:
    asked = p.capacity.efa_devices
    if asked is None:
        return it.efa_devices
    if not 1 <= asked <= it.efa_devices:
        raise ProfileError(
            "capacity.efa_devices",
            asked,
            f"{it.name} has {it.efa_devices} EFA devices (one per network card)",
            f"use 1..{it.efa_devices} or remove the field to use all",
        )
    return asked


def _interfaces(it: InstanceType, efa: int) -> tuple[NetworkInterface, ...]:
    """ENA primary at card 0 / device 0 (it cannot be EFA-only and carries the IPs); one EFA-only
    interface per network card: card 0 device 1, then device 0 on cards 1..N-1.

    https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/efa-acc-inst-types.html
    """
    efa_only = [NetworkInterface(0, 1, "efa-only")] + [NetworkInterface(card, 0, "efa-only") for card in range(1, it.network_cards)]
    return (NetworkInterface(0, 0, "interface"), *efa_only[:efa])


def _weights(p: Profile) -> WeightsPlan:
    weights = WeightsPlan(
        bucket_prefix=f"{p.name}-weights",
        region=p.aws.region,
        prefix=f"models/{p.model.id}/{p.model.revision}/",
        revision=p.model.revision,
        hf_token_secret_arn=p.model.hf_token_secret_arn,
    )
    longest = weights.bucket("123456789012")
    if len(longest) > 63:
        raise ProfileError(
            "name",
            p.name,
            f"the weights bucket name {longest!r} would exceed S3's 63 characters",
            f"use a name of at most {len(p.name) - (len(longest) - 63)} characters",
        )
    return weights


def _arch(instance_type: str) -> str:
    """Graviton families carry a 'g' after the generation digit (m7g, c8gd); everything else here is x86_64."""
    family = instance_type.split(".", 1)[0]
    digits = [i for i, ch in enumerate(family) if ch.isdigit()]
    return "arm64" if digits and "g" in family[digits[0] + 1 :] else "x86_64"


def stack_name(deployment: str, part: str) -> str:
    """The CloudFormation stack name of one part (STACKS, PURCHASE_STACK) of a deployment."""
    return f"{deployment}-{part}"


def purchase_id(deployment: str, region: str, offering_id: str) -> str:
    """The purchase tag's value: the same for every attempt to buy this offering for this deployment, so a Create
    that finds a block carrying it adopts that block instead of buying another.

    It must survive what a failed first deploy does: CloudFormation deletes the stack, and the next create gets a
    new StackId (FACTS: nothing that identifies the purchase may hash it). So it is made of what stays:
    - the deployment name: two deployments in one account never adopt each other's block;
    - the region: the reservation and the offering live in it (and `pdkit` knows it without a call);
    - the offering id: the thing paid for. A later profile with another offering is another purchase, while any
      retry of this one finds what the first attempt bought (a sold offering is not listed again, so it could
      not be bought twice anyway: the tag is what lets the retry find it instead of failing).
    Not the account (the tag is only ever read by DescribeCapacityReservations, which sees one account's
    reservations, and the CLI would need an STS call to know it), not the stack's or resource's logical id (a
    refactor that moves the resource, as issue 25 did, must not make the next deploy buy again)."""
    return hashlib.sha256(f"pdkit-purchase|{deployment}|{region}|{offering_id}".encode()).hexdigest()[:32]


def _purchase(p: Profile) -> PurchasePlan | None:
    buy = p.capacity.purchase
    if buy is None:
        return None
    if p.capacity.reservation_id != PLACEHOLDER_RESERVATION:
        raise ProfileError(
            "capacity.purchase",
            buy.offering_id,
            f"set together with capacity.reservation_id {p.capacity.reservation_id}: the deploy would buy a second block",
            f"keep one: remove capacity.purchase to use {p.capacity.reservation_id}, "
            f"or set capacity.reservation_id to the placeholder {PLACEHOLDER_RESERVATION} to buy at deploy time",
        )
    return PurchasePlan(
        offering_id=buy.offering_id,
        upfront_fee_usd=buy.confirm_upfront_fee_usd,
        instance_type=p.capacity.instance_type,
        instance_count=p.capacity.instance_count,
        availability_zone=p.aws.availability_zone,
        duration_hours=p.capacity.duration_hours,
        earliest_start=buy.earliest_start,
        latest_end=buy.latest_end,
        purchase_id=purchase_id(p.name, p.aws.region, buy.offering_id),
    )


def _placement_group(p: Profile) -> Literal["cluster", "none"]:
    """The block's own placement unless the profile asks for a placement group: a Capacity Block's instances "are
    automatically placed close together inside EC2 UltraClusters" (EC2 API_CapacityBlock), AWS ParallelCluster refuses
    a placement group with a Capacity Block at error level (aws/aws-parallelcluster#6311) and stopped suggesting one
    (#6324), and eksctl#7949 saw one cut a reservation's usable instances (eksctl no longer adds one when a reservation
    is set, eksctl#8220; terraform-aws-modules/terraform-aws-eks#3730 reports the same InsufficientInstanceCapacity with
    Capacity Blocks). An on-demand rehearsal has no block to
    place it, so it keeps a cluster placement group (EC2's way to get instances close on demand)."""
    chosen = p.capacity.placement_group
    if chosen is not None:
        return chosen
    return "none" if p.capacity.market == "capacity-block" else "cluster"


# Open upstream: "[Bug] GLM5-FP8 enabling context parallel and MTP simultaneously causes error" (PD prefill on H200,
# TP8/EP8 deepep; "Using CP alone works fine"), https://github.com/sgl-project/sglang/issues/18830. SGLang 0.5.23's new
# draft placement (speculative/draft_parallel.py) covers SINGLE_GROUP drafts only; GLM's NextN draft keeps the target
# layout, so nothing shows it fixed. Drop this warning when a pinned SGLang closes the issue.
CP_MTP_ISSUE = "sgl-project/sglang#18830"


def _serving_warnings(p: Profile) -> tuple[str, ...]:
    prefill = p.roles.prefill
    if prefill.parallelism.attn_cp > 1 and prefill.mtp.enabled:
        return (
            f"roles.prefill runs attention context parallelism (attn_cp {prefill.parallelism.attn_cp}) with MTP, which fails for "
            f"GLM-5-FP8 in PD prefill upstream ({CP_MTP_ISSUE}, open; not known fixed in the pinned SGLang). Treat this profile "
            "as unproven until a GPU run: the fallback is the seed profile (MTP off), or MTP with the prefill fallback layout "
            "(roles.prefill.parallelism tp 16, attn_dp 16; runbooks/02-serve.md, Switch the prefill layout)",
        )
    return ()


def _placement_warnings(p: Profile) -> tuple[str, ...]:
    if p.capacity.market == "capacity-block" and _placement_group(p) == "cluster":
        return (
            "capacity.placement_group is cluster on a Capacity Block: EC2 already places a block's instances together, and a "
            "placement group can leave some of the paid instances unlaunchable (AWS ParallelCluster refuses the combination, "
            "aws/aws-parallelcluster#6311; eksctl#7949). It shows only when the block starts, as InsufficientInstanceCapacity "
            "on the node groups. Fix: remove capacity.placement_group (or set none); the delivery notification checks the "
            "block's own placement",
        )
    return ()


def _market(p: Profile) -> Literal["capacity-block", "on-demand"]:
    """On-demand GPU nodes launch without a reservation (EC2 RunInstances: no InstanceMarketOptions, no
    CapacityReservationSpecification), so a rehearsal names none and buys none; only a rehearsal names a block."""
    c = p.capacity
    if c.market == "on-demand":
        if c.reservation_id != PLACEHOLDER_RESERVATION:
            raise ProfileError(
                "capacity.reservation_id",
                c.reservation_id,
                "names a Capacity Block, but capacity.market is on-demand (its nodes launch without a reservation)",
                f"use the placeholder {PLACEHOLDER_RESERVATION}, or set capacity.market: capacity-block",
            )
        if c.purchase is not None:
            raise ProfileError(
                "capacity.purchase",
                c.purchase.offering_id,
                "would buy a Capacity Block, but capacity.market is on-demand",
                "remove capacity.purchase, or set capacity.market: capacity-block",
            )
    elif p.rehearses is not None:
        raise ProfileError(
            "rehearses",
            p.rehearses,
            "only an on-demand rehearsal names the block profile it rehearses",
            "set capacity.market: on-demand, or remove rehearses",
        )
    return c.market


# The widest public allow-list the kit accepts for the Kubernetes API: a /8's worth of addresses (a large
# organisation's own range), however it is split.
MAX_PUBLIC_ACCESS_ADDRESSES = 2**24


def _endpoint(p: Profile) -> None:
    c = p.cluster
    if c.endpoint_access == "private" and c.public_access_cidrs:
        raise ProfileError(
            "cluster.public_access_cidrs",
            [str(n) for n in c.public_access_cidrs],
            "set but the endpoint is private",
            "remove them, or set cluster.endpoint_access: public_and_private",
        )
    if c.endpoint_access == "public_and_private":
        if not c.public_access_cidrs:
            raise ProfileError("cluster.public_access_cidrs", [], "a public endpoint needs an allow-list", "list your office/VPN CIDRs")
        # Counted over the union, so that 0.0.0.0/1 with 128.0.0.0/1 (or any split of /0) is what it is.
        opened = sum(n.num_addresses for n in collapse_addresses(c.public_access_cidrs))
        if opened > MAX_PUBLIC_ACCESS_ADDRESSES:
            raise ProfileError(
                "cluster.public_access_cidrs",
                [str(n) for n in c.public_access_cidrs],
                f"together open the Kubernetes API to {opened:,} addresses"
                + (" (the whole internet)" if opened == 2**32 else ", more than a /8"),
                "list your office/VPN CIDRs, or keep the endpoint private and use the SSM access host",
            )


def _low_latency_dispatch_fits(at: str, r: Role, par: Parallelism, graph_bs: tuple[int, ...]) -> None:
    """A low-latency role's largest step per rank: its running requests per attention-DP rank (or its largest CUDA
    graph), times the tokens each verifies with MTP. It must fit DeepEP's low-latency buffer, LL_TOKENS_PER_RANK
    (SGLang 0.5.23 SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK, srt/environ.py, the number the memory model sizes the
    buffer with); no SGLang resolution rule compares it with the batch, so one more token fails in the kernel. Checked where attention is data
    parallel end to end (attn_dp = tp: every rank dispatches its own batch, the seed's decode); with attention TP the
    batch is split over the ranks before dispatch in a way this rule does not model, so it stays unchecked there."""
    if par.deepep_mode != "low_latency" or par.attn_dp != par.tp:
        return
    per_rank = max(max(graph_bs, default=0), math.ceil(r.max_running_requests / par.attn_dp))
    tokens = r.mtp.draft_tokens if r.mtp.enabled else 1
    if per_rank * tokens > LL_TOKENS_PER_RANK:
        most = LL_TOKENS_PER_RANK // tokens * par.attn_dp
        raise ProfileError(
            f"{at}.max_running_requests",
            r.max_running_requests,
            f"{per_rank} requests per attention-DP rank x {tokens} token(s) each = {per_rank * tokens} tokens per low-latency "
            f"dispatch, more than DeepEP's buffer holds ({LL_TOKENS_PER_RANK}, SGLANG_DEEPEP_NUM_MAX_DISPATCH_TOKENS_PER_RANK)",
            f"use at most {most}" + (" (or fewer mtp.draft_tokens)" if tokens > 1 else ""),
        )


def _drain_lead(p: Profile) -> None:
    """The drain starts block_end_warning_minutes before the end: at or beyond the block's length it would drain at
    the start, and past length - minimum_serving_hours no block of this length could pass preflight."""
    if p.capacity.market != "capacity-block":
        return
    lead, block = p.observability.block_end_warning_minutes, p.capacity.duration_hours * 60
    serving = block - lead
    if serving < p.capacity.minimum_serving_hours * 60:
        raise ProfileError(
            "observability.block_end_warning_minutes",
            lead,
            f"leaves {max(serving, 0) / 60:g} h of a {p.capacity.duration_hours} h block before the drain, less than "
            f"capacity.minimum_serving_hours ({p.capacity.minimum_serving_hours:g} h)"
            + (": the drain would start when the block does" if serving <= 0 else ""),
            f"use at most {block - int(p.capacity.minimum_serving_hours * 60)} minutes, or buy a longer block (capacity.duration_hours)",
        )


# Where the amazon-cloudwatch-observability add-on runs its agents (stacks/observability_addon.py installs it):
# https://docs.aws.amazon.com/AmazonCloudWatch/latest/monitoring/install-CloudWatch-Observability-EKS-addon.html
CONTAINER_INSIGHTS_NAMESPACE = "amazon-cloudwatch"


def _namespace(p: Profile) -> None:
    """The serving namespace is the kit's alone: not one its add-ons and charts run in (their pods would fall under
    the serving Pod Security labels and NetworkPolicies, and a `make destroy` of serving would take them along)."""
    taken = {chart.namespace for chart in catalog.addons().charts.values()} | {CONTAINER_INSIGHTS_NAMESPACE}
    if p.serving.namespace in taken:
        raise ProfileError(
            "serving.namespace",
            p.serving.namespace,
            "is where the kit's cluster add-ons run (" + ", ".join(sorted(taken)) + ")",
            "use a namespace of its own, e.g. pd-serving",
        )


def _role(p: Profile, name: str, r: Role, it: InstanceType, m: Model, efa: int, *, suggest: bool = True) -> RolePlan:
    par = r.parallelism
    at = f"roles.{name}"
    if r.expert_balance_report and par.pp > 1:
        # SGLang 0.5.23: the balancedness recorder ends every ModelRunner.forward with torch.distributed.reduce on WORLD
        # (srt/eplb/expert_distribution.py, _append_utilization_rate), and the PP scheduler's send to the next stage
        # waits on an event recorded after that forward (srt/managers/scheduler_pp_mixin.py): stage 0's send waits for a
        # reduce stage 1 enters only after it received that send. Code-traced; the first GPU run confirms.
        raise ProfileError(
            f"{at}.expert_balance_report",
            True,
            f"with pp {par.pp}, SGLang's per-forward balancedness reduce makes the pipeline stages wait on each other at the first batch",
            "leave it off on this role; record the expert distribution on demand (runbooks/02-serve.md, Expert balance)",
        )
    gpus_per_replica = r.nodes_per_replica * it.gpus

    def fix(options: list[dict[str, int]], otherwise: str) -> str:
        """The first parallelism change that passes every rule of the role, so a fix never leads to the next refusal."""
        change = _first_passing(p, name, r, it, m, efa, options) if suggest else None
        return f"use {_yaml_pairs(change)}" if change else otherwise

    if par.tp * par.pp != gpus_per_replica:
        raise ProfileError(
            f"{at}.parallelism.tp",
            par.tp,
            f"tp x pp = {par.tp} x {par.pp} = {par.tp * par.pp}, but one replica has {r.nodes_per_replica} node(s) x {it.gpus} GPUs = {gpus_per_replica}",
            fix(_layouts(r, it), f"make tp x pp = {gpus_per_replica} with pp <= {r.nodes_per_replica}, or change nodes_per_replica"),
        )
    if par.pp > r.nodes_per_replica:
        raise ProfileError(
            f"{at}.parallelism.pp",
            par.pp,
            f"more pipeline stages than nodes per replica ({r.nodes_per_replica}); split stages across nodes, not inside one",
            fix(_layouts(r, it), f"keep pp <= {r.nodes_per_replica}"),
        )
    for knob in ("attn_cp", "attn_dp"):
        size = getattr(par, knob)
        if par.tp % size:
            raise ProfileError(
                f"{at}.parallelism.{knob}",
                size,
                f"does not divide tp ({par.tp})",
                fix([{knob: d} for d in _divisors_near(par.tp, size)], f"use a divisor of {par.tp}"),
            )
    # The attention TP size divides what the memory model below divides by: refused here, next to the
    # division, so no path reaches it with 0 (a ZeroDivisionError traceback instead of this line).
    attn_tp, uneven = divmod(par.tp, par.attn_cp * par.attn_dp)
    if uneven or not attn_tp:
        raise ProfileError(
            f"{at}.parallelism.attn_dp",
            par.attn_dp,
            f"attn_cp x attn_dp = {par.attn_cp * par.attn_dp} does not divide tp ({par.tp})",
            fix([{"attn_dp": d} for d in _divisors_near(par.tp // par.attn_cp, par.attn_dp)], "lower one of them"),
        )
    if par.attn_cp > 1:
        if name != "prefill":
            raise ProfileError(
                f"{at}.parallelism.attn_cp",
                par.attn_cp,
                "context parallel attention is a prefill feature in SGLang",
                fix([{"attn_cp": 1, "attn_dp": d} for d in _divisors_near(par.tp, par.attn_cp * par.attn_dp)], "use attn_dp on decode"),
            )
        if par.tp > it.gpus:
            one_node = {"tp": it.gpus, "pp": gpus_per_replica // it.gpus}
            raise ProfileError(
                f"{at}.parallelism.attn_cp",
                par.attn_cp,
                f"prefill context parallel needs tp <= GPUs of one instance ({it.gpus}); SGLang refuses cross-node CP, and tp is {par.tp}",
                fix(
                    [one_node, {**one_node, "attn_cp": math.gcd(par.attn_cp, it.gpus)}, {"attn_cp": 1, "attn_dp": par.tp}],
                    f"use tp: {it.gpus} with pp across nodes, or the fallback layout attn_cp: 1, attn_dp: {par.tp}",
                ),
            )
    if par.moe_a2a_backend != "none":
        if par.ep is not None and par.ep != par.tp:
            raise ProfileError(
                f"{at}.parallelism.ep",
                par.ep,
                f"SGLang's DeepEP dispatcher ({par.moe_a2a_backend}) forces ep = tp ({par.tp})",
                "remove ep, or set moe_a2a_backend: none",
            )
        if par.deepep_mode is None:
            mode = "normal" if name == "prefill" else "low_latency"
            raise ProfileError(
                f"{at}.parallelism.deepep_mode", None, "must be pinned (auto switches kernels under load)", f"set deepep_mode: {mode}"
            )
        ep = par.tp
    else:
        ep = par.ep or 1
        if par.tp % ep:
            raise ProfileError(
                f"{at}.parallelism.ep",
                ep,
                f"does not divide tp ({par.tp})",
                fix([{"ep": d} for d in _divisors_near(par.tp, ep)], f"use a divisor of {par.tp}"),
            )
        if par.deepep_mode is not None:
            raise ProfileError(
                f"{at}.parallelism.deepep_mode",
                par.deepep_mode,
                "selects DeepEP kernels, but moe_a2a_backend is none",
                "remove deepep_mode, or set moe_a2a_backend: uccl-ep (or deepep)",
            )
    if m.routed_experts % ep:
        with_deepep = par.moe_a2a_backend != "none"
        options = _layouts(r, it) if with_deepep else [{"ep": d} for d in _divisors_near(math.gcd(par.tp, m.routed_experts), ep)]
        raise ProfileError(
            f"{at}.parallelism.tp" if with_deepep else f"{at}.parallelism.ep",
            par.tp if with_deepep else ep,
            f"expert parallel size {ep} does not divide the model's {m.routed_experts} experts",
            fix(options, f"use an ep (= tp with DeepEP) that divides {m.routed_experts}, e.g. 8 or 16"),
        )

    weights = m.routed_expert_gb / (par.tp * par.pp) + m.dense_gb / (attn_tp * par.pp)
    # EAGLE MTP loads the checkpoint's next-token layer (one more decoder layer, its experts sharded
    # like the others; embedding and LM head shared) and keeps its KV beside the target's.
    draft_layers = m.mtp_layers if r.mtp.enabled else 0
    draft = draft_layers * (m.routed_expert_gb / m.moe_layers / par.tp + m.dense_gb / m.layers / attn_tp)
    graph_bs = (
        decode_graph_batch_sizes(r.max_running_requests, par.attn_dp, speculative=r.mtp.enabled, cap=r.cuda_graph_max_bs)
        if name == "decode"
        else ()
    )
    _low_latency_dispatch_fits(at, r, par, graph_bs)
    shape = RoleShape(
        role=name,
        backend=par.moe_a2a_backend,
        deepep_mode=par.deepep_mode,
        tp=par.tp,
        pp=par.pp,
        ep=ep,
        attn_dp=par.attn_dp,
        max_running_requests=r.max_running_requests,
        chunked_prefill_size=r.chunked_prefill_size,
        draft_tokens=r.mtp.draft_tokens if r.mtp.enabled else None,
        decode_graph_bs=graph_bs,
    )
    gpu_mib = it.gpu_memory_mib
    derived = derived_fraction(shape, gpu_mib, m.hidden_size, m.routed_experts)
    fraction = r.mem_fraction_static if r.mem_fraction_static is not None else derived
    static_gb = fraction * it.gpu_memory_gb
    weights += draft
    kv_per_token = m.kv_bytes_per_token_per_layer * (m.layers + draft_layers) / par.pp
    longest = min(r.context_length, m.max_context_length)
    if weights >= static_gb:
        # Enough for the weights and one request of the (capped) context, rounded up to a hundredth.
        needed = math.ceil((weights + longest / par.attn_cp * kv_per_token / catalog.GB) / it.gpu_memory_gb * 100 + 1e-9) / 100
        low, high = MEM_FRACTION_RANGE
        spread = "spread the model over more GPUs (more nodes per replica or larger tp)"
        raise ProfileError(
            f"{at}.mem_fraction_static",
            fraction,
            f"weights need ~{weights:.1f} GB per GPU but the static pool is {static_gb:.1f} GB of {it.gpu_memory_gb:.1f} GB"
            + ("" if r.mem_fraction_static is not None else " (derived: the rest is the memory model's reserve, see `pdkit plan`)"),
            f"use mem_fraction_static: {needed:.2f} (it must stay in ({low}, {high})), or {spread}"
            if low < needed < high
            else f"{spread}: this layout would need mem_fraction_static {needed:.2f}, outside ({low}, {high})",
        )
    kv_gb = static_gb - weights
    kv_tokens = int(kv_gb * catalog.GB / kv_per_token)
    holds = kv_tokens * par.attn_cp
    if r.context_length > m.max_context_length:
        raise ProfileError(
            f"{at}.context_length",
            r.context_length,
            f"longer than the model's {m.max_context_length}",
            f"use context_length: {min(m.max_context_length, holds)} (at most the model's {m.max_context_length}"
            + (f" and the {holds} tokens the KV budget holds)" if holds < m.max_context_length else ")"),
        )
    if holds < r.context_length:
        raise ProfileError(
            f"{at}.context_length",
            r.context_length,
            f"the KV budget (~{kv_gb:.1f} GB per GPU, ~{kv_tokens} tokens) cannot hold one request of this length",
            f"use context_length: {holds} (what the KV budget holds), or raise mem_fraction_static, or spread the model over more GPUs",
        )
    spans = ep > it.gpus
    # SGLang's DP-attention recipe: with attention DP = TP every rank holds whole sequences, so the dense
    # layers and the LM head run per rank too instead of a TP all-reduce / all-to-all across the group.
    dp_everywhere = par.attn_dp > 1 and attn_tp == 1
    _upstream_deepep_reach(at, par, spans=spans, gpus_per_node=it.gpus)
    return RolePlan(
        name=name,
        replicas=r.replicas,
        nodes_per_replica=r.nodes_per_replica,
        nodes=r.replicas * r.nodes_per_replica,
        gpus_per_node=it.gpus,
        gpus_per_replica=gpus_per_replica,
        gpus=r.replicas * gpus_per_replica,
        tp=par.tp,
        pp=par.pp,
        ep=ep,
        attn_cp=par.attn_cp,
        attn_dp=par.attn_dp,
        attn_tp=attn_tp,
        moe_a2a_backend="none" if par.moe_a2a_backend == "none" else "deepep",
        deepep_mode=par.deepep_mode,
        a2a_backend=par.moe_a2a_backend,
        image=A2A_IMAGES[par.moe_a2a_backend],
        experts_per_gpu=m.routed_experts / ep,
        ep_spans_nodes=spans,
        cross_node_moe_messages_per_token=2 * m.moe_layers if spans else 0,
        pp_transfers_per_chunk=par.pp - 1,
        weights_gb_per_gpu=round(weights, 1),
        kv_budget_gb_per_gpu=round(kv_gb, 1),
        kv_tokens_per_gpu=kv_tokens,
        context_length=r.context_length,
        mem_fraction_static=fraction,
        max_running_requests=r.max_running_requests,
        moe_dense_tp_size=1 if dp_everywhere else None,
        enable_dp_lm_head=dp_everywhere,
        decode_graph_bs=graph_bs,
        memory=_memory_budget(shape, it, m, fraction=fraction, derived=derived, weights=weights - draft, draft=draft, kv_gb=kv_gb),
        # EKS cannot move a node group between a launch template with and without an image id, and
        # CloudFormation cannot replace a custom-named group in place: the image source is in the name.
        node_group_name=f"{p.name}-{name}" + ("-custom" if p.ami.source == "custom" else ""),
        labels={ROLE_LABEL: name},
        taint={"key": ROLE_LABEL, "value": name, "effect": "NoSchedule"},
        efa_devices_per_node=efa,
        settings=r,
    )


def _memory_budget(
    shape: RoleShape, it: InstanceType, m: Model, *, fraction: float, derived: float, weights: float, draft: float, kv_gb: float
) -> MemoryBudget:
    parts = reserve_mib(shape, it.gpu_memory_mib, m.hidden_size, m.routed_experts)

    def gb(mib: float) -> float:
        return round(mib * MIB / catalog.GB, 1)

    return MemoryBudget(
        gpu_gb=round(it.gpu_memory_gb, 1),
        mem_fraction_static=fraction,
        mem_fraction_derived=derived,
        weights_gb=round(weights, 1),
        draft_weights_gb=round(draft, 1),
        kv_gb=round(kv_gb, 1),
        runtime_gb=gb(parts["runtime"]),
        cuda_graphs_gb=gb(parts["cuda_graphs"]),
        ep_buffers_gb=gb(parts["ep_buffers"]),
        capture_headroom_gb=gb(parts["capture_headroom"]),
        draft_graphs_gb=gb(parts["draft_graphs"]),
        decode_graph_bs=shape.decode_graph_bs,
        derived_by_backend=derived_by_backend(shape, it.gpu_memory_mib, m.hidden_size, m.routed_experts),
    )


# Suggestions are searched only among sizes a real deployment could have: a profile that asks for a
# billion nodes gets the rule's plain fix, not a billion-step search.
SEARCH_LIMIT = 4096


def _layouts(r: Role, it: InstanceType) -> list[dict[str, int]]:
    """tp x pp layouts that fill one replica with pp <= nodes_per_replica, nearest the asked pp first; each
    also with the attention sizes cut to what the new tp allows."""
    par = r.parallelism
    gpus = r.nodes_per_replica * it.gpus
    if r.nodes_per_replica > SEARCH_LIMIT:
        return []
    stages = sorted((pp for pp in range(1, r.nodes_per_replica + 1) if gpus % pp == 0), key=lambda pp: (abs(pp - par.pp), pp))
    options = []
    for pp in stages:
        tp = gpus // pp
        cp = math.gcd(par.attn_cp, tp)
        options += [{"tp": tp, "pp": pp}, {"tp": tp, "pp": pp, "attn_cp": cp, "attn_dp": math.gcd(par.attn_dp, tp // cp)}]
    return options


def _divisors_near(n: int, asked: int) -> list[int]:
    """Divisors of n, nearest `asked` first (the larger of two equally near)."""
    if n > SEARCH_LIMIT:
        return []
    return sorted((d for d in range(1, n + 1) if n % d == 0), key=lambda d: (abs(d - asked), -d))


def _first_passing(
    p: Profile, name: str, r: Role, it: InstanceType, m: Model, efa: int, options: list[dict[str, int]]
) -> dict[str, int] | None:
    for change in options:
        candidate = r.model_copy(update={"parallelism": r.parallelism.model_copy(update=change)})
        try:
            _role(p, name, candidate, it, m, efa, suggest=False)
        except ProfileError:
            continue
        return change
    return None


def _yaml_pairs(change: dict[str, int]) -> str:
    return ", ".join(f"{key}: {value}" for key, value in change.items())


def _mtp_pairing(p: Profile) -> None:
    """Decode's EAGLE starts from the draft KV and hidden states that prefill computes and sends with
    the KV cache, so both roles run the same MTP settings or neither does."""
    prefill, decode = p.roles.prefill.mtp, p.roles.decode.mtp
    if prefill == decode or not (prefill.enabled or decode.enabled):
        return
    if decode.enabled and not prefill.enabled:
        raise ProfileError(
            "roles.prefill.mtp.enabled",
            False,
            "decode runs EAGLE MTP but prefill does not; SGLang's prefill computes the draft model's KV and hidden states that decode's first speculative step starts from",
            f"set roles.prefill.mtp to the decode settings (enabled: true, steps: {decode.steps}, topk: {decode.topk}, draft_tokens: {decode.draft_tokens})",
        )
    if prefill.enabled and not decode.enabled:
        raise ProfileError(
            "roles.decode.mtp.enabled",
            False,
            "prefill runs EAGLE MTP but decode does not; the draft KV it sends has nowhere to go",
            f"set roles.decode.mtp to the prefill settings (enabled: true, steps: {prefill.steps}, topk: {prefill.topk}, draft_tokens: {prefill.draft_tokens}), or disable roles.prefill.mtp",
        )
    raise ProfileError(
        "roles.prefill.mtp",
        prefill.model_dump(),
        f"differs from roles.decode.mtp ({decode.model_dump()}); the draft KV layout must match on both sides",
        f"use the decode settings on prefill too (steps: {decode.steps}, topk: {decode.topk}, draft_tokens: {decode.draft_tokens})",
    )


def _node_total(p: Profile, roles: dict[str, RolePlan]) -> None:
    total = sum(r.nodes for r in roles.values())
    if total != p.capacity.instance_count:
        parts = " + ".join(f"{r.name} {r.replicas}x{r.nodes_per_replica}" for r in roles.values())
        raise ProfileError(
            "capacity.instance_count",
            p.capacity.instance_count,
            f"the roles need {total} nodes ({parts}) but the block reserves {p.capacity.instance_count}",
            f"set instance_count: {total}, or change roles.*.replicas / nodes_per_replica to add up to {p.capacity.instance_count}",
        )


def _estimates(p: Profile, roles: dict[str, RolePlan], m: Model) -> Estimates:
    price = p.capacity.hourly_price_usd
    per_hour = price * p.capacity.instance_count if price else None
    staging = m.checkpoint_gb / STAGING_GBPS_PER_NODE / 60
    load = max(r.weights_gb_per_gpu * r.gpus_per_node for r in roles.values()) / NVME_READ_GBPS / 60
    return Estimates(
        gpu_cost_per_hour_usd=per_hour,
        block_cost_usd=per_hour * p.capacity.duration_hours if per_hour else None,
        staging_minutes=round(staging, 1),
        load_minutes=round(load, 1),
        startup_budget_minutes=round(2 * (load + WARMUP_MINUTES)),
        precompile_minutes=DEEPGEMM_COMPILE_MINUTES,
        # If the precompile step timed out, the server compiles the same kernels itself before /health.
        first_boot_budget_minutes=round(2 * (load + WARMUP_MINUTES + DEEPGEMM_COMPILE_MINUTES)),
        image_ready_minutes={source: _image_ready_minutes(source) for source in ("eks-optimized", "custom")},
    )


def _gpu_root_volume(ami_source: str) -> RootVolume:
    if ami_source == "custom":
        return RootVolume(GPU_ROOT_GIB, ROOT_VOLUME_THROUGHPUT_MIBPS, ROOT_VOLUME_INITIALIZATION_MIBPS)
    # The EKS-optimized root holds no image (containerd's data is on the NVMe RAID): nothing to initialize early.
    return RootVolume(GPU_ROOT_GIB, None, None)


def _image_ready_minutes(ami_source: str) -> float:
    if ami_source == "eks-optimized":
        return round(SERVING_IMAGE_GB / IMAGE_PULL_GBPS / 60, 1)
    root = _gpu_root_volume(ami_source)
    # Without a provisioned rate (2.5 min for 20 GB at 125 MiB/s) the pre-pull would not beat the pull.
    mibps = min(root.initialization_mibps or GP3_BASELINE_MIBPS, root.throughput_mibps or GP3_BASELINE_MIBPS)
    return round(SERVING_IMAGE_GB / (mibps * 2**20 / 1e9) / 60, 1)


def _plain(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if is_dataclass(value) and not isinstance(value, type):
        out = {f.name: _plain(getattr(value, f.name)) for f in fields(value) if f.repr}
        for prop in ("gpu_memory_gb", "routed_expert_gb", "dense_gb"):
            if hasattr(type(value), prop):
                out[prop] = round(getattr(value, prop), 1)
        return out
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    return value
