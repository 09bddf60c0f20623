"""The end-of-block drain never meets a PodDisruptionBudget: the lifecycle Lambda scales the
DisaggregatedSet's roles to 0 through the Kubernetes API and waits for their pods before it scales the
GPU node groups, and restores them at delivery. The Kubernetes API is faked behind the injected HTTP
opener and authorizes each call against the Role the serving objects render; EKS and SNS are
botocore Stubbers; a real TLS server on 127.0.0.1 checks the CA handling."""

from __future__ import annotations

import base64
import datetime as dt
import hashlib
import hmac
import io
import json
import ssl
import threading
import urllib.error
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import ClassVar

import boto3
import botocore.auth
import pytest
from botocore.stub import ANY, Stubber

from pdkit import deployment
from pdkit.functions import block_lifecycle, kube_api
from pdkit.model import placement
from pdkit.model.placement import PLACED_ROLE_LABEL
from pdkit.model.plan import ROLE_LABEL
from pdkit.render.serving import drain, inputs, manifests, names
from pdkit.render.serving.scale import roles_patch
from tests.fixtures import block_events
from tests.fixtures.block_events import fill

CLUSTER = "glm51-2p2d"
GROUPS = {"glm51-2p2d-decode": 2, "glm51-2p2d-prefill": 2}
NOW = dt.datetime(2026, 12, 1, 12, 0, tzinfo=dt.UTC)
RID = "cr-0123456789abcdef0"


@pytest.fixture(scope="module")
def the_plan():
    """The plan the kit synthesizes from (conftest's synth: deployment.load), without synthesizing: these tests
    are the drain's mutation killers, and under mutmut a test that synthesizes is no killer (tests/conftest.py)."""
    return deployment.load(None)


# --- a fake API server behind the opener ----------------------------------------------------------


class FakeKube:
    """One DisaggregatedSet and its pods in one namespace. Every request is authorized against the rules
    of the Role the serving objects render for the lifecycle. A PATCH is a JSON patch (RFC 6902: a failed
    `test` refuses the whole patch) and the result must pass the CRD's rule that replicas are all zero or
    all non-zero (kubernetes-sigs/lws v0.10.0 api/disaggregatedset/v1/disaggregatedset_types.go), as the
    API server checks it. A scaled LeaderWorkerSet is reverted by the controller, so the fake serves
    none. Pods of a role scaled to 0 disappear after `pods_linger` more pod listings (never, with None)."""

    def __init__(self, plan, log, *, pods_linger=1, unreachable=None, present=True):
        self.log = log
        self.namespace = names.namespace(plan)
        self.name = names.disaggregated_set(plan)
        self.role = manifests.block_lifecycle_role(plan)
        self.node_role = manifests.block_lifecycle_node_role(plan)
        # Nodes that have joined: name -> labels and providerID; `late` ones join after that many node listings.
        self.nodes: dict[str, dict] = {}
        self.late: dict[str, tuple[int, dict]] = {}
        (ds,) = [o for o in manifests.render(plan, inputs.from_plan(plan)) if o["kind"] == "DisaggregatedSet"]
        self.spec = json.loads(json.dumps(ds["spec"])) if present else None
        self.pods = {r["name"]: [f"{self.name}-0-5d8f-{r['name']}-0", f"{self.name}-0-5d8f-{r['name']}-0-1"] for r in ds["spec"]["roles"]}
        self.pods_linger = pods_linger
        self.countdown: dict[str, int] = {}
        self.unreachable = unreachable
        self.tokens: list[str] = []
        self.patches: list[list[dict]] = []

    @property
    def replicas(self):
        return {r["name"]: r["spec"]["replicas"] for r in self.spec["roles"]}

    def set_replicas(self, count):
        for r in self.spec["roles"]:
            r["spec"]["replicas"] = count

    def connect(self):
        return kube_api.KubeApi("https://api.example.eks.amazonaws.com", bearer=lambda: "k8s-aws-v1.test", opener=self)

    def join(self, instance_id, role, *, after=0):
        """A GPU node of `role`'s node group registers (kubelet sets providerID aws:///<az>/<instance id>)."""
        node = {
            "labels": {ROLE_LABEL: role, "topology.kubernetes.io/zone": "eu-south-2a"},
            "providerID": f"aws:///eu-south-2a/{instance_id}",
        }
        if after:
            self.late[f"ip-{instance_id}"] = (after, node)
        else:
            self.nodes[f"ip-{instance_id}"] = node

    def placed(self):
        return {name: n["labels"][PLACED_ROLE_LABEL] for name, n in self.nodes.items() if PLACED_ROLE_LABEL in n["labels"]}

    def _allowed(self, verb, resource, name, rules=None):
        for rule in rules if rules is not None else self.role["rules"]:
            if resource in rule["resources"] and verb in rule["verbs"] and (name is None or name in rule.get("resourceNames", [name])):
                return True
        return False

    def _error(self, url, code, message):
        body = json.dumps({"kind": "Status", "code": code, "message": message}).encode()
        return urllib.error.HTTPError(url, code, message, {}, io.BytesIO(body))

    def _json_patch(self, url, ops):
        doc = {"spec": json.loads(json.dumps(self.spec))}
        for op in ops:
            *parents, last = op["path"].strip("/").split("/")
            node = doc
            for part in parents:
                node = node[int(part)] if isinstance(node, list) else node[part]
            key = int(last) if isinstance(node, list) else last
            if op["op"] == "test" and node[key] != op["value"]:
                raise self._error(url, 422, f"the server rejected our request: test failed at {op['path']}")
            if op["op"] == "replace":
                node[key] = op["value"]
            assert op["op"] in ("test", "replace"), op
        counts = [r["spec"].get("replicas", 0) for r in doc["spec"]["roles"]]
        if not (all(c == 0 for c in counts) or all(c > 0 for c in counts)):
            raise self._error(url, 422, "replicas must be zero for all non-External roles or non-zero for all non-External roles")
        return doc["spec"]

    def __call__(self, request, timeout):
        assert timeout <= kube_api.REQUEST_TIMEOUT_SECONDS
        if self.unreachable is not None:
            raise self.unreachable
        self.tokens.append(request.get_header("Authorization"))
        url = urllib.parse.urlsplit(request.full_url)
        method = request.get_method()
        ds_prefix = f"/apis/disaggregatedset.x-k8s.io/v1/namespaces/{self.namespace}/disaggregatedsets/"
        if method == "PATCH" and url.path.startswith(ds_prefix):
            name = url.path.removeprefix(ds_prefix)
            if not self._allowed("patch", "disaggregatedsets", name):
                raise self._error(request.full_url, 403, f"disaggregatedsets {name} is forbidden")
            if self.spec is None or name != self.name:
                raise self._error(request.full_url, 404, f'disaggregatedsets.disaggregatedset.x-k8s.io "{name}" not found')
            assert request.get_header("Content-type") == "application/json-patch+json"
            ops = json.loads(request.data)
            self.patches.append(ops)
            self.spec = self._json_patch(request.full_url, ops)
            for role, replicas in self.replicas.items():
                self.log.append(("patch", role, replicas))
                if replicas == 0:
                    self.countdown[role] = self.pods_linger if self.pods_linger is not None else -1
                else:
                    self.countdown.pop(role, None)
            return io.BytesIO(json.dumps({"kind": "DisaggregatedSet", "spec": self.spec}).encode())
        if method == "GET" and url.path == "/api/v1/nodes":
            if not self._allowed("list", "nodes", None, self.node_role["rules"]):
                raise self._error(request.full_url, 403, "nodes is forbidden")
            (selector,) = urllib.parse.parse_qs(url.query)["labelSelector"]
            key, values = selector.split(" in ")
            wanted = values.strip("()").split(",")
            for name, (after, node) in list(self.late.items()):
                if after <= 1:
                    self.nodes[name] = node
                    del self.late[name]
                else:
                    self.late[name] = (after - 1, node)
            items = [
                {"metadata": {"name": name, "labels": n["labels"]}, "spec": {"providerID": n["providerID"]}}
                for name, n in self.nodes.items()
                if n["labels"].get(key) in wanted
            ]
            self.log.append(("nodes", len(items)))
            return io.BytesIO(json.dumps({"kind": "NodeList", "items": items}).encode())
        if method == "PATCH" and url.path.startswith("/api/v1/nodes/"):
            name = url.path.removeprefix("/api/v1/nodes/")
            if not self._allowed("patch", "nodes", name, self.node_role["rules"]):
                raise self._error(request.full_url, 403, f"nodes {name} is forbidden")
            assert request.get_header("Content-type") == "application/merge-patch+json"
            patch = json.loads(request.data)
            # What the ValidatingAdmissionPolicy lets the group change: the placed-role label, nothing else.
            assert set(patch) == {"metadata"}
            assert set(patch["metadata"]) == {"labels"}
            assert set(patch["metadata"]["labels"]) == {PLACED_ROLE_LABEL}
            self.nodes[name]["labels"].update(patch["metadata"]["labels"])
            self.log.append(("label", name, patch["metadata"]["labels"][PLACED_ROLE_LABEL]))
            return io.BytesIO(json.dumps({"kind": "Node"}).encode())
        if method == "GET" and url.path == f"/api/v1/namespaces/{self.namespace}/pods":
            if not self._allowed("list", "pods", None):
                raise self._error(request.full_url, 403, "pods is forbidden")
            (selector,) = urllib.parse.parse_qs(url.query)["labelSelector"]
            key, value = selector.split("=")
            assert (key, value) == (names.DS_NAME_LABEL, self.name)
            for role in self.pods:
                if self.countdown.get(role) == 0:
                    self.pods[role] = []
                elif self.countdown.get(role, -1) > 0:
                    self.countdown[role] -= 1
            items = [{"metadata": {"name": p}} for pods in self.pods.values() for p in pods]
            self.log.append(("pods", value, len(items)))
            return io.BytesIO(json.dumps({"kind": "PodList", "items": items}).encode())
        raise self._error(request.full_url, 404, f"no route for {method} {url.path}")


class FakeClock:
    def __init__(self):
        self.now = 1000.0
        self.sleeps: list[float] = []

    def __call__(self):
        return self.now

    def sleep(self, seconds):
        # A wait that sleeps 0 s, or far past any deadline, would spin until Lambda's timeout: fail it instead.
        assert 0 < seconds <= block_lifecycle.POLL_SECONDS, seconds
        assert len(self.sleeps) < 1000, "never reached the deadline"
        self.sleeps.append(seconds)
        self.now += seconds


class Context:
    def __init__(self, remaining_ms):
        self.remaining_ms = remaining_ms

    def get_remaining_time_in_millis(self):
        return self.remaining_ms


@pytest.fixture
def env(monkeypatch, the_plan):
    for key, value in {
        "NODE_GROUPS": json.dumps(GROUPS),
        "CLUSTER_NAME": CLUSTER,
        "RESERVATION_ID": RID,
        "DRAIN_LEAD_MINUTES": "60",
        "TOPIC_ARN": "arn:aws:sns:eu-south-2:123456789012:t",
        "ACCOUNT_ID": block_events.ACCOUNT,
        **drain.drain_plan(the_plan).lifecycle_environment(),
        **placement.lifecycle_environment(the_plan),
    }.items():
        monkeypatch.setenv(key, value)


def _client(name):
    return boto3.client(name, region_name="eu-south-2", aws_access_key_id="test", aws_secret_access_key="test")  # noqa: S106


class Aws:
    """EC2, EKS and SNS stubs that write the node group updates and the message to the shared log."""

    def __init__(self, log):
        self.log = log
        self.messages: list[str] = []
        self.ec2, self.eks, self.sns = _client("ec2"), _client("eks"), _client("sns")
        self.stubs = {name: Stubber(getattr(self, name)) for name in ("ec2", "eks", "sns")}
        self.eks.meta.events.register(
            "before-parameter-build.eks.UpdateNodegroupConfig",
            lambda params, **_: log.append(("nodegroup", params["nodegroupName"], params["scalingConfig"]["desiredSize"])),
        )
        self.sns.meta.events.register("before-parameter-build.sns.Publish", lambda params, **_: self.messages.append(params["Message"]))
        self.ec2.meta.events.register("before-parameter-build.ec2.DescribeInstanceTopology", lambda params, **_: log.append(("topology",)))

    def topology(self, paths, *, reported=None):
        """One DescribeInstanceTopology answer for the joined instances (botocore ec2 model: InstanceTopology);
        an instance EC2 does not report yet comes back without NetworkNodes."""
        reported = set(paths) if reported is None else reported
        instances = [
            {
                "InstanceId": i,
                "InstanceType": "p5en.48xlarge",
                "AvailabilityZone": "eu-south-2a",
                **({"NetworkNodes": list(p)} if i in reported else {}),
            }
            for i, p in paths.items()
        ]
        self.stubs["ec2"].add_response("describe_instance_topology", {"Instances": instances}, {"InstanceIds": ANY})

    def nodegroups(self, current, target):
        for name in GROUPS:
            self.stubs["eks"].add_response(
                "describe_nodegroup",
                {"nodegroup": {"nodegroupName": name, "scalingConfig": {"minSize": 0, "maxSize": 2, "desiredSize": current}}},
                {"clusterName": CLUSTER, "nodegroupName": name},
            )
        if target == 0 and current != 0:
            # Every drain first leaves its marker on the reservation (pdkit/functions/block_lifecycle.py DRAINED_TAG).
            self.stubs["ec2"].add_response(
                "create_tags", {}, {"Resources": [RID], "Tags": [{"Key": block_lifecycle.DRAINED_TAG, "Value": NOW.isoformat()}]}
            )
        if target and current != target:
            self.stubs["ec2"].add_response(
                "create_tags", {}, {"Resources": [RID], "Tags": [{"Key": block_lifecycle.SCALED_UP_TAG, "Value": NOW.isoformat()}]}
            )
        if current != target:
            for name in GROUPS:
                self.stubs["eks"].add_response(
                    "update_nodegroup_config",
                    {"update": {"id": "u"}},
                    {"clusterName": CLUSTER, "nodegroupName": name, "scalingConfig": {"minSize": 0, "maxSize": 2, "desiredSize": target}},
                )

    def ending_in(self, minutes):
        self.stubs["ec2"].add_response(
            "describe_capacity_reservations",
            {"CapacityReservations": [{"CapacityReservationId": RID, "State": "active", "EndDate": NOW + dt.timedelta(minutes=minutes)}]},
            {"CapacityReservationIds": [RID]},
        )

    def notified(self):
        self.stubs["sns"].add_response("publish", {"MessageId": "m"}, {"TopicArn": ANY, "Subject": ANY, "Message": ANY})

    def run(self, event, kube, clock=None, context=None):
        clock = clock or FakeClock()
        for stub in self.stubs.values():
            stub.activate()
        clients = {"ec2": self.ec2, "eks": self.eks, "sns": self.sns}
        result = block_lifecycle.handler(event, context, clients=clients, now=NOW, kube=kube.connect, clock=clock, sleep=clock.sleep)
        for stub in self.stubs.values():
            stub.assert_no_pending_responses()
        return result


# AWS's documented examples (tests/fixtures/block_events.py) for this test's block and account.
TICK = fill(block_events.SCHEDULED, reservation_id=RID)
DELIVERED = fill(block_events.DELIVERED, reservation_id=RID)
EXPIRING = fill(block_events.EXPIRATION_WARNING, reservation_id=RID)


def _first(log, kind):
    return next(i for i, entry in enumerate(log) if entry[0] == kind)


def _last(log, kind):
    return max(i for i, entry in enumerate(log) if entry[0] == kind)


# --- the drain order --------------------------------------------------------------------------------


@pytest.mark.parametrize("event", [TICK, EXPIRING])
def test_serving_scales_to_zero_and_its_pods_go_before_the_node_groups(env, the_plan, event):
    log: list = []
    kube, aws = FakeKube(the_plan, log, pods_linger=2), Aws(log)
    if event is TICK:
        aws.ending_in(59)
    aws.nodegroups(current=2, target=0)
    aws.notified()
    result = aws.run(event, kube)
    assert result["serving"] == "drained"
    roles = drain.drain_plan(the_plan).roles
    assert {(e[1], e[2]) for e in log if e[0] == "patch"} == {(role, 0) for role in roles}
    assert len(kube.patches) == 1, "one patch for every role: the CRD refuses some at 0 and others not"
    # Every role is at 0 and the last pod listing came back empty before any node group changes.
    first_update = _first(log, "nodegroup")
    assert _last(log, "patch") < first_update
    listings = [i for i, e in enumerate(log) if e[:2] == ("pods", names.disaggregated_set(the_plan))]
    assert log[listings[-1]][2] == 0
    assert listings[-1] < first_update
    assert [e for e in log[first_update:] if e[0] != "nodegroup"] == []
    assert {e[1]: e[2] for e in log if e[0] == "nodegroup"} == dict.fromkeys(GROUPS, 0)
    assert "pods are gone" in aws.messages[0]
    assert all(t == "Bearer k8s-aws-v1.test" for t in kube.tokens)


def test_pods_that_never_go_do_not_keep_the_nodes(env, the_plan):
    """At the wait's deadline the node groups scale anyway, and the notification says what was left."""
    log: list = []
    kube, aws, clock = FakeKube(the_plan, log, pods_linger=None), Aws(log), FakeClock()
    start = clock.now
    aws.ending_in(55)
    aws.nodegroups(current=2, target=0)
    aws.notified()
    assert aws.run(TICK, kube, clock) == {"action": "drain", "serving": "timeout"}
    assert clock.now - start == pytest.approx(drain.POD_WAIT_MINUTES * 60)
    assert max(clock.sleeps) <= block_lifecycle.POLL_SECONDS
    assert [e[1] for e in log if e[0] == "nodegroup"] == list(GROUPS)
    assert "still there after 600 s" in aws.messages[0]
    assert "scaling the node groups anyway" in aws.messages[0]


def test_the_wait_fits_in_what_is_left_of_the_invocation(env, the_plan):
    log: list = []
    kube, aws, clock = FakeKube(the_plan, log, pods_linger=None), Aws(log), FakeClock()
    start = clock.now
    aws.ending_in(55)
    aws.nodegroups(current=2, target=0)
    aws.notified()
    aws.run(TICK, kube, clock, context=Context(remaining_ms=300_000))
    assert clock.now - start == pytest.approx(300 - block_lifecycle.RESERVE_SECONDS)


@pytest.mark.parametrize(
    ("failure", "words"),
    [
        (urllib.error.URLError(ConnectionRefusedError(111, "Connection refused")), "Connection refused"),
        (TimeoutError("timed out"), "timed out"),
        (ssl.SSLCertVerificationError(1, "certificate verify failed"), "certificate verify failed"),
    ],
)
def test_an_unreachable_api_still_scales_the_node_groups(env, the_plan, failure, words):
    log: list = []
    kube, aws = FakeKube(the_plan, log, unreachable=failure), Aws(log)
    aws.ending_in(50)
    aws.nodegroups(current=2, target=0)
    aws.notified()
    assert aws.run(TICK, kube) == {"action": "drain", "serving": "failed"}
    assert [e[0] for e in log] == ["nodegroup", "nodegroup"]
    (message,) = aws.messages
    assert "Serving objects NOT scaled to 0" in message
    assert words in message
    assert "kubectl -n pd-serving patch disaggregatedset glm51-2p2d-pd --type=json -p '[" in message
    assert '{"op":"replace","path":"/spec/roles/0/spec/replicas","value":0}' in message


def test_a_forbidden_api_still_scales_the_node_groups(env, the_plan):
    """Before the serving stack applies the Role, the group may do nothing: reported, nodes still go."""
    log: list = []
    kube, aws = FakeKube(the_plan, log), Aws(log)
    kube.role = {"rules": []}
    aws.ending_in(50)
    aws.nodegroups(current=2, target=0)
    aws.notified()
    assert aws.run(TICK, kube)["serving"] == "failed"
    assert "HTTP 403" in aws.messages[0]
    assert "forbidden" in aws.messages[0]
    assert [e[0] for e in log] == ["nodegroup", "nodegroup"]


def test_no_serving_objects_yet_is_not_an_error(env, the_plan):
    log: list = []
    kube, aws = FakeKube(the_plan, log, present=False), Aws(log)
    aws.ending_in(50)
    aws.nodegroups(current=2, target=0)
    aws.notified()
    assert aws.run(TICK, kube)["serving"] == "absent"
    assert "nothing to scale" in aws.messages[0]


def test_drained_groups_are_left_alone_without_calling_kubernetes(env, the_plan):
    """The clock keeps ticking until the block ends: once the groups are at 0 it does nothing."""
    log: list = []
    kube, aws = FakeKube(the_plan, log), Aws(log)
    aws.ending_in(30)
    aws.nodegroups(current=0, target=0)
    assert aws.run(TICK, kube) == {"action": "none"}
    assert log == []
    assert kube.tokens == []


# --- delivery ---------------------------------------------------------------------------------------


# The block's four instances: each decode-group node shares its bottom network node with a prefill-group node
# (EC2 picks which instance each node group gets), so the topology moves one prefill node into decode.
PATHS = {
    "i-0d1": ("nn-top", "nn-mid-1", "nn-bottom-1"),
    "i-0p1": ("nn-top", "nn-mid-1", "nn-bottom-1"),
    "i-0d2": ("nn-top", "nn-mid-2", "nn-bottom-2"),
    "i-0p2": ("nn-top", "nn-mid-2", "nn-bottom-2"),
}


def _joined(kube, *, late=(), after=0):
    for instance_id in PATHS:
        kube.join(instance_id, "decode" if "d" in instance_id[2:] else "prefill", after=after if instance_id in late else 0)


def test_delivered_scales_up_labels_from_the_topology_then_restores_serving(env, the_plan):
    """Delivery -> node groups scaled -> DescribeInstanceTopology -> Node labels -> serving restored, in that order.
    A pod already scheduled keeps its node (the label is a preferred node affinity, which the scheduler only
    weighs when it places a pod: https://kubernetes.io/docs/concepts/scheduling-eviction/assign-pod-node/#node-affinity),
    so the labels must be on the Nodes before the DisaggregatedSet gets its replicas back. Instances under the same
    bottom network node are the closest (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/how-ec2-instance-topology-works.html)."""
    log: list = []
    kube, aws = FakeKube(the_plan, log), Aws(log)
    kube.set_replicas(0)
    _joined(kube)
    aws.nodegroups(current=0, target=2)
    aws.topology(PATHS)
    aws.notified()
    assert aws.run(DELIVERED, kube) == {"action": "scale-up", "placement": "placed", "serving": "restored"}
    assert kube.placed() == {"ip-i-0d1": "decode", "ip-i-0p1": "decode", "ip-i-0d2": "prefill", "ip-i-0p2": "prefill"}
    assert _last(log, "nodegroup") < _first(log, "topology") < _first(log, "label")
    assert _last(log, "label") < _first(log, "patch")
    wanted = drain.drain_plan(the_plan).roles
    assert kube.replicas == wanted
    assert sorted((e[1], e[2]) for e in log if e[0] == "patch") == sorted(wanted.items())
    (message,) = aws.messages
    assert "Placement from the instance topology: prefill on i-0d2, i-0p2; decode on i-0d1, i-0p1" in message
    assert "Serving restored to the plan's replicas (prefill: 1, decode: 1)" in message


def test_nodes_that_join_during_the_wait_are_labelled_before_serving(env, the_plan):
    """EKS scales the group in minutes and the kubelet registers the Node later still: the function polls
    (never more than POLL_SECONDS at a time) until every planned node has joined."""
    log: list = []
    kube, aws, clock = FakeKube(the_plan, log), Aws(log), FakeClock()
    kube.set_replicas(0)
    _joined(kube, late=("i-0p2",), after=3)
    aws.nodegroups(current=0, target=2)
    aws.topology(PATHS)
    aws.notified()
    assert aws.run(DELIVERED, kube, clock)["placement"] == "placed"
    assert [e[1] for e in log if e[0] == "nodes"] == [3, 3, 4]
    assert clock.sleeps == [block_lifecycle.POLL_SECONDS] * 2
    assert len(kube.placed()) == 4
    assert _last(log, "label") < _first(log, "patch")


def test_topology_not_reported_yet_is_waited_for(env, the_plan):
    """EC2 answers DescribeInstanceTopology only for running instances and may lag just after launch
    (API reference, DescribeInstanceTopology: eventual consistency); the function asks again before it places."""
    log: list = []
    kube, aws, clock = FakeKube(the_plan, log), Aws(log), FakeClock()
    kube.set_replicas(0)
    _joined(kube)
    aws.nodegroups(current=0, target=2)
    aws.topology(PATHS, reported={"i-0d1", "i-0d2", "i-0p1"})
    aws.topology(PATHS)
    aws.notified()
    assert aws.run(DELIVERED, kube, clock)["placement"] == "placed"
    assert [e[0] for e in log].count("topology") == 2
    assert kube.placed()["ip-i-0p1"] == "decode"


def test_late_nodes_get_a_bounded_wait_then_serving_anyway_with_a_notice(env, the_plan):
    """A node that has not joined by the deadline never holds serving: no label is written, the roles get
    their replicas back (each pod then prefers its node group's role) and the notification says what to run."""
    log: list = []
    kube, aws, clock = FakeKube(the_plan, log), Aws(log), FakeClock()
    start = clock.now
    kube.set_replicas(0)
    _joined(kube, late=("i-0p2",), after=10_000)
    aws.nodegroups(current=0, target=2)
    aws.notified()
    assert aws.run(DELIVERED, kube, clock) == {"action": "scale-up", "placement": "late", "serving": "restored"}
    assert clock.now - start == pytest.approx(placement.JOIN_WAIT_MINUTES * 60)
    assert max(clock.sleeps) <= block_lifecycle.POLL_SECONDS
    assert kube.placed() == {}
    assert "topology" not in [e[0] for e in log]
    assert kube.replicas == drain.drain_plan(the_plan).roles
    (message,) = aws.messages
    assert (
        "Only 3 of 4 planned GPU nodes joined within 720 s: serving is restored without placement (each pod prefers "
        "its node group's role). Once every node has joined: pdkit topology --assign (pods already running keep their "
        "nodes until they restart)."
    ) in message
    assert "Serving restored" in message


def test_the_join_wait_fits_in_what_is_left_of_the_invocation(env, the_plan):
    log: list = []
    kube, aws, clock = FakeKube(the_plan, log), Aws(log), FakeClock()
    start = clock.now
    aws.nodegroups(current=0, target=2)
    aws.notified()
    assert aws.run(DELIVERED, kube, clock, context=Context(remaining_ms=300_000))["placement"] == "late"
    assert clock.now - start == pytest.approx(300 - block_lifecycle.RESERVE_SECONDS)


def test_a_refused_topology_call_still_restores_serving(env, the_plan):
    """EC2 refuses DescribeInstanceTopology without ec2:DescribeInstanceTopology (EC2 User Guide, instance topology
    prerequisites: IAM permissions): placement is reported as not applied, serving still comes back."""
    log: list = []
    kube, aws = FakeKube(the_plan, log), Aws(log)
    kube.set_replicas(0)
    _joined(kube)
    aws.nodegroups(current=0, target=2)
    aws.stubs["ec2"].add_client_error("describe_instance_topology", "UnauthorizedOperation", "You are not authorized", 403)
    aws.notified()
    assert aws.run(DELIVERED, kube) == {"action": "scale-up", "placement": "failed", "serving": "restored"}
    assert kube.placed() == {}
    assert "Placement NOT applied" in aws.messages[0]
    assert "UnauthorizedOperation" in aws.messages[0]
    # What the operator runs once the permission is there.
    assert (
        "Serving is restored without it (each pod prefers its node group's role); label the nodes with pdkit topology --assign."
        in aws.messages[0]
    )


def test_without_the_node_cluster_role_placement_fails_and_serving_is_restored(env, the_plan):
    """Nodes are cluster-scoped: the namespaced Role cannot list or patch them (RBAC docs, Role and ClusterRole:
    https://kubernetes.io/docs/reference/access-authn-authz/rbac/#role-and-clusterrole)."""
    log: list = []
    kube, aws = FakeKube(the_plan, log), Aws(log)
    kube.node_role = {"rules": []}
    kube.set_replicas(0)
    _joined(kube)
    aws.nodegroups(current=0, target=2)
    aws.notified()
    assert aws.run(DELIVERED, kube)["placement"] == "failed"
    assert "HTTP 403" in aws.messages[0]
    assert kube.replicas == drain.drain_plan(the_plan).roles


def test_delivered_with_an_unreachable_api_still_scales_up_and_says_so(env, the_plan):
    log: list = []
    kube, aws = FakeKube(the_plan, log, unreachable=urllib.error.URLError("no route to host")), Aws(log)
    aws.nodegroups(current=0, target=2)
    aws.notified()
    assert aws.run(DELIVERED, kube)["serving"] == "failed"
    assert [e[0] for e in log] == ["nodegroup", "nodegroup"]
    assert "Serving objects NOT restored" in aws.messages[0]
    assert "kubectl -n pd-serving patch disaggregatedset glm51-2p2d-pd" in aws.messages[0]
    assert '{"op":"replace","path":"/spec/roles/1/spec/replicas","value":1}' in aws.messages[0]


# --- the token ----------------------------------------------------------------------------------------

ACCESS_KEY, SECRET_KEY = "AKIDEXAMPLE", "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
SIGNED_AT = dt.datetime(2026, 12, 1, 11, 0, 0)


@pytest.fixture
def frozen_signing_time(monkeypatch):
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda *a, **k: SIGNED_AT)


def _session():
    return boto3.session.Session(aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY, region_name="eu-south-2")


def _url_of(token):
    assert token.startswith(kube_api.TOKEN_PREFIX)
    body = token.removeprefix(kube_api.TOKEN_PREFIX)
    assert not set(body) & set("=+/"), "base64url without padding"
    return base64.urlsafe_b64decode(body + "=" * (-len(body) % 4)).decode()


def _sigv4(key, date, region, service, string_to_sign):
    k = hmac.new(("AWS4" + key).encode(), date.encode(), hashlib.sha256).digest()
    for part in (region, service, "aws4_request"):
        k = hmac.new(k, part.encode(), hashlib.sha256).digest()
    return hmac.new(k, string_to_sign.encode(), hashlib.sha256).hexdigest()


def test_token_is_a_presigned_get_caller_identity_for_this_cluster(frozen_signing_time):
    token = kube_api.token(CLUSTER, session=_session())
    assert token == kube_api.token(CLUSTER, session=_session()), "deterministic for fixed credentials and time"
    url = urllib.parse.urlsplit(_url_of(token))
    assert (url.scheme, url.netloc, url.path) == ("https", "sts.eu-south-2.amazonaws.com", "/")
    query = dict(urllib.parse.parse_qsl(url.query))
    assert query["Action"] == "GetCallerIdentity"
    assert query["Version"] == "2011-06-15"
    assert query["X-Amz-Expires"] == "60"
    assert query["X-Amz-Algorithm"] == "AWS4-HMAC-SHA256"
    assert query["X-Amz-Date"] == "20261201T110000Z"
    assert query["X-Amz-Credential"] == f"{ACCESS_KEY}/20261201/eu-south-2/sts/aws4_request"
    assert query["X-Amz-SignedHeaders"] == "host;x-k8s-aws-id"
    # Recompute SigV4 independently: the signature holds only if x-k8s-aws-id carried this cluster's name.
    unsigned = sorted((k, v) for k, v in query.items() if k != "X-Amz-Signature")
    canonical_query = "&".join(f"{urllib.parse.quote(k, safe='-_.~')}={urllib.parse.quote(v, safe='-_.~')}" for k, v in unsigned)
    for cluster, valid in ((CLUSTER, True), ("someone-elses-cluster", False)):
        canonical = "\n".join(
            [
                "GET",
                "/",
                canonical_query,
                f"host:{url.netloc}",
                f"x-k8s-aws-id:{cluster}",
                "",
                "host;x-k8s-aws-id",
                hashlib.sha256(b"").hexdigest(),
            ]
        )
        to_sign = "\n".join(
            ["AWS4-HMAC-SHA256", "20261201T110000Z", "20261201/eu-south-2/sts/aws4_request", hashlib.sha256(canonical.encode()).hexdigest()]
        )
        assert (_sigv4(SECRET_KEY, "20261201", "eu-south-2", "sts", to_sign) == query["X-Amz-Signature"]) is valid


@pytest.mark.parametrize("session_token", ["a", "ab", "abc"])
def test_token_never_carries_base64_padding(frozen_signing_time, session_token):
    """Lambda credentials carry a session token, which lands in the URL: three lengths cover every
    remainder mod 3, so at least one URL would need padding."""
    session = boto3.session.Session(
        aws_access_key_id=ACCESS_KEY, aws_secret_access_key=SECRET_KEY, aws_session_token=session_token, region_name="eu-south-2"
    )
    body = kube_api.token(CLUSTER, session=session).removeprefix(kube_api.TOKEN_PREFIX)
    assert "=" not in body
    assert f"X-Amz-Security-Token={session_token}&" in _url_of(kube_api.TOKEN_PREFIX + body)


def test_each_request_gets_a_fresh_token(frozen_signing_time, monkeypatch):
    tokens = kube_api.Tokens(CLUSTER, session=_session())
    first = tokens()
    monkeypatch.setattr(botocore.auth, "get_current_datetime", lambda *a, **k: SIGNED_AT + dt.timedelta(minutes=10))
    assert "X-Amz-Date=20261201T111000Z" in _url_of(tokens())
    assert tokens() != first


# --- real TLS against the cluster CA ----------------------------------------------------------------


def _certificates():
    """A CA and a server certificate for 127.0.0.1 it signed; and an unrelated CA."""
    x509 = pytest.importorskip("cryptography.x509")
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    def name(cn):
        return x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, cn)])

    now = dt.datetime.now(dt.UTC)

    def certificate(subject, key, issuer, issuer_key, *, ca):
        builder = (
            x509.CertificateBuilder()
            .subject_name(name(subject))
            .issuer_name(name(issuer))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - dt.timedelta(minutes=5))
            .not_valid_after(now + dt.timedelta(hours=1))
            .add_extension(x509.BasicConstraints(ca=ca, path_length=None), critical=True)
        )
        if ca:
            builder = builder.add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
        else:
            import ipaddress

            builder = builder.add_extension(
                x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]), critical=False
            )
        return builder.sign(issuer_key, hashes.SHA256())

    ca_key, other_key, server_key = (ec.generate_private_key(ec.SECP256R1()) for _ in range(3))
    ca = certificate("kubernetes", ca_key, "kubernetes", ca_key, ca=True)
    other = certificate("other", other_key, "other", other_key, ca=True)
    server = certificate("kube-apiserver", server_key, "kubernetes", ca_key, ca=False)
    pem = serialization.Encoding.PEM
    key_pem = server_key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    return ca.public_bytes(pem), other.public_bytes(pem), server.public_bytes(pem), key_pem


class _ApiHandler(BaseHTTPRequestHandler):
    seen: ClassVar[list[tuple[str, str | None]]] = []

    def do_GET(self):
        self.seen.append((self.path, self.headers.get("Authorization")))
        body = json.dumps({"kind": "PodList", "items": [{"metadata": {"name": "p-0"}}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


@pytest.fixture
def tls_api(tmp_path):
    ca, other, cert, key = _certificates()
    (tmp_path / "cert.pem").write_bytes(cert)
    (tmp_path / "key.pem").write_bytes(key)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(tmp_path / "cert.pem", tmp_path / "key.pem")
    server = ThreadingHTTPServer(("127.0.0.1", 0), _ApiHandler)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    _ApiHandler.seen = []
    try:
        yield f"https://127.0.0.1:{server.server_address[1]}", base64.b64encode(ca).decode(), base64.b64encode(other).decode()
    finally:
        server.shutdown()
        server.server_close()


def test_the_api_is_reached_over_tls_trusting_the_cluster_ca(tls_api):
    endpoint, ca, _ = tls_api
    api = kube_api.KubeApi(endpoint, bearer=lambda: "k8s-aws-v1.abc", opener=kube_api.tls_opener(ca), timeout=5)
    assert api.pods("pd-serving", {names.DS_NAME_LABEL: "glm51-2p2d-pd"}) == ["p-0"]
    ((path, auth),) = _ApiHandler.seen
    assert path == "/api/v1/namespaces/pd-serving/pods?labelSelector=disaggregatedset.x-k8s.io%2Fname%3Dglm51-2p2d-pd"
    assert auth == "Bearer k8s-aws-v1.abc"


def test_a_server_the_cluster_ca_did_not_sign_is_refused(tls_api):
    endpoint, _, other = tls_api
    api = kube_api.KubeApi(endpoint, bearer=lambda: "k8s-aws-v1.abc", opener=kube_api.tls_opener(other), timeout=5)
    with pytest.raises(kube_api.ApiError, match=r"CERTIFICATE_VERIFY_FAILED|certificate verify failed"):
        api.pods("pd-serving", {names.DS_NAME_LABEL: "x"})
    assert _ApiHandler.seen == []


def test_plain_http_endpoints_are_refused():
    with pytest.raises(ValueError, match="https"):
        kube_api.KubeApi("http://10.0.0.1", bearer=lambda: "t", opener=object())


# --- the serving objects and the template ---------------------------------------------------------


def test_the_role_allows_exactly_what_the_lifecycle_calls(the_plan):
    role = manifests.block_lifecycle_role(the_plan)
    binding = manifests.block_lifecycle_binding(the_plan)
    ds = [drain.drain_plan(the_plan).disaggregated_set]
    assert role["metadata"]["namespace"] == binding["metadata"]["namespace"] == names.namespace(the_plan)
    assert role["rules"] == [
        {"apiGroups": ["disaggregatedset.x-k8s.io"], "resources": ["disaggregatedsets"], "resourceNames": ds, "verbs": ["get", "patch"]},
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["list"]},
    ]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": role["metadata"]["name"]}
    assert binding["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": drain.LIFECYCLE_GROUP}]
    objs = manifests.render(the_plan, inputs.from_plan(the_plan))
    assert role in objs
    assert binding in objs


def test_the_cluster_role_may_only_read_and_patch_nodes(the_plan):
    """Labelling a Node is a `patch` of a cluster-scoped object, which only a ClusterRole can grant; nothing more."""
    role = manifests.block_lifecycle_node_role(the_plan)
    binding = manifests.block_lifecycle_node_binding(the_plan)
    assert "namespace" not in role["metadata"]
    assert "namespace" not in binding["metadata"]
    assert role["rules"] == [{"apiGroups": [""], "resources": ["nodes"], "verbs": ["get", "list", "patch"]}]
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": role["metadata"]["name"]}
    assert binding["subjects"] == [{"apiGroup": "rbac.authorization.k8s.io", "kind": "Group", "name": drain.LIFECYCLE_GROUP}]
    objs = manifests.render(the_plan, inputs.from_plan(the_plan))
    assert role in objs
    assert binding in objs


def test_an_admission_policy_narrows_the_patch_to_the_placed_role_label(the_plan):
    """RBAC grants `patch` on a whole Node; a ValidatingAdmissionPolicy bound with Deny
    (admissionregistration.k8s.io/v1, GA since 1.30: https://kubernetes.io/docs/reference/access-authn-authz/validating-admission-policy/)
    checks each UPDATE by the lifecycle group (matchConditions on request.userInfo.groups) against oldObject:
    spec, annotations and every other label unchanged, the label's value a role. Both objects pass
    kubernetes-validate's strict schema of the cluster's version."""
    import kubernetes_validate

    policy = manifests.block_lifecycle_node_policy(the_plan)
    binding = manifests.block_lifecycle_node_policy_binding(the_plan)
    for obj in (policy, binding):
        kubernetes_validate.validate(obj, the_plan.kubernetes_version, strict=True)
    spec = policy["spec"]
    assert spec["failurePolicy"] == "Fail"
    assert spec["matchConstraints"]["resourceRules"] == [
        {"apiGroups": [""], "apiVersions": ["v1"], "operations": ["UPDATE"], "resources": ["nodes"]}
    ]
    assert [c["expression"] for c in spec["matchConditions"]] == [f"'{drain.LIFECYCLE_GROUP}' in request.userInfo.groups"]
    rules = " ".join(v["expression"] for v in spec["validations"])
    assert "object.spec == oldObject.spec" in rules
    assert "object.metadata.annotations == oldObject.metadata.annotations" in rules
    assert f"k == '{PLACED_ROLE_LABEL}' || (k in oldObject.metadata.labels" in rules
    assert "['prefill', 'decode']" in rules
    assert binding["spec"] == {"policyName": policy["metadata"]["name"], "validationActions": ["Deny"]}
    objs = manifests.render(the_plan, inputs.from_plan(the_plan))
    assert objs.index(policy) < objs.index(binding)


def _lifecycle(kit):
    resources = kit.template_json("capacity")["Resources"]
    (fn,) = [r for r in resources.values() if r["Properties"].get("Handler") == "pdkit.functions.block_lifecycle.handler"]
    return resources, fn


def _output_of(value):
    return value["Fn::GetStackOutput"]["OutputName"] if "Fn::GetStackOutput" in value else value["Fn::ImportValue"]


def test_lifecycle_function_knows_the_api_and_the_serving_objects(kit):
    _, fn = _lifecycle(kit)
    env = fn["Properties"]["Environment"]["Variables"]
    assert "Endpoint" in _output_of(env["KUBE_ENDPOINT"])
    assert "CertificateAuthorityData" in _output_of(env["KUBE_CA_DATA"])
    wanted = drain.drain_plan(kit.plan).lifecycle_environment()
    assert env["SERVING"] == wanted["SERVING"]
    assert json.loads(env["SERVING"]) == {
        "namespace": "pd-serving",
        "pod_label": names.DS_NAME_LABEL,
        "disaggregated_set": "glm51-2p2d-pd",
        "roles": [{"name": "prefill", "replicas": 1}, {"name": "decode", "replicas": 1}],
    }
    assert env["DRAIN_WAIT_SECONDS"] == "600"
    assert json.loads(env["PLACEMENT"]) == {"role_label": ROLE_LABEL, "nodes": {"prefill": 2, "decode": 2}, "wait_seconds": 720}
    # The pod wait, or the node join wait, and the node group calls fit in one invocation.
    assert fn["Properties"]["Timeout"] == 900
    assert fn["Properties"]["Timeout"] >= int(env["DRAIN_WAIT_SECONDS"]) + block_lifecycle.RESERVE_SECONDS
    assert fn["Properties"]["Timeout"] >= json.loads(env["PLACEMENT"])["wait_seconds"] + block_lifecycle.RESERVE_SECONDS


def test_lifecycle_function_knows_its_account_and_may_tag_only_its_block(kit):
    """The handler ignores events of another account (ACCOUNT_ID, the stack's own), and the drain marker is the one
    write it makes on EC2: CreateTags on this block's capacity-reservation ARN, no wildcard."""
    resources, fn = _lifecycle(kit)
    env = fn["Properties"]["Environment"]["Variables"]
    assert env["ACCOUNT_ID"] == {"Ref": "AWS::AccountId"}
    tagging = [
        st
        for r in resources.values()
        if r["Type"] == "AWS::IAM::ManagedPolicy"
        for st in r["Properties"]["PolicyDocument"]["Statement"]
        if "ec2:CreateTags" in ([st["Action"]] if isinstance(st["Action"], str) else st["Action"])
    ]
    (statement,) = tagging
    (arn,) = [statement["Resource"]] if not isinstance(statement["Resource"], list) else statement["Resource"]
    text = json.dumps(arn)
    assert ":capacity-reservation/" in text
    assert kit.plan.reservation_id in text
    assert "*" not in text


def test_lifecycle_role_maps_to_the_kubernetes_group_with_no_access_policy(kit):
    resources, fn = _lifecycle(kit)
    (entry,) = [r["Properties"] for r in resources.values() if r["Type"] == "AWS::EKS::AccessEntry"]
    assert entry["KubernetesGroups"] == [drain.LIFECYCLE_GROUP] == ["pdkit:block-lifecycle"]
    assert entry["PrincipalArn"] == fn["Properties"]["Role"]
    assert entry["Type"] == "STANDARD"
    assert "AccessPolicies" not in entry, "RBAC in the serving namespace says what it may do, nothing cluster-wide"


def test_cluster_security_group_admits_the_function_on_443_only(kit):
    resources, fn = _lifecycle(kit)
    (function_sg,) = fn["Properties"]["VpcConfig"]["SecurityGroupIds"]
    rules = [r["Properties"] for r in resources.values() if r["Type"] == "AWS::EC2::SecurityGroupIngress"]
    (rule,) = [r for r in rules if r.get("SourceSecurityGroupId") == function_sg]
    assert (rule["IpProtocol"], rule["FromPort"], rule["ToPort"]) == ("tcp", 443, 443)
    assert "ClusterSecurityGroupId" in _output_of(rule["GroupId"])
    cluster = kit.template_json("cluster")["Resources"]
    assert not any("BlockLifecycle" in json.dumps(r) for r in cluster.values()), "nothing in the cluster stack refers back"


# What the lifecycle function imports: the placement choice runs in it, so placement.py and topology.py ship too.
SHIPPED = (
    "model/reservation.py",
    "model/topology.py",
    "model/placement.py",
    "render/serving/scale.py",
    "functions/kube_api.py",
    "functions/block_lifecycle.py",
)
# Every package above a shipped module (stacks/function_code.py adds their __init__.py to the bundle).
PACKAGES = sorted({str(parent / "__init__.py") for module in SHIPPED for parent in Path(module).parents})


def test_lifecycle_bundle_imports_with_only_what_it_ships(tmp_path, kit):
    import shutil
    import subprocess
    import sys

    from pdkit.model import profile_files

    root = profile_files.ROOT / "pdkit"
    for module in (*SHIPPED, *PACKAGES):
        (tmp_path / "pdkit" / module).parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(root / module, tmp_path / "pdkit" / module)
    code = (
        "import sys, pdkit.functions.block_lifecycle; "
        "assert not {'yaml', 'pydantic', 'pdkit.model.plan'} & set(sys.modules), sorted(m for m in sys.modules if m.startswith('pdkit'))"
    )
    subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env={"PYTHONPATH": str(tmp_path)}, check=True)


def test_the_deployed_lifecycle_asset_holds_its_own_modules(kit):
    from pathlib import Path

    _, fn = _lifecycle(kit)
    asset = Path(kit.assembly.directory) / ("asset." + fn["Properties"]["Code"]["S3Key"].removesuffix(".zip"))
    files = {str(p.relative_to(asset)) for p in asset.rglob("*.py")}
    assert {f"pdkit/{module}" for module in (*SHIPPED, *PACKAGES)} <= files


# --- the DisaggregatedSet patch -------------------------------------------------------------------------


def test_the_drain_patches_the_disaggregated_set_not_its_leader_worker_sets(env, the_plan):
    """The DisaggregatedSet controller owns the LeaderWorkerSets it creates and puts their replicas back
    (kubernetes-sigs/lws v0.10.0 docs/examples/disaggregatedset.md: scale a role by patching
    /spec/roles/<i>/spec/replicas on the DisaggregatedSet). The JSON patch sets every role in one request
    (the CRD's CEL rule refuses a mix of zero and non-zero) and tests each role's name at its index."""
    log: list = []
    kube, aws = FakeKube(the_plan, log, pods_linger=0), Aws(log)
    aws.ending_in(59)
    aws.nodegroups(current=2, target=0)
    aws.notified()
    assert aws.run(TICK, kube)["serving"] == "drained"
    (ops,) = kube.patches
    assert ops == [
        {"op": "test", "path": "/spec/roles/0/name", "value": "prefill"},
        {"op": "replace", "path": "/spec/roles/0/spec/replicas", "value": 0},
        {"op": "test", "path": "/spec/roles/1/name", "value": "decode"},
        {"op": "replace", "path": "/spec/roles/1/spec/replicas", "value": 0},
    ]
    assert kube.replicas == {"prefill": 0, "decode": 0}


def test_a_reordered_disaggregated_set_is_refused_not_mis_scaled(env, the_plan):
    """RFC 6902: a failed `test` fails the whole patch. If someone reordered spec.roles, no role is scaled
    to another's replicas; the drain reports it and the node groups still go."""
    log: list = []
    kube, aws = FakeKube(the_plan, log), Aws(log)
    kube.spec["roles"].reverse()
    aws.ending_in(50)
    aws.nodegroups(current=2, target=0)
    aws.notified()
    assert aws.run(TICK, kube)["serving"] == "failed"
    assert "test failed" in aws.messages[0]
    assert [e[0] for e in log] == ["nodegroup", "nodegroup"]


# --- paths one step past the tested ones (mutation testing, issue 19) ----------------------------------


def test_pods_that_cannot_be_listed_after_the_scale_still_free_the_nodes(env, the_plan):
    """Scaled to 0, but the pod listing is refused (a Role without list on pods: the API server answers 403,
    https://kubernetes.io/docs/reference/access-authn-authz/rbac/): reported as unconfirmed, and the node groups go."""
    log: list = []
    kube, aws = FakeKube(the_plan, log), Aws(log)
    kube.role = {"rules": [r for r in kube.role["rules"] if "pods" not in r["resources"]]}
    aws.ending_in(50)
    aws.nodegroups(current=2, target=0)
    aws.notified()
    assert aws.run(TICK, kube) == {"action": "drain", "serving": "unconfirmed"}
    assert kube.replicas == {"prefill": 0, "decode": 0}
    assert [e[0] for e in log] == ["patch", "patch", "nodegroup", "nodegroup"]
    (message,) = aws.messages
    ds = names.disaggregated_set(the_plan)
    assert f"Serving scaled to 0 ({ds} prefill, {ds} decode), but its pods could not be listed: " in message
    assert "HTTP 403" in message


def test_delivered_before_the_serving_stack_restores_nothing_and_says_what_to_deploy(env, the_plan):
    """No DisaggregatedSet yet (the API server answers 404 to the patch): serving is 'partial', not an error."""
    log: list = []
    kube, aws = FakeKube(the_plan, log, present=False), Aws(log)
    _joined(kube)
    aws.nodegroups(current=0, target=2)
    aws.topology(PATHS)
    aws.notified()
    assert aws.run(DELIVERED, kube) == {"action": "scale-up", "placement": "placed", "serving": "partial"}
    (message,) = aws.messages
    ds = names.disaggregated_set(the_plan)
    assert f"No DisaggregatedSet {ds} in {names.namespace(the_plan)}; deploy the serving stack." in message


def test_topology_follows_next_token_and_batches_of_100_ids():
    """DescribeInstanceTopology takes at most 100 instance ids per call and pages with NextToken
    (EC2 API reference, DescribeInstanceTopology: InstanceIds 'Maximum 100', NextToken); an instance
    without NetworkNodes is left out (it is not placed on a guess)."""
    ec2 = _client("ec2")
    stub = Stubber(ec2)
    ids = [f"i-{n:017x}" for n in range(101)]

    def item(i, nodes=True):
        return {"InstanceId": i, "InstanceType": "p5en.48xlarge", **({"NetworkNodes": ["nn-a", i]} if nodes else {})}

    stub.add_response("describe_instance_topology", {"Instances": [item(ids[0])], "NextToken": "t1"}, {"InstanceIds": ids[:100]})
    stub.add_response(
        "describe_instance_topology",
        {"Instances": [item(ids[1]), item(ids[2], nodes=False)]},
        {"InstanceIds": ids[:100], "NextToken": "t1"},
    )
    stub.add_response("describe_instance_topology", {"Instances": [item(ids[100])]}, {"InstanceIds": ids[100:]})
    with stub:
        paths = block_lifecycle._topology(ec2, ids)
    stub.assert_no_pending_responses()
    assert paths == {i: ("nn-a", i) for i in (ids[0], ids[1], ids[100])}


def test_the_runbook_drain_commands_are_the_lifecycles_patch(the_plan):
    """runbooks/02-serve.md and `pdkit nodes` print these: the same JSON patch the function sends (RFC 6902 with
    a `test` per role), then `kubectl wait --for=delete` on the DisaggregatedSet's pods, bounded by the same wait."""
    plan = drain.drain_plan(the_plan)
    ds, ns = names.disaggregated_set(the_plan), names.namespace(the_plan)

    def patched(counts):
        return [
            "kubectl",
            "-n",
            ns,
            "patch",
            "disaggregatedset",
            ds,
            "--type=json",
            "-p",
            json.dumps(roles_patch(counts), separators=(",", ":")),
        ]

    assert plan.kubectl_scale_down() == [patched({"prefill": 0, "decode": 0})]
    assert plan.kubectl_restore() == [patched({"prefill": 1, "decode": 1})]
    assert plan.kubectl_wait_gone() == [
        ["kubectl", "-n", ns, "wait", "--for=delete", "pod", "-l", f"{names.DS_NAME_LABEL}={ds}", "--timeout=10m"]
    ]
    assert plan.lifecycle_environment()["DRAIN_WAIT_SECONDS"] == "600"


def test_the_function_builds_its_ec2_eks_and_sns_clients_from_the_lambda_environment(monkeypatch):
    """Lambda sets AWS_REGION and the role's credentials in the environment (Lambda developer guide, defined runtime
    environment variables), so each client is boto3.client(service) with nothing else."""
    made: list[tuple] = []
    monkeypatch.setattr(boto3, "client", lambda *a, **kw: made.append((a, kw)) or f"client:{a[0]}")
    assert block_lifecycle._clients() == {"ec2": "client:ec2", "eks": "client:eks", "sns": "client:sns"}
    assert made == [(("ec2",), {}), (("eks",), {}), (("sns",), {})]


def test_the_lifecycle_environment_is_canonical_json(the_plan):
    """The SERVING variable is part of the capacity template: sorted keys keep it byte-identical from one synth
    to the next, so a deploy that changes nothing does not update the function."""
    env = drain.drain_plan(the_plan).lifecycle_environment()
    assert env["SERVING"] == json.dumps(json.loads(env["SERVING"]), sort_keys=True)


def test_the_drain_knows_each_roles_node_group(the_plan):
    assert drain.drain_plan(the_plan).node_groups == ("glm51-2p2d-prefill", "glm51-2p2d-decode")


# --- survivors of the block_lifecycle mutation run (issue 19) -------------------------------------------


def test_without_an_injected_api_the_handler_connects_from_the_lambda_environment(env, the_plan, monkeypatch):
    """In Lambda nothing is injected: the handler builds its Kubernetes client from the function's own environment
    (CLUSTER_ENDPOINT, CLUSTER_CA... set by the capacity stack), so the default connector must read os.environ."""
    log: list = []
    kube, aws = FakeKube(the_plan, log, pods_linger=0), Aws(log)
    seen: list = []
    monkeypatch.setattr(kube_api, "from_env", lambda environ: seen.append(environ) or kube.connect())
    aws.nodegroups(current=2, target=0)
    aws.notified()
    for stub in aws.stubs.values():
        stub.activate()
    clients = {"ec2": aws.ec2, "eks": aws.eks, "sns": aws.sns}
    clock = FakeClock()
    result = block_lifecycle.handler(EXPIRING, None, clients=clients, now=NOW, clock=clock, sleep=clock.sleep)
    assert result == {"action": "scale-down", "serving": "drained"}
    ds = names.disaggregated_set(the_plan)
    assert f"Serving scaled to 0 ({ds} prefill, {ds} decode) and its pods are gone." in aws.messages[0]
    assert seen
    assert all(environ is block_lifecycle.os.environ for environ in seen)


def test_the_expiration_warnings_wait_fits_in_what_is_left_of_the_invocation(env, the_plan):
    """EC2 sends the warning at T-40 (EC2 User Guide, Capacity Blocks: EventBridge events); Lambda stops the
    function at its timeout, so the pod wait of this path is bounded by what the invocation has left too,
    keeping RESERVE_SECONDS for the node group calls that free the instances."""
    log: list = []
    kube, aws, clock = FakeKube(the_plan, log, pods_linger=None), Aws(log), FakeClock()
    start = clock.now
    aws.nodegroups(current=2, target=0)
    aws.notified()
    assert aws.run(EXPIRING, kube, clock, context=Context(remaining_ms=300_500)) == {"action": "scale-down", "serving": "timeout"}
    # To the deadline itself, the last poll included (0.5 s), not a second short of it.
    assert clock.now - start == pytest.approx(300.5 - block_lifecycle.RESERVE_SECONDS)
    ds = names.disaggregated_set(the_plan)
    assert f"Serving scaled to 0 ({ds} prefill, {ds} decode) but 4 pod(s) of {ds} were still there after 210 s" in aws.messages[0]


def test_without_an_injected_time_the_clock_compares_in_utc(env, the_plan):
    """EC2 returns EndDate as an aware UTC timestamp (botocore parses ISO 8601 with its zone): the handler's own
    `now` must be aware UTC too, or the T-60 comparison raises instead of draining."""
    log: list = []
    kube, aws = FakeKube(the_plan, log, pods_linger=0), Aws(log)
    end = dt.datetime.now(dt.UTC) + dt.timedelta(minutes=30)
    aws.stubs["ec2"].add_response(
        "describe_capacity_reservations",
        {"CapacityReservations": [{"CapacityReservationId": RID, "State": "active", "EndDate": end}]},
        {"CapacityReservationIds": [RID]},
    )
    aws.nodegroups(current=2, target=0)
    aws.notified()
    for stub in aws.stubs.values():
        stub.activate()
    clients = {"ec2": aws.ec2, "eks": aws.eks, "sns": aws.sns}
    clock = FakeClock()
    result = block_lifecycle.handler(TICK, None, clients=clients, kube=kube.connect, clock=clock, sleep=clock.sleep)
    assert result == {"action": "drain", "serving": "drained"}


@pytest.mark.parametrize(
    ("wait", "remaining_ms", "bounded"),
    [(600.0, 300_000, 210.0), (100.0, 300_000, 100.0), (600.0, 60_000, 0.0), (600.0, None, 600.0)],
)
def test_a_wait_is_what_the_invocation_has_left_minus_the_reserve(wait, remaining_ms, bounded):
    """Lambda's context reports milliseconds left before the timeout (Lambda developer guide, Python context object:
    get_remaining_time_in_millis); the wait keeps RESERVE_SECONDS of them for the node group calls and is never
    negative, so an invocation already short of time goes straight to the node groups."""
    context = None if remaining_ms is None else Context(remaining_ms)
    assert block_lifecycle._bounded(wait, context) == bounded


def test_a_node_group_without_a_desired_size_counts_as_zero():
    """EKS's NodegroupScalingConfig has every field optional (botocore eks model, DescribeNodegroup): a group
    reported without desiredSize has no nodes to drain and must not break the handler."""
    eks = _client("eks")
    stub = Stubber(eks)
    stub.add_response("describe_nodegroup", {"nodegroup": {"scalingConfig": {}}}, {"clusterName": CLUSTER, "nodegroupName": "g"})
    with stub:
        assert block_lifecycle._desired(eks, CLUSTER, "g") == 0


def test_a_one_node_group_keeps_its_maximum_at_one_and_reports_no_change_when_converged():
    """A node group's maxSize is the plan's size (at least 1: EKS refuses maxSize 0, UpdateNodegroupConfig API
    reference), never more than the Capacity Block reserved; a group already at its target is not updated and
    the call reports False, so no notification goes out."""
    eks = _client("eks")
    stub = Stubber(eks)
    stub.add_response(
        "update_nodegroup_config",
        {"update": {"id": "u"}},
        {"clusterName": CLUSTER, "nodegroupName": "g", "scalingConfig": {"minSize": 0, "maxSize": 1, "desiredSize": 1}},
    )
    with stub:
        assert block_lifecycle._apply(eks, CLUSTER, {"g": 1}, {"g": 0}, up=True) is True
        assert block_lifecycle._apply(eks, CLUSTER, {"g": 1}, {"g": 1}, up=True) is False
    stub.assert_no_pending_responses()


def test_the_notification_has_the_lifecycle_subject_and_lists_every_groups_size(monkeypatch):
    """SNS uses Subject as the e-mail subject line (SNS Publish API reference), the one operators filter on."""
    monkeypatch.setenv("TOPIC_ARN", "arn:aws:sns:eu-south-2:123456789012:t")
    sns = _client("sns")
    stub = Stubber(sns)
    stub.add_response(
        "publish",
        {"MessageId": "m"},
        {"TopicArn": "arn:aws:sns:eu-south-2:123456789012:t", "Subject": "Capacity Block lifecycle", "Message": "hello"},
    )
    with stub:
        block_lifecycle._notify(sns, "hello")
    stub.assert_no_pending_responses()
    assert block_lifecycle._sizes({"a": 2, "b": 1}) == "a to 2, b to 1"


def test_a_topology_page_without_instances_places_nothing():
    """EC2's query protocol leaves an empty list out of the answer (botocore parses no Instances key), so a page
    without instances is an instance EC2 does not report yet, not an error."""
    ec2 = _client("ec2")
    stub = Stubber(ec2)
    stub.add_response("describe_instance_topology", {}, {"InstanceIds": ["i-0d1"]})
    with stub:
        assert block_lifecycle._topology(ec2, ["i-0d1"]) == {}


def test_placement_waits_for_topology_to_the_deadline_then_places_with_what_there_is(env, the_plan):
    """EC2 may never report one instance's topology within the wait (DescribeInstanceTopology: eventual
    consistency); the function asks until the deadline itself (polls of at most POLL_SECONDS, the last one
    shorter) and then places with what there is rather than not at all."""
    log: list = []
    kube, aws, clock = FakeKube(the_plan, log), Aws(log), FakeClock()
    start = clock.now
    kube.set_replicas(0)
    _joined(kube)
    aws.nodegroups(current=0, target=2)
    for _ in range(23):  # at 0, 10, ..., 210 s and at the deadline, 210.5 s
        aws.topology(PATHS, reported={"i-0d1", "i-0d2", "i-0p1"})
    aws.notified()
    assert aws.run(DELIVERED, kube, clock, context=Context(remaining_ms=300_500))["placement"] == "placed"
    assert clock.now - start == pytest.approx(300.5 - block_lifecycle.RESERVE_SECONDS)
    assert [e[0] for e in log].count("topology") == 23
    assert len(kube.placed()) == 4


def test_the_join_wait_runs_to_its_deadline_not_a_second_short(env, the_plan):
    """A late node gets the whole bounded wait, the last short poll included, before serving comes back unplaced."""
    log: list = []
    kube, aws, clock = FakeKube(the_plan, log), Aws(log), FakeClock()
    start = clock.now
    aws.nodegroups(current=0, target=2)
    aws.notified()
    assert aws.run(DELIVERED, kube, clock, context=Context(remaining_ms=300_500))["placement"] == "late"
    assert clock.now - start == pytest.approx(300.5 - block_lifecycle.RESERVE_SECONDS)
    assert clock.sleeps[-1] == pytest.approx(0.5)


class _Nodes:
    """Just the two calls `place` makes: list the GPU nodes, label one."""

    def __init__(self, nodes):
        self._nodes = nodes
        self.labels: dict[str, str] = {}

    def nodes(self, selector):
        return self._nodes

    def label_node(self, name, labels):
        self.labels[name] = labels[PLACED_ROLE_LABEL]


def test_with_every_instance_equally_close_decode_keeps_its_node_groups_instances():
    """placement.choose breaks ties by the fewest moves: the role each node's group gave it must reach it (the
    node-group role label, as EKS sets it from the node group's labels), or a tie moves every pod for nothing.
    Instances spread over different bottom network nodes are placed with a warning, and the message ends there."""
    nodes = [
        {"name": f"ip-{i}", "instance_id": i, "labels": {ROLE_LABEL: role}}
        for i, role in (("i-0a1", "prefill"), ("i-0a2", "prefill"), ("i-0b1", "decode"), ("i-0b2", "decode"))
    ]
    api = _Nodes(nodes)
    ec2 = _client("ec2")
    stub = Stubber(ec2)
    paths = {n["instance_id"]: ("nn-top", f"nn-mid-{n['instance_id']}", f"nn-bottom-{n['instance_id']}") for n in nodes}
    stub.add_response(
        "describe_instance_topology",
        {"Instances": [{"InstanceId": i, "NetworkNodes": list(p)} for i, p in paths.items()]},
        {"InstanceIds": list(paths)},
    )
    spec = {"role_label": ROLE_LABEL, "nodes": {"prefill": 2, "decode": 2}}
    clock = FakeClock()
    with stub:
        outcome, message = block_lifecycle.place(ec2, lambda: api, spec, 60.0, clock, clock.sleep)
    assert outcome == "placed"
    assert api.labels == {"ip-i-0a1": "prefill", "ip-i-0a2": "prefill", "ip-i-0b1": "decode", "ip-i-0b2": "decode"}
    assert message.startswith("Placement from the instance topology: prefill on i-0a1, i-0a2; decode on i-0b1, i-0b2 ")
    assert "every pod still schedules (the role is only preferred)." in message
    assert message.endswith(
        "sit under 4 bottom network nodes (nn-bottom-i-0a1, nn-bottom-i-0a2, nn-bottom-i-0b1, nn-bottom-i-0b2); "
        "decode gets the closest ones (pdkit topology shows the distances)."
    )
    assert "None" not in message


def test_a_plan_with_more_decode_than_prefill_nodes_is_placed_as_soon_as_every_role_has_joined():
    """Joined means each role's node group has its count of nodes with that role label: with 1 prefill and 2 decode
    nodes planned, the three nodes complete the block at the first listing and are placed without a wait."""
    nodes = [
        {"name": f"ip-{i}", "instance_id": i, "labels": {ROLE_LABEL: role}}
        for i, role in (("i-0a1", "prefill"), ("i-0b1", "decode"), ("i-0b2", "decode"))
    ]
    api = _Nodes(nodes)
    ec2 = _client("ec2")
    stub = Stubber(ec2)
    stub.add_response(
        "describe_instance_topology",
        {"Instances": [{"InstanceId": n["instance_id"], "NetworkNodes": ["nn-top", "nn-mid", "nn-bottom"]} for n in nodes]},
        {"InstanceIds": [n["instance_id"] for n in nodes]},
    )
    spec = {"role_label": ROLE_LABEL, "nodes": {"prefill": 1, "decode": 2}}
    clock = FakeClock()
    with stub:
        outcome, _ = block_lifecycle.place(ec2, lambda: api, spec, 60.0, clock, clock.sleep)
    assert outcome == "placed"
    assert clock.sleeps == []
    assert api.labels == {"ip-i-0a1": "prefill", "ip-i-0b1": "decode", "ip-i-0b2": "decode"}
