"""`pdkit preflight` and `pdkit status` with capacity.purchase: the block is the one the capacity stack bought, read from
its ReservationId output (cloudformation DescribeStacks, Outputs), and before the purchase they say `make deploy` buys it."""

from __future__ import annotations

import json

from pdkit.cli.main import main
from tests.fixtures.cmd_support import CR
from tests.test_cmd_capacity import purchase_profile, stub_capacity_stack
from tests.test_cmd_preflight import rows, stub_checks

pytest_plugins = ["tests.fixtures.cmd_fixtures"]  # aws, and pins: the add-on pins fixture preflight reads

OUTPUTS = [{"OutputKey": "ReservationId", "OutputValue": CR}]


def test_preflight_checks_the_block_the_stack_bought(aws, pins, tmp_path, capsys):
    """The reservation, interconnect and topology checks run against the bought id, as on a profile that names it."""
    stub_capacity_stack(aws, outputs=OUTPUTS)
    stub_checks(aws)
    assert main(["preflight", "--profile", purchase_profile(tmp_path), "--output", "json"]) == 0
    found = rows(capsys)
    assert found["Reservation"]["status"] == "PASS"
    assert CR in found["Reservation"]["detail"]
    assert found["Reservation topology"]["status"] == "PASS"


def test_preflight_before_the_purchase_passes_and_names_the_next_step(aws, pins, tmp_path, capsys):
    """Before the first deploy there is nothing to check yet: the row says `make deploy` buys it, and preflight does not fail."""
    stub_capacity_stack(aws, exists=False)
    stub_checks(aws, placeholder=True)
    assert main(["preflight", "--profile", purchase_profile(tmp_path), "--output", "json"]) == 0
    row = rows(capsys)["Reservation"]
    assert row["status"] == "PASS"
    assert row["detail"].startswith("Capacity Block not bought yet: `make deploy` buys it")


def test_preflight_names_the_missing_describe_stacks_permission(aws, pins, tmp_path, capsys):
    """AccessDenied on DescribeStacks is one FAIL row naming cloudformation:DescribeStacks, not a traceback."""
    aws("cloudformation").add_client_error(
        "describe_stacks", "AccessDenied", "not authorized", 403, expected_params={"StackName": "glm51-2p2d-capacity"}
    )
    stub_checks(aws, placeholder=True)
    assert main(["preflight", "--profile", purchase_profile(tmp_path), "--output", "json"]) == 1
    row = rows(capsys)["Reservation"]
    assert row["status"] == "FAIL"
    assert "cloudformation:DescribeStacks" in row["detail"]


def test_status_names_the_bought_block(aws, tmp_path, capsys):
    """`pdkit status` describes the bought reservation (its id from the stack output), not the profile's placeholder."""
    from tests.test_cmd_status import stub_aws

    stub_capacity_stack(aws, outputs=OUTPUTS)
    stub_aws(aws, desired=0)
    main(["status", "--profile", purchase_profile(tmp_path), "--output", "json"])
    items = [r["item"] for r in json.loads(capsys.readouterr().out)["rows"]]
    assert f"block {CR}" in items
