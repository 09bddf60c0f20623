"""The plan's refusals, each asserted as the whole line the operator reads (STYLE.md 2: the field, the bad
value and the fix), and the limits each guard draws, tested on both sides.

tests/test_profile_errors.py proves every guard fires and names its field; here every word and number of the
line is pinned, because a fix that suggests the wrong layout, or names the wrong field, sends the operator
into the next refusal (or a deploy that fails an hour later on the block).
"""

from __future__ import annotations

import pytest

from pdkit.errors import ProfileError
from pdkit.model import plan, profile_files

PURCHASE = {"offering_id": "cbr-0123456789abcdef0", "confirm_upfront_fee_usd": 1000}
DEEPEP_ON = {"moe_a2a_backend": "uccl-ep"}


def build(raw):
    return plan.build(profile_files.parse(raw, source="t.yaml"))


def refusal(raw) -> str:
    with pytest.raises(ProfileError) as info:
        build(raw)
    return str(info.value)


LINES = [
    # --- the block, the region and the cluster ----------------------------------------------------------
    (
        "unknown-instance-type",
        ("capacity.instance_type", "p4d.24xlarge"),
        "capacity.instance_type = 'p4d.24xlarge': not in the kit's instance-type table. "
        "Fix: use one of p5en.48xlarge, p5e.48xlarge, p5.48xlarge, p5.4xlarge (or add a row to pdkit/model/data/instance_types.yaml)",
    ),
    (
        "unknown-model",
        ("model.id", "zai-org/GLM-4"),
        "model.id = 'zai-org/GLM-4': not in the kit's model table. "
        "Fix: use one of zai-org/GLM-5.1-FP8, zai-org/GLM-4.7-Flash (or add it to pdkit/model/data/models.yaml)",
    ),
    (
        "region-without-az-table",
        ("aws.region", "xx-nowhere-1"),
        "aws.region = 'xx-nowhere-1': no AZ list for this region in the kit. Fix: set aws.availability_zones to the region's AZ names",
    ),
    (
        "az-list-of-another-region",
        ("aws.availability_zones", ["eu-south-2a", "eu-west-1b"]),
        "aws.availability_zones = ['eu-south-2a', 'eu-west-1b']: 'eu-west-1b' is not an AZ of eu-south-2. Fix: list AZ names like eu-south-2a",
    ),
    (
        # Another region's AZ of the same length: the region prefix is what decides.
        "az-of-another-region-same-length",
        ("aws.availability_zones", ["eu-south-2a", "eu-north-1a"]),
        "aws.availability_zones = ['eu-south-2a', 'eu-north-1a']: 'eu-north-1a' is not an AZ of eu-south-2. Fix: list AZ names like eu-south-2a",
    ),
    (
        # AZ names end in a letter (EC2 zone names: region + a-z); a digit is not one.
        "az-ending-in-a-digit",
        ("aws.availability_zones", ["eu-south-2a", "eu-south-22"]),
        "aws.availability_zones = ['eu-south-2a', 'eu-south-22']: 'eu-south-22' is not an AZ of eu-south-2. Fix: list AZ names like eu-south-2a",
    ),
    (
        "block-az-outside-the-region",
        ("aws.availability_zone", "eu-west-1a"),
        "aws.availability_zone = 'eu-west-1a': not an Availability Zone of eu-south-2 (eu-south-2a, eu-south-2b, eu-south-2c). "
        "Fix: use the AZ that `pdkit capacity offerings` shows for your block",
    ),
    (
        "unpinned-kubernetes",
        ("cluster.kubernetes_version", "1.29"),
        "cluster.kubernetes_version = '1.29': not a version this kit is pinned and tested for. "
        'Fix: use one of 1.36 (quote it: "1.36"); another version needs new add-on pins',
    ),
    (
        "more-efa-than-cards",
        ("capacity.efa_devices", 17),
        "capacity.efa_devices = 17: p5en.48xlarge has 16 EFA devices (one per network card). Fix: use 1..16 or remove the field to use all",
    ),
    (
        "name-too-long-for-the-bucket",
        ("name", "a" * 32),
        f"name = '{'a' * 32}': the weights bucket name '{'a' * 32}-weights-123456789012-eu-south-2' would exceed S3's 63 characters. "
        "Fix: use a name of at most 31 characters",
    ),
    (
        "nat-gateways-over-azs",
        ("network.nat_gateways", 4),
        "network.nat_gateways = 4: more NAT gateways than AZs (3). Fix: use 1..3",
    ),
    (
        "roles-do-not-add-up",
        ("capacity.instance_count", 6),
        "capacity.instance_count = 6: the roles need 4 nodes (prefill 1x2 + decode 1x2) but the block reserves 6. "
        "Fix: set instance_count: 4, or change roles.*.replicas / nodes_per_replica to add up to 6",
    ),
    # --- buying, rehearsing, the endpoint ---------------------------------------------------------------
    (
        "purchase-and-a-reservation",
        ("capacity.reservation_id", "cr-0123456789abcdef0", "capacity.purchase", PURCHASE),
        "capacity.purchase = 'cbr-0123456789abcdef0': set together with capacity.reservation_id cr-0123456789abcdef0: "
        "the deploy would buy a second block. Fix: keep one: remove capacity.purchase to use cr-0123456789abcdef0, "
        "or set capacity.reservation_id to the placeholder cr-00000000000000000 to buy at deploy time",
    ),
    (
        "on-demand-with-a-reservation",
        ("capacity.market", "on-demand", "capacity.reservation_id", "cr-0123456789abcdef0"),
        "capacity.reservation_id = 'cr-0123456789abcdef0': names a Capacity Block, but capacity.market is on-demand "
        "(its nodes launch without a reservation). Fix: use the placeholder cr-00000000000000000, or set capacity.market: capacity-block",
    ),
    (
        "on-demand-with-a-purchase",
        ("capacity.market", "on-demand", "capacity.purchase", PURCHASE),
        "capacity.purchase = 'cbr-0123456789abcdef0': would buy a Capacity Block, but capacity.market is on-demand. "
        "Fix: remove capacity.purchase, or set capacity.market: capacity-block",
    ),
    (
        "a-block-that-rehearses",
        ("rehearses", "glm51-fp8-2p2d"),
        "rehearses = 'glm51-fp8-2p2d': only an on-demand rehearsal names the block profile it rehearses. "
        "Fix: set capacity.market: on-demand, or remove rehearses",
    ),
    (
        "cidrs-on-a-private-endpoint",
        ("cluster.public_access_cidrs", ["10.1.0.0/16"]),
        "cluster.public_access_cidrs = ['10.1.0.0/16']: set but the endpoint is private. "
        "Fix: remove them, or set cluster.endpoint_access: public_and_private",
    ),
    (
        "public-endpoint-without-allow-list",
        ("cluster.endpoint_access", "public_and_private"),
        "cluster.public_access_cidrs = []: a public endpoint needs an allow-list. Fix: list your office/VPN CIDRs",
    ),
    (
        "api-open-to-the-internet",
        ("cluster.endpoint_access", "public_and_private", "cluster.public_access_cidrs", ["10.0.0.0/8", "0.0.0.0/0"]),
        "cluster.public_access_cidrs = ['10.0.0.0/8', '0.0.0.0/0']: together open the Kubernetes API to 4,294,967,296 addresses "
        "(the whole internet). Fix: list your office/VPN CIDRs, or keep the endpoint private and use the SSM access host",
    ),
    (
        "escape-hatch-under-baseline",
        ("roles.decode.security", {"capabilities": ["IPC_LOCK"]}),
        "roles.decode.security = {'capabilities': ('IPC_LOCK',), 'privileged': False, 'seccomp': 'node-default'}: "
        'needs more than Pod Security "baseline" admits (added capabilities, privileged or an Unconfined seccomp profile). '
        "Fix: set serving.pod_security: privileged as well (runbooks/02-serve.md, Pod security), or remove the escape hatch",
    ),
    (
        "dp-aware-router-without-attention-dp",
        ("serving.router.dp_aware", True, "roles.decode.parallelism", {"tp": 16, "deepep_mode": "low_latency", **DEEPEP_ON}),
        "serving.router.dp_aware = True: decode runs no attention DP, so there are no ranks to route to. "
        "Fix: leave serving.router.dp_aware unset, or set roles.decode.parallelism.attn_dp",
    ),
    # --- MTP ------------------------------------------------------------------------------------------------
    (
        "mtp-on-decode-only",
        ("roles.decode.mtp", {"enabled": True}),
        "roles.prefill.mtp.enabled = False: decode runs EAGLE MTP but prefill does not; SGLang's prefill computes the draft model's KV "
        "and hidden states that decode's first speculative step starts from. "
        "Fix: set roles.prefill.mtp to the decode settings (enabled: true, steps: 3, topk: 1, draft_tokens: 4)",
    ),
    (
        "mtp-on-prefill-only",
        ("roles.prefill.mtp", {"enabled": True, "steps": 2, "draft_tokens": 3}),
        "roles.decode.mtp.enabled = False: prefill runs EAGLE MTP but decode does not; the draft KV it sends has nowhere to go. "
        "Fix: set roles.decode.mtp to the prefill settings (enabled: true, steps: 2, topk: 1, draft_tokens: 3), or disable roles.prefill.mtp",
    ),
    (
        "mtp-settings-differ",
        ("roles.prefill.mtp", {"enabled": True, "steps": 2}, "roles.decode.mtp", {"enabled": True, "steps": 3}),
        "roles.prefill.mtp = {'draft_tokens': 4, 'enabled': True, 'steps': 2, 'topk': 1}: differs from roles.decode.mtp "
        "({'enabled': True, 'steps': 3, 'topk': 1, 'draft_tokens': 4}); the draft KV layout must match on both sides. "
        "Fix: use the decode settings on prefill too (steps: 3, topk: 1, draft_tokens: 4)",
    ),
    # --- a role's layout ------------------------------------------------------------------------------------
    (
        "tp-x-pp-not-the-replica",
        ("roles.decode.parallelism.tp", 8),
        "roles.decode.parallelism.tp = 8: tp x pp = 8 x 1 = 8, but one replica has 2 node(s) x 8 GPUs = 16. Fix: use tp: 16, pp: 1",
    ),
    (
        "more-stages-than-nodes",
        ("roles.decode.parallelism", {"tp": 4, "pp": 4, "deepep_mode": "low_latency", **DEEPEP_ON}),
        "roles.decode.parallelism.pp = 4: more pipeline stages than nodes per replica (2); split stages across nodes, not inside one. "
        "Fix: use tp: 8, pp: 2",
    ),
    (
        "attn-cp-not-a-divisor",
        ("roles.prefill.parallelism.attn_cp", 3),
        "roles.prefill.parallelism.attn_cp = 3: does not divide tp (8). Fix: use attn_cp: 4",
    ),
    (
        "attn-dp-not-a-divisor",
        ("roles.decode.parallelism.attn_dp", 6),
        "roles.decode.parallelism.attn_dp = 6: does not divide tp (16). Fix: use attn_dp: 8",
    ),
    (
        "attn-cp-times-dp-over-tp",
        ("roles.prefill.parallelism.attn_dp", 2),
        "roles.prefill.parallelism.attn_dp = 2: attn_cp x attn_dp = 16 does not divide tp (8). Fix: use attn_dp: 1",
    ),
    (
        "context-parallel-on-decode",
        ("roles.decode.parallelism.attn_dp", 1, "roles.decode.parallelism.attn_cp", 2),
        "roles.decode.parallelism.attn_cp = 2: context parallel attention is a prefill feature in SGLang. Fix: use attn_cp: 1, attn_dp: 2",
    ),
    (
        # The attention ranks it asked for (cp 2 x dp 2) move to attention DP.
        "context-parallel-on-decode-keeps-the-ranks",
        ("roles.decode.parallelism.attn_dp", 2, "roles.decode.parallelism.attn_cp", 2),
        "roles.decode.parallelism.attn_cp = 2: context parallel attention is a prefill feature in SGLang. Fix: use attn_cp: 1, attn_dp: 4",
    ),
    (
        "context-parallel-across-nodes",
        ("roles.prefill.parallelism", {"tp": 16, "attn_cp": 8, "deepep_mode": "normal", **DEEPEP_ON}),
        "roles.prefill.parallelism.attn_cp = 8: prefill context parallel needs tp <= GPUs of one instance (8); "
        "SGLang refuses cross-node CP, and tp is 16. Fix: use tp: 8, pp: 2",
    ),
    (
        # CP 16 does not fit one node's 8 GPUs: the fix cuts it to what tp 8 allows.
        "context-parallel-across-nodes-cut-to-one-node",
        ("roles.prefill.parallelism", {"tp": 16, "attn_cp": 16, "deepep_mode": "normal", **DEEPEP_ON}),
        "roles.prefill.parallelism.attn_cp = 16: prefill context parallel needs tp <= GPUs of one instance (8); "
        "SGLang refuses cross-node CP, and tp is 16. Fix: use tp: 8, pp: 2, attn_cp: 8",
    ),
    (
        # CP 12 fits no 8-GPU node: the fix keeps the largest CP that divides both (4), not the node's 8.
        "context-parallel-across-nodes-cut-to-a-common-divisor",
        (
            "roles.prefill.nodes_per_replica",
            3,
            "capacity.instance_count",
            5,
            "roles.prefill.parallelism",
            {"tp": 24, "attn_cp": 12, "deepep_mode": "normal", **DEEPEP_ON},
        ),
        "roles.prefill.parallelism.attn_cp = 12: prefill context parallel needs tp <= GPUs of one instance (8); "
        "SGLang refuses cross-node CP, and tp is 24. Fix: use tp: 8, pp: 3, attn_cp: 4",
    ),
    (
        "ep-other-than-tp-with-deepep",
        ("roles.decode.parallelism.ep", 8),
        "roles.decode.parallelism.ep = 8: SGLang's DeepEP dispatcher (uccl-ep) forces ep = tp (16). Fix: remove ep, or set moe_a2a_backend: none",
    ),
    (
        "decode-deepep-mode-unpinned",
        ("roles.decode.parallelism.deepep_mode", None),
        "roles.decode.parallelism.deepep_mode = None: must be pinned (auto switches kernels under load). Fix: set deepep_mode: low_latency",
    ),
    (
        "prefill-deepep-mode-unpinned",
        ("roles.prefill.parallelism.deepep_mode", None),
        "roles.prefill.parallelism.deepep_mode = None: must be pinned (auto switches kernels under load). Fix: set deepep_mode: normal",
    ),
    (
        "ep-not-a-divisor-without-deepep",
        ("roles.decode.parallelism", {"tp": 16, "attn_dp": 16, "moe_a2a_backend": "none", "ep": 3}),
        "roles.decode.parallelism.ep = 3: does not divide tp (16). Fix: use ep: 4",
    ),
    (
        "deepep-mode-without-deepep",
        ("roles.decode.parallelism", {"tp": 16, "attn_dp": 16, "moe_a2a_backend": "none", "deepep_mode": "low_latency"}),
        "roles.decode.parallelism.deepep_mode = 'low_latency': selects DeepEP kernels, but moe_a2a_backend is none. "
        "Fix: remove deepep_mode, or set moe_a2a_backend: uccl-ep (or deepep)",
    ),
    (
        "experts-not-divisible-with-deepep",
        (
            "roles.prefill.nodes_per_replica",
            3,
            "roles.prefill.parallelism",
            {"tp": 24, "deepep_mode": "normal", **DEEPEP_ON},
            "capacity.instance_count",
            5,
        ),
        "roles.prefill.parallelism.tp = 24: expert parallel size 24 does not divide the model's 256 experts. Fix: use tp: 8, pp: 3",
    ),
    (
        "experts-not-divisible-without-deepep",
        (
            "roles.prefill.nodes_per_replica",
            3,
            "roles.prefill.parallelism",
            {"tp": 24, "moe_a2a_backend": "none", "ep": 24},
            "capacity.instance_count",
            5,
        ),
        "roles.prefill.parallelism.ep = 24: expert parallel size 24 does not divide the model's 256 experts. Fix: use ep: 8",
    ),
    (
        # Without DeepEP the field named is ep, with its own value (12), not tp's (24).
        "experts-not-divisible-by-a-smaller-ep",
        (
            "roles.prefill.nodes_per_replica",
            3,
            "roles.prefill.parallelism",
            {"tp": 24, "moe_a2a_backend": "none", "ep": 12},
            "capacity.instance_count",
            5,
        ),
        "roles.prefill.parallelism.ep = 12: expert parallel size 12 does not divide the model's 256 experts. Fix: use ep: 8",
    ),
    (
        "weights-over-the-static-pool",
        ("capacity.instance_type", "p5.48xlarge"),
        "roles.prefill.mem_fraction_static = 0.64: weights need ~60.9 GB per GPU but the static pool is 55.0 GB of 85.9 GB "
        "(derived: the rest is the memory model's reserve, see `pdkit plan`). "
        "Fix: use mem_fraction_static: 0.72 (it must stay in (0.3, 0.96)), or spread the model over more GPUs (more nodes per replica or larger tp)",
    ),
    (
        # One p5 node cannot hold GLM-5.1's experts at tp 8: no fraction fits, so the fix says spread, not a number.
        "weights-beyond-any-fraction",
        (
            "capacity.instance_type",
            "p5.48xlarge",
            "roles.prefill.nodes_per_replica",
            1,
            "capacity.instance_count",
            3,
            "roles.prefill.parallelism",
            {"tp": 8, "attn_cp": 8, "deepep_mode": "normal", **DEEPEP_ON},
        ),
        "roles.prefill.mem_fraction_static = 0.65: weights need ~121.8 GB per GPU but the static pool is 55.8 GB of 85.9 GB "
        "(derived: the rest is the memory model's reserve, see `pdkit plan`). Fix: spread the model over more GPUs "
        "(more nodes per replica or larger tp): this layout would need mem_fraction_static 1.44, outside (0.3, 0.96)",
    ),
    (
        # A fraction the profile set is not called derived.
        "weights-over-an-explicit-fraction",
        ("capacity.instance_type", "p5.48xlarge", "roles.prefill.mem_fraction_static", 0.6),
        "roles.prefill.mem_fraction_static = 0.6: weights need ~60.9 GB per GPU but the static pool is 51.5 GB of 85.9 GB. "
        "Fix: use mem_fraction_static: 0.72 (it must stay in (0.3, 0.96)), or spread the model over more GPUs (more nodes per replica or larger tp)",
    ),
    (
        # Longer than the model and more than the KV budget holds: the fix takes the smaller of the two.
        "context-over-the-model-and-the-kv-budget",
        ("roles.decode.context_length", 300000, "roles.decode.mem_fraction_static", 0.55),
        "roles.decode.context_length = 300000: longer than the model's 202752. "
        "Fix: use context_length: 75074 (at most the model's 202752 and the 75074 tokens the KV budget holds)",
    ),
    (
        "context-over-the-model",
        ("roles.decode.context_length", 300000),
        "roles.decode.context_length = 300000: longer than the model's 202752. Fix: use context_length: 202752 (at most the model's 202752)",
    ),
    (
        "kv-cannot-hold-the-context",
        ("roles.decode.mem_fraction_static", 0.55),
        "roles.decode.context_length = 131072: the KV budget (~6.7 GB per GPU, ~75074 tokens) cannot hold one request of this length. "
        "Fix: use context_length: 75074 (what the KV budget holds), or raise mem_fraction_static, or spread the model over more GPUs",
    ),
    (
        "upstream-deepep-across-nodes",
        ("roles.decode.parallelism.moe_a2a_backend", "deepep"),
        "roles.decode.parallelism.moe_a2a_backend = 'deepep': upstream DeepEP across nodes (ep 16 > 8 GPUs per node) needs NVSHMEM "
        "over libfabric and DeepEP's EFA patch, which the kit's sglang-deepep image does not build. "
        "Fix: use moe_a2a_backend: uccl-ep, or keep ep within one node (tp: 8 with pp across nodes)",
    ),
    (
        "upstream-deepep-low-latency",
        ("roles.prefill.parallelism.moe_a2a_backend", "deepep", "roles.prefill.parallelism.deepep_mode", "low_latency"),
        "roles.prefill.parallelism.deepep_mode = 'low_latency': upstream DeepEP's low-latency kernels always start NVSHMEM "
        "(InfiniBand GPUDirect Async), which EFA lacks. Fix: use deepep_mode: normal, or moe_a2a_backend: uccl-ep",
    ),
]


# Beyond SEARCH_LIMIT (a profile asking for thousands of nodes) no layout is searched: the rule's plain fix.
HUGE = [
    (
        "tp-x-pp-plain-fix",
        ("roles.decode.nodes_per_replica", 5000, "capacity.instance_count", 5002),
        "roles.decode.parallelism.tp = 16: tp x pp = 16 x 1 = 16, but one replica has 5000 node(s) x 8 GPUs = 40000. "
        "Fix: make tp x pp = 40000 with pp <= 5000, or change nodes_per_replica",
    ),
    (
        "pp-plain-fix",
        (
            "roles.decode.nodes_per_replica", 5000, "capacity.instance_count", 5002,
            "roles.decode.parallelism", {"tp": 4, "pp": 10000, "attn_dp": 4, "deepep_mode": "low_latency", **DEEPEP_ON},
        ),
        "roles.decode.parallelism.pp = 10000: more pipeline stages than nodes per replica (5000); split stages across nodes, "
        "not inside one. Fix: keep pp <= 5000",
    ),
    (
        "divisor-plain-fix",
        (
            "roles.decode.nodes_per_replica", 1024, "capacity.instance_count", 1026,
            "roles.decode.parallelism", {"tp": 8192, "attn_dp": 3, "deepep_mode": "low_latency", **DEEPEP_ON},
        ),
        "roles.decode.parallelism.attn_dp = 3: does not divide tp (8192). Fix: use a divisor of 8192",
    ),
    (
        "attention-product-plain-fix",
        (
            "roles.prefill.nodes_per_replica", 2048, "capacity.instance_count", 2050,
            "roles.prefill.parallelism", {"tp": 16384, "attn_cp": 2, "attn_dp": 16384, "deepep_mode": "normal", **DEEPEP_ON},
        ),
        "roles.prefill.parallelism.attn_dp = 16384: attn_cp x attn_dp = 32768 does not divide tp (16384). Fix: lower one of them",
    ),
    (
        # Each divides tp 24, attention TP would be 1 with 8 left over: refused although the quotient is not 0.
        "attention-product-uneven-but-not-zero",
        (
            "roles.prefill.nodes_per_replica", 3, "capacity.instance_count", 5,
            "roles.prefill.parallelism", {"tp": 24, "attn_cp": 8, "attn_dp": 2, "deepep_mode": "normal", **DEEPEP_ON},
        ),
        "roles.prefill.parallelism.attn_dp = 2: attn_cp x attn_dp = 16 does not divide tp (24). Fix: lower one of them",
    ),
    (
        "context-parallel-on-decode-plain-fix",
        (
            "roles.decode.nodes_per_replica", 1024, "capacity.instance_count", 1026,
            "roles.decode.parallelism", {"tp": 8192, "attn_cp": 2, "deepep_mode": "low_latency", **DEEPEP_ON},
        ),
        "roles.decode.parallelism.attn_cp = 2: context parallel attention is a prefill feature in SGLang. Fix: use attn_dp on decode",
    ),
    (
        "ep-divisor-plain-fix",
        (
            "roles.decode.nodes_per_replica", 1024, "capacity.instance_count", 1026,
            "roles.decode.parallelism", {"tp": 8192, "moe_a2a_backend": "none", "ep": 3},
        ),
        "roles.decode.parallelism.ep = 3: does not divide tp (8192). Fix: use a divisor of 8192",
    ),
    (
        "experts-plain-fix",
        (
            "roles.decode.nodes_per_replica", 1024, "capacity.instance_count", 1026,
            "roles.decode.parallelism", {"tp": 8192, "moe_a2a_backend": "none", "ep": 512},
        ),
        "roles.decode.parallelism.ep = 512: expert parallel size 512 does not divide the model's 256 experts. "
        "Fix: use an ep (= tp with DeepEP) that divides 256, e.g. 8 or 16",
    ),
    (
        # p5 (80 GB) at mem_fraction_static 0.5: neither one-node layout nor the attention-DP fallback fits.
        "context-parallel-across-nodes-plain-fix",
        (
            "capacity.instance_type", "p5.48xlarge", "roles.prefill.mem_fraction_static", 0.5,
            "roles.prefill.parallelism", {"tp": 16, "attn_cp": 2, "deepep_mode": "normal", **DEEPEP_ON},
        ),
        "roles.prefill.parallelism.attn_cp = 2: prefill context parallel needs tp <= GPUs of one instance (8); SGLang refuses "
        "cross-node CP, and tp is 16. Fix: use tp: 8 with pp across nodes, or the fallback layout attn_cp: 1, attn_dp: 16",
    ),
]  # fmt: skip
LINES += HUGE


@pytest.mark.parametrize(("changes", "line"), [c[1:] for c in LINES], ids=[c[0] for c in LINES])
def test_each_refusal_is_the_whole_line(raw_with, changes, line):
    assert refusal(raw_with(*changes)) == line


# --- what the plan takes from the profile, tested with values other than the defaults ---------------------


def test_a_purchase_plan_carries_the_profiles_offering_fee_and_window(raw_with):
    """The deploy-time purchase (pdkit/ops/purchase.py) buys exactly this: the offering, the fee the operator
    confirmed, and the block's shape, AZ and length as the profile states them."""
    buy = {
        **PURCHASE,
        "confirm_upfront_fee_usd": "98765.43",
        "earliest_start": "2026-12-03T11:30:00Z",
        "latest_end": "2026-12-09T11:30:00Z",
    }
    raw = raw_with(
        "capacity.purchase", buy, "capacity.duration_hours", 72, "aws.availability_zone", "eu-south-2b",
        "capacity.instance_count", 6, "roles.decode.replicas", 2,
    )  # fmt: skip
    bought = build(raw).purchase
    assert bought is not None
    assert (bought.offering_id, str(bought.upfront_fee_usd)) == ("cbr-0123456789abcdef0", "98765.43")
    assert (bought.instance_type, bought.instance_count, bought.availability_zone, bought.duration_hours) == (
        "p5en.48xlarge",
        6,
        "eu-south-2b",
        72,
    )
    assert (bought.earliest_start.isoformat(), bought.latest_end.isoformat()) == ("2026-12-03T11:30:00+00:00", "2026-12-09T11:30:00+00:00")


def test_no_purchase_without_one_in_the_profile(raw_with):
    assert build(raw_with()).purchase is None


@pytest.mark.parametrize(("attn_dp", "dp_aware"), [(1, False), (2, True), (16, True)])
def test_the_router_is_rank_aware_exactly_when_decode_runs_attention_dp(raw_with, attn_dp, dp_aware):
    """smg's --dp-aware registers each attention-DP rank of a decode worker as a routing target; with one rank
    per worker (attn_dp 1) there is nothing to split (conformance/help/smg-1.13.0-launch_router.txt)."""
    raw = raw_with("roles.decode.parallelism.attn_dp", attn_dp)
    assert build(raw).router.dp_aware is dp_aware


@pytest.mark.parametrize(("replicas", "policy"), [(1, "round_robin"), (2, "cache_aware")])
def test_the_prefill_policy_is_cache_aware_only_with_a_choice_of_replicas(raw_with, replicas, policy):
    raw = raw_with("roles.prefill.replicas", replicas, "capacity.instance_count", 2 + 2 * replicas)
    router = build(raw).router
    assert (router.prefill_policy, router.decode_policy) == (policy, "power_of_two")


def test_the_profiles_router_settings_win_over_the_plans_choice(raw_with):
    settings = {
        "prefill_policy": "prefix_hash",
        "decode_policy": "least_load",
        "dp_aware": False,
        "cache_threshold": 0.5,
        "balance_abs_threshold": 32,
        "balance_rel_threshold": 1.25,
    }
    router = build(raw_with("serving.router", settings)).router
    assert (router.prefill_policy, router.decode_policy, router.dp_aware) == ("prefix_hash", "least_load", False)
    assert (router.cache_threshold, router.balance_abs_threshold, router.balance_rel_threshold) == (0.5, 32, 1.25)


def test_the_image_a_backend_needs_is_named_with_where_to_add_it(tmp_path):
    """A versions file without the role's image: the line names the image, the file and the fix."""
    import yaml

    from pdkit.model.images import _versions_module

    versions = _versions_module()
    doc = versions.load(versions.VERSIONS_FILE)
    del doc["images"]["sglang-deepep"]
    alt = tmp_path / "versions.yaml"
    alt.write_text(yaml.safe_dump(doc, sort_keys=False))
    prof, _ = profile_files.load("glm51-fp8-2p2d-deepep-prefill")
    raw = prof.model_dump(mode="json", exclude_none=True)
    raw["images"]["versions_file"] = str(alt)
    assert refusal(raw) == (
        f"roles.prefill.parallelism.moe_a2a_backend = 'deepep': needs the sglang-deepep image, which {alt} does not define. "
        f"Fix: add images.sglang-deepep to {alt} (see containers/README.md), or use another backend"
    )


@pytest.mark.parametrize(
    ("changes", "level"),
    [
        ((), "baseline"),
        (("serving.host_network", True), "privileged"),
        (("serving.pod_security", "privileged"), "privileged"),
        (("serving.pod_security", "privileged", "roles.decode.security", {"capabilities": ["IPC_LOCK"]}), "privileged"),
    ],
    ids=["default", "host-network", "asked", "escape-hatch-admitted"],
)
def test_the_namespaces_pod_security_level(raw_with, changes, level):
    """Pod Security "baseline" unless the pods use the host network or the profile lowers it to admit a role's
    escape hatch (https://kubernetes.io/docs/concepts/security/pod-security-standards/)."""
    assert build(raw_with(*changes)).pod_security == level


def test_the_weights_go_to_one_folder_per_model_and_revision(raw_with):
    weights = build(
        raw_with("name", "glm-alt", "model.revision", "0123abc", "aws.region", "eu-west-2", "aws.availability_zone", "eu-west-2b")
    ).weights
    assert (weights.bucket_prefix, weights.region, weights.prefix) == (
        "glm-alt-weights",
        "eu-west-2",
        "models/zai-org/GLM-5.1-FP8/0123abc/",
    )
    assert weights.bucket("123456789012") == "glm-alt-weights-123456789012-eu-west-2"


def test_the_plan_carries_the_profiles_block_region_and_cluster(raw_with):
    """One non-default profile, field by field: a value dropped or swapped on the way into the plan would reach
    every stack that reads it (names, AZs, the block, the drain lead, the node labels the device plugin needs)."""
    raw = raw_with(
        "name", "glm-alt", "aws.region", "eu-west-2", "aws.availability_zone", "eu-west-2b", "aws.account", "123456789012",
        "capacity.reservation_id", "cr-0123456789abcdef0", "capacity.placement_group", "none", "capacity.efa_devices", 8,
        "cluster.system_nodes", {"instance_type": "m7g.2xlarge"}, "cluster.lambda_reserved_concurrency", 5,
        "observability.block_end_warning_minutes", 75,
    )  # fmt: skip
    p = plan.build(profile_files.parse(raw, source="alt.yaml"), profile_path="config/alt.yaml")
    assert (p.name, p.profile_path, p.cluster_name, p.region, p.image_region, p.account) == (
        "glm-alt", "config/alt.yaml", "glm-alt", "eu-west-2", "eu-west-2", "123456789012",
    )  # fmt: skip
    assert (p.block_az, p.availability_zones) == ("eu-west-2b", ("eu-west-2a", "eu-west-2b", "eu-west-2c"))
    assert (p.reservation_id, p.reservation_is_placeholder) == ("cr-0123456789abcdef0", False)
    assert (p.instance.name, p.instance_count, p.placement_group) == ("p5en.48xlarge", 4, "none")
    assert (p.efa_devices_per_node, len(p.network_interfaces)) == (8, 9)
    assert (p.model.id, list(p.roles), p.kubernetes_version) == ("zai-org/GLM-5.1-FP8", ["prefill", "decode"], "1.36")
    assert p.service_cidr == "172.20.0.0/16"
    # The NVIDIA device plugin chart schedules only on nodes labelled nvidia.com/gpu.present=true (or by NFD).
    assert p.gpu_node_labels == {"nvidia.com/gpu.present": "true"}
    assert (p.system_node_labels, p.system_node_arch) == ({"pdkit/role": "system"}, "arm64")
    assert p.drain_lead_minutes == 75
    assert p.stack_names == {
        part: f"glm-alt-{part}" for part in ("network", "cluster", "capacity", "images", "serving", "observability", "ami")
    }
    assert "eks-auth" in p.interface_endpoints
    assert (p.gateway_endpoints, p.private_subnet_mask, p.public_subnet_mask) == (("s3",), 19, 24)
    assert (p.function_concurrency.per_function, p.function_concurrency.total) == (5, 20)
    assert (p.market, p.rehearses, p.purchase) == ("capacity-block", None, None)
    assert (p.system_nodes.instance_type, p.namespace) == ("m7g.2xlarge", "pd-serving")
    # ECR repositories are named after the deployment, so two profiles in one account do not share them.
    assert {image.repository for image in p.images.values()} >= {"glm-alt/sglang-efa", "glm-alt/sglang-deepep", "glm-alt/router"}
    assert p.weights.bucket_prefix == "glm-alt-weights"
    # The EKS-optimized root holds no image (containerd's data is on the NVMe RAID): gp3 baseline, lazy init.
    assert (p.gpu_root_volume.size_gib, p.gpu_root_volume.throughput_mibps, p.gpu_root_volume.initialization_mibps) == (200, None, None)


def test_the_placeholder_reservation_is_flagged(raw_with):
    """The deploy refuses the placeholder unless it buys the block (pdkit/ops/capacity.py reads the flag)."""
    assert build(raw_with()).reservation_is_placeholder is True


def test_the_system_nodes_are_x86_unless_graviton(raw_with):
    assert build(raw_with()).system_node_arch == "x86_64"


def test_without_deepep_and_without_ep_every_gpu_holds_every_expert(raw_with):
    """SGLang's --ep-size defaults to 1: with moe_a2a_backend none and no ep, the experts are not split."""
    decode = build(raw_with("roles.decode.parallelism", {"tp": 16, "attn_dp": 16, "moe_a2a_backend": "none"})).decode
    assert (decode.ep, decode.experts_per_gpu, decode.ep_spans_nodes) == (1, 256, False)


def _mtp(raw_with, *more):
    return build(raw_with("roles.prefill.mtp", {"enabled": True}, "roles.decode.mtp", {"enabled": True}, *more))


def test_mtp_draft_layer_weights_per_gpu(raw_with):
    """EAGLE MTP loads GLM-5.1's one next-token layer, sharded like the others: its experts over tp (724.8 GB of
    routed experts / 75 MoE layers / tp 16 = 0.60 GB) and its dense part over attention TP (31.2 GB / 78 layers /
    attn_tp 4 = 0.10 GB), on top of the target's 724.8 / 16 + 31.2 / 4 = 53.1 GB: the static pool holds both."""
    plain = build(raw_with("roles.decode.parallelism.attn_dp", 4)).decode
    decode = _mtp(raw_with, "roles.decode.parallelism.attn_dp", 4).decode
    assert decode.attn_tp == 4
    assert decode.memory.draft_weights_gb == 0.7
    assert decode.memory.weights_gb == plain.weights_gb_per_gpu == 53.1
    assert decode.weights_gb_per_gpu == pytest.approx(plain.weights_gb_per_gpu + 0.7, abs=0.051)


def test_mtp_draft_layer_keeps_its_kv_beside_the_targets(raw_with):
    """KV per token covers 78 + 1 layers with MTP (1152 bytes per token per layer, GLM-5.1): the tokens the
    budget holds shrink accordingly."""
    for role in _mtp(raw_with).roles.values():
        assert role.kv_tokens_per_gpu == pytest.approx(role.kv_budget_gb_per_gpu * 10**9 / (1152 * 79 / role.pp), rel=2e-3)


def test_decode_cuda_graphs_follow_mtp_and_stop_at_the_cap(raw_with):
    """Speculative decoding captures graphs for draft-token batch sizes (sglang_args: --cuda-graph-bs), and
    cuda_graph_max_bs caps them: a graph per batch size costs memory."""
    plain = build(raw_with("roles.decode.cuda_graph_max_bs", 16)).decode.decode_graph_bs
    with_mtp = _mtp(raw_with, "roles.decode.cuda_graph_max_bs", 16).decode.decode_graph_bs
    assert max(plain) == max(with_mtp) == 16
    assert plain != with_mtp


def test_the_memory_reserve_counts_decode_graphs_and_ep_buffers(raw_with):
    """The derived mem_fraction_static leaves room for what the role runs: decode's CUDA graphs, the DeepEP
    buffers of an EP backend, and the extra room UCCL-EP's low-latency kernels take while decode captures its
    graphs (a decode-only, uccl-ep-only, low-latency-only term of pdkit/model/gpu_memory.py)."""
    p = build(raw_with())
    assert p.decode.memory.cuda_graphs_gb > 0
    assert p.decode.memory.capture_headroom_gb > 0
    assert p.prefill.memory.capture_headroom_gb == 0
    assert p.decode.memory.ep_buffers_gb > 0
    assert p.prefill.memory.ep_buffers_gb > 0


def test_the_roles_shape_in_the_plan(raw_with):
    """Built here, not from a shared fixture: GPUs per replica, whether EP crosses nodes (decode EP16 over two
    8-GPU nodes: 75 MoE layers x dispatch + combine = 150 EFA messages per token) and the PP hand-offs."""
    p = build(raw_with())
    assert (p.prefill.gpus_per_replica, p.decode.gpus_per_replica) == (16, 16)
    assert (p.prefill.ep_spans_nodes, p.decode.ep_spans_nodes) == (False, True)
    assert (p.prefill.cross_node_moe_messages_per_token, p.decode.cross_node_moe_messages_per_token) == (0, 150)
    assert (p.prefill.pp_transfers_per_chunk, p.decode.pp_transfers_per_chunk) == (1, 0)


@pytest.mark.parametrize(("attn_cp", "attn_dp", "everywhere"), [(4, 2, True), (8, 1, False), (2, 2, False)])
def test_dense_layers_and_lm_head_run_per_rank_when_attention_is_all_dp(raw_with, attn_cp, attn_dp, everywhere):
    """SGLang's DP-attention recipe: once every attention rank holds whole sequences (attention TP 1 with DP > 1),
    --moe-dense-tp-size 1 and --enable-dp-lm-head keep the dense layers and the LM head per rank."""
    raw = raw_with("roles.prefill.parallelism.attn_cp", attn_cp, "roles.prefill.parallelism.attn_dp", attn_dp)
    prefill = build(raw).prefill
    assert (prefill.moe_dense_tp_size, prefill.enable_dp_lm_head) == ((1, True) if everywhere else (None, False))


def test_each_roles_plan_field_by_field(raw_with):
    """Two decode replicas (a non-default shape), built here: every field the renderers read."""
    raw = raw_with(
        "roles.decode.replicas", 2, "capacity.instance_count", 6, "capacity.efa_devices", 4,
        "roles.decode.parallelism", {"tp": 16, "attn_dp": 8, "deepep_mode": "low_latency", **DEEPEP_ON},
        "roles.decode.context_length", 65536, "roles.decode.max_running_requests", 256,
    )  # fmt: skip
    d = build(raw).decode
    assert (d.name, d.replicas, d.nodes_per_replica, d.nodes, d.gpus_per_node, d.gpus_per_replica, d.gpus) == ("decode", 2, 2, 4, 8, 16, 32)
    assert (d.tp, d.pp, d.ep, d.attn_cp, d.attn_dp, d.attn_tp) == (16, 1, 16, 1, 8, 2)
    # uccl-ep is SGLang's deepep dispatcher with another library: the flag says deepep, the image is the EFA one.
    assert (d.moe_a2a_backend, d.a2a_backend, d.deepep_mode, d.image) == ("deepep", "uccl-ep", "low_latency", "sglang-efa")
    assert (d.experts_per_gpu, d.ep_spans_nodes, d.cross_node_moe_messages_per_token) == (16, True, 150)
    assert (d.context_length, d.max_running_requests, d.efa_devices_per_node) == (65536, 256, 4)
    assert d.mem_fraction_static == d.memory.mem_fraction_static == d.memory.mem_fraction_derived
    assert d.weights_gb_per_gpu == d.memory.weights_gb
    assert d.kv_budget_gb_per_gpu == d.memory.kv_gb
    assert d.decode_graph_bs == d.memory.decode_graph_bs
    assert d.decode_graph_bs
    assert d.labels == {"pdkit/role": "decode"}
    assert d.taint == {"key": "pdkit/role", "value": "decode", "effect": "NoSchedule"}
    assert d.node_group_name == "glm51-2p2d-decode"
    assert d.settings.max_running_requests == 256


def test_a_custom_node_image_gets_its_own_node_group_name(raw_with):
    """EKS cannot move a node group between a launch template with and without an image id, and CloudFormation
    cannot replace a custom-named group in place: the image source is in the name."""
    p = build(raw_with("ami.source", "custom"))
    assert (p.prefill.node_group_name, p.decode.node_group_name) == ("glm51-2p2d-prefill-custom", "glm51-2p2d-decode-custom")


def test_without_deepep_the_role_runs_sglangs_plain_moe(raw_with):
    d = build(raw_with("roles.decode.parallelism", {"tp": 16, "attn_dp": 16, "moe_a2a_backend": "none", "ep": 16})).decode
    assert (d.moe_a2a_backend, d.a2a_backend, d.deepep_mode, d.image, d.ep) == ("none", "none", None, "sglang-efa", 16)


def test_external_images_come_from_the_profiles_registry_and_are_not_built(raw_with):
    registry = "123456789012.dkr.ecr.eu-south-2.amazonaws.com/mirror"
    images = build(raw_with("images", {"source": "external", "registry": registry})).images
    assert images["sglang-efa"].repository == f"{registry}/sglang-efa"
    assert not any(image.build for image in images.values())


def test_a_custom_node_image_root_volume_is_initialized_at_the_provisioned_rate(raw_with):
    """The custom AMI's root holds the pre-pulled serving image: restored from a snapshot it is read at
    300 MiB/s from the start (EBS volume initialization rate, 100-300 MiB/s) on a gp3 of 300 MiB/s."""
    root = build(raw_with("ami.source", "custom")).gpu_root_volume
    assert (root.size_gib, root.throughput_mibps, root.initialization_mibps) == (200, 300, 300)


def test_the_plan_decides_what_the_renderers_read_from_a_non_default_profile(raw_with):
    """The fields the renderers, stacks and ops read instead of the profile (issue 20): each from a non-default
    value, so a field dropped on the way into the plan (left at None) or a sizing rule turned around fails here,
    not in a template someone re-records. The GPU pod's share is 3/4 of p5en's 192 vCPUs and 2,048 GiB, and its
    /dev/shm 1/8 of the memory (EC2 accelerated-computing instance table)."""
    token_arn = "arn:aws:secretsmanager:eu-south-2:123456789012:secret:hf-token-AbC123"  # noqa: S105 - an ARN, not a secret
    raw = raw_with(
        "serving.host_network", True, "serving.pod_security", "privileged",
        "images.source", "external", "images.registry", "registry.example.com/glm",
        "cluster.log_retention_days", 731, "capacity.duration_hours", 72, "capacity.minimum_serving_hours", 6,
        "observability.alarm_email", "oncall@example.com", "observability.tpot_p99_ms", 55,
        "observability.ttft_p99_ms", 8000, "observability.expert_balancedness_min", 0.5,
        "bench.concurrency", [2, 8], "serving.router.replicas", 3,
        "model.revision", "0123abc", "model.hf_token_secret_arn", token_arn,
        "cluster.endpoint_access", "public_and_private", "cluster.public_access_cidrs", ["198.51.100.0/24"],
        "cluster.admin_principal_arns", ["arn:aws:iam::123456789012:role/ops"],
    )  # fmt: skip
    p = plan.build(profile_files.parse(raw, source="alt.yaml"), profile_path="config/alt.yaml")
    assert (p.host_network, p.image_source, p.versions_file) == (True, "external", "containers/versions.yaml")
    assert (p.log_retention_days, p.block_duration_hours, p.minimum_serving_hours) == (731, 72, 6)
    assert p.alarms == plan.Alarms("oncall@example.com", 55, 8000, 0.5)
    assert p.bench.concurrency == (2, 8)
    assert p.router.replicas == 3
    assert (p.weights.revision, p.weights.hf_token_secret_arn) == ("0123abc", token_arn)
    assert p.gpu_pod == plan.GpuPod(cpu=144, memory_mib=1_572_864, shm_mib=262_144)
    assert p.cluster_access == plan.ClusterAccess("public_and_private", ("198.51.100.0/24",), ("arn:aws:iam::123456789012:role/ops",))
    assert (p.kv_transfer, p.runs_mooncake) == ("mooncake", True)
