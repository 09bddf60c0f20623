"""`pdkit topology`: GPU nodes found by their node-group tags, grouped by bottom network node, decode placement checked."""

from __future__ import annotations

import json

import pytest

from pdkit.cli.main import main
from pdkit.model.topology import GpuNode, network_nodes_between
from pdkit.ops import kube
from tests.fixtures.cmd_support import FakeCore, instance, instances_page, k8s_node, real_profile

pytest_plugins = ["tests.fixtures.cmd_fixtures"]

FILTERS = [
    {"Name": "tag:eks:cluster-name", "Values": ["glm51-2p2d"]},
    {"Name": "tag:eks:nodegroup-name", "Values": ["glm51-2p2d-prefill", "glm51-2p2d-decode"]},
    {"Name": "instance-state-name", "Values": ["pending", "running"]},
]
NODES = {
    "i-0p1": "glm51-2p2d-prefill",
    "i-0p2": "glm51-2p2d-prefill",
    "i-0d1": "glm51-2p2d-decode",
    "i-0d2": "glm51-2p2d-decode",
}


def stub_nodes(aws, paths: dict[str, list[str]], *, cr_of: dict[str, str | None] | None = None) -> None:
    cr_of = cr_of or {}
    ec2 = aws("ec2")
    items = [instance(i, group, **({"cr": cr_of[i]} if i in cr_of else {})) for i, group in NODES.items()]
    # Two pages, as DescribeInstances paginates.
    ec2.add_response("describe_instances", instances_page(*items[:2], next_page="p2"), {"Filters": FILTERS})
    ec2.add_response("describe_instances", instances_page(*items[2:]), {"Filters": FILTERS, "NextToken": "p2"})
    ids = ["i-0d1", "i-0d2", "i-0p1", "i-0p2"]  # the kit sorts by role, decode first
    ec2.add_response(
        "describe_instance_topology",
        {
            "Instances": [
                {"InstanceId": i, "InstanceType": "p5en.48xlarge", "NetworkNodes": paths[i], "AvailabilityZone": "eu-south-2a"}
                for i in ids
                if paths.get(i)
            ]
        },
        {"InstanceIds": ids},
    )


TOGETHER = {
    "i-0d1": ["nn-a", "nn-b", "nn-c"],
    "i-0d2": ["nn-a", "nn-b", "nn-c"],
    "i-0p1": ["nn-a", "nn-b", "nn-d"],
    "i-0p2": ["nn-a", "nn-e", "nn-f"],
}


def test_groups_by_bottom_node_and_reports_network_nodes_between(aws, tmp_path, capsys):
    stub_nodes(aws, TOGETHER)
    assert main(["topology", "--profile", real_profile(tmp_path), "--output", "json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["groups_by_bottom_network_node"]["nn-c"] == ["i-0d1", "i-0d2"]
    assert data["network_nodes_between"]["i-0d1"]["i-0d2"] == 1
    assert data["network_nodes_between"]["i-0d1"]["i-0p1"] == 3
    assert data["network_nodes_between"]["i-0p1"]["i-0p2"] == 5
    assert data["decode_shares_bottom_network_node"] is True
    assert data["warnings"] == []
    assert {n["instance_id"]: n["role"] for n in data["nodes"]} == {
        "i-0d1": "decode",
        "i-0d2": "decode",
        "i-0p1": "prefill",
        "i-0p2": "prefill",
    }
    # Ties keep the node groups' roles, so a block EC2 placed well is not relabelled.
    assert data["placement"]["roles"]["decode"] == ["i-0d1", "i-0d2"]
    assert data["placement"]["moved_from_node_group_role"] == []


def test_text_output_says_decode_is_together(aws, tmp_path, capsys):
    stub_nodes(aws, TOGETHER)
    assert main(["topology", "--profile", real_profile(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "Decode nodes share their bottom network node" in out
    assert "WARN" not in out


def test_warns_when_decode_nodes_do_not_share_the_lowest_layer(aws, tmp_path, capsys):
    stub_nodes(aws, TOGETHER | {"i-0d2": ["nn-a", "nn-e", "nn-f"]})
    assert main(["topology", "--profile", real_profile(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "WARN: decode nodes do not share the lowest network layer" in out
    assert "up to 5 network nodes apart" in out
    assert "EP16" in out


def test_warns_about_a_node_outside_the_block_and_missing_topology(aws, tmp_path, capsys):
    stub_nodes(aws, {k: v for k, v in TOGETHER.items() if k != "i-0p2"}, cr_of={"i-0p1": None})
    assert main(["topology", "--profile", real_profile(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "i-0p1 (prefill) runs on no reservation, not the profile's cr-0123456789abcdef0" in out
    assert "EC2 reports no topology yet for i-0p2" in out


def test_no_gpu_nodes_says_what_to_do(aws, tmp_path, capsys):
    aws("ec2").add_response("describe_instances", instances_page(), {"Filters": FILTERS})
    assert main(["topology", "--profile", real_profile(tmp_path)]) == 2
    assert "pdkit nodes up" in capsys.readouterr().err


def test_throttling_is_one_line(aws, tmp_path, capsys):
    aws("ec2").add_client_error("describe_instances", "RequestLimitExceeded", "Request limit exceeded.", 503)
    assert main(["topology", "--profile", real_profile(tmp_path)]) == 2
    assert "throttled ec2:DescribeInstances" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("a", "b", "expected"),
    [
        (("x", "y", "z"), ("x", "y", "z"), 1),
        (("x", "y", "z"), ("x", "y", "w"), 3),
        (("x", "y", "z"), ("x", "v", "w"), 5),
        (("x", "y", "z"), ("u", "v", "w"), 7),
        (("x", "y", "z"), (), None),
    ],
)
def test_network_nodes_between_two_instances(a, b, expected):
    def node(path):
        return GpuNode("i", "decode", "g", "running", "az", "cr", path)

    assert network_nodes_between(node(a), node(b)) == expected


# --- role assignment from the topology (pdkit/model/placement.py) ---------------------------------------------

# EC2 gave the decode node group one instance under nn-c and one under nn-f, while a prefill instance
# shares nn-c with decode: the per-role node groups alone cannot put decode together.
SPLIT = {
    "i-0d1": ["nn-a", "nn-b", "nn-c"],
    "i-0d2": ["nn-a", "nn-e", "nn-f"],
    "i-0p1": ["nn-a", "nn-b", "nn-c"],
    "i-0p2": ["nn-a", "nn-e", "nn-g"],
}
# No two instances share a bottom node; the closest pair (d1, p1) meets one layer up.
APART = {
    "i-0d1": ["nn-a", "nn-b", "nn-c"],
    "i-0d2": ["nn-x", "nn-y", "nn-z"],
    "i-0p1": ["nn-a", "nn-b", "nn-d"],
    "i-0p2": ["nn-u", "nn-v", "nn-w"],
}


def test_assignment_gives_decode_the_pair_that_shares_a_bottom_node(aws, tmp_path, capsys):
    """Instances under the same bottom network node are the closest (EC2 User Guide, How instance topology works:
    https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/how-ec2-instance-topology-works.html); the pair under nn-c
    becomes decode even though EC2 put one of them in the prefill node group."""
    stub_nodes(aws, SPLIT)
    assert main(["topology", "--profile", real_profile(tmp_path), "--output", "json"]) == 0
    chosen = json.loads(capsys.readouterr().out)["placement"]
    assert chosen["roles"] == {"prefill": ["i-0d2", "i-0p2"], "decode": ["i-0d1", "i-0p1"]}
    assert chosen["decode_shares_bottom_network_node"] is True
    assert chosen["moved_from_node_group_role"] == ["i-0d2", "i-0p1"]
    assert chosen["warnings"] == []


def test_a_block_with_no_shared_bottom_node_still_assigns_every_node_and_warns(aws, tmp_path, capsys):
    """When DescribeInstanceTopology shows no two instances under one bottom node, decode gets the closest pair
    (3 network nodes apart: one layer up) and every instance keeps a role, so no pod waits for a node that cannot exist."""
    stub_nodes(aws, APART)
    assert main(["topology", "--profile", real_profile(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "WARN: no 2 instances of the block share a bottom network node: decode gets the closest 2 (3 network nodes apart)" in out
    assert "Placement from the topology: prefill: i-0d2, i-0p2; decode: i-0d1, i-0p1" in out
    assert "pdkit topology --assign" in out


def test_assign_labels_each_node_with_its_placed_role(aws, tmp_path, capsys, monkeypatch):
    """`--assign` merge-patches pdkit/placed-role onto each Node, found by its providerID (aws:///<az>/<instance id>)."""
    core = FakeCore(
        [
            k8s_node(f"ip-{i}", role, instance_id=i)
            for i, role in (("i-0d1", "decode"), ("i-0d2", "decode"), ("i-0p1", "prefill"), ("i-0p2", "prefill"))
        ]
    )
    monkeypatch.setattr(kube, "connect", lambda context: kube.Kube(core=core, apps=None, custom=None))
    stub_nodes(aws, SPLIT)
    assert main(["topology", "--profile", real_profile(tmp_path), "--assign"]) == 0
    assert sorted(core.patches) == sorted(
        (f"ip-{i}", {"metadata": {"labels": {"pdkit/placed-role": role}}})
        for i, role in (("i-0d1", "decode"), ("i-0p1", "decode"), ("i-0d2", "prefill"), ("i-0p2", "prefill"))
    )
    assert "pdkit status" in capsys.readouterr().out


def test_assign_before_the_nodes_register_is_one_line(aws, tmp_path, capsys, monkeypatch):
    """A Node object exists only once the kubelet registers; labelling half the block would split the roles."""
    core = FakeCore([k8s_node("ip-1", "decode", instance_id="i-0d1")])
    monkeypatch.setattr(kube, "connect", lambda context: kube.Kube(core=core, apps=None, custom=None))
    stub_nodes(aws, SPLIT)
    assert main(["topology", "--profile", real_profile(tmp_path), "--assign"]) == 2
    err = capsys.readouterr().err
    assert "not registered in Kubernetes yet" in err
    assert "Traceback" not in err
    assert core.patches == []


def test_before_every_node_has_launched_roles_stay_with_the_node_groups(tmp_path):
    """DescribeInstances lists only launched instances; assigning roles from three of four would hand decode a node
    that prefill's last instance might beat, so the node groups' roles stand until the whole block is there."""
    from pdkit.cli.context import load_plan
    from pdkit.model.placement import assign

    plan = load_plan(real_profile(tmp_path))
    nodes = [
        GpuNode("i-0d1", "decode", "g-d", "running", "az", "cr", ("nn-a", "nn-b", "nn-c")),
        GpuNode("i-0d2", "decode", "g-d", "running", "az", "cr", ("nn-a", "nn-e", "nn-f")),
        GpuNode("i-0p1", "prefill", "g-p", "running", "az", "cr", ("nn-a", "nn-b", "nn-c")),
    ]
    chosen = assign(plan, nodes)
    assert chosen.roles == {"prefill": ["i-0p1"], "decode": ["i-0d1", "i-0d2"]}
    assert chosen.moved == []
    assert chosen.warnings == ["3 of 4 planned GPU nodes found: roles stay with the node groups until all have joined"]
