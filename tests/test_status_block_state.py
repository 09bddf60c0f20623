"""`pdkit status` grades the block's row by the one state table (pdkit/model/reservation.py STATES): OK when
active, WAIT while the block is still coming (the deploy-time guard lets a deployment proceed on it), FAIL when it
is gone, each with what the state means and what to do. It used to call an expired or payment-failed block WAIT,
as if waiting could bring it back. States: botocore's ec2 CapacityReservationState; meanings, EC2 API reference
CapacityReservation.State (https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_CapacityReservation.html).
"""

from __future__ import annotations

import json

import pytest

from pdkit.cli.main import main
from pdkit.model import reservation
from tests.fixtures.cmd_support import CR, real_profile, stub_nodegroups, stub_reservation

pytest_plugins = ["tests.fixtures.cmd_fixtures"]


@pytest.mark.parametrize(
    ("state", "verdict"),
    [
        ("active", "OK"),
        ("pending", "WAIT"),
        ("scheduled", "WAIT"),
        ("expired", "FAIL"),
        ("payment-failed", "FAIL"),
        ("unavailable", "FAIL"),
    ],
)
def test_the_block_row_follows_the_state_table(state, verdict, aws, cluster, tmp_path, capsys):
    aws("eks").add_response(
        "describe_cluster", {"cluster": {"name": "glm51-2p2d", "status": "ACTIVE", "version": "1.36"}}, {"name": "glm51-2p2d"}
    )
    stub_reservation(aws, State=state)
    stub_nodegroups(aws, 2)
    cluster()
    main(["status", "--profile", real_profile(tmp_path), "--output", "json"])
    (row,) = [r for r in json.loads(capsys.readouterr().out)["rows"] if r["item"] == f"block {CR}"]
    assert row["state"] == verdict
    if state != "active":
        rule = reservation.STATES[state]
        assert row["detail"].startswith(f"{state} ({rule.meaning}; {rule.todo}), ends ")
