"""The plan a profile deploys: every entry point that turns a profile into a deployment (`cdk synth`, the
CLI, conformance) builds through here. pdkit.model.plan derives the plan; a rehearsal (`rehearses:`) is then
held to its block profile and runs the block's images. This sits above render, whose serving objects the
comparison needs, so the model never imports a renderer.

A rehearsal: an on-demand profile that runs the block profile's whole path at small scale.

It may differ from the block profile it names (`rehearses:`) in scale and model only. Everything the
block's first hour would otherwise meet for the first time is compared here, as the plans decide it:
the images each role runs, the GPU launch template's shape (EFA interface layout rule, security
groups, user data, placement), the kinds of serving objects, the KV transfer backend and, per role,
the MoE all-to-all backend and its DeepEP mode. Instance-specific counts (EFA devices, GPUs, nodes) and
the parallel layout they allow are scale: on one-GPU nodes EP crosses nodes for both roles, so the
rehearsal runs UCCL-EP over EFA wherever the block does, and more.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from pdkit.errors import KitError, ProfileError, short
from pdkit.model import plan as planning
from pdkit.model import profile_files
from pdkit.model.plan import Plan
from pdkit.model.profile import Profile, Role
from pdkit.render.serving.inputs import ServingInputs
from pdkit.render.serving.manifests import render


def build(profile: Profile, *, profile_path: str | Path = "") -> Plan:
    """The profile's plan; for a rehearsal, checked against its block (RehearsalMismatch lists every difference)."""
    plan = planning.build(profile, profile_path=profile_path)
    if plan.rehearses is None:
        return plan
    try:
        block = load_rehearsed(plan)
        check(plan, block)
        return adopt_block_images(plan, block)
    except ProfileError as err:
        raise err.with_source(str(profile_path)) from None


def load(ref: str | None) -> Plan:
    """The plan of a profile named in config/ or given as a path (None: cdk.json's default)."""
    profile, path = profile_files.load(ref)
    return build(profile, profile_path=path)


class RehearsalMismatch(KitError):
    """A rehearsal that would prove something other than its block: one line per difference."""

    def __init__(self, source: str, lines: list[str]) -> None:
        self.lines = lines
        where = f"{source}: " if source else ""
        super().__init__("\n".join(f"{where}{line}" for line in lines))


def rehearsed_ref(rehearses: str, profile_path: str) -> str:
    """A relative path is relative to the rehearsal's own file; a bare name is a profile in config/."""
    looks_like_path = "/" in rehearses or rehearses.endswith((".yaml", ".yml"))
    if looks_like_path and not Path(rehearses).is_absolute() and profile_path:
        return str(Path(profile_path).parent / rehearses)
    return rehearses


def load_rehearsed(plan: Plan) -> Plan:
    """The plan of the block profile `plan` rehearses."""

    assert plan.rehearses is not None
    profile, path = profile_files.load(rehearsed_ref(plan.rehearses, plan.profile_path))
    return planning.build(profile, profile_path=path)


def _kinds(plan: Plan) -> list[str]:

    inputs = ServingInputs(
        image="image",
        router_image="router",
        weights_bucket="bucket",
        weights_prefix="prefix/",
        host_network=plan.host_network,
    )
    return sorted({str(obj["kind"]) for obj in render(plan, inputs)})


# (field to name in the message, what the plan decided, fix template). A fix names the block's value.
Check = tuple[str, Callable[["Plan"], Any], str]


def _checks(plan: Plan) -> list[Check]:
    checks: list[Check] = [
        ("images.source", lambda p: p.image_source, "use the block profile's images.source: {want}"),
        ("images.versions_file", lambda p: p.versions_file, "use the block profile's images.versions_file: {want}"),
        # The rehearsal pulls the block's images from the block's registry, which is in the block's account.
        ("aws.account", lambda p: p.account, "use the block profile's aws.account: {want} (its registry holds the images)"),
        (
            "images (tags)",
            lambda p: {name: image.tag for name, image in sorted(p.images.items())},
            "build the rehearsal from the same containers/ tree as the block (same image tags)",
        ),
        ("ami.source", lambda p: p.ami_source, "use ami.source: {want} (the GPU node image and its user data)"),
        # Not capacity.placement_group: a block's instances are placed by EC2, an on-demand rehearsal's by its cluster
        # placement group (pdkit/model/plan.py _placement_group), so the two differ on purpose.
        (
            "capacity.efa_devices",
            # The layout rule, not the count: every EFA device the instance has, or a cap.
            lambda p: "all" if p.efa_devices_per_node == p.instance.efa_devices else "capped",
            "remove capacity.efa_devices in both profiles, or cap it in both ({want})",
        ),
        (
            "network interfaces",
            lambda p: sorted({(nic.kind, nic.carries_ips) for nic in p.network_interfaces}),
            "use an instance type whose launch template has the same interface kinds (ENA primary plus EFA-only)",
        ),
        ("serving.kv_transfer", lambda p: p.kv_transfer, "use serving.kv_transfer: {want}"),
        ("serving.host_network", lambda p: p.host_network, "use serving.host_network: {want}"),
        ("serving.pod_security", lambda p: p.pod_security, "use serving.pod_security: {want}"),
        ("serving objects (kinds)", _kinds, "rehearse the same serving object kinds as the block: {want}"),
    ]
    for role in plan.roles:
        at = f"roles.{role}"
        checks += [
            (f"{at}.parallelism.moe_a2a_backend", _role(role, "a2a_backend"), "use moe_a2a_backend: {want}"),
            (f"{at}.parallelism.deepep_mode", _role(role, "deepep_mode"), "use deepep_mode: {want}"),
            (f"{at} image", _role(role, "image"), "use the backend whose image is {want}"),
            (f"{at}.mtp.enabled", _setting(role, lambda r: r.mtp.enabled), "use mtp.enabled: {want}"),
            (f"{at}.security", _setting(role, lambda r: r.security.model_dump()), "use the block role's security: {want}"),
        ]
    return checks


def _role(role: str, attr: str) -> Callable[[Plan], Any]:
    return lambda p: getattr(p.roles[role], attr)


def _setting(role: str, read: Callable[[Role], Any]) -> Callable[[Plan], Any]:
    return lambda p: read(p.roles[role].settings)


def adopt_block_images(rehearsal: Plan, block: Plan) -> Plan:
    """The rehearsal runs the images built for its block, from the block's registry: the same repositories and
    tags (check() has proved the tags equal), pulled across regions when the block's region offers no rehearsal
    instance type. Nodes pull with AmazonEC2ContainerRegistryReadOnly (Resource "*", any region of the account:
    https://docs.aws.amazon.com/aws-managed-policy/latest/reference/AmazonEC2ContainerRegistryReadOnly.html);
    the bytes travel through the NAT gateway and are billed as inter-region transfer on both sides
    (https://aws.amazon.com/blogs/containers/understanding-data-transfer-costs-for-aws-container-services/)."""

    return replace(rehearsal, images=dict(block.images), image_region=block.image_region)


def check(rehearsal: Plan, block: Plan) -> None:
    """Refuse a rehearsal that differs from its block in anything but scale and model."""
    if block.market != "capacity-block":
        raise ProfileError(
            "rehearses",
            rehearsal.rehearses,
            f"{block.name} is itself an on-demand profile",
            "name the capacity-block profile this rehearsal stands in for",
        )
    lines = []
    for field, decided, fix in _checks(rehearsal):
        want, got = decided(block), decided(rehearsal)
        if want != got:
            lines.append(
                f"{field} = {short(got)}: differs from the block profile {block.name} ({short(want)}); "
                f"a rehearsal differs in scale and model only. Fix: {fix.format(want=short(want))}"
            )
    if lines:
        raise RehearsalMismatch(rehearsal.profile_path, lines)
