"""The deployment profile: a YAML file validated into these typed models.

Only shape and single-field rules live here; rules that relate fields to each other or to the
fact tables (instance types, models, regions) live in plan.py. Defaults are the safe choice.
"""

from __future__ import annotations

import re
from datetime import datetime
from decimal import Decimal
from ipaddress import IPv4Network
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from pdkit.errors import short

PLACEHOLDER_RESERVATION = "cr-00000000000000000"
RESERVATION_ID = re.compile(r"^cr-[0-9a-f]{17}$")
# Offering ids as DescribeCapacityBlockOfferings returns them: a cb- prefix and an id (its alphabet and length are not documented).
OFFERING_ID = re.compile(r"^cb[a-z]*-[0-9A-Za-z]+$")
# CloudWatch Logs accepts only these retention periods (days).
LOG_RETENTION_DAYS = (1, 3, 5, 7, 14, 30, 60, 90, 120, 150, 180, 365, 400, 545, 731, 1096, 1827, 2192, 2557, 2922, 3288, 3653)


class FieldFix(ValueError):
    """A single-field validation failure that knows its fix."""

    def __init__(self, problem: str, fix: str) -> None:
        super().__init__(problem)
        self.problem = problem
        self.fix = fix


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Aws(_Section):
    region: str
    availability_zone: str = Field(description="The AZ the Capacity Block is in (from `pdkit capacity offerings`).")
    account: str | None = Field(default=None, description="Optional 12-digit account id; deploys refuse other accounts.")
    availability_zones: tuple[str, ...] | None = Field(
        default=None, description="Override the region's AZ names from pdkit/model/data/regions.yaml."
    )

    @field_validator("account")
    @classmethod
    def _account(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"\d{12}", v):
            raise FieldFix("not a 12-digit AWS account id", 'quote the 12 digits (account: "123456789012") or remove the field')
        return v


class Purchase(_Section):
    """Opt-in: `cdk deploy` buys the block (a custom resource in the capacity stack), once, at this exact fee.

    The offering is found again with capacity.instance_type, instance_count and duration_hours and the
    window below, the same query `pdkit capacity offerings --earliest/--latest` lists it with."""

    offering_id: str = Field(description="The cbr-... id printed by `pdkit capacity offerings`.")
    confirm_upfront_fee_usd: Decimal = Field(
        gt=0, description="The upfront fee you accept, exactly as `pdkit capacity offerings` prints it."
    )
    earliest_start: datetime | None = Field(default=None, description="The --earliest the offering was listed with, if any.")
    latest_end: datetime | None = Field(default=None, description="The --latest the offering was listed with, if any.")

    @field_validator("offering_id")
    @classmethod
    def _offering(cls, v: str) -> str:
        if not OFFERING_ID.fullmatch(v):
            raise FieldFix("not a Capacity Block offering id (cb-...)", "copy the offering id from `pdkit capacity offerings`")
        return v

    @field_validator("earliest_start", "latest_end")
    @classmethod
    def _aware(cls, v: datetime | None) -> datetime | None:
        if v is not None and v.tzinfo is None:
            raise FieldFix("a time without a time zone", "write it in UTC with a Z, e.g. 2026-12-01T00:00:00Z")
        return v


class Capacity(_Section):
    reservation_id: str = Field(description="The cr-... id of the Capacity Block; the placeholder synthesizes only.")
    purchase: Purchase | None = Field(
        default=None, description="Buy the block at deploy time instead (keep the placeholder reservation_id)."
    )
    instance_type: str
    instance_count: int = Field(gt=0)
    duration_hours: int = Field(default=24, description="Block length to search offerings for.")
    expected_start: datetime | None = None
    minimum_serving_hours: float = Field(default=4, gt=0, description="Preflight fails if less block time is left.")
    placement_group: Literal["cluster", "none"] | None = Field(
        default=None,
        description=(
            "cluster: a cluster placement group in the GPU launch template; none: no placement group. Default: none on a "
            "Capacity Block, whose instances EC2 already places together (checked at delivery from the instance topology), "
            "cluster on an on-demand rehearsal. cluster on a block risks launching fewer instances than you paid for, "
            "and that shows only when the block starts (aws/aws-parallelcluster#6311, eksctl#7949)."
        ),
    )
    efa_devices: int | None = Field(default=None, description="EFA devices per node; default: all the instance has.")
    hourly_price_usd: float | None = Field(default=None, gt=0, description="Per instance-hour, for cost estimates.")
    market: Literal["capacity-block", "on-demand"] = Field(
        default="capacity-block",
        description="capacity-block: GPU nodes on the reserved block; on-demand: a rehearsal (no reservation, guard or block lifecycle).",
    )

    @field_validator("reservation_id")
    @classmethod
    def _reservation(cls, v: str) -> str:
        if not RESERVATION_ID.fullmatch(v):
            raise FieldFix(
                "not a Capacity Reservation id (cr- followed by 17 lowercase hex digits)",
                f"use the cr-... id printed by `pdkit capacity buy`, or {PLACEHOLDER_RESERVATION} to synthesize only",
            )
        return v

    @field_validator("duration_hours")
    @classmethod
    def _duration(cls, v: int) -> int:
        ok = (24 <= v <= 14 * 24 and v % 24 == 0) or (14 * 24 < v <= 182 * 24 and v % (7 * 24) == 0)
        if not ok:
            raise FieldFix(
                "Capacity Blocks last 1-14 days in whole days, then 7-day steps up to 182 days",
                "use a multiple of 24 up to 336, or of 168 up to 4368",
            )
        return v


class Network(_Section):
    vpc_cidr: IPv4Network = IPv4Network("10.0.0.0/16")
    nat_gateways: int = Field(default=1, ge=1, description="NAT gateways for the public registries; 1 per AZ for HA.")
    # One year: AWS Control Tower (CT.CLOUDWATCH.PR.2) rejects log groups kept for less.
    flow_log_retention_days: int = 365

    @field_validator("vpc_cidr")
    @classmethod
    def _cidr(cls, v: IPv4Network) -> IPv4Network:
        if v.prefixlen > 16:
            raise FieldFix("too small for a /19 private subnet in every AZ", "use a /16 (e.g. 10.0.0.0/16)")
        return v

    @field_validator("flow_log_retention_days")
    @classmethod
    def _retention(cls, v: int) -> int:
        return _retention_days(v)


class SystemNodes(_Section):
    instance_type: str = "m7i.2xlarge"
    count: int = Field(default=2, ge=1)


class Cluster(_Section):
    kubernetes_version: str
    endpoint_access: Literal["private", "public_and_private"] = "private"
    public_access_cidrs: tuple[IPv4Network, ...] = ()
    admin_principal_arns: tuple[str, ...] = ()
    # One year: AWS Control Tower (CT.CLOUDWATCH.PR.2) rejects log groups kept for less.
    log_retention_days: int = 365
    system_nodes: SystemNodes = SystemNodes()
    lambda_reserved_concurrency: int | None = Field(
        default=None,
        description="Opt-in: concurrent executions reserved for each of the kit's block-time Lambda functions; "
        "needs room in the account's Lambda quota (`pdkit preflight` row 'Lambda concurrency').",
    )

    @field_validator("admin_principal_arns")
    @classmethod
    def _arns(cls, v: tuple[str, ...]) -> tuple[str, ...]:
        for arn in v:
            if not re.fullmatch(r"arn:aws[a-z-]*:iam::\d{12}:(role|user)/[\w+=,.@/-]+", arn):
                raise FieldFix(f"{short(arn)} is not an IAM role or user ARN", "use arn:aws:iam::<account>:role/<name>")
        return v

    @field_validator("log_retention_days")
    @classmethod
    def _retention(cls, v: int) -> int:
        return _retention_days(v)

    @field_validator("lambda_reserved_concurrency")
    @classmethod
    def _reserved(cls, v: int | None) -> int | None:
        # Reserved concurrency 0 is Lambda's throttle: no invocation runs at all.
        if v is not None and v < 1:
            raise FieldFix(
                "0 or less stops every invocation of the kit's functions", "remove the field to reserve nothing, or use 1 or more"
            )
        return v


class Mtp(_Section):
    """EAGLE multi-token prediction: hides per-token overhead by verifying several tokens per step."""

    enabled: bool = False
    steps: int = Field(default=3, ge=1)
    topk: int = Field(default=1, ge=1)
    draft_tokens: int = Field(default=4, ge=1)


class Parallelism(_Section):
    tp: int = Field(gt=0, description="Tensor parallel size of one replica (its GPUs, together with pp).")
    pp: int = Field(default=1, gt=0)
    attn_cp: int = Field(default=1, gt=0, description="Attention context parallel size (prefill only).")
    attn_dp: int = Field(default=1, gt=0, description="Attention data parallel size.")
    moe_a2a_backend: Literal["uccl-ep", "deepep", "none"] = Field(
        default="uccl-ep",
        description="MoE all-to-all: uccl-ep (UCCL-EP as deep_ep, over EFA), deepep (upstream DeepEP, sgl-deep-ep; NVLink only) or none.",
    )
    deepep_mode: Literal["normal", "low_latency"] | None = None
    ep: int | None = Field(default=None, gt=0, description="Expert parallel size; DeepEP forces ep = tp.")


class RoleSecurity(_Section):
    """The escape hatch for a role whose fabric libraries need more than the kit's unprivileged pods
    (runbooks/02-serve.md, "Pod security"). Both the role's serving pods and `pdkit validate`'s checks
    for that role run with it, so a validation pass still predicts serving. Capabilities, privileged
    and an Unconfined seccomp profile need `serving.pod_security: privileged`: Pod Security "baseline"
    admits none of them (`seccomp: node-default`, an unset profile, it does admit)."""

    # IPC_LOCK: pin memory beyond RLIMIT_MEMLOCK (verbs memory registration). SYS_NICE: the runtime's
    # default seccomp profile admits get_mempolicy/mbind/set_mempolicy only with it (NUMA queries).
    capabilities: tuple[Literal["IPC_LOCK", "SYS_NICE", "SYS_RESOURCE"], ...] = ()
    # "node-default" leaves the pod's seccompProfile unset: kubelet's default (Unconfined unless kubelet
    # runs with seccompDefault), which "baseline" admits; validation then runs under "baseline" too.
    # RuntimeDefault admits NUMA syscalls only with SYS_NICE (pdkit/render/serving/role_pod.py): tighten to it
    # once `pdkit validate` passes with it on the hardware.
    seccomp: Literal["node-default", "RuntimeDefault", "Unconfined"] = "node-default"
    privileged: bool = False

    @property
    def relaxed(self) -> bool:
        """More than Pod Security "baseline" admits."""
        return bool(self.capabilities) or self.seccomp == "Unconfined" or self.privileged


class Role(_Section):
    replicas: int = Field(gt=0)
    nodes_per_replica: int = Field(gt=0)
    parallelism: Parallelism
    context_length: int = Field(gt=0, description="Cap it: an uncapped KV pool hangs SGLang after weight load.")
    mem_fraction_static: float | None = Field(
        default=None,
        gt=0.3,
        lt=0.96,
        description="Override of the fraction the plan derives from its per-GPU memory model (`pdkit plan` shows both).",
    )
    max_running_requests: int = Field(gt=0)
    chunked_prefill_size: int | None = Field(default=None, gt=0)
    cuda_graph_max_bs: int | None = Field(default=None, gt=0)
    two_batch_overlap: bool = False
    expert_balance_report: bool = Field(
        default=False,
        description="Opt-in: SGLang's expert-balancedness recorder (--expert-balancedness-report-mode prometheus). It ends every "
        "forward pass with a reduce over every rank of the instance: refused with pp > 1 (the pipeline stages would wait on each "
        "other at the first batch), a cross-node collective per step on decode. Balance on demand: runbooks/02-serve.md.",
    )
    mtp: Mtp = Mtp()
    security: RoleSecurity = RoleSecurity()


class Roles(_Section):
    prefill: Role
    decode: Role


# smg 1.13.0's --decode-policy choices; --prefill-policy also takes "bucket" (conformance/help/smg-1.13.0-launch_router.txt).
RouterPolicy = Literal["random", "round_robin", "cache_aware", "power_of_two", "least_load", "consistent_hashing", "prefix_hash"]


class Router(_Section):
    prefill_policy: RouterPolicy | Literal["bucket"] | None = Field(
        default=None, description="Unset: the plan picks cache_aware with >= 2 prefill replicas, else round_robin."
    )
    decode_policy: RouterPolicy | None = Field(default=None, description="Unset: the plan picks power_of_two (load-aware).")
    dp_aware: bool | None = Field(
        default=None, description="Route to decode's attention-DP ranks; unset: on when decode runs attention DP."
    )
    cache_threshold: float = Field(default=0.3, ge=0.0, le=1.0)
    balance_abs_threshold: int = Field(default=64, ge=0)
    balance_rel_threshold: float = Field(default=1.5, ge=1.0)
    replicas: int = Field(default=2, ge=1)


# Namespaces the serving objects must never land in: Kubernetes' own (it reserves the kube- prefix: "Avoid
# creating namespaces with the prefix kube-", https://kubernetes.io/docs/concepts/overview/working-with-objects/namespaces/)
# and `default`; the kit's add-on and chart namespaces are refused by the plan (pdkit/model/plan.py, _namespace).
SYSTEM_NAMESPACES = ("default",)


class Serving(_Section):
    namespace: str = Field(
        default="pd-serving",
        pattern=r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$",
        description="Namespace of the serving objects; its Pod Security labels and NetworkPolicies are the kit's, so never a system one.",
    )
    kv_transfer: Literal["mooncake", "nixl"] = "mooncake"
    router: Router = Router()
    host_network: bool = Field(
        default=False, description="SGLang pods on the host network; the namespace's Pod Security then becomes privileged."
    )
    pod_security: Literal["baseline", "privileged"] = Field(
        default="baseline",
        description="Pod Security level the serving namespace enforces; `privileged` only to admit roles.<role>.security.",
    )

    @field_validator("namespace")
    @classmethod
    def _namespace(cls, v: str) -> str:
        # The kit labels its namespace for Pod Security and scopes network policy to it: in kube-system that
        # would relabel (and, on delete, remove) what the cluster itself runs on.
        if v.startswith("kube-") or v in SYSTEM_NAMESPACES:
            raise FieldFix(
                "is a Kubernetes system namespace (kube-* and default hold the cluster's own pods)",
                "use a namespace of its own, e.g. pd-serving",
            )
        return v


# What git refuses in a ref name (git-check-ref-format: https://git-scm.com/docs/git-check-ref-format), which the
# Hub's branches and tags follow; `*` and `?` would also be IAM wildcards in the weights role's S3 resource
# (models/<id>/<revision>/*), widening its read to every revision.
_BAD_REVISION = re.compile(r"[\x00-\x20\x7f~^:?*\[\\]|\.\.|@\{|//|^/|/$|\.lock$|^@$|\.$|^\.|/\.")


class ModelRef(_Section):
    id: str
    revision: str = "main"
    served_name: str | None = None
    hf_token_secret_arn: str | None = Field(
        default=None, description="Secrets Manager secret (full ARN) holding a Hugging Face read token; only for gated models."
    )

    @field_validator("revision")
    @classmethod
    def _revision(cls, v: str) -> str:
        if not v or _BAD_REVISION.search(v):
            raise FieldFix(
                "is not a branch, tag or commit of the Hub (git refuses such a ref name; * and ? would let the weights role read every revision)",
                "use a commit hash (what `huggingface-cli repo info` or the model page's history shows) or a branch name such as main",
            )
        return v

    @field_validator("hf_token_secret_arn")
    @classmethod
    def _token_secret(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"arn:aws[a-z-]*:secretsmanager:[a-z0-9-]+:\d{12}:secret:[\w/+=.@-]+-[A-Za-z0-9]{6}", v):
            raise FieldFix(
                f"{short(v)} is not the full ARN of a Secrets Manager secret",
                "use the ARN that `aws secretsmanager describe-secret --secret-id NAME --query ARN` prints (it ends in -XXXXXX)",
            )
        return v


class Images(_Section):
    source: Literal["build", "external"] = "build"
    versions_file: str = "containers/versions.yaml"
    registry: str | None = Field(default=None, description="With source: external, the registry/repository prefix.")


class Ami(_Section):
    source: Literal["eks-optimized", "custom"] = "eks-optimized"


class Observability(_Section):
    alarm_email: str | None = None
    tpot_p99_ms: float = Field(default=40, gt=0)
    ttft_p99_ms: float = Field(default=10000, gt=0)
    expert_balancedness_min: float = Field(
        default=0.4, gt=0, lt=1, description="Alarm when SGLang's expert balancedness (1 = even) stays below this for 15 minutes."
    )
    block_end_warning_minutes: int = Field(default=60, ge=45, description="Drain lead time; EC2 warns at T-40 min.")


class SharedPrefix(_Section):
    """`pdkit bench --workload shared-prefix`: bench_serving's generated-shared-prefix dataset (--gsp-*)."""

    groups: int = Field(default=16, ge=1, description="Distinct system prompts; prompts_per_level is spread over them.")
    system_prompt_len: int = Field(default=1536, gt=0, description="Tokens every prompt of a group shares.")
    question_len: int = Field(default=512, gt=0)
    turns: int = Field(default=1, ge=1, description="> 1: multi-turn conversations on the same system prompt.")


class Bench(_Section):
    concurrency: tuple[int, ...] = Field(default=(1, 4, 16, 64), description="Concurrency levels of the sweep, each >= 1.")
    input_len: int = Field(default=2048, gt=0)
    output_len: int = Field(default=512, gt=0)
    prompts_per_level: int = Field(default=200, gt=0)
    warmup_requests: int = Field(default=16, ge=1)
    shared_prefix: SharedPrefix = SharedPrefix()

    @field_validator("concurrency")
    @classmethod
    def _levels(cls, v: tuple[int, ...]) -> tuple[int, ...]:
        # Refused with the profile, not when `pdkit bench` starts on the paid block (render/bench.py check_levels
        # refuses the same for --concurrency).
        if not v:
            raise FieldFix("no concurrency level to run", "list at least one, e.g. [1, 4, 16, 64]")
        bad = [c for c in v if c < 1]
        if bad:
            raise FieldFix(f"level {bad[0]} is not a number of concurrent requests", "use levels of 1 or more, e.g. [1, 4, 16, 64]")
        return v


class Profile(_Section):
    name: str = Field(description="Deployment name; prefixes every stack and resource.")
    description: str = ""
    aws: Aws
    capacity: Capacity
    network: Network = Network()
    cluster: Cluster
    roles: Roles
    serving: Serving = Serving()
    model: ModelRef
    images: Images = Images()
    ami: Ami = Ami()
    observability: Observability = Observability()
    bench: Bench = Bench()
    rehearses: str | None = Field(
        default=None, description="With capacity.market on-demand: the block profile (name in config/ or path) this one rehearses."
    )

    @field_validator("name")
    @classmethod
    def _name(cls, v: str) -> str:
        if not re.fullmatch(r"[a-z][a-z0-9-]{1,30}[a-z0-9]", v):
            raise FieldFix("must be 3-32 lowercase letters, digits or dashes, starting with a letter", "e.g. name: glm51-2p2d")
        return v


def _retention_days(v: int) -> int:
    if v not in LOG_RETENTION_DAYS:
        nearest = min(LOG_RETENTION_DAYS, key=lambda d: abs(d - v))
        raise FieldFix("CloudWatch Logs does not accept this retention", f"use one of its periods, e.g. {nearest}")
    return v
