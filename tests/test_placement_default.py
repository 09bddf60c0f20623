"""Where the kit's placement decision lives (pdkit/model/plan.py _placement_group) and how `pdkit plan` states it.

A Capacity Block's instances "are automatically placed close together inside EC2 UltraClusters"
(https://docs.aws.amazon.com/AWSEC2/latest/APIReference/API_CapacityBlock.html); AWS ParallelCluster refuses a
placement group with a Capacity Block at error level (aws/aws-parallelcluster#6311, "validate that placement group
is not used with capacity block") and stopped suggesting one for EFA when Capacity Blocks are used (#6324); eksctl
saw a placement group cut a 16-instance reservation to 11 usable ones (eksctl-io/eksctl#7949). So a block gets no
placement group unless the profile asks, and then a warning; an on-demand rehearsal, with no block to place it,
keeps a cluster placement group."""

from __future__ import annotations

import pytest
import yaml

from pdkit import deployment
from pdkit.model import plan as plan_module
from pdkit.model import profile_files
from pdkit.render import plan_report


def _plan(raw):
    return plan_module.build(profile_files.parse(raw), profile_path="<test>")


@pytest.mark.parametrize(("asked", "chosen"), [(None, "none"), ("none", "none"), ("cluster", "cluster")])
def test_a_block_defaults_to_its_own_placement(raw_with, asked, chosen):
    """Field absent -> none (b561709 defaulted to cluster); either value can still be asked for."""
    assert _plan(raw_with("capacity.placement_group", asked)).placement_group == chosen


def test_a_rehearsal_defaults_to_a_cluster_placement_group():
    """On demand, EC2 places instances wherever it has them: the cluster placement group keeps them close."""
    raw = yaml.safe_load(profile_files.resolve("rehearsal-glm51-fp8-2p2d").read_text())
    del raw["capacity"]["placement_group"]
    assert _plan(raw).placement_group == "cluster"
    assert deployment.load("rehearsal-glm51-fp8-2p2d").placement_group == "cluster"


def test_a_cluster_placement_group_on_a_block_is_warned_about_with_the_fix(raw_with):
    plan = _plan(raw_with("capacity.placement_group", "cluster"))
    (warning,) = plan.placement_warnings
    assert "aws/aws-parallelcluster#6311" in warning
    assert "shows only when the block starts" in warning
    assert "Fix: remove capacity.placement_group (or set none)" in warning
    assert f"Warning: {warning}." in plan_report.as_text(plan)


@pytest.mark.parametrize("asked", [None, "none"])
def test_the_blocks_own_placement_is_not_warned_about_and_says_how_it_is_checked(raw_with, asked):
    plan = _plan(raw_with("capacity.placement_group", asked))
    assert plan.placement_warnings == ()
    text = plan_report.as_text(plan)
    assert "Placement group  none: the block's own (EC2 places a Capacity Block's instances together; checked at delivery" in text


def test_every_shipped_block_profile_uses_the_blocks_own_placement():
    """The shipped block profiles ask for none; only the on-demand rehearsal keeps a placement group."""
    for name in profile_files.available_profiles():
        plan = deployment.load(name)
        want = "none" if plan.market == "capacity-block" else "cluster"
        assert plan.placement_group == want, name
        assert plan.placement_warnings == (), name
