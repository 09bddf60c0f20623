"""`pdkit nodes up` places the GPU nodes from the instance topology before it restores serving, as the block
lifecycle function does at delivery, and never fails because of placement. EC2 and EKS are botocore Stubbers;
the Kubernetes side is a fake that records Node labels and DisaggregatedSet scales in call order."""

from __future__ import annotations

from pdkit.cli.main import main
from pdkit.model.placement import PLACED_ROLE_LABEL
from tests.fixtures.cmd_support import instance, instances_page, real_profile, stub_marked, stub_reservation

pytest_plugins = ["tests.fixtures.cmd_fixtures"]

CLUSTER = "glm51-2p2d"
GROUPS = {"prefill": "glm51-2p2d-prefill", "decode": "glm51-2p2d-decode"}
# Each decode-group instance shares its bottom network node with a prefill-group instance.
PATHS = {
    "i-0d1": ["nn-top", "nn-mid-1", "nn-bottom-1"],
    "i-0p1": ["nn-top", "nn-mid-1", "nn-bottom-1"],
    "i-0d2": ["nn-top", "nn-mid-2", "nn-bottom-2"],
    "i-0p2": ["nn-top", "nn-mid-2", "nn-bottom-2"],
}


def _group_of(instance_id: str) -> str:
    return GROUPS["decode" if instance_id[3] == "d" else "prefill"]


class FakeCluster:
    """`pdkit.ops.kube.Kube` as `nodes up` uses it: GPU nodes that have joined, Node labels, the roles' replicas."""

    def __init__(self, events: list[str], joined: list[str]) -> None:
        self.events = events
        self.joined = joined

    def gpu_nodes(self):
        from pdkit.ops import kube

        return [
            kube.Node(name=f"ip-{i}", role=_group_of(i).rsplit("-", 1)[-1], ready=True, gpus=8, efa=16, instance_id=i) for i in self.joined
        ]

    def label_node(self, name: str, labels: dict[str, str]) -> None:
        self.events.append(f"label {name} {labels[PLACED_ROLE_LABEL]}")

    def scale_roles(self, namespace: str, name: str, replicas: dict[str, int]) -> bool:
        self.events.append("ds " + ",".join(f"{role}={count}" for role, count in replicas.items()))
        return True


def _scaled_up(aws) -> None:
    """The block is active, both groups go 0 -> 2, EKS applies it and the instances run."""
    stub_reservation(aws)
    stub_marked(aws)
    for group in GROUPS.values():
        aws("eks").add_response(
            "describe_nodegroup",
            {"nodegroup": {"nodegroupName": group, "scalingConfig": {"minSize": 0, "maxSize": 2, "desiredSize": 0}}},
            {"clusterName": CLUSTER, "nodegroupName": group},
        )
        aws("eks").add_response(
            "update_nodegroup_config",
            {"update": {"id": f"u-{group}", "status": "InProgress"}},
            {"clusterName": CLUSTER, "nodegroupName": group, "scalingConfig": {"minSize": 0, "maxSize": 2, "desiredSize": 2}},
        )
    for group in GROUPS.values():
        aws("eks").add_response(
            "describe_update",
            {"update": {"id": f"u-{group}", "status": "Successful"}},
            {"name": CLUSTER, "updateId": f"u-{group}", "nodegroupName": group},
        )
    for group in GROUPS.values():
        running = [instance(i, group) for i in PATHS if _group_of(i) == group]
        aws("ec2").add_response("describe_instances", instances_page(*running), {"Filters": _live_filters(group)})


def _live_filters(group: str) -> list[dict[str, object]]:
    return [
        {"Name": "tag:eks:cluster-name", "Values": [CLUSTER]},
        {"Name": "tag:eks:nodegroup-name", "Values": [group]},
        {"Name": "instance-state-name", "Values": ["pending", "running", "stopping", "shutting-down"]},
    ]


def _topology(aws) -> None:
    everyone = [instance(i, _group_of(i)) for i in PATHS]
    filters = [
        {"Name": "tag:eks:cluster-name", "Values": [CLUSTER]},
        {"Name": "tag:eks:nodegroup-name", "Values": list(GROUPS.values())},
        {"Name": "instance-state-name", "Values": ["pending", "running"]},
    ]
    aws("ec2").add_response("describe_instances", instances_page(*everyone), {"Filters": filters})
    found = sorted(PATHS, key=lambda i: ("prefill" in _group_of(i), i))
    aws("ec2").add_response(
        "describe_instance_topology",
        {"Instances": [{"InstanceId": i, "InstanceType": "p5en.48xlarge", "NetworkNodes": PATHS[i]} for i in found]},
        {"InstanceIds": found},
    )


def test_up_labels_the_nodes_from_the_topology_before_restoring_serving(aws, tmp_path, monkeypatch, capsys):
    """A preferred node affinity is weighed only when the scheduler places a pod
    (https://kubernetes.io/docs/concepts/scheduling-eviction/assign-pod-node/#node-affinity): the placed-role
    labels go on first, then the DisaggregatedSet gets its replicas. Instances under one bottom network node are
    the closest (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/how-ec2-instance-topology-works.html)."""
    from pdkit.ops import kube

    events: list[str] = []
    monkeypatch.setattr(kube, "connect", lambda context: FakeCluster(events, list(PATHS)))
    _scaled_up(aws)
    _topology(aws)
    assert main(["nodes", "up", "--profile", real_profile(tmp_path)]) == 0
    assert events == [
        "label ip-i-0d2 prefill",
        "label ip-i-0p2 prefill",
        "label ip-i-0d1 decode",
        "label ip-i-0p1 decode",
        "ds prefill=1,decode=1",
    ]
    out = capsys.readouterr().out
    assert "Placement from the topology: prefill: i-0d2, i-0p2; decode: i-0d1, i-0p1" in out


def test_nodes_that_never_join_get_a_warning_and_serving_anyway(aws, tmp_path, monkeypatch, capsys):
    """The join wait is bounded (nodes.JOIN_POLLS); then the command restores serving unlabelled and exits 0."""
    from pdkit.ops import kube, nodes

    events: list[str] = []
    naps: list[float] = []
    monkeypatch.setattr(nodes, "sleep", naps.append)
    monkeypatch.setattr(kube, "connect", lambda context: FakeCluster(events, ["i-0d1", "i-0d2", "i-0p1"]))
    _scaled_up(aws)
    assert main(["nodes", "up", "--profile", real_profile(tmp_path)]) == 0
    assert events == ["ds prefill=1,decode=1"]
    assert len(naps) == nodes.JOIN_POLLS - 1
    out = " ".join(capsys.readouterr().out.split())
    assert "WARN: 3 of 4 GPU nodes joined Kubernetes in time: no placement" in out
    assert "pdkit topology --assign" in out


def test_a_refused_topology_call_warns_and_still_restores_serving(aws, tmp_path, monkeypatch, capsys):
    """EC2 refuses DescribeInstanceTopology without ec2:DescribeInstanceTopology (EC2 User Guide, instance topology
    prerequisites): a WARN, no label, serving restored, exit 0."""
    from pdkit.ops import kube

    events: list[str] = []
    monkeypatch.setattr(kube, "connect", lambda context: FakeCluster(events, list(PATHS)))
    _scaled_up(aws)
    everyone = [instance(i, _group_of(i)) for i in PATHS]
    aws("ec2").add_response("describe_instances", instances_page(*everyone))
    aws("ec2").add_client_error(
        "describe_instance_topology", "UnauthorizedOperation", "You are not authorized to perform this operation.", 403
    )
    assert main(["nodes", "up", "--profile", real_profile(tmp_path)]) == 0
    assert events == ["ds prefill=1,decode=1"]
    assert "WARN: placement not applied" in capsys.readouterr().out
