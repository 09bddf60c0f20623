"""The block's own placement, with evidence (issue 25, item 6). On `capacity.market: capacity-block` the kit
asks for no placement group: EC2 places a block's instances together ("automatically placed close together inside
EC2 UltraClusters", https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_CapacityBlock.html), AWS
ParallelCluster refuses a placement group with a Capacity Block at error level (aws/aws-parallelcluster#6311) and
stopped suggesting one (#6324), and eksctl#7949 saw a placement group cut a reservation's usable instances. So the
claim is checked where it can be: at delivery, from DescribeInstanceTopology, the seed's own check (one bottom
network node). The topology answers are the AWS CLI's documented example (tests/fixtures/instance_topology.py)."""

from __future__ import annotations

import boto3
import pytest
from botocore.stub import Stubber

from pdkit import deployment
from pdkit.functions import block_lifecycle
from pdkit.model import topology
from pdkit.model.plan import ROLE_LABEL
from pdkit.model.topology import GpuNode
from tests.fixtures import instance_topology


def _client(name):
    return boto3.client(name, region_name="eu-south-2", aws_access_key_id="test", aws_secret_access_key="test")  # noqa: S106


def _no_sleep(seconds):
    raise AssertionError("every node had joined with its topology: nothing to wait for")


def _nodes(answer):
    return [
        GpuNode(
            instance_id=i["InstanceId"],
            role="?",
            node_group="?",
            state="running",
            availability_zone=i["AvailabilityZone"],
            reservation_id=None,
            network_nodes=tuple(i.get("NetworkNodes", ())),
        )
        for i in answer["Instances"]
    ]


def test_instances_under_one_bottom_network_node_are_the_blocks_placement_proven():
    """The documented pair sharing nn-3333333333example: the proof holds and names the node."""
    together, sentence = topology.block_together(_nodes(instance_topology.response(*instance_topology.TOGETHER)))
    assert together is True
    assert sentence == "Block placement: all 2 instances under one bottom network node (nn-3333333333example)."


def test_instances_under_several_bottom_nodes_are_reported_not_hidden():
    """All four documented instances: three bottom nodes. A warning, never a failure (serving still comes back)."""
    together, sentence = topology.block_together(_nodes(instance_topology.response()))
    assert together is False
    assert sentence.startswith("WARN: block placement: the 4 instances sit under 3 bottom network nodes (")
    assert "nn-1235301234example, nn-1311133311example, nn-3333333333example" in sentence


def test_an_instance_not_reported_yet_is_counted_apart():
    """EC2 leaves NetworkNodes empty for an instance that is not `running` yet (API_InstanceTopology)."""
    answer = instance_topology.response(*instance_topology.TOGETHER)
    answer["Instances"].append({"InstanceId": "i-0late", "AvailabilityZone": "us-west-2a"})
    together, sentence = topology.block_together(_nodes(answer))
    assert together is True
    assert "(1 instance(s) without topology yet)" in sentence
    assert topology.block_together(_nodes({"Instances": [{"InstanceId": "i-0late", "AvailabilityZone": "a"}]}))[0] is None


class _Api:
    def __init__(self, nodes):
        self._nodes = nodes

    def nodes(self, selector):
        return self._nodes

    def label_node(self, name, labels):
        pass


@pytest.mark.parametrize(
    ("ids", "words"),
    [
        (instance_topology.TOGETHER, "Block placement: all 2 instances under one bottom network node (nn-3333333333example)."),
        (("i-1111111111example", "i-444444444example"), "WARN: block placement: the 2 instances sit under 2 bottom network nodes"),
    ],
    ids=["together", "apart"],
)
def test_the_delivery_notification_carries_the_proof(ids, words):
    """What the operator reads on the SNS topic at block start says whether the block's own placement held; it
    failed on b561709, whose notification said nothing about it."""
    nodes = [
        {"name": f"ip-{i}", "instance_id": i, "labels": {ROLE_LABEL: role}} for i, role in zip(ids, ("prefill", "decode"), strict=True)
    ]
    ec2 = _client("ec2")
    stub = Stubber(ec2)
    stub.add_response("describe_instance_topology", instance_topology.response(*ids), {"InstanceIds": list(ids)})
    with stub:
        outcome, message = block_lifecycle.place(
            ec2, lambda: _Api(nodes), {"role_label": ROLE_LABEL, "nodes": {"prefill": 1, "decode": 1}}, 60.0, lambda: 0.0, _no_sleep
        )
    assert outcome == "placed"
    assert words in message


def test_the_documented_answers_next_token_is_followed():
    """The example answer carries a NextToken: the lifecycle asks again until it is gone."""
    ec2 = _client("ec2")
    stub = Stubber(ec2)
    ids = [i["InstanceId"] for i in instance_topology.EXAMPLE["Instances"]]
    stub.add_response("describe_instance_topology", instance_topology.EXAMPLE, {"InstanceIds": ids})
    stub.add_response("describe_instance_topology", {"Instances": []}, {"InstanceIds": ids, "NextToken": "SomeEncryptedToken"})
    with stub:
        paths = block_lifecycle._topology(ec2, ids)
    assert sorted(paths) == sorted(ids)


def test_pdkit_topology_reports_the_blocks_own_placement_too():
    """The same check at any time, in `pdkit topology --output json` (block_shares_bottom_network_node)."""
    plan = deployment.load(None)
    apart = topology.analyse(plan, _nodes(instance_topology.response()))
    assert apart.block_together is False
    assert apart.to_dict()["block_shares_bottom_network_node"] is False
    together = topology.analyse(plan, _nodes(instance_topology.response(*instance_topology.TOGETHER)))
    assert together.to_dict()["block_shares_bottom_network_node"] is True
