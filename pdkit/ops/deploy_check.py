"""The check `make deploy` runs before `cdk deploy`: no rolling node update inside a Capacity Block.

A new version of a GPU launch template, or a changed or renamed GPU node group, makes EKS update the
node group by launching new nodes before it drains the old ones (default `updateConfig`: one node
unavailable at a time, new instances first), and a Capacity Block has no spare instance to launch.
EKS asks for the node group's desired size to be 0 when a Capacity Block node group is upgraded
(https://docs.aws.amazon.com/eks/latest/userguide/capacity-blocks-mng.html,
https://docs.aws.amazon.com/eks/latest/userguide/managed-node-update-behavior.html).

What changes is read by comparing the capacity stack's template that `cdk synth` wrote to cdk.out with
the deployed one (cloudformation:GetTemplate, stage Original: the template exactly as CDK submitted it).
A change set would say the same for the node groups but needs the assets published first, which is
`cdk deploy`'s own job. The launch template's `LaunchTemplateData` is compared as a whole: CloudFormation
makes a new version for any change in it, and the node groups follow `LatestVersionNumber`. The one input
a template comparison cannot see is an SSM-typed parameter (the promoted custom AMI): CloudFormation
resolves it again at every update, so its deployed value (DescribeStacks `ResolvedValue`) is compared with
the parameter's value now (ssm:GetParameter).

An on-demand rehearsal (capacity.market: on-demand) is exempt: its node groups are ON_DEMAND, and a rolling update
there is EKS's ordinary one, new instances launched on demand first, then the old ones drained
(https://docs.aws.amazon.com/eks/latest/userguide/managed-node-update-behavior.html), so nothing is refused and
no node group size is read.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pdkit.errors import KitError
from pdkit.model.plan import PURCHASE_STACK, Plan
from pdkit.ops import capacity
from pdkit.ops.aws_errors import error_code, stack_missing

LAUNCH_TEMPLATE = "AWS::EC2::LaunchTemplate"
NODE_GROUP = "AWS::EKS::Nodegroup"
# Node group properties EKS applies with UpdateNodegroupConfig, without touching the instances (AWS::EKS::Nodegroup
# reference: "Update requires: No interruption" and not a version update). Any other property change is a version
# update (LaunchTemplate, ReleaseVersion, Version) or a replacement (NodegroupName, AmiType, Subnets, ...).
CONFIG_ONLY = frozenset({"Labels", "Taints", "Tags", "ScalingConfig", "UpdateConfig", "NodeRepairConfig", "ForceUpdateEnabled"})
SSM_PARAMETER_TYPE = "AWS::SSM::Parameter::Value<"
# The Capacity Block bought by `cdk deploy` (capacity.purchase, stacks/capacity_purchase.py): in the purchase
# stack (stacks/purchase_stack.py); a capacity stack deployed by an earlier kit may still hold one.
PURCHASE = "Custom::CapacityBlockPurchase"


@dataclass(frozen=True)
class Verdict:
    changes: tuple[str, ...]  # what would roll or replace GPU nodes, one phrase each
    running: dict[str, int]  # deployed GPU node group -> desired size
    on_demand: bool = False  # the groups can surge: EKS launches the replacements on demand
    # The block a capacity stack deployed by a kit before issue 25 bought with its own purchase resource (tagged with
    # a hash of that stack's id, which the purchase stack's tag does not match): the cr- id, or "" when unknown.
    earlier_purchase: str | None = None

    @property
    def refused(self) -> bool:
        return bool(self.changes) and any(self.running.values()) and not self.on_demand


def synthesized_template(cdk_out: Path, stack_name: str) -> dict[str, Any]:
    """The template `cdk synth` wrote for `stack_name`, found through the cloud assembly's manifest."""
    manifest_path = cdk_out / "manifest.json"
    try:
        artifacts = json.loads(manifest_path.read_text())["artifacts"]
    except (OSError, ValueError, KeyError):
        raise KitError(f"no cloud assembly in {cdk_out}. Fix: run `make synth` (make deploy does it first)") from None
    for artifact in artifacts.values():
        props = artifact.get("properties", {})
        if artifact.get("type") == "aws:cloudformation:stack" and props.get("stackName", artifact.get("displayName")) == stack_name:
            template: dict[str, Any] = json.loads((cdk_out / props["templateFile"]).read_text())
            return template
    raise KitError(f"{cdk_out} has no stack {stack_name}: it was synthesized for another profile. Fix: make synth PROFILE=<this profile>")


def deployed_template(cloudformation: Any, stack_name: str) -> dict[str, Any] | None:
    """The template as last submitted, or None when the stack does not exist yet (a first deploy rolls nothing)."""
    try:
        body = cloudformation.get_template(StackName=stack_name, TemplateStage="Original")["TemplateBody"]
    except Exception as err:
        if stack_missing(err):
            return None
        raise
    # botocore decodes a JSON body into a mapping; a YAML body would stay a string (CDK always writes JSON).
    return dict(body) if isinstance(body, Mapping) else dict(json.loads(body))


def template_changes(
    deployed: Mapping[str, Any], synthesized: Mapping[str, Any], *, bought: str | None = None, purchase_stack: str | None = None
) -> list[str]:
    """What in the synthesized template makes EKS roll or replace a deployed GPU node group. `bought`: the bought id
    (the ReservationId output of the purchase stack, `purchase_stack`, or of a capacity stack that held the purchase)."""
    changes = []
    before, after = _resources(deployed, LAUNCH_TEMPLATE), _resources(synthesized, LAUNCH_TEMPLATE)
    purchases = _resources(deployed, PURCHASE)
    for logical_id in sorted(before.keys() & after.keys()):
        old, new = before[logical_id].get("LaunchTemplateData", {}), after[logical_id].get("LaunchTemplateData", {})
        if old == new:
            continue
        if bought and _substituted(old, lambda v: bought if _names_bought(v, purchases, purchase_stack) else v) == new:
            # The same block, now named by its literal id. CloudFormation documents no rule that a changed property
            # expression resolving to the same value skips the update, and AWS::EC2::LaunchTemplate makes a new version
            # on every update of LaunchTemplateData; until that is shown, count it as a new version.
            changes.append(
                f"launch template {logical_id} names the bought block {bought} by its literal id instead of the purchase "
                "resource's attribute (same block; counted as a new version: runbooks/00-capacity-block.md, "
                '"From a bought block to capacity.reservation_id")'
            )
            continue
        fields = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
        changes.append(f"launch template {logical_id} gets a new version ({', '.join(fields)} changed)")
    old_groups, new_groups = _node_groups(deployed), _node_groups(synthesized)
    for name in sorted(old_groups):
        if name not in new_groups:
            changes.append(f"node group {name} is replaced by {', '.join(sorted(new_groups)) or 'nothing'}")
            continue
        old, new = old_groups[name], new_groups[name]
        fields = sorted(k for k in old.keys() | new.keys() if k not in CONFIG_ONLY and old.get(k) != new.get(k))
        if fields:
            changes.append(f"node group {name} is updated or replaced ({', '.join(fields)} changed)")
    return changes


def ssm_parameters_in_launch_templates(template: Mapping[str, Any]) -> dict[str, str]:
    """Template parameter -> SSM parameter name, for SSM-typed parameters a launch template references."""
    params = template.get("Parameters", {})
    typed = {key: p.get("Default", "") for key, p in params.items() if str(p.get("Type", "")).startswith(SSM_PARAMETER_TYPE)}
    used = {ref for lt in _resources(template, LAUNCH_TEMPLATE).values() for ref in _refs(lt)}
    return {key: name for key, name in typed.items() if key in used and name}


def resolved_parameters(cloudformation: Any, stack_name: str) -> dict[str, str]:
    stacks = cloudformation.describe_stacks(StackName=stack_name)["Stacks"]
    return {p["ParameterKey"]: p["ResolvedValue"] for p in stacks[0].get("Parameters", []) if "ResolvedValue" in p}


def parameter_changes(cloudformation: Any, ssm: Any, stack_name: str, synthesized: Mapping[str, Any]) -> list[str]:
    """SSM-typed launch-template inputs (the promoted AMI) whose value moved since the last deploy."""
    wanted = ssm_parameters_in_launch_templates(synthesized)
    if not wanted:
        return []
    deployed = resolved_parameters(cloudformation, stack_name)
    changes = []
    for key, name in sorted(wanted.items()):
        try:
            now = ssm.get_parameter(Name=name)["Parameter"]["Value"]
        except Exception as err:
            if error_code(err) != "ParameterNotFound":
                raise
            raise KitError(
                f"the launch template reads {name}, which does not exist in this region. "
                "Fix: build and promote a node image first (runbooks/05-node-image.md), or set ami.source: eks-optimized"
            ) from None
        before = deployed.get(key)
        if before is not None and before != now:
            changes.append(f"{name} moved from {before} to {now}: the launch template gets a new version")
    return changes


def desired_sizes(eks: Any, cluster_name: str, groups: list[str]) -> dict[str, int]:
    """Desired size of each deployed GPU node group (a group deleted by hand counts as 0)."""
    sizes = {}
    for name in groups:
        try:
            group = eks.describe_nodegroup(clusterName=cluster_name, nodegroupName=name)["nodegroup"]
        except Exception as err:
            if error_code(err) != "ResourceNotFoundException":
                raise
            sizes[name] = 0
            continue
        sizes[name] = int(group.get("scalingConfig", {}).get("desiredSize", 0))
    return sizes


def check(plan: Plan, *, cdk_out: Path, cloudformation: Any, eks: Any, ssm: Any) -> Verdict | None:
    """The verdict for the capacity stack, or None when it is not deployed yet."""
    stack = plan.stack_names["capacity"]
    synthesized = synthesized_template(cdk_out, stack)
    deployed = deployed_template(cloudformation, stack)
    if deployed is None:
        return None
    changes = template_changes(deployed, synthesized)
    # Is it only the bought block, now named by its id? The deployed stack read it from the purchase stack's output,
    # or (a capacity stack deployed before issue 25) from its own purchase resource.
    held = bool(_resources(deployed, PURCHASE))
    source = stack if held else plan.purchase_stack_name if _reads(deployed, plan.purchase_stack_name) else None
    # With capacity.purchase, a capacity stack that bought its block itself is refused (earlier_purchase_refusal).
    earlier_kit = held and plan.purchase is not None and not _resources(synthesized, PURCHASE)
    bought = capacity.bought_reservation_id(cloudformation, source) if source and (changes or earlier_kit) else None
    if changes and source:
        changes = template_changes(deployed, synthesized, bought=bought, purchase_stack=plan.purchase_stack_name)
    changes += parameter_changes(cloudformation, ssm, stack, synthesized)
    if plan.market == "on-demand":
        return Verdict(changes=tuple(changes), running={}, on_demand=True)
    earlier = (bought or "") if earlier_kit else None
    running = desired_sizes(eks, plan.cluster_name, sorted(_node_groups(deployed))) if changes else {}
    return Verdict(changes=tuple(changes), running=running, earlier_purchase=earlier)


def earlier_purchase_refusal(plan: Plan, block: str, *, profile_ref: str | None) -> KitError:
    """The capacity stack of an earlier kit bought the block itself; the purchase stack would not recognise it (its tag
    is made of the deployment, region and offering, the earlier one of that stack's id) and would find the offering sold."""
    which = block or f"the block in the {plan.stack_names['capacity']} stack's ReservationId output"
    flag = f" --profile {profile_ref}" if profile_ref else ""
    return KitError(
        f"the deployed {plan.stack_names['capacity']} stack bought {which} with the kit's earlier purchase resource; this kit buys in "
        f"{plan.purchase_stack_name}, which would not recognise that block. Nothing was deployed. Fix: put {block or 'that cr- id'} in "
        f"capacity.reservation_id and remove capacity.purchase, then pdkit nodes down{flag} && make deploy && pdkit nodes up{flag} "
        '(runbooks/00-capacity-block.md, "From a bought block to capacity.reservation_id")'
    )


def purchase_pending(plan: Plan, *, cdk_out: Path, cloudformation: Any) -> bool:
    """True when this deploy creates the purchase resource, so CloudFormation will buy the block (or adopt the one a
    rolled-back first create bought): it is in the synthesized purchase stack and not in the deployed one, or that
    stack is not deployed (Update and Delete never buy)."""
    stack = plan.stack_names.get(PURCHASE_STACK)
    if stack is None:
        return False
    if not _resources(synthesized_template(cdk_out, stack), PURCHASE):
        return False
    deployed = deployed_template(cloudformation, stack)
    return deployed is None or not _resources(deployed, PURCHASE)


def refusal(verdict: Verdict, *, profile_ref: str | None) -> KitError:
    flag = f" --profile {profile_ref}" if profile_ref else ""
    make = f" PROFILE={profile_ref}" if profile_ref else ""
    nodes = ", ".join(f"{name} at desired {size}" for name, size in sorted(verdict.running.items()) if size)
    return KitError(
        f"this deploy would roll GPU nodes inside the Capacity Block ({'; '.join(verdict.changes)}) while {nodes}: EKS replaces "
        "nodes by launching new instances first, which a block does not have, and asks for desired size 0 during such updates. "
        f"Fix: pdkit nodes down{flag} && make deploy{make} && pdkit nodes up{flag}"
    )


def _resources(template: Mapping[str, Any], kind: str) -> dict[str, dict[str, Any]]:
    return {key: r.get("Properties", {}) for key, r in template.get("Resources", {}).items() if r.get("Type") == kind}


def _node_groups(template: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """Node groups by name (the kit names each one; the logical id would hide a rename)."""
    return {str(props.get("NodegroupName", key)): props for key, props in _resources(template, NODE_GROUP).items()}


def _names_bought(value: Any, purchases: Mapping[str, Any], purchase_stack: str | None) -> bool:
    """Whether `value` is {"Fn::GetAtt": [<a purchase resource>, "ReservationId"]} or a read of the purchase stack's
    output (Fn::GetStackOutput: the only thing the capacity stack reads from it is the bought id)."""
    if not isinstance(value, dict) or len(value) != 1:
        return False
    att, read = value.get("Fn::GetAtt"), value.get("Fn::GetStackOutput")
    if isinstance(read, dict):
        return purchase_stack is not None and read.get("StackName") == purchase_stack
    return isinstance(att, list) and len(att) == 2 and att[0] in purchases and att[1] == "ReservationId"


def _reads(template: Any, stack_name: str) -> bool:
    """Whether the template reads an output of `stack_name` (Fn::GetStackOutput) anywhere."""
    if isinstance(template, dict):
        read = template.get("Fn::GetStackOutput")
        if isinstance(read, dict) and read.get("StackName") == stack_name:
            return True
        return any(_reads(v, stack_name) for v in template.values())
    if isinstance(template, list):
        return any(_reads(v, stack_name) for v in template)
    return False


def _substituted(value: Any, swap: Any) -> Any:
    """`value` with every node replaced by swap(node) where that changes it, outermost first."""
    swapped = swap(value)
    if swapped is not value:
        return swapped
    if isinstance(value, dict):
        return {k: _substituted(v, swap) for k, v in value.items()}
    if isinstance(value, list):
        return [_substituted(v, swap) for v in value]
    return value


def _refs(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        if isinstance(value.get("Ref"), str):
            yield value["Ref"]
        for item in value.values():
            yield from _refs(item)
    elif isinstance(value, list):
        for item in value:
            yield from _refs(item)
