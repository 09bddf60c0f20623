"""`pdkit status` shows the placement: which node serves which role, its bottom network node, whether decode shares one."""

from __future__ import annotations

import json

import pytest

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


@pytest.mark.parametrize(
    ("placed", "said", "unsaid"),
    [
        (
            ("decode", "prefill", "decode", "prefill"),
            [
                "decode: ip-1 (i-0d1) under nn-c, ip-3 (i-0p1) under nn-c",
                "prefill: ip-2 (i-0d2) under nn-f, ip-4 (i-0p2) under nn-g",
                "decode shares bottom network node nn-c",
            ],
            "--assign",
        ),
        ((None,) * 4, ["decode does NOT share a bottom network node (nn-c, nn-f)", "pdkit topology --assign"], None),
    ],
    ids=["placed-decode-shares-layer3", "not-assigned-decode-apart"],
)
def test_status_shows_the_placement(aws, cluster, tmp_path, capsys, placed, said, unsaid):
    """EKS labels each GPU node with topology.k8s.aws/network-node-layer-1..3, layer 3 being the bottom for p5en
    (https://docs.aws.amazon.com/eks/latest/userguide/ml-workload-topology.html); the placed role wins over the
    node group's, because the serving pods prefer it. Without pdkit/placed-role the pods fall back to their node
    group's role (preferred, so never Pending); status names the command that places decode from the topology, and
    an apart decode pair is reported, not failed."""
    stub_aws(aws)
    nodes = [("ip-1", "decode", "i-0d1", "nn-c"), ("ip-2", "decode", "i-0d2", "nn-f")]
    nodes += [("ip-3", "prefill", "i-0p1", "nn-c"), ("ip-4", "prefill", "i-0p2", "nn-g")]
    cluster([node(n, group, i, placed=role, layer3=l3) for (n, group, i, l3), role in zip(nodes, placed, strict=True)])
    main(["status", "--profile", real_profile(tmp_path), "--output", "json"])
    row = placement_row(capsys)
    assert row["state"] == "OK"
    assert all(part in row["detail"] for part in said), row["detail"]
    assert unsaid is None or unsaid not in row["detail"]
