"""`pdkit status` shows the placement: which node serves which role, its bottom network node, whether decode shares one."""

from __future__ import annotations

import json

from pdkit.cli.main import main
from tests.fixtures.cmd_support import k8s_node, real_profile
from tests.test_cmd_status import stub_aws

pytest_plugins = ["tests.fixtures.cmd_fixtures"]  # aws, and cluster: the Kubernetes fakes

LAYER3 = "topology.k8s.aws/network-node-layer-3"


def node(name, group_role, instance_id, *, placed=None, layer3=None):
    made = k8s_node(name, group_role, instance_id=instance_id)
    if placed:
        made.metadata.labels["pdkit/placed-role"] = placed
    if layer3:
        made.metadata.labels[LAYER3] = layer3
    return made


def placement_row(capsys) -> dict[str, str]:
    rows = json.loads(capsys.readouterr().out)["rows"]
    (row,) = [r for r in rows if r["item"] == "placement"]
    return row


def test_status_shows_the_placed_roles_and_that_decode_shares_its_layer3_node(aws, cluster, tmp_path, capsys):
    """EKS labels each GPU node with topology.k8s.aws/network-node-layer-1..3, layer 3 being the bottom for p5en
    (https://docs.aws.amazon.com/eks/latest/userguide/ml-workload-topology.html); the placed role wins over the
    node group's, because the serving pods prefer it."""
    stub_aws(aws)
    cluster(
        [
            node("ip-1", "decode", "i-0d1", placed="decode", layer3="nn-c"),
            node("ip-2", "decode", "i-0d2", placed="prefill", layer3="nn-f"),
            node("ip-3", "prefill", "i-0p1", placed="decode", layer3="nn-c"),
            node("ip-4", "prefill", "i-0p2", placed="prefill", layer3="nn-g"),
        ]
    )
    main(["status", "--profile", real_profile(tmp_path), "--output", "json"])
    row = placement_row(capsys)
    assert row["state"] == "OK"
    assert "decode: ip-1 (i-0d1) under nn-c, ip-3 (i-0p1) under nn-c" in row["detail"]
    assert "prefill: ip-2 (i-0d2) under nn-f, ip-4 (i-0p2) under nn-g" in row["detail"]
    assert "decode shares bottom network node nn-c" in row["detail"]
    assert "--assign" not in row["detail"]


def test_status_says_when_decode_is_apart_and_roles_are_not_assigned_yet(aws, cluster, tmp_path, capsys):
    """Without pdkit/placed-role the pods fall back to their node group's role (preferred, so never Pending); status
    names the command that places decode from the topology, and an apart decode pair is reported, not failed."""
    stub_aws(aws)
    cluster(
        [
            node("ip-1", "decode", "i-0d1", layer3="nn-c"),
            node("ip-2", "decode", "i-0d2", layer3="nn-f"),
            node("ip-3", "prefill", "i-0p1", layer3="nn-c"),
            node("ip-4", "prefill", "i-0p2", layer3="nn-g"),
        ]
    )
    main(["status", "--profile", real_profile(tmp_path), "--output", "json"])
    row = placement_row(capsys)
    assert row["state"] == "OK"
    assert "decode does NOT share a bottom network node (nn-c, nn-f)" in row["detail"]
    assert "pdkit topology --assign" in row["detail"]
