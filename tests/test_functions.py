"""The block lifecycle Lambda against botocore's real service models (Stubber), and the custom-resource answer
both kit functions send. The lifecycle's Kubernetes side (drain order, timeouts, an unreachable API) is in
tests/test_block_drain.py; the deploy-time guard in tests/test_guard_protocol.py, test_guard_propagation.py and
test_guard_rollback.py."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import boto3
import pytest
from botocore.stub import ANY, Stubber

from pdkit.functions import block_lifecycle, cfn_response
from pdkit.model import reservation
from tests.fixtures import block_events
from tests.fixtures.block_events import fill

RID = "cr-0123456789abcdef0"
NOW = datetime(2026, 12, 1, 12, 0, tzinfo=UTC)
# The documented EventBridge examples (tests/fixtures/block_events.py) with this test's reservation and account.
TICK = fill(block_events.SCHEDULED, reservation_id=RID)


def delivered(spelling=reservation.DELIVERED[0]):
    return fill(block_events.DELIVERED, reservation_id=RID, detail_type=spelling)


def expiring(spelling=reservation.EXPIRING[0]):
    return fill(block_events.EXPIRATION_WARNING, reservation_id=RID, detail_type=spelling)


def _client(name):
    return boto3.client(name, region_name="eu-south-2", aws_access_key_id="test", aws_secret_access_key="test")  # noqa: S106


def _reservation(**overrides):
    base = {
        "CapacityReservationId": RID,
        "InstanceType": "p5en.48xlarge",
        "AvailabilityZone": "eu-south-2a",
        "TotalInstanceCount": 4,
        "State": "scheduled",
        "ReservationType": "capacity-block",
        "EndDate": NOW + timedelta(hours=48),
    }
    return base | overrides


def test_cfn_response_puts_the_protocol_body():
    sent = []
    event = {"StackId": "s", "RequestId": "r", "LogicalResourceId": "Guard", "ResponseURL": "https://bucket.example/signed"}
    cfn_response.send(event, success=False, reason="x" * 5000, physical_id=RID, opener=lambda req, timeout: sent.append(req))
    (request,) = sent
    body = json.loads(request.data)
    assert request.get_method() == "PUT"
    assert body["Status"] == "FAILED"
    assert body["PhysicalResourceId"] == RID
    assert len(request.data) <= cfn_response.MAX_BODY_BYTES, "CloudFormation's limit is on the body, in bytes (tests/test_cfn_answers.py)"


def test_cfn_response_refuses_non_https():
    with pytest.raises(ValueError, match="https"):
        cfn_response.send(
            {"ResponseURL": "file:///etc/passwd", "StackId": "s", "RequestId": "r", "LogicalResourceId": "l"},
            success=True,
            reason="",
            physical_id="p",
        )


GROUPS = {"g-decode": 2, "g-prefill": 2}
SERVING = {
    "namespace": "ns",
    "pod_label": "disaggregatedset.x-k8s.io/name",
    "disaggregated_set": "ds",
    "roles": [{"name": "prefill", "replicas": 1}, {"name": "decode", "replicas": 1}],
}


PLACEMENT = {"role_label": "pdkit/role", "nodes": {"prefill": 2, "decode": 2}, "wait_seconds": 720}
INSTANCES = {"i-0d1": "decode", "i-0d2": "decode", "i-0p1": "prefill", "i-0p2": "prefill"}


class Kube:
    """A Kubernetes API where the DisaggregatedSet exists, the four GPU nodes have joined and pods go at once;
    records the calls."""

    def __init__(self):
        self.calls = []

    def __call__(self):
        return self

    def nodes(self, selector):
        self.calls.append(("nodes", selector))
        return [{"name": f"ip-{i}", "labels": {"pdkit/role": role}, "instance_id": i} for i, role in INSTANCES.items()]

    def label_node(self, name, labels):
        self.calls.append(("label", name, labels))

    def scale_roles(self, namespace, name, replicas):
        self.calls.append(("scale", namespace, name, replicas))
        return True

    def pods(self, namespace, selector):
        self.calls.append(("pods", namespace, selector))
        return []


@pytest.fixture
def env(monkeypatch):
    for key, value in {
        "NODE_GROUPS": json.dumps(GROUPS),
        "CLUSTER_NAME": "c",
        "RESERVATION_ID": RID,
        "DRAIN_LEAD_MINUTES": "60",
        "TOPIC_ARN": "arn:aws:sns:eu-south-2:123456789012:t",
        "SERVING": json.dumps(SERVING),
        "DRAIN_WAIT_SECONDS": "600",
        "PLACEMENT": json.dumps(PLACEMENT),
        "ACCOUNT_ID": block_events.ACCOUNT,
    }.items():
        monkeypatch.setenv(key, value)


class Clients:
    def __init__(self):
        self.kube = Kube()
        self.ec2, self.eks, self.sns = _client("ec2"), _client("eks"), _client("sns")
        self.stubs = {name: Stubber(getattr(self, name)) for name in ("ec2", "eks", "sns")}

    def as_dict(self):
        return {"ec2": self.ec2, "eks": self.eks, "sns": self.sns}

    def nodegroups(self, current, target):
        for name in GROUPS:
            self.stubs["eks"].add_response(
                "describe_nodegroup",
                {"nodegroup": {"nodegroupName": name, "scalingConfig": {"minSize": 0, "maxSize": 2, "desiredSize": current}}},
                {"clusterName": "c", "nodegroupName": name},
            )
        if target and current != target:
            # A scale-up this function made leaves its marker on the reservation (block_lifecycle.SCALED_UP_TAG).
            self.stubs["ec2"].add_response(
                "create_tags", {}, {"Resources": [RID], "Tags": [{"Key": block_lifecycle.SCALED_UP_TAG, "Value": NOW.isoformat()}]}
            )
        for name in GROUPS:
            if current != target:
                self.stubs["eks"].add_response(
                    "update_nodegroup_config",
                    {"update": {"id": "u"}},
                    {"clusterName": "c", "nodegroupName": name, "scalingConfig": {"minSize": 0, "maxSize": 2, "desiredSize": target}},
                )

    def reservation(self, **overrides):
        self.stubs["ec2"].add_response(
            "describe_capacity_reservations", {"CapacityReservations": [_reservation(**overrides)]}, {"CapacityReservationIds": [RID]}
        )

    def topology(self):
        """Every decode-group node under its own bottom network node, each beside a prefill-group node."""
        instances = [
            {"InstanceId": i, "InstanceType": "p5en.48xlarge", "NetworkNodes": ["nn-1", f"nn-2{i[-1]}", f"nn-3{i[-1]}"]} for i in INSTANCES
        ]
        self.stubs["ec2"].add_response("describe_instance_topology", {"Instances": instances}, {"InstanceIds": list(INSTANCES)})

    def tagged(self):
        """The drain's marker on the reservation (EC2 CreateTags)."""
        self.stubs["ec2"].add_response(
            "create_tags", {}, {"Resources": [RID], "Tags": [{"Key": block_lifecycle.DRAINED_TAG, "Value": ANY}]}
        )

    def notified(self):
        self.stubs["sns"].add_response("publish", {"MessageId": "m"}, {"TopicArn": ANY, "Subject": ANY, "Message": ANY})

    def run(self, event, now=NOW):
        for stub in self.stubs.values():
            stub.activate()
        result = block_lifecycle.handler(event, None, clients=self.as_dict(), now=now, kube=self.kube, sleep=_no_sleep)
        for stub in self.stubs.values():
            stub.assert_no_pending_responses()
        return result


def _no_sleep(seconds):
    raise AssertionError("pods were gone: nothing to wait for")


@pytest.mark.parametrize("spelling", reservation.DELIVERED)
def test_delivered_scales_every_role_to_its_plan_size(env, spelling):
    c = Clients()
    c.nodegroups(current=0, target=2)
    c.topology()
    c.notified()
    result = c.run(delivered(spelling))
    assert result == {"action": "scale-up", "placement": "placed", "serving": "restored"}
    assert c.kube.calls[0] == ("nodes", "pdkit/role in (prefill,decode)")
    assert sorted(call[1:] for call in c.kube.calls if call[0] == "label") == [
        ("ip-i-0d1", {"pdkit/placed-role": "decode"}),
        ("ip-i-0d2", {"pdkit/placed-role": "prefill"}),
        ("ip-i-0p1", {"pdkit/placed-role": "decode"}),
        ("ip-i-0p2", {"pdkit/placed-role": "prefill"}),
    ]
    assert c.kube.calls[-1] == ("scale", "ns", "ds", {"prefill": 1, "decode": 1})


@pytest.mark.parametrize("spelling", reservation.EXPIRING)
def test_expiration_warning_scales_to_zero(env, spelling):
    c = Clients()
    c.nodegroups(current=2, target=0)
    c.tagged()
    c.notified()
    assert c.run(expiring(spelling)) == {"action": "scale-down", "serving": "drained"}
    assert [call[:4] for call in c.kube.calls if call[0] == "scale"] == [("scale", "ns", "ds", {"prefill": 0, "decode": 0})]


def test_expiration_warning_after_the_drain_only_reports(env):
    c = Clients()
    c.nodegroups(current=0, target=0)
    c.notified()
    assert c.run(expiring()) == {"action": "scale-down", "serving": "skipped"}
    assert c.kube.calls == []


def test_clock_drains_at_t_minus_60(env):
    c = Clients()
    c.reservation(State="active", EndDate=NOW + timedelta(minutes=59))
    c.nodegroups(current=2, target=0)
    c.tagged()
    c.notified()
    assert c.run(TICK) == {"action": "drain", "serving": "drained"}
    assert c.kube.calls == [
        ("scale", "ns", "ds", {"prefill": 0, "decode": 0}),
        ("pods", "ns", {"disaggregatedset.x-k8s.io/name": "ds"}),
    ]


def test_clock_drains_only_what_is_still_up(env):
    """A group someone already scaled to 0 is not updated again; the rest still drain."""
    c = Clients()
    c.reservation(State="active", EndDate=NOW + timedelta(minutes=45))
    c.stubs["eks"].add_response(
        "describe_nodegroup",
        {"nodegroup": {"nodegroupName": "g-decode", "scalingConfig": {"minSize": 0, "maxSize": 2, "desiredSize": 0}}},
        {"clusterName": "c", "nodegroupName": "g-decode"},
    )
    c.stubs["eks"].add_response(
        "describe_nodegroup",
        {"nodegroup": {"nodegroupName": "g-prefill", "scalingConfig": {"minSize": 0, "maxSize": 2, "desiredSize": 2}}},
        {"clusterName": "c", "nodegroupName": "g-prefill"},
    )
    c.stubs["eks"].add_response(
        "update_nodegroup_config",
        {"update": {"id": "u"}},
        {"clusterName": "c", "nodegroupName": "g-prefill", "scalingConfig": {"minSize": 0, "maxSize": 2, "desiredSize": 0}},
    )
    c.tagged()
    c.notified()
    assert c.run(TICK)["action"] == "drain"


def test_clock_waits_while_the_block_has_time(env):
    c = Clients()
    c.reservation(State="active", EndDate=NOW + timedelta(minutes=61))
    c.nodegroups(current=2, target=2)
    assert c.run(TICK) == {"action": "none"}


def test_an_extension_moves_the_drain(env):
    """The end date is read on every tick, so an extended block is not drained at its old end."""
    c = Clients()
    c.reservation(State="active", EndDate=NOW + timedelta(hours=24, minutes=30))
    c.nodegroups(current=2, target=2)
    assert c.run(TICK, now=NOW + timedelta(minutes=30)) == {"action": "none"}


def test_clock_ignores_blocks_that_are_not_active(env):
    c = Clients()
    c.reservation(State="scheduled", EndDate=NOW + timedelta(minutes=10))
    assert c.run(TICK) == {"action": "none"}


def test_clock_does_not_renotify_once_drained(env):
    c = Clients()
    c.reservation(State="active", EndDate=NOW + timedelta(minutes=30))
    c.nodegroups(current=0, target=0)
    assert c.run(TICK) == {"action": "none"}
    assert c.kube.calls == [], "no Kubernetes call once the groups are at 0"


# --- overlapping invocations -----------------------------------------------------------------------
# Nothing serializes the lifecycle function any more (no reserved concurrency), and Lambda may deliver
# the same asynchronous event more than once ("your function can receive the same event multiple
# times", https://docs.aws.amazon.com/lambda/latest/dg/invocation-async.html). EKS refuses an
# UpdateNodegroupConfig while another update of the group runs: ResourceInUseException, "The specified
# resource is in use." (botocore eks model, UpdateNodegroupConfig errors).


def _describe(c, name, desired):
    c.stubs["eks"].add_response(
        "describe_nodegroup",
        {"nodegroup": {"nodegroupName": name, "scalingConfig": {"minSize": 0, "maxSize": 2, "desiredSize": desired}}},
        {"clusterName": "c", "nodegroupName": name},
    )


def _update(c, name, desired, *, in_use=False):
    params = {"clusterName": "c", "nodegroupName": name, "scalingConfig": {"minSize": 0, "maxSize": 2, "desiredSize": desired}}
    if in_use:
        c.stubs["eks"].add_client_error(
            "update_nodegroup_config", "ResourceInUseException", "Nodegroup is being updated", 409, expected_params=params
        )
    else:
        c.stubs["eks"].add_response("update_nodegroup_config", {"update": {"id": "u"}}, params)


def test_two_scale_ups_at_once_converge_and_notify_once(env):
    """The second of two overlapping Delivered invocations meets EKS's ResourceInUseException on both groups:
    the groups already have the target size, so it ends cleanly and stays quiet (the first one notified)."""
    c = Clients()
    for name in GROUPS:
        _describe(c, name, 0)
    for name in GROUPS:
        _update(c, name, 2, in_use=True)
        _describe(c, name, 2)
    c.topology()
    assert c.run(delivered()) == {"action": "scale-up", "placement": "placed", "serving": "restored"}


def test_a_duplicate_delivered_event_after_the_scale_up_is_quiet(env):
    """Groups already at their plan sizes: no update, no second notification; serving is patched to the same replicas."""
    c = Clients()
    c.nodegroups(current=2, target=2)
    c.topology()
    assert c.run(delivered(reservation.DELIVERED[1])) == {"action": "scale-up", "placement": "placed", "serving": "restored"}


def test_a_refused_update_that_did_not_converge_is_raised_for_lambdas_retry(env):
    """ResourceInUse from some other update (a version upgrade): the group is not at the target, so the
    invocation fails and Lambda retries the event instead of reporting a scale-up that did not happen."""
    c = Clients()
    for name in GROUPS:
        _describe(c, name, 0)
    _update(c, "g-decode", 2, in_use=True)
    _describe(c, "g-decode", 0)
    for stub in c.stubs.values():
        stub.activate()
    with pytest.raises(c.eks.exceptions.ResourceInUseException):
        block_lifecycle.handler(delivered(), None, clients=c.as_dict(), now=NOW, kube=c.kube, sleep=_no_sleep)


def test_a_tick_during_a_running_drain_converges_without_a_second_notice(env):
    """A 5-minute tick lands while the T-60 drain still waits for pods: it scales the LeaderWorkerSets to 0 again
    (the same merge patch), and finds the node group updates already under way at 0."""
    c = Clients()
    c.reservation(State="active", EndDate=NOW + timedelta(minutes=55))
    for name in GROUPS:
        _describe(c, name, 2)
    for name in GROUPS:
        _update(c, name, 0, in_use=True)
        _describe(c, name, 0)
    c.tagged()
    assert c.run(TICK) == {"action": "drain", "serving": "drained"}
    assert [call for call in c.kube.calls if call[0] == "scale"] == [("scale", "ns", "ds", {"prefill": 0, "decode": 0})]


def test_the_expiration_warning_during_a_drain_converges_without_a_second_notice(env):
    c = Clients()
    for name in GROUPS:
        _describe(c, name, 2)
    _update(c, "g-decode", 0, in_use=True)
    _describe(c, "g-decode", 0)
    _update(c, "g-prefill", 0)
    c.tagged()
    c.notified()  # this invocation scaled prefill itself: it says so
    assert c.run(expiring()) == {"action": "scale-down", "serving": "drained"}


# --- a block that started without its Delivered event ---------------------------------------------
# "Capacity Block Delivered" fires once, at the block's start (EC2 User Guide, capacity-blocks-monitor), and
# EventBridge does not replay events to a rule created later: a deploy made after the start, or an event lost, left
# the node groups at 0 for the whole paid block on b561709. The check now catches up, only when nothing says not to.


def _catch_up(c):
    """The scale-up the check does: node groups to the plan, placement from the topology, serving restored."""
    c.nodegroups(current=0, target=2)
    c.topology()
    c.notified()


def test_an_active_block_with_its_node_groups_at_0_is_scaled_up_by_the_check(env):
    """Active, 48 h left (outside the 60 min drain lead), both groups at 0, no drain marker: the check does what the
    lost Delivered event would have done, and says why on the topic."""
    c = Clients()
    c.reservation(State="active")
    _catch_up(c)
    messages = []
    c.sns.meta.events.register("before-parameter-build.sns.Publish", lambda params, **_: messages.append(params["Message"]))
    assert c.run(TICK) == {"action": "catch-up", "placement": "placed", "serving": "restored"}
    assert c.kube.calls[-1] == ("scale", "ns", "ds", {"prefill": 1, "decode": 1})
    (message,) = messages
    assert f"Capacity Block {RID} is active but its GPU node groups were at 0" in message
    assert "scaling g-decode to 2, g-prefill to 2 on c" in message


@pytest.mark.parametrize(
    ("why", "found", "desired"),
    [
        ("scheduled: not started", {"State": "scheduled"}, (0, 0)),
        ("payment-pending", {"State": "payment-pending"}, (0, 0)),
        ("expired", {"State": "expired"}, (0, 0)),
        ("inside the drain lead", {"State": "active", "EndDate": NOW + timedelta(minutes=59)}, (0, 0)),
        ("already up", {"State": "active"}, (2, 2)),
        ("one group up: someone is working on it", {"State": "active"}, (0, 2)),
        (
            "drained before (marker)",
            {"State": "active", "Tags": [{"Key": block_lifecycle.DRAINED_TAG, "Value": "2026-12-01T11:00:00+00:00"}]},
            (0, 0),
        ),
        (
            "scaled up before, down by hand since (marker)",
            {"State": "active", "Tags": [{"Key": block_lifecycle.SCALED_UP_TAG, "Value": "2026-12-01T09:00:00+00:00"}]},
            (0, 0),
        ),
    ],
)
def test_the_check_scales_up_only_an_active_undrained_block_outside_the_lead_with_every_group_at_0(env, why, found, desired):
    """Every combination that must NOT scale up: no update, no topology call, no notification, nothing in Kubernetes.
    A drained block stays down even when an extension moves its end out of the lead (the marker says a drain
    happened), and groups scaled to 0 after the kit scaled them up (`pdkit nodes down` before a `make deploy`) stay
    down; `pdkit nodes up` brings them back on purpose."""
    c = Clients()
    c.reservation(**found)
    if found["State"] == "active":
        for name, size in zip(GROUPS, desired, strict=True):
            _describe(c, name, size)
    assert c.run(TICK) == {"action": "none"}, why
    assert c.kube.calls == []


def test_the_markers_are_read_from_their_tags_only():
    """Other tags on the block (EC2's own incremental-quantity tag, the purchase's) are neither a scale-up nor a drain."""
    found = _reservation(Tags=[{"Key": "aws:ec2capacityreservation:incrementalRequestedQuantity", "Value": "4"}])
    assert block_lifecycle.held(found) is None
    for key in (block_lifecycle.DRAINED_TAG, block_lifecycle.SCALED_UP_TAG):
        assert block_lifecycle.held(found | {"Tags": [{"Key": key, "Value": "t"}]}) == key


def test_a_drain_tags_the_reservation_before_serving_goes():
    """The marker is written first, so a drain interrupted half-way still keeps the check from scaling back up."""
    c = Clients()
    c.tagged()
    c.stubs["ec2"].activate()
    assert block_lifecycle._mark_drained(c.ec2, RID, NOW) == ""
    c.stubs["ec2"].assert_no_pending_responses()


def test_a_scale_up_marks_the_block_so_the_check_scales_it_up_once(env):
    """Delivered (or the catch-up) leaves SCALED_UP_TAG: the catch-up is at most once per block, like the event."""
    c = Clients()
    c.reservation(State="active")
    _catch_up(c)  # its create_tags stub wants SCALED_UP_TAG on this block
    assert c.run(TICK)["action"] == "catch-up"
    again = Clients()
    again.reservation(State="active", Tags=[{"Key": block_lifecycle.SCALED_UP_TAG, "Value": NOW.isoformat()}])
    for name in GROUPS:
        _describe(again, name, 0)
    assert again.run(TICK) == {"action": "none"}


def test_a_refused_tag_never_holds_the_drain(env):
    """CreateTags refused (a policy, a throttle): the nodes still go, and the notification says the marker is missing."""
    c = Clients()
    c.reservation(State="active", EndDate=NOW + timedelta(minutes=50))
    c.nodegroups(current=2, target=0)
    c.stubs["ec2"].add_client_error("create_tags", "UnauthorizedOperation", "You are not authorized to perform this operation.")
    messages = []
    c.sns.meta.events.register("before-parameter-build.sns.Publish", lambda params, **_: messages.append(params["Message"]))
    c.notified()
    assert c.run(TICK) == {"action": "drain", "serving": "drained"}
    assert "could NOT be tagged pdkit/drained-at" in messages[0]
    assert "UnauthorizedOperation" in messages[0]


# --- only its own events ----------------------------------------------------------------------------
# EventBridge's rule filters on source, detail-type and the reservation id (stacks/block_lifecycle.py), but the
# function can be invoked directly (lambda:InvokeFunction) and a rule can be widened: an event that is not this
# function's must not scale a paid block's node groups. The events are AWS's documented examples.


@pytest.mark.parametrize(
    ("event", "words"),
    [
        (fill(block_events.DELIVERED, reservation_id="cr-0fffffffffffffff0"), "for reservation 'cr-0fffffffffffffff0'"),
        (fill(block_events.EXPIRATION_WARNING, reservation_id="cr-0fffffffffffffff0"), "for reservation 'cr-0fffffffffffffff0'"),
        (fill(block_events.DELIVERED, reservation_id=RID, account="210987654321"), "for account '210987654321'"),
        (fill(block_events.SCHEDULED, reservation_id=RID, account="210987654321"), "for account '210987654321'"),
        (fill(block_events.DELIVERED, reservation_id=RID) | {"source": "my.app"}, "from source 'my.app'"),
        (fill(block_events.SCHEDULED, reservation_id=RID) | {"source": "aws.ec2"}, "from source 'aws.ec2'"),
        (fill(block_events.RESERVATION_STATE, reservation_id=RID), "'EC2 Capacity Reservation Scheduled' is not"),
        ({}, "detail-type '' is not"),
        ({"detail-type": "Scheduled Event"}, "from source None"),
    ],
    ids=[
        "other-block",
        "other-block-expiring",
        "other-account",
        "other-account-tick",
        "forged-source",
        "tick-from-ec2",
        "state-event",
        "empty",
        "bare-tick",
    ],
)
def test_events_that_are_not_its_own_are_ignored_before_any_call(env, event, words):
    """A direct invoke or a widened rule must not scale a paid block's node groups for another block, another
    account or a forged source (b561709 treated any event that was not Delivered/Expiring as a tick and acted on
    it). Events: AWS's documented examples (tests/fixtures/block_events.py). No stub has a response: any AWS or
    Kubernetes call would fail the test."""
    c = Clients()
    result = c.run(event)
    assert result["action"] == "ignored"
    assert words in result["reason"]
    assert c.kube.calls == []


def test_the_eventbridge_envelope_spelling_of_detail_type_is_read_too(env):
    """The guide's examples print `detail_type`; EventBridge's event structure spells it `detail-type`
    (https://docs.aws.amazon.com/eventbridge/latest/ref/overiew-event-structure.html). Both are this function's."""
    event = delivered()
    event["detail-type"] = event.pop("detail_type")
    c = Clients()
    c.nodegroups(current=0, target=2)
    c.topology()
    c.notified()
    assert c.run(event)["action"] == "scale-up"
