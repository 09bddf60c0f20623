"""Every follow-up command the CLI prints ("Next:", "Watch:", "Follow it:", a "Fix:" that names a command)
repeats the --profile, --aws-profile and --region the command was run with.

Without them the next command reads another deployment: `pdkit` with no --profile takes cdk.json's
context "profile", with no --aws-profile the SDK credential chain (AWS_PROFILE, then the default
profile: https://docs.aws.amazon.com/sdkref/latest/guide/standardized-credentials.html) and with no
--region the profile's aws.region. Each test runs a command with values that differ from all three
defaults and copies the printed command back into the real parser.
"""

from __future__ import annotations

import argparse
import shlex
from datetime import timedelta

import pytest

from pdkit.cli.context import in_context, make_command, pdkit_command
from pdkit.cli.main import build_parser, main
from pdkit.ops import kube, purchase
from tests import test_cmd_capacity as capacity_tests
from tests import test_cmd_nodes as nodes_tests
from tests import test_cmd_preflight as preflight_tests
from tests import test_cmd_status as status_tests
from tests import test_weights_cmd as weights_tests
from tests.fixtures.cmd_support import (
    GROUPS,
    NOW,
    instances_page,
    profile,
    real_profile,
    stub_marked,
    stub_nodegroups,
    stub_reservation,
)
from tests.fixtures.fabric.fakes import GOOD_LOGS, FakeCluster, bench_pod_log
from tests.test_cmd_topology import FILTERS

pytest_plugins = ["tests.fixtures.cmd_fixtures"]

AWS_PROFILE = "ops-admin"
REGION = "us-west-2"
REGISTRY = "123456789012.dkr.ecr.us-west-2.amazonaws.com"


@pytest.fixture
def where(tmp_path) -> list[str]:
    return ["--profile", real_profile(tmp_path), "--aws-profile", AWS_PROFILE, "--region", REGION]


def context_of(where: list[str]) -> str:
    return " ".join(shlex.quote(v) if not v.startswith("--") else v for v in where)


def printed_command(text: str, after: str, where: list[str]) -> list[str]:
    """The command that follows `after` in `text`, up to and including the context flags; checked by the real parser."""
    start = text.index(after) + len(after)
    tail = context_of(where)
    end = text.index(tail, start) + len(tail)
    argv = shlex.split(text[start:end].strip().strip("`"))
    assert argv[0] == "pdkit"
    parsed = build_parser().parse_args(argv[1:])
    assert (parsed.profile, parsed.aws_profile, parsed.region) == (where[1], AWS_PROFILE, REGION)
    return argv


# --- the renderer ---------------------------------------------------------------------------------------


def test_pdkit_command_repeats_only_what_was_given():
    args = argparse.Namespace(profile="config/my deployment.yaml", aws_profile=None, region="us-east-1")
    assert pdkit_command(args, "status") == "pdkit status --profile 'config/my deployment.yaml' --region us-east-1"
    assert pdkit_command(argparse.Namespace(), "smoke") == "pdkit smoke"


def test_in_context_rewrites_every_backticked_command():
    args = argparse.Namespace(profile="p.yaml", aws_profile="ops", region=None)
    assert in_context(args, "run `pdkit nodes up`; before launch, `pdkit preflight`") == (
        "run `pdkit nodes up --profile p.yaml --aws-profile ops`; before launch, `pdkit preflight --profile p.yaml --aws-profile ops`"
    )


def test_in_context_does_not_repeat_flags_already_rendered():
    """Error messages may carry commands already rendered with the context; the CLI renders them once more."""
    args = argparse.Namespace(profile="p.yaml", aws_profile="ops", region="us-west-2")
    once = in_context(args, "Fix: `pdkit capacity offerings`")
    assert in_context(args, once) == once
    assert pdkit_command(args, "status --region eu-west-1") == "pdkit status --region eu-west-1 --profile p.yaml --aws-profile ops"


def test_a_fix_in_an_error_repeats_the_context(aws, tmp_path, capsys):
    """A Fix: raised deep in a module (here: the profile still holds the placeholder reservation, so
    `pdkit capacity status` refuses) names `pdkit capacity offerings` with this invocation's flags."""
    where = ["--profile", profile(tmp_path), "--aws-profile", AWS_PROFILE, "--region", REGION]
    assert main(["capacity", "status", *where]) == 2
    err = capsys.readouterr().err
    assert err.startswith("pdkit: error:")
    argv = printed_command(err, "Fix: ", where)
    assert argv[1:3] == ["capacity", "offerings"]


def test_make_command_carries_profile_and_credentials():
    """The Makefile takes PROFILE= and passes AWS_PROFILE through the environment to cdk."""
    args = argparse.Namespace(profile="p.yaml", aws_profile="ops", region="us-west-2")
    assert make_command(args, "deploy") == "AWS_PROFILE=ops make deploy PROFILE=p.yaml"


# --- each command ---------------------------------------------------------------------------------------


def test_plan(where, capsys):
    assert main(["plan", *where]) == 0
    out = capsys.readouterr().out
    assert f"Next: AWS_PROFILE={AWS_PROFILE} make synth PROFILE={where[1]}" in out
    assert printed_command(out, "(then ", where)[1:3] == ["capacity", "offerings"]


def test_capacity_offerings(aws, where, capsys):
    query = capacity_tests.QUERY
    capacity_tests.stub_offerings(aws, capacity_tests.offering("cbr-soon"), query=query)
    assert main(["capacity", "offerings", *where]) == 0
    assert printed_command(capsys.readouterr().out, "Next:", where)[1:4] == ["capacity", "buy", "cbr-soon"]


def test_capacity_status(aws, where, capsys):
    stub_reservation(aws, CapacityBlockId=None)
    aws("ec2").add_response("describe_instances", instances_page())
    assert main(["capacity", "status", *where]) == 0
    assert printed_command(capsys.readouterr().out, "More time:", where)[1:3] == ["capacity", "extend"]


def test_capacity_status_of_a_scheduled_block(aws, where, capsys):
    stub_reservation(aws, State="scheduled", StartDate=NOW + timedelta(hours=5), CapacityBlockId=None)
    aws("ec2").add_response("describe_instances", instances_page())
    assert main(["capacity", "status", *where]) == 0
    assert printed_command(capsys.readouterr().out, "start; `", where)[1:3] == ["nodes", "up"]


def test_capacity_extend_list(aws, where, capsys):
    capacity_tests.stub_extensions(aws, capacity_tests.extension("cbeo-1"))
    assert main(["capacity", "extend", *where]) == 0
    assert printed_command(capsys.readouterr().out, "Next:", where)[1:6] == ["capacity", "extend", "cbeo-1", "--hours", "24"]


def test_nodes_up(aws, where, capsys):
    stub_reservation(aws)
    stub_marked(aws)
    stub_nodegroups(aws, 2)
    for group in GROUPS:
        nodes_tests.stub_instances(aws, group, "running", "running")
    assert main(["nodes", "up", "--no-serving", *where]) == 0
    out = capsys.readouterr().out
    assert printed_command(out, "Next:", where)[1:2] == ["status"]


def test_nodes_up_without_waiting(aws, where, capsys):
    stub_reservation(aws)
    stub_marked(aws)
    stub_nodegroups(aws, 2)
    assert main(["nodes", "up", "--no-serving", "--no-wait", *where]) == 0
    assert printed_command(capsys.readouterr().out, "Watch:", where)[1:2] == ["status"]


def test_nodes_down(aws, where, capsys):
    stub_marked(aws, up=False)
    stub_nodegroups(aws, 0)
    for group in GROUPS:
        nodes_tests.stub_instances(aws, group)
    assert main(["nodes", "down", "--no-serving", *where]) == 0
    assert printed_command(capsys.readouterr().out, "; `", where)[1:3] == ["nodes", "up"]


def test_status(aws, where, cluster, capsys):
    status_tests.stub_aws(aws)
    cluster()
    assert main(["status", *where]) == 0
    assert printed_command(capsys.readouterr().out, "Next:", where)[1:2] == ["smoke"]


def test_topology_without_nodes(aws, where, capsys):
    aws("ec2").add_response("describe_instances", instances_page(), {"Filters": FILTERS})
    assert main(["topology", *where]) == 2
    assert printed_command(capsys.readouterr().err, "active, `", where)[1:3] == ["nodes", "up"]


def test_render(where, tmp_path, capsys):
    out = tmp_path / "serving"
    assert main(["render", "--out", str(out), "--registry", REGISTRY, "--weights-bucket", "glm51-2p2d-weights-bucket", *where]) == 0
    assert printed_command(capsys.readouterr().out, "then `", where)[1:2] == ["status"]


def test_bench(where, monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(kube, "connect", lambda context: FakeCluster(logs={"bench": {0: bench_pod_log()}}))
    assert main(["bench", "--out", str(tmp_path / "b"), "--concurrency", "1,4", "--registry", REGISTRY, *where]) == 0
    assert printed_command(capsys.readouterr().out, "Next:", where)[1:3] == ["report", "--bench"]


def test_validate(where, monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(kube, "connect", lambda context: FakeCluster(logs=GOOD_LOGS))
    assert main(["validate", "--out", str(tmp_path / "v.json"), "--registry", REGISTRY, *where]) == 0
    out = capsys.readouterr().out
    assert printed_command(out, "then `", where)[1:2] == ["bench"]
    assert f"to `pdkit report {context_of(where)}`" in out  # the flags to add to the report command


def test_weights_import_and_wait(aws, where, monkeypatch, capsys):
    weights_tests.stub_account(aws)
    core, batch = (
        weights_tests.Core(pods=[weights_tests.pod()], logs=["import complete"]),
        weights_tests.Batch(after=[weights_tests.job_status(complete=True)]),
    )
    monkeypatch.setattr(kube, "connect", lambda context: kube.Kube(core=core, batch=batch))
    monkeypatch.setattr(weights_tests.weights, "POLL_SECONDS", 0)
    assert main(["weights", "import", "--wait", "--bucket", weights_tests.BUCKET, *where]) == 0
    assert printed_command(capsys.readouterr().out, "Next:", where)[1:3] == ["weights", "verify"]


def test_weights_import_without_waiting(aws, where, monkeypatch, capsys):
    weights_tests.stub_account(aws)
    core, batch = weights_tests.Core(), weights_tests.Batch()
    monkeypatch.setattr(kube, "connect", lambda context: kube.Kube(core=core, batch=batch))
    assert main(["weights", "import", "--bucket", weights_tests.BUCKET, *where]) == 0
    assert printed_command(capsys.readouterr().out, "Follow it:", where)[1:4] == ["weights", "import", "--wait"]


def test_weights_verify_fix(aws, where, capsys):
    weights_tests.stub_manifest(aws)
    sizes = weights_tests.sizes_with_manifest()
    del sizes["config.json"]
    weights_tests.stub_listing(aws, sizes)
    for path, data in weights_tests.DATA.items():
        if path != "config.json":
            weights_tests.stub_head(aws, path, weights_tests.sha(data))
    assert main([*weights_tests.VERIFY, "--bucket", weights_tests.BUCKET, *where]) == 1
    assert printed_command(capsys.readouterr().out, "Fix: run `", where)[1:3] == ["weights", "import"]


def test_capacity_buy(aws, tmp_path, monkeypatch, capsys):
    # buy refuses a --region other than the profile's (test_cmd_capacity.py), so the profile is in the region here.
    where = [
        "--profile",
        real_profile(tmp_path, aws__region=REGION, aws__availability_zone=f"{REGION}a"),
        "--aws-profile",
        AWS_PROFILE,
        "--region",
        REGION,
    ]
    monkeypatch.setattr(purchase, "new_purchase_id", lambda: capacity_tests.PURCHASE_ID)
    capacity_tests.stub_offerings(aws, capacity_tests.offering("cbr-1", az=f"{REGION}a"))
    capacity_tests.stub_dry_run(aws, "cbr-1")
    capacity_tests.stub_purchase(aws, "cbr-1")
    assert main(["capacity", "buy", "cbr-1", "--yes", *where]) == 0
    out = capsys.readouterr().out
    assert printed_command(out, "Next: `", where)[1:3] == ["capacity", "status"]
    assert printed_command(out, "then `", where)[1:2] == ["preflight"]


def test_preflight(aws, where, pins, capsys):
    preflight_tests.stub_checks(aws, cluster={"name": "glm51-2p2d", "status": "ACTIVE", "version": "1.36"})
    assert main(["preflight", *where]) == 0
    out = capsys.readouterr().out
    assert (
        f"Next: AWS_PROFILE={AWS_PROFILE} make deploy PROFILE={where[1]} (after AWS_PROFILE={AWS_PROFILE} make bootstrap PROFILE={where[1]} "
        in out
    )
    assert printed_command(out, "approve its IAM changes), then", where)[1:3] == ["nodes", "up"]


def test_weights_import_failure_fix(aws, where, monkeypatch, capsys):
    weights_tests.stub_account(aws)
    failed = weights_tests.job_status(failure=("PodFailurePolicy", "Container import exited with 3"), failed=1)
    core, batch = weights_tests.Core(pods=[weights_tests.pod()], logs=["error: gated"]), weights_tests.Batch(after=[failed])
    monkeypatch.setattr(kube, "connect", lambda context: kube.Kube(core=core, batch=batch))
    monkeypatch.setattr(weights_tests.weights, "POLL_SECONDS", 0)
    assert main(["weights", "import", "--wait", "--bucket", weights_tests.BUCKET, *where]) == 1
    assert printed_command(capsys.readouterr().out, "then run `", where)[1:3] == ["weights", "import"]


def test_status_not_ready_yet(aws, where, cluster, capsys):
    status_tests.stub_aws(aws, desired=0)
    cluster(nodes=[], sets=[], routers=[])
    assert main(["status", *where]) == 1
    assert printed_command(capsys.readouterr().out, "; run `", where)[1:2] == ["status"]


def test_validate_failure(where, monkeypatch, tmp_path, capsys):
    from tests.fixtures.fabric.fakes import fixture

    logs = {**GOOD_LOGS, "nccl": {0: fixture("nccl-socket.log")}}
    monkeypatch.setattr(kube, "connect", lambda context: FakeCluster(logs=logs))
    assert main(["validate", "--out", str(tmp_path / "v.json"), "--registry", REGISTRY, *where]) == 1
    assert printed_command(capsys.readouterr().out, "then run `", where)[1:2] == ["validate"]


def test_capacity_extend_purchase(aws, where, capsys):
    capacity_tests.stub_extension_purchase(aws)
    assert main(["capacity", "extend", "cbeo-1", "--yes", *where]) == 0
    assert printed_command(capsys.readouterr().out, "Check:", where)[1:3] == ["capacity", "status"]
