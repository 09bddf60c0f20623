"""A suggested fix is a fix: applying it to the profile makes the plan accept it, rather than
leading to the next refusal (issue 13: the pp=4 message suggested `tp: 4, pp: 4`, which the
pipeline-stage rule then refused)."""

from __future__ import annotations

import re
from typing import Any

import pytest
import yaml

from pdkit.errors import ProfileError
from pdkit.model import plan, profile_files

# (id, changes that break the default profile in one place, the field the error names).
# Rules whose fix needs the operator's own facts are not here: the block's AZ (from
# `pdkit capacity offerings`), a region's AZ names, and the CIDRs of the operator's network.
CASES = [
    ("tp-times-pp", ("roles.decode.parallelism.tp", 8), "roles.decode.parallelism.tp"),
    ("tp-times-pp-with-pp-4", ("roles.decode.parallelism.pp", 4), "roles.decode.parallelism.tp"),
    (
        "pp-more-than-nodes",
        ("roles.decode.parallelism", {"tp": 4, "pp": 4, "deepep_mode": "low_latency"}),
        "roles.decode.parallelism.pp",
    ),
    ("attn-dp-not-divisor", ("roles.decode.parallelism.attn_dp", 6), "roles.decode.parallelism.attn_dp"),
    ("attn-cp-times-dp", ("roles.prefill.parallelism.attn_dp", 2), "roles.prefill.parallelism.attn_dp"),
    (
        "cp-on-decode",
        ("roles.decode.parallelism.attn_dp", 1, "roles.decode.parallelism.attn_cp", 2),
        "roles.decode.parallelism.attn_cp",
    ),
    (
        "prefill-cp-across-nodes",
        ("roles.prefill.parallelism", {"tp": 16, "attn_cp": 8, "deepep_mode": "normal"}),
        "roles.prefill.parallelism.attn_cp",
    ),
    ("deepep-mode-unpinned", ("roles.decode.parallelism.deepep_mode", None), "roles.decode.parallelism.deepep_mode"),
    ("ep-not-tp-with-deepep", ("roles.decode.parallelism.ep", 8), "roles.decode.parallelism.ep"),
    (
        "ep-not-divisor-without-deepep",
        (
            "roles.decode.parallelism.moe_a2a_backend",
            "none",
            "roles.decode.parallelism.deepep_mode",
            None,
            "roles.decode.parallelism.ep",
            6,
        ),
        "roles.decode.parallelism.ep",
    ),
    (
        "experts-not-divisible",
        (
            "capacity.instance_count",
            5,
            "roles.prefill.nodes_per_replica",
            3,
            "roles.prefill.parallelism",
            {"tp": 24, "deepep_mode": "normal"},
        ),
        "roles.prefill.parallelism.tp",
    ),
    ("context-over-model", ("roles.decode.context_length", 300000), "roles.decode.context_length"),
    (
        "context-over-model-and-kv",
        ("roles.decode.context_length", 300000, "roles.decode.mem_fraction_static", 0.6),
        "roles.decode.context_length",
    ),
    ("weights-over-static-pool", ("roles.decode.mem_fraction_static", 0.5), "roles.decode.mem_fraction_static"),
    ("kv-cannot-hold-context", ("roles.decode.mem_fraction_static", 0.55), "roles.decode.context_length"),
    ("nodes-not-instance-count", ("capacity.instance_count", 6), "capacity.instance_count"),
    ("nat-more-than-azs", ("network.nat_gateways", 4), "network.nat_gateways"),
    ("more-efa-than-instance", ("capacity.efa_devices", 32), "capacity.efa_devices"),
    ("old-kubernetes", ("cluster.kubernetes_version", "1.29"), "cluster.kubernetes_version"),
    ("unknown-instance-type", ("capacity.instance_type", "p4d.24xlarge"), "capacity.instance_type"),
    ("unknown-model", ("model.id", "zai-org/GLM-4"), "model.id"),
    ("name-too-long", ("name", "a" * 32), "name"),
    ("mtp-on-decode-only", ("roles.decode.mtp", {"enabled": True}), "roles.prefill.mtp.enabled"),
    ("mtp-on-prefill-only", ("roles.prefill.mtp", {"enabled": True}), "roles.decode.mtp.enabled"),
    (
        "mtp-settings-differ",
        ("roles.prefill.mtp", {"enabled": True, "steps": 2}, "roles.decode.mtp", {"enabled": True}),
        "roles.prefill.mtp",
    ),
    ("cidrs-with-private-endpoint", ("cluster.public_access_cidrs", ["10.1.0.0/16"]), "cluster.public_access_cidrs"),
]


def _error(raw: dict[str, Any]) -> ProfileError:
    with pytest.raises(ProfileError) as caught:
        plan.build(profile_files.parse(raw))
    return caught.value


def _apply(raw: dict[str, Any], field: str, fix: str) -> None:
    """Apply the first alternative of a fix the way an operator would read it."""
    first = fix.split(", or ")[0]
    *parents, leaf = field.split(".")
    section = raw
    for key in parents:
        section = section.setdefault(key, {})
    if m := re.match(r"remove (\w+)", first):
        section.pop(leaf if m.group(1) == "them" else m.group(1))
    elif m := re.match(r"use one of ([^,\s(]+)", first):
        section[leaf] = m.group(1)
    elif m := re.match(r"use 1\.\.(\d+)", first):
        section[leaf] = int(m.group(1))
    elif m := re.search(r"at most (\d+) characters", first):
        section[leaf] = section[leaf][: int(m.group(1))]
    else:
        pairs = re.findall(r"(\w+): (\"[^\"]*\"|[^\s,()]+)", first)
        assert pairs, f"the fix names no value to set: {fix}"
        target = section[leaf] if isinstance(section.get(leaf), dict) else section
        for key, value in pairs:
            target[key] = yaml.safe_load(value)


@pytest.mark.parametrize(("changes", "field"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_suggested_fix_is_accepted(raw_with, changes, field):
    """The refusal names the field; its suggested fix, applied as written, gives a plan."""
    raw = raw_with(*changes)
    err = _error(raw)
    assert err.field == field, str(err)
    _apply(raw, err.field, err.fix)
    try:
        plan.build(profile_files.parse(raw))
    except ProfileError as after:
        pytest.fail(f"fix {err.fix!r} for {err.field} led to: {after}")


@pytest.mark.parametrize("parallelism", [{"pp": 4}, {"tp": 4, "pp": 4}])
def test_pp_fix_from_the_issue(raw_with, parallelism):
    """pp: 4 on a two-node decode replica: the fix no longer suggests `tp: 4, pp: 4`, which the
    pipeline-stage rule (pp <= nodes_per_replica) refuses."""
    raw = raw_with(*[x for key, value in parallelism.items() for x in (f"roles.decode.parallelism.{key}", value)])
    err = _error(raw)
    assert "pp: 4" not in err.fix
    assert re.search(r"pp: [12]\b", err.fix)


@pytest.mark.parametrize(
    ("levels", "problem"),
    [([], "no concurrency level to run"), ([1, 0, 4], "level 0 is not"), ([-4], "level -4 is not")],
)
def test_bench_levels_are_refused_with_the_profile(raw_with, levels, problem):
    """bench.concurrency was accepted as anything and refused only when `pdkit bench` started on the paid block;
    now the profile refuses it, and the example in its fix is accepted."""
    raw = raw_with("bench.concurrency", levels)
    err = _error(raw)
    assert (err.field, problem in str(err)) == ("bench.concurrency", True), str(err)
    example = re.search(r"e\.g\. (\[[^]]*\])", err.fix)
    assert example, err.fix
    raw["bench"]["concurrency"] = yaml.safe_load(example.group(1))
    assert plan.build(profile_files.parse(raw)).bench.concurrency == (1, 4, 16, 64)
