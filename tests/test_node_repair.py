"""EKS node auto repair on the GPU node groups (issue 25, item 5): throttled for 2-node groups and preferring
Reboot where a reboot clears the condition, because a terminated Capacity Block instance cannot be replaced for
several minutes. The decision is the plan's (pdkit/model/plan.py GPU_NODE_REPAIR), the capacity stack renders it on
AWS::EKS::Nodegroup NodeRepairConfig (aws-cdk-lib's L1 CfnNodegroup.NodeRepairConfigProperty; EKS API
NodeRepairConfig / NodeRepairConfigOverrides), runbook 01 explains it.

Sources, copied into the tables below:
- https://docs.aws.amazon.com/eks/latest/userguide/node-repair.html (awsdocs/amazon-eks-user-guide
  latest/ug/nodes/node-repair.adoc): repairs stop by default only when "the node group has more than five nodes and
  more than 20% of the nodes in the node group are unhealthy"; repair after 10m for AcceleratedHardwareReady,
  30m for ContainerRuntimeReady, KernelReady, NetworkingReady, StorageReady, Ready; Reboot only on managed node groups.
- https://docs.aws.amazon.com/eks/latest/userguide/node-health-nma.html (latest/ug/nodes/node-health-nma.adoc): the
  conditions the node monitoring agent sets and their default repair action.
- https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-launch.html: "When you stop or terminate an
  instance in a Capacity Block, it takes several minutes to clean up your instance before you can launch another
  instance to replace it."
"""

from __future__ import annotations

from pathlib import Path

from pdkit.model.plan import GPU_NODE_REPAIR

ROOT = Path(__file__).resolve().parent.parent

# node-health-nma.adoc: (condition, reason) -> the default repair action EKS takes, for the Conditions (not Events).
DEFAULT_ACTION = {
    ("AcceleratedHardwareReady", "NvidiaXID13Error"): "Reboot",
    ("AcceleratedHardwareReady", "NvidiaXID31Error"): "Reboot",
    ("AcceleratedHardwareReady", "NvidiaXID48Error"): "Reboot",
    ("AcceleratedHardwareReady", "NvidiaXID63Error"): "Reboot",
    ("AcceleratedHardwareReady", "NvidiaXID64Error"): "Reboot",
    ("AcceleratedHardwareReady", "NvidiaXID74Error"): "Replace",
    ("AcceleratedHardwareReady", "NvidiaXID79Error"): "Replace",
    ("AcceleratedHardwareReady", "NvidiaXID94Error"): "Reboot",
    ("AcceleratedHardwareReady", "NvidiaXID95Error"): "Reboot",
    ("AcceleratedHardwareReady", "NvidiaXID119Error"): "Replace",
    ("AcceleratedHardwareReady", "NvidiaXID120Error"): "Replace",
    ("AcceleratedHardwareReady", "NvidiaXID121Error"): "Replace",
    ("AcceleratedHardwareReady", "NvidiaXID140Error"): "Replace",
    ("AcceleratedHardwareReady", "NvidiaDoubleBitError"): "Replace",
    ("AcceleratedHardwareReady", "NvidiaNVLinkError"): "Replace",
    ("ContainerRuntimeReady", "PodStuckTerminating"): "Replace",
    ("KernelReady", "ForkFailedOutOfPIDs"): "Replace",
    ("NetworkingReady", "IPAMDNotReady"): "Replace",
    ("NetworkingReady", "IPAMDNotRunning"): "Replace",
    ("NetworkingReady", "InterfaceNotRunning"): "Replace",
    ("NetworkingReady", "InterfaceNotUp"): "Replace",
    ("NetworkingReady", "MissingLoopbackInterface"): "Replace",
}
# node-repair.adoc: "Repair after" per condition.
REPAIR_AFTER_MINUTES = {
    "AcceleratedHardwareReady": 10,
    "ContainerRuntimeReady": 30,
    "KernelReady": 30,
    "NetworkingReady": 30,
    "StorageReady": 30,
}
# Faults of the hardware itself: a reboot comes back on the same broken part, so EKS's Replace stays.
HARDWARE = {
    "NvidiaXID74Error",
    "NvidiaXID79Error",
    "NvidiaXID140Error",
    "NvidiaDoubleBitError",
    "NvidiaNVLinkError",
    "InterfaceNotRunning",
    "InterfaceNotUp",
}


def test_repairs_go_one_node_at_a_time_and_stop_past_one_unhealthy_node():
    """EKS's default threshold never applies to a group of five nodes or fewer: left alone, a 2-node group could
    have both nodes replaced at once, each gone for minutes of the paid block. b561709 set only `enabled`."""
    assert GPU_NODE_REPAIR.max_parallel_nodes == 1
    assert GPU_NODE_REPAIR.max_unhealthy_nodes == 1


def test_every_override_turns_a_documented_replace_into_a_reboot():
    """No override repeats a default, none names a condition the agent does not report, none chooses Replace."""
    for o in GPU_NODE_REPAIR.overrides:
        assert DEFAULT_ACTION[(o.condition, o.reason)] == "Replace", o
        assert o.action == "Reboot", o
        assert o.why, o


def test_hardware_faults_keep_their_replacement():
    assert not {o.reason for o in GPU_NODE_REPAIR.overrides} & HARDWARE


def test_an_override_waits_as_long_as_eks_does_before_it_acts():
    """An override must set every field; the wait is EKS's own for the condition, so a transient fault is not rebooted sooner."""
    for o in GPU_NODE_REPAIR.overrides:
        assert o.wait_minutes == REPAIR_AFTER_MINUTES[o.condition], o


def test_every_gpu_node_group_carries_the_plans_repair_config(kit):
    """The CloudFormation rendering, field for field (AWS::EKS::Nodegroup NodeRepairConfig)."""
    groups = [r["Properties"] for r in kit.template_json("capacity")["Resources"].values() if r["Type"] == "AWS::EKS::Nodegroup"]
    assert len(groups) == len(kit.plan.roles)
    want = {
        "Enabled": True,
        "MaxParallelNodesRepairedCount": 1,
        "MaxUnhealthyNodeThresholdCount": 1,
        "NodeRepairConfigOverrides": [
            {
                "NodeMonitoringCondition": o.condition,
                "NodeUnhealthyReason": o.reason,
                "MinRepairWaitTimeMins": o.wait_minutes,
                "RepairAction": o.action,
            }
            for o in GPU_NODE_REPAIR.overrides
        ],
    }
    for group in groups:
        assert group["NodeRepairConfig"] == want


def test_runbook_01_states_the_choice_and_each_override():
    text = (ROOT / "runbooks" / "01-cluster.md").read_text()
    assert "## Node auto repair" in text
    for needle in ("maxParallelNodesRepairedCount", "maxUnhealthyNodeThresholdCount", "several minutes", "more than five nodes"):
        assert needle in text, needle
    for o in GPU_NODE_REPAIR.overrides:
        assert o.reason in text, o.reason
