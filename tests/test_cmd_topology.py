"""`pdkit topology`: GPU nodes found by their node-group tags, grouped by bottom network node, decode placement checked."""

from __future__ import annotations

import json

import pytest

from pdkit.cli import main
from pdkit.topology import GpuNode, network_nodes_between
from tests.fixtures.cmd_support import instance, instances_page, real_profile

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
