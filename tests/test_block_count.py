"""How many instances a Capacity Block has, or will have: one reading (pdkit/model/reservation.py instance_count)
for the deploy-time guard, preflight, the purchase's after-the-fact lookup, `pdkit capacity status` and `nodes up`.

Before a block starts, DescribeCapacityReservations reports TotalInstanceCount and AvailableInstanceCount 0, and
"you can see how many instances will be available in your Capacity Block by the tag value for the tag key
aws:ec2capacityreservation:incrementalRequestedQuantity" (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-view.html).
The block here is the one AWS ParallelCluster's integration test mocks for a Capacity Block just bought: State
pending, TotalInstanceCount 0, the tag 4 (tests/fixtures/ec2/README.md names the file and commit). Until this
reading existed the guard refused every block that had not started ("instance count 0 but the profile says 4"),
so a deploy ahead of the block failed, and with capacity.purchase the block was bought and then refused.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import boto3
import pytest
from botocore.stub import Stubber

from pdkit.cli.main import main
from pdkit.functions import reservation_guard
from pdkit.model import reservation
from pdkit.ops import purchase
from pdkit.ops.capacity import Offering, reservation_from
from tests.fixtures import ec2_replies
from tests.fixtures.cmd_support import CR, NOW, REGION, REQUESTED_QUANTITY_TAG, pending_block, real_profile, stub_reservation

pytest_plugins = ["tests.fixtures.cmd_fixtures"]

TAG = REQUESTED_QUANTITY_TAG  # the docs' key, written out in the fixture, not read from the code under test
PARALLELCLUSTER = ec2_replies.capacity_reservation(ec2_replies.PENDING_BLOCK)


def test_a_block_before_its_start_has_the_count_of_its_tag():
    """ParallelCluster's just-bought block, as copied: EC2 says 0 instances, the tag says 4, and 4 is the count."""
    count = reservation.instance_count(PARALLELCLUSTER)
    assert (PARALLELCLUSTER["TotalInstanceCount"], PARALLELCLUSTER["AvailableInstanceCount"]) == (0, 0)
    assert (count.instances, count.source, count.note) == (4, TAG, "")
    assert reservation_from(PARALLELCLUSTER).instances == 4, "the CLI's Reservation carries the same reading"


@pytest.mark.parametrize(
    ("raw", "instances", "note"),
    [
        # AWS ParallelCluster's own cases for the same two fields (cli/tests/pcluster/validators/test_ec2_validators.py,
        # test_capacity_reservation_size_validator), read as "how many instances":
        ({"TotalInstanceCount": 1}, 1, ""),
        ({"TotalInstanceCount": 0, "Tags": [{"Key": TAG, "Value": "1"}]}, 1, ""),
        ({"Tags": [{"Key": TAG, "Value": "1"}]}, 1, ""),
        ({}, None, ""),
        ({"Tags": []}, None, ""),
        ({"TotalInstanceCount": 1, "Tags": [{"Key": TAG, "Value": "0"}]}, 1, ""),
        ({"TotalInstanceCount": 0, "Tags": [{"Key": TAG, "Value": ""}]}, None, ""),
        # A started block whose tag says otherwise: EC2's count of what it reserves wins, and the disagreement is said.
        ({"TotalInstanceCount": 3, "Tags": [{"Key": TAG, "Value": "4"}]}, 3, f"TotalInstanceCount 3, but its {TAG} tag says 4"),
    ],
)
def test_the_count_rules_at_their_edges(raw, instances, note):
    """The decisions: a positive TotalInstanceCount is what EC2 reserves now and wins; 0 means "not started", and then
    the tag is the count; neither (no count, no usable tag) is None, which every check refuses instead of guessing.
    ParallelCluster takes max(total, tag) because it checks a ceiling; the kit needs the exact count."""
    count = reservation.instance_count(raw)
    assert (count.instances, count.note) == (instances, note)


def test_no_count_at_all_is_refused_with_what_ec2_reported():
    want = reservation.Expected(CR, "p5en.48xlarge", 4, "eu-south-2a")
    block = pending_block(Tags=[])
    (problem,) = reservation.problems(block, want)
    assert problem == (
        f"reservation {CR} has no instance count (TotalInstanceCount 0 and no {TAG} tag) but the profile says 4: "
        "make the profile match the block"
    )


def test_a_started_block_whose_tag_disagrees_is_held_to_what_ec2_reserves():
    want = reservation.Expected(CR, "p5en.48xlarge", 4, "eu-south-2a")
    (problem,) = reservation.problems(pending_block(State="active", TotalInstanceCount=3), want)
    assert problem == (
        f"reservation {CR} has 3 instances (EC2 reports TotalInstanceCount 3, but its {TAG} tag says 4) but the profile says 4: "
        "make the profile match the block"
    )


def _guard_create(block):
    ec2 = boto3.client("ec2", region_name=REGION, aws_access_key_id="test", aws_secret_access_key="test")  # noqa: S106
    stub = Stubber(ec2)
    stub.add_response(
        "describe_capacity_reservations", {"CapacityReservations": [block]}, {"CapacityReservationIds": [block["CapacityReservationId"]]}
    )
    event = {
        "RequestType": "Create",
        "RequestId": "unique id for this create request",
        "ResponseURL": "https://cloudformation-custom-resource-response.example/signed",
        "ResourceType": "Custom::CapacityBlockGuard",
        "LogicalResourceId": "ReservationGuardCheck",
        "StackId": "arn:aws:cloudformation:us-west-2:123456789012:stack/mystack/5b918d10-cd98-11ea-90d5-0a9cd3354c10",
        "ResourceProperties": {
            "ReservationId": block["CapacityReservationId"],
            "InstanceType": block["InstanceType"],
            "InstanceCount": "4",
            "AvailabilityZone": block["AvailabilityZone"],
        },
    }
    sent = []
    with stub:
        reservation_guard.handler(event, None, ec2=ec2, respond=lambda e, **kw: sent.append(kw))
    (answer,) = sent
    return answer


def test_the_guard_lets_a_deploy_ahead_of_the_block_through():
    """ParallelCluster's block exactly as copied (t2.micro in us-east-2a, the guard's properties say the same): the
    guard answers SUCCESS, where it used to refuse the count 0 and the pending state."""
    answer = _guard_create(PARALLELCLUSTER)
    assert answer == {
        "success": True,
        "reason": "reservation cr-123456abc12345abc matches the profile",
        "physical_id": "cr-123456abc12345abc",
    }


def test_the_guard_still_refuses_a_block_that_will_be_too_small():
    answer = _guard_create(PARALLELCLUSTER | {"Tags": [{"Key": TAG, "Value": "2"}]})
    assert answer["success"] is False
    assert f"has 2 instances (its {TAG} tag: EC2 reports TotalInstanceCount 0) but the profile says 4" in answer["reason"]


def test_preflight_passes_the_count_of_a_block_that_has_not_started(aws, pins, tmp_path, capsys):
    """The count row names where the number came from; the pending state is a WARN with the wait (the deploy may
    proceed: pdkit/model/reservation.py STATES), not a FAIL."""
    from tests.test_cmd_preflight import rows, stub_checks

    stub_checks(aws, reservation=pending_block(), interconnect=None)
    assert main(["preflight", "--profile", real_profile(tmp_path), "--output", "json"]) == 0
    found = rows(capsys)
    assert found["Instance count"]["status"] == "PASS"
    assert found["Instance count"]["detail"] == f"4 instances (its {TAG} tag: EC2 reports TotalInstanceCount 0), as the roles need"
    assert found["Reservation state"]["status"] == "WARN"
    assert found["Reservation state"]["fix"] == "wait a few minutes, then run `pdkit capacity status` again"


def test_preflight_fails_a_block_without_any_count(aws, pins, tmp_path, capsys):
    from tests.test_cmd_preflight import rows, stub_checks

    stub_checks(aws, reservation=pending_block(Tags=[]), interconnect=None)
    assert main(["preflight", "--profile", real_profile(tmp_path), "--output", "json"]) == 1
    row = rows(capsys)["Instance count"]
    assert row["status"] == "FAIL"
    assert row["detail"] == f"{CR} reports no instance count (TotalInstanceCount 0 and no {TAG} tag)"


def _stub_status(aws, block):
    """The calls `capacity status` makes for a block without a cb- id yet: the reservation, then its instances."""
    aws("ec2").add_response("describe_capacity_reservations", {"CapacityReservations": [block]}, {"CapacityReservationIds": [CR]})
    live = ["pending", "running", "stopping", "shutting-down"]
    filters = [{"Name": "capacity-reservation-id", "Values": [CR]}, {"Name": "instance-state-name", "Values": live}]
    aws("ec2").add_response("describe_instances", {"Reservations": []}, {"Filters": filters})


def test_capacity_status_shows_the_count_a_block_will_have(aws, tmp_path, capsys):
    _stub_status(aws, pending_block(State="scheduled", CapacityBlockId=None))
    assert main(["capacity", "status", "--profile", real_profile(tmp_path)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"4 x p5en.48xlarge in eu-south-2a once it starts (EC2 reports 0 until then; the count is its {TAG} tag)" in out


def test_capacity_status_json_carries_the_count_and_its_source(aws, tmp_path, capsys):
    import json

    _stub_status(aws, pending_block(CapacityBlockId=None))
    assert main(["capacity", "status", "--profile", real_profile(tmp_path), "--output", "json"]) == 0
    found = json.loads(capsys.readouterr().out)["reservation"]
    assert (found["total_instances"], found["count"]) == (0, {"instances": 4, "source": TAG, "note": ""})


def test_nodes_up_refuses_an_active_block_smaller_than_the_node_groups(aws, tmp_path, capsys):
    """EC2 delivered fewer instances than the plan's node groups would ask for: the Auto Scaling groups would retry
    the launches it cannot hold inside the paid window, so `up` stops before it sizes anything (no EKS call stubbed)."""
    stub_reservation(aws, TotalInstanceCount=2, AvailableInstanceCount=2)
    assert main(["nodes", "up", "--profile", real_profile(tmp_path)]) == 2
    err = " ".join(capsys.readouterr().err.split())
    assert (
        f"the block {CR} has 2 instances (EC2 reports TotalInstanceCount 2, but its {TAG} tag says 4), the node groups would ask for 4"
        in err
    )


START = NOW + timedelta(hours=24)
OFFER = Offering("cbr-1", "eu-south-2a", "p5en.48xlarge", 4, START, START + timedelta(hours=48), 48, Decimal("98765.43"), "USD")


def test_the_lookup_after_an_unclear_purchase_sees_a_block_that_has_not_started():
    """After a 503 with no tagged reservation, the kit looks for a block with the offering's type, AZ, count and dates.
    A block bought a moment ago reports TotalInstanceCount 0: only its tag says 4, so the count must come from there
    (it used to compare 0 with 4 and report nothing, as if no block existed)."""
    ec2 = boto3.client("ec2", region_name=REGION, aws_access_key_id="test", aws_secret_access_key="test")  # noqa: S106
    stub = Stubber(ec2)
    stub.add_client_error(
        "purchase_capacity_block", "Unavailable", "stand-in", 503, expected_params=purchase.block_request("cbr-1", "pid-1", dry=False)
    )
    just_bought = pending_block(Tags=[{"Key": TAG, "Value": "4"}], StartDate=OFFER.start, EndDate=OFFER.end)
    lookup = {"Filters": [{"Name": "instance-type", "Values": ["p5en.48xlarge"]}, {"Name": "availability-zone", "Values": ["eu-south-2a"]}]}
    stub.add_response("describe_capacity_reservations", {"CapacityReservations": [just_bought]}, lookup)
    with stub:
        outcome = purchase.buy_block(ec2, ec2, OFFER, "pid-1")
    assert outcome.status == "unclear"
    assert [(s.reservation_id, s.state, s.certain) for s in outcome.found] == [(CR, "pending", False)]
