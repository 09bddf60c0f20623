"""`pdkit nodes up|down`: refused on a block that is not active; sizes from the plan; waits for EKS and the instances."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest

from pdkit.cli.main import main
from pdkit.ops import kube, nodes
from tests.fixtures.cmd_support import (
    CR,
    GROUPS,
    NOW,
    instance,
    instances_page,
    nodegroup,
    real_profile,
    stub_marked,
    stub_nodegroup,
    stub_nodegroups,
    stub_reservation,
)

pytest_plugins = ["tests.fixtures.cmd_fixtures"]


def stub_update(aws, group: str, desired: int, update_id: str, cluster: str = "glm51-2p2d") -> None:
    aws("eks").add_response(
        "update_nodegroup_config",
        {"update": {"id": update_id, "status": "InProgress", "type": "ConfigUpdate"}},
        {"clusterName": cluster, "nodegroupName": group, "scalingConfig": {"minSize": 0, "maxSize": 2, "desiredSize": desired}},
    )


def stub_update_status(
    aws, group: str, update_id: str, status: str, errors: list[dict[str, str]] | None = None, cluster: str = "glm51-2p2d"
) -> None:
    aws("eks").add_response(
        "describe_update",
        {"update": {"id": update_id, "status": status, "errors": errors or []}},
        {"name": cluster, "updateId": update_id, "nodegroupName": group},
    )


def stub_resize(aws, start: int, end: int, groups: tuple[str, ...] = GROUPS, cluster: str = "glm51-2p2d", **over: object) -> None:
    """Each group read at `start` and updated to `end`, then each update reported Successful (in the command's order)."""
    for group in groups:
        stub_nodegroup(aws, group, start, cluster, **over)
        stub_update(aws, group, end, f"u-{group}", cluster)
    for group in groups:
        stub_update_status(aws, group, f"u-{group}", "Successful", cluster=cluster)


def filters(group: str, cluster: str = "glm51-2p2d") -> dict[str, object]:
    return {
        "Filters": [
            {"Name": "tag:eks:cluster-name", "Values": [cluster]},
            {"Name": "tag:eks:nodegroup-name", "Values": [group]},
            {"Name": "instance-state-name", "Values": ["pending", "running", "stopping", "shutting-down"]},
        ]
    }


def stub_instances(aws, group: str, *states: str) -> None:
    items = [instance(f"i-{group[-4:]}{n}", group, state=s) for n, s in enumerate(states)]
    aws("ec2").add_response("describe_instances", instances_page(*items), filters(group))


def test_up_scales_both_groups_to_the_plan_and_waits(aws, tmp_path, capsys):
    stub_reservation(aws)
    stub_marked(aws)
    for group in GROUPS:
        stub_nodegroup(aws, group, 0)
        stub_update(aws, group, 2, f"u-{group}")
    stub_update_status(aws, GROUPS[0], f"u-{GROUPS[0]}", "InProgress")
    stub_update_status(aws, GROUPS[0], f"u-{GROUPS[0]}", "Successful")
    stub_update_status(aws, GROUPS[1], f"u-{GROUPS[1]}", "Successful")
    stub_instances(aws, GROUPS[0], "pending", "pending")  # first poll: still starting
    stub_instances(aws, GROUPS[1], "running")
    stub_instances(aws, GROUPS[0], "running", "running")  # second poll: done
    stub_instances(aws, GROUPS[1], "running", "running")
    assert main(["nodes", "up", "--profile", real_profile(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "glm51-2p2d-prefill: desired 0 -> 2 (min 0, max 2)" in out
    assert "Next: pdkit status" in out


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"State": "scheduled", "StartDate": NOW + timedelta(hours=3, minutes=1)}, "starts"),
        # The fix repeats the invocation's profile.
        ({"State": "scheduled", "StartDate": NOW + timedelta(hours=3)}, "(in 3 h 0 min) ... run `pdkit nodes up --profile"),
        ({"State": "expired"}, "no instance can launch into it"),
        ({"State": "payment-pending"}, "no instance can launch into it"),
        ({"EndDate": NOW + timedelta(minutes=50)}, "inside the kit's 60 min drain window"),
    ],
)
def test_up_is_refused_unless_the_block_is_active(aws, tmp_path, capsys, change, words):
    """Only the reservation is read; no EKS client is even created (none is stubbed)."""
    stub_reservation(aws, **change)
    assert main(["nodes", "up", "--profile", real_profile(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert all(part in err for part in words.split(" ... "))
    assert [r[0] for r in aws.requested] == ["ec2"]


def test_up_with_the_placeholder_points_to_offerings(aws, capsys):
    assert main(["nodes", "up"]) == 2
    assert "pdkit capacity offerings" in capsys.readouterr().err


def test_down_needs_no_active_block_and_waits_for_zero(aws, tmp_path, capsys):
    stub_resize(aws, 2, 0)
    stub_instances(aws, GROUPS[0], "shutting-down")
    stub_instances(aws, GROUPS[1])
    stub_instances(aws, GROUPS[0])
    stub_instances(aws, GROUPS[1])
    assert main(["nodes", "down"]) == 0
    assert "GPU node groups are at 0" in capsys.readouterr().out


def test_already_at_size_sends_no_update(aws, capsys):
    stub_nodegroups(aws, 0)
    assert main(["nodes", "down", "--no-wait"]) == 0
    assert capsys.readouterr().out.count("already min 0 / desired 0 / max 2") == 2


def test_failed_update_is_one_line_with_the_reason(aws, capsys):
    for group in GROUPS:
        stub_nodegroup(aws, group, 2)
        stub_update(aws, group, 0, f"u-{group}")
    stub_update_status(
        aws, GROUPS[0], f"u-{GROUPS[0]}", "Failed", [{"errorCode": "AsgInstanceLaunchFailures", "errorMessage": "launch failed"}]
    )
    assert main(["nodes", "down"]) == 2
    assert "failed: launch failed" in capsys.readouterr().err


def test_missing_node_group_says_deploy_first(aws, capsys):
    aws("eks").add_client_error("describe_nodegroup", "ResourceNotFoundException", "No node group found", 404)
    assert main(["nodes", "down"]) == 2
    assert "make deploy" in capsys.readouterr().err


def test_update_in_progress_says_wait(aws, capsys):
    aws("eks").add_response("describe_nodegroup", nodegroup(GROUPS[0], 2))
    aws("eks").add_client_error("update_nodegroup_config", "ResourceInUseException", "update in progress", 409)
    assert main(["nodes", "down"]) == 2
    assert "another update of glm51-2p2d-prefill is still running" in capsys.readouterr().err


def test_timeout_reports_the_node_group_health(aws, tmp_path, capsys):
    stub_reservation(aws)
    stub_marked(aws)
    stub_nodegroups(aws, 2)  # already at size: straight to waiting
    stub_instances(aws, GROUPS[0], "pending")
    stub_instances(aws, GROUPS[1], "running", "running")
    issue = [{"code": "InsufficientFreeAddresses", "message": "placement group full"}]
    aws("eks").add_response("describe_nodegroup", nodegroup(GROUPS[0], 2, issues=issue))
    aws("eks").add_response("describe_nodegroup", nodegroup(GROUPS[1], 2))
    # 0.25 min = one 15 s poll.
    assert main(["nodes", "up", "--profile", real_profile(tmp_path), "--timeout", "0.25"]) == 2
    err = capsys.readouterr().err
    assert "InsufficientFreeAddresses: placement group full" in err
    assert "capacity.placement_group: none" in err


# --- serving follows the nodes ---------------------------------------------------------------------


class FakeLws:
    """The Kubernetes side of `nodes up|down`: records each scale of the DisaggregatedSet's roles, in call order."""

    def __init__(self, events: list[str], *, missing: bool = False) -> None:
        self.events = events
        self.missing = missing

    def scale_roles(self, namespace: str, name: str, replicas: dict[str, int]) -> bool:
        self.events.append(f"ds {namespace}/{name} " + ",".join(f"{role}={count}" for role, count in replicas.items()))
        return not self.missing


@pytest.fixture
def order(monkeypatch):
    """Every node-group update and LeaderWorkerSet scale, in the order the command made them."""
    events: list[str] = []
    original = nodes.request

    def request(eks, plan, role, target):
        events.append(f"eks {role.node_group_name}={target.desired}")
        return original(eks, plan, role, target)

    monkeypatch.setattr(nodes, "request", request)
    return events


@pytest.fixture(autouse=True)
def no_kubeconfig(monkeypatch):
    """Unless a test installs a fake, the Kubernetes API is unreachable (as on a laptop without the SSM path)."""

    def unreachable(context):
        raise kube.KubeUnreachable("no usable kubeconfig (test). Fix: open the SSM access path")

    monkeypatch.setattr(kube, "connect", unreachable)


def test_down_scales_serving_to_zero_before_the_node_groups(aws, order, monkeypatch, capsys):
    """A PodDisruptionBudget can hold a node drain, but not roles scaled to 0: pods go first. The roles are
    scaled on the DisaggregatedSet, whose controller reverts a scaled LeaderWorkerSet (kubernetes-sigs/lws
    v0.10.0 docs/examples/disaggregatedset.md, "Scaling replicas within a role")."""
    monkeypatch.setattr(kube, "connect", lambda context: FakeLws(order))
    stub_resize(aws, 2, 0)
    assert main(["nodes", "down", "--no-wait"]) == 0
    assert order == [
        "ds pd-serving/glm51-2p2d-pd prefill=0,decode=0",
        "eks glm51-2p2d-prefill=0",
        "eks glm51-2p2d-decode=0",
    ]


def test_up_restores_the_plans_replicas_after_sizing_the_node_groups(aws, tmp_path, order, monkeypatch, capsys):
    """After a late extension (the drain already ran), `nodes up` alone must bring serving back."""
    monkeypatch.setattr(kube, "connect", lambda context: FakeLws(order))
    stub_reservation(aws)
    stub_marked(aws)
    stub_resize(aws, 0, 2)
    assert main(["nodes", "up", "--no-wait", "--profile", real_profile(tmp_path)]) == 0
    assert order[-1] == "ds pd-serving/glm51-2p2d-pd prefill=1,decode=1"
    assert order[0].startswith("eks ")


def test_unreachable_api_prints_the_kubectl_commands_and_still_scales(aws, order, capsys):
    stub_resize(aws, 2, 0)
    assert main(["nodes", "down", "--no-wait"]) == 0
    out = capsys.readouterr().out
    assert "serving NOT scaled to 0" in out
    assert (
        "kubectl -n pd-serving patch disaggregatedset glm51-2p2d-pd --type=json -p "
        """'[{"op":"test","path":"/spec/roles/0/name","value":"prefill"},{"op":"replace","path":"/spec/roles/0/spec/replicas","value":0},"""
    ) in out, "a command the operator can paste: the JSON patch is shell-quoted"
    assert order == ["eks glm51-2p2d-prefill=0", "eks glm51-2p2d-decode=0"]


def test_no_serving_leaves_the_leader_worker_sets_alone(aws, order, monkeypatch, capsys):
    monkeypatch.setattr(kube, "connect", lambda context: FakeLws(order))
    stub_resize(aws, 2, 0)
    assert main(["nodes", "down", "--no-wait", "--no-serving"]) == 0
    assert not any(e.startswith("ds") for e in order)


class _Response:
    """What the kubernetes client's REST layer hands back (kubernetes.client.rest.RESTResponse)."""

    def __init__(self, status: int, body: dict) -> None:
        self.status, self.reason, self.data = status, "OK" if status < 400 else "Error", json.dumps(body).encode()

    def getheaders(self) -> dict[str, str]:
        return {"content-type": "application/json"}

    def getheader(self, name: str, default: str | None = None) -> str | None:
        return self.getheaders().get(name.lower(), default)


def _custom_api(sent: list, status: int = 200):
    """The real CustomObjectsApi, its HTTP layer replaced by a recorder: the path, the content type and the
    body are the client's own choices (kubernetes 36 api_client.select_header_content_type)."""
    from kubernetes import client
    from kubernetes.client.exceptions import ApiException

    api = client.ApiClient(client.Configuration(host="https://127.0.0.1:8443"))

    def request(method, url, query_params=None, headers=None, body=None, **_):
        sent.append((method, url, headers.get("Content-Type"), body))
        if status >= 400:
            raise ApiException(http_resp=_Response(status, {"kind": "Status", "code": status}))
        return _Response(status, {"kind": "DisaggregatedSet"})

    api.rest_client.request = request
    return client.CustomObjectsApi(api)


def test_kube_scales_the_roles_with_one_json_patch_of_the_disaggregated_set():
    """The controller reverts a scaled LeaderWorkerSet, so the roles' replicas on the DisaggregatedSet are
    patched; a custom resource takes no strategic merge patch, and a merge patch would replace the whole
    roles list, so it is an RFC 6902 JSON patch (application/json-patch+json)."""
    sent: list = []
    assert kube.Kube(core=None, apps=None, custom=_custom_api(sent)).scale_roles("ns", "glm51-2p2d-pd", {"prefill": 0, "decode": 0}) is True
    ((method, url, content_type, body),) = sent
    assert (method, url) == (
        "PATCH",
        "https://127.0.0.1:8443/apis/disaggregatedset.x-k8s.io/v1/namespaces/ns/disaggregatedsets/glm51-2p2d-pd",
    )
    assert content_type == "application/json-patch+json"
    assert body == [
        {"op": "test", "path": "/spec/roles/0/name", "value": "prefill"},
        {"op": "replace", "path": "/spec/roles/0/spec/replicas", "value": 0},
        {"op": "test", "path": "/spec/roles/1/name", "value": "decode"},
        {"op": "replace", "path": "/spec/roles/1/spec/replicas", "value": 0},
    ]


def test_kube_scale_404_means_not_deployed_and_403_says_how_to_get_access():
    assert kube.Kube(core=None, apps=None, custom=_custom_api([], 404)).scale_roles("ns", "ds", {"prefill": 1, "decode": 1}) is False
    with pytest.raises(kube.KubeUnreachable, match="refused your identity"):
        kube.Kube(core=None, apps=None, custom=_custom_api([], 403)).scale_roles("ns", "ds", {"prefill": 1, "decode": 1})


# --- an on-demand rehearsal has no block to wait for -------------------------------------------------

REHEARSAL = "rehearsal-glm51-fp8-2p2d"
REHEARSAL_GROUPS = ("rehearsal-glm51-2p2d-prefill", "rehearsal-glm51-2p2d-decode")


def test_up_on_an_on_demand_rehearsal_scales_without_a_reservation(aws, order, capsys):
    """On-demand instances launch as soon as the Auto Scaling group asks (no CapacityReservationSpecification in the
    rehearsal's launch template, https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/ec2-launch-templates.html), so
    `up` reads no reservation (no ec2 call is stubbed: Stubber fails any) and sizes both groups at once."""
    stub_resize(aws, 0, 2, REHEARSAL_GROUPS, "rehearsal-glm51-2p2d", kind="ON_DEMAND")
    assert main(["nodes", "up", "--no-wait", "--no-serving", "--profile", REHEARSAL]) == 0
    assert order == ["eks rehearsal-glm51-2p2d-prefill=2", "eks rehearsal-glm51-2p2d-decode=2"]
    assert "ec2" not in [r[0] for r in aws.requested]


def test_down_on_a_rehearsal_says_billing_stops(aws, capsys):
    """On-demand instances bill per second until they terminate
    (https://aws.amazon.com/ec2/pricing/on-demand/): the block's "paid upfront" note would be wrong here."""
    for group in REHEARSAL_GROUPS:
        stub_nodegroup(aws, group, 0, "rehearsal-glm51-2p2d", kind="ON_DEMAND")
        aws("ec2").add_response("describe_instances", instances_page(), filters(group, "rehearsal-glm51-2p2d"))
    assert main(["nodes", "down", "--no-serving", "--profile", REHEARSAL]) == 0
    out = capsys.readouterr().out
    assert "stop billing" in out
    assert "paid upfront" not in out


def test_down_on_a_bought_block_marks_it_drained_so_the_lifecycle_check_leaves_it_at_0(aws, tmp_path, capsys):
    """The runbooks' `nodes down`, `make deploy`, `nodes up` needs the groups at 0 while EKS updates them (EKS,
    capacity-blocks-mng). The lifecycle function's 5-minute catch-up scales an active block's groups up when they are at
    0 and the block carries no marker: `nodes down` writes reservation.DRAINED_TAG first (stub_marked; the Stubber
    refuses any other order)."""
    stub_marked(aws, up=False)
    stub_nodegroups(aws, 0)
    assert main(["nodes", "down", "--no-wait", "--no-serving", "--profile", real_profile(tmp_path)]) == 0
    assert "Warning" not in capsys.readouterr().err


def test_a_refused_marker_is_a_warning_that_names_the_risk(aws, tmp_path, capsys):
    from pdkit.model import reservation as rules

    aws("ec2").add_client_error("create_tags", "UnauthorizedOperation", "not allowed", 403)
    stub_nodegroups(aws, 0)
    assert main(["nodes", "down", "--no-wait", "--no-serving", "--profile", real_profile(tmp_path)]) == 0
    err = capsys.readouterr().err
    assert f"could not tag {CR} {rules.DRAINED_TAG} (ec2:CreateTags denied)" in err
    assert "may scale the node groups back up" in err
