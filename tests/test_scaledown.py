"""Issue 25 item 7: after `pdkit capacity extend`, EKS's own scale-down before the reservation's end must follow the
new end, or the kit says what to do; `pdkit preflight` checks it too (row "EKS scale-down").

EKS creates the Auto Scaling scheduled action "Amazon EKS Node Group Capacity Scaledown Before Reservation End" on a
CAPACITY_BLOCK node group to scale it to 0 forty minutes before the reservation ends, and says not to edit or delete
it (https://docs.aws.amazon.com/eks/latest/userguide/capacity-blocks-mng.html). An extension moves the reservation's
end once its payment succeeds (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/capacity-blocks-extend.html); no
AWS document says that EKS moves its action with it, so the kit reads the action and compares. Replies are AWS's
documented examples (tests/fixtures/scaledown.py), checked by Stubber against the EKS and Auto Scaling models.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from pdkit.cli.main import main
from pdkit.ops import capacity, scaledown
from pdkit.ops.aws_clients import Aws
from tests.conftest import plan_of
from tests.fixtures.cmd_support import NOW, REGION, reservation
from tests.fixtures.scaledown import ACTION, asg_name, nodegroup, scheduled, stub_group, stub_no_node_groups
from tests.test_cmd_capacity import extension, stub_extensions
from tests.test_cmd_preflight import rows, stub_checks

pytest_plugins = ["tests.fixtures.cmd_fixtures"]

GROUPS = ("glm51-2p2d-prefill", "glm51-2p2d-decode")  # the plan's order: prefill, then decode
OLD_END = NOW + timedelta(hours=46)  # tests.fixtures.cmd_support.reservation's EndDate
NEW_END = NOW + timedelta(hours=70)  # tests.test_cmd_capacity.extension's CapacityBlockExtensionEndDate


def _extend(aws, tmp_path, status: str = "payment-succeeded") -> int:
    from tests.fixtures.cmd_support import real_profile

    stub_extensions(aws, extension("cbeo-1"))
    aws("ec2").add_client_error("purchase_capacity_block_extension", "DryRunOperation", "ok", 412)
    aws("ec2").add_response("purchase_capacity_block_extension", {"CapacityBlockExtensions": [{"CapacityBlockExtensionStatus": status}]})
    return main(["capacity", "extend", "cbeo-1", "--yes", "--profile", real_profile(tmp_path)])


def test_an_action_left_at_the_old_end_is_named_with_what_to_do(aws, tmp_path, capsys):
    """The extension is paid, EKS's action still fires at the old end - 40 min: the command says so per group, says
    not to edit EKS's action (EKS's own instruction), and gives the `pdkit nodes up` line for after it fires."""
    for group in GROUPS:
        stub_group(aws, group, OLD_END - timedelta(minutes=40))
    assert _extend(aws, tmp_path) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert out.count("its scale-down did not follow the extension") == 2
    assert "EKS scale-down WARN: glm51-2p2d-prefill: EKS scales it to 0 at" in out
    assert "1 d 0 h before the block's end - 40 min" in out
    assert "EKS says not to edit or delete that action" in out
    assert "pdkit nodes up --profile" in out
    assert "pdkit preflight --profile" in out, "EKS may still move it: where to look again"


def test_an_action_that_followed_the_new_end_passes(aws, tmp_path, capsys):
    for group in GROUPS:
        stub_group(aws, group, NEW_END - timedelta(minutes=40))
    assert _extend(aws, tmp_path) == 0
    out = capsys.readouterr().out
    assert out.count("EKS scale-down PASS") == 2
    assert "did not follow" not in out


def test_a_pending_payment_defers_the_comparison(aws, tmp_path, capsys):
    """Until the payment succeeds the end has not moved (capacity-blocks-extend): nothing to compare yet, and no EKS call."""
    assert _extend(aws, tmp_path, "payment-pending") == 0
    assert "Once the payment succeeds, pdkit preflight" in capsys.readouterr().out
    assert ("eks", None, REGION) not in aws.requested


def test_a_denied_read_after_a_paid_extension_is_a_note_not_a_failure(aws, tmp_path, capsys):
    aws("eks").add_client_error("describe_nodegroup", "AccessDeniedException", "not authorized to perform: eks:DescribeNodegroup", 403)
    assert _extend(aws, tmp_path) == 0
    out = capsys.readouterr().out
    assert "Extension bought and paid" in out
    assert "Could not read EKS's scale-down" in out
    assert "row EKS scale-down" in out


# --- the comparison itself -------------------------------------------------------------------------------------


def _aws() -> Aws:
    return Aws(aws_profile=None, region=REGION)


@pytest.mark.parametrize(
    ("at", "verdict"),
    [
        (NEW_END - timedelta(minutes=40), "follows"),
        (NEW_END - timedelta(minutes=38), "follows"),  # within the slack for rounding
        (OLD_END - timedelta(minutes=40), "stale"),
        (NEW_END - timedelta(minutes=20), "late"),
        (None, "missing"),
    ],
)
def test_the_action_is_compared_with_the_current_end_minus_40_min(aws, at, verdict):
    plan = plan_of()
    for group in GROUPS:
        stub_group(aws, group, at)
    found = scaledown.check(_aws(), plan, NEW_END)
    assert [f.verdict for f in found] == [verdict, verdict]
    assert [f.auto_scaling_group for f in found] == [asg_name(g) for g in GROUPS]
    assert all(f.expected == NEW_END - timedelta(minutes=40) for f in found)


def test_every_page_of_scheduled_actions_is_read(aws):
    """DescribeScheduledActions pages with NextToken (the botocore paginator): the action may be on the second page."""
    plan = plan_of()
    at = NEW_END - timedelta(minutes=40)
    for group in GROUPS:
        asg = asg_name(group)
        aws("eks").add_response("describe_nodegroup", nodegroup(group), {"clusterName": "glm51-2p2d", "nodegroupName": group})
        params = {"AutoScalingGroupName": asg, "ScheduledActionNames": [ACTION]}
        aws("autoscaling").add_response("describe_scheduled_actions", scheduled(asg, None, next_token="t-2"), params)  # noqa: S106
        aws("autoscaling").add_response("describe_scheduled_actions", scheduled(asg, at), params | {"NextToken": "t-2"})
    assert [f.verdict for f in scaledown.check(_aws(), plan, NEW_END)] == ["follows", "follows"]


def test_node_groups_not_deployed_yet_pass_without_reading_auto_scaling(aws):
    stub_no_node_groups(aws)
    found = scaledown.check(_aws(), plan_of(), NEW_END)
    assert [f.verdict for f in found] == ["absent", "absent"]
    assert not [s for s, *_ in aws.requested if s == "autoscaling"]


def test_a_rehearsal_has_no_such_action_and_makes_no_call(aws):
    assert scaledown.check(_aws(), plan_of("rehearsal-glm51-fp8-2p2d"), NEW_END) == []
    assert aws.requested == []


def test_a_fired_stale_action_says_it_already_scaled_the_group(aws):
    """Past its time the action has already set the group to 0: the advice says so instead of naming a future time."""
    plan = plan_of()
    stub_group(aws, GROUPS[0], OLD_END - timedelta(minutes=40))
    stub_no_node_groups(aws, roles=1)
    first = scaledown.check(_aws(), plan, NEW_END)[0]
    status, detail, fix = scaledown.advice(first, end=NEW_END, now=OLD_END, nodes_up="pdkit nodes up", drain_minutes=60)
    assert status == "WARN"
    assert "EKS already scaled the group to 0" in detail
    assert fix.endswith("pdkit nodes up")


# --- preflight's row ---------------------------------------------------------------------------------------------


def test_preflight_has_the_row(aws, pins, tmp_path, capsys):
    """The row exists in `pdkit preflight` (here: the node groups are not deployed yet, so it passes)."""
    from tests.fixtures.cmd_support import real_profile

    stub_checks(aws, cluster={"name": "glm51-2p2d", "status": "ACTIVE", "version": "1.36"})
    assert main(["preflight", "--profile", real_profile(tmp_path), "--output", "json"]) == 0
    row = rows(capsys)["EKS scale-down"]
    assert row["status"] == "PASS"
    assert "not deployed yet" in row["detail"]


def test_preflight_row_warns_with_the_fix_when_the_action_is_stale(aws):
    """What preflight adds for a stale action: WARN, the two times, and the `pdkit nodes up` line of this profile."""
    plan = plan_of()
    for group in GROUPS:
        stub_group(aws, group, OLD_END - timedelta(minutes=40))
    added: list[tuple[str, str, str, str]] = []
    res = capacity.reservation_from(reservation(EndDate=NEW_END))
    scaledown.report(plan, _aws(), res, lambda *row: added.append(row), now=NOW)
    assert [(name, status) for name, status, _, _ in added] == [("EKS scale-down", "WARN")] * 2
    assert all(f"pdkit nodes up --profile {plan.profile_path}" in fix for *_, fix in added)


def test_an_action_with_only_the_older_time_field_is_read(aws):
    """ScheduledUpdateGroupAction carries StartTime and the older Time (botocore model; the example sets both): a reply
    with Time alone is still compared, not taken for a missing action."""
    plan = plan_of()
    at = NEW_END - timedelta(minutes=40)
    for group in GROUPS:
        asg = asg_name(group)
        reply = scheduled(asg, at)
        del reply["ScheduledUpdateGroupActions"][0]["StartTime"]
        aws("eks").add_response("describe_nodegroup", nodegroup(group), {"clusterName": "glm51-2p2d", "nodegroupName": group})
        aws("autoscaling").add_response(
            "describe_scheduled_actions", reply, {"AutoScalingGroupName": asg, "ScheduledActionNames": [ACTION]}
        )
    assert [f.verdict for f in scaledown.check(_aws(), plan, NEW_END)] == ["follows", "follows"]
