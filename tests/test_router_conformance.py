"""Conformance of the router's routing flags: the exported cases state the plan's policies, and the checker fails,
naming the field, when smg resolves a different one (issue 16 item 3).

smg 1.13.0's rule (smg/router_args.py `_validate_router_args`, --help in conformance/help/): in PD mode a role
uses its --prefill-policy / --decode-policy, else the main --policy.
"""

from __future__ import annotations

import sys
import types

import pytest

from conformance import check_sglang, export_cases


@pytest.fixture(scope="module")
def cases():
    return {c["id"]: c for c in export_cases.all_cases()}


def test_router_cases_expect_the_plans_policies(cases):
    """2P2D: one prefill replica, round_robin; 4P4D: two, cache_aware. Decode load-aware and rank-aware in both."""
    two = cases["glm51-fp8-2p2d/router"]["expect"]
    four = cases["glm51-fp8-4p4d/router"]["expect"]
    assert (two["prefill_policy"], two["decode_policy"], two["dp_aware"]) == ("round_robin", "power_of_two", True)
    assert (four["prefill_policy"], four["decode_policy"], four["dp_aware"]) == ("cache_aware", "power_of_two", True)
    assert (four["cache_threshold"], four["balance_abs_threshold"], four["balance_rel_threshold"]) == (0.3, 64, 1.5)
    assert "reject/router-bucket-decode-policy" in cases  # bucket is a --prefill-policy choice only


def _fake_smg(monkeypatch, parsed: types.SimpleNamespace) -> None:
    """smg lives in .venv-sglang only: stand in for its parser with what it would have parsed."""
    parsed._validate_router_args = lambda: None
    launch = types.ModuleType("smg.launch_router")
    launch.parse_router_args = lambda argv: parsed
    router = types.ModuleType("smg.router")
    router.Router = types.SimpleNamespace(from_args=lambda args: None)
    monkeypatch.setitem(sys.modules, "smg", types.ModuleType("smg"))
    monkeypatch.setitem(sys.modules, "smg.launch_router", launch)
    monkeypatch.setitem(sys.modules, "smg.router", router)


def test_checker_names_a_policy_smg_resolves_differently(cases, monkeypatch):
    """Without --prefill-policy smg falls back to its main --policy (default cache_aware): a 2P2D command line that
    lost its prefill policy must fail the case, naming the field."""
    case = cases["glm51-fp8-2p2d/router"]
    expect = case["expect"]
    parsed = types.SimpleNamespace(
        **{k: v for k, v in expect.items() if k not in ("prefill_policy", "decode_policy")},
        policy="cache_aware",
        prefill_policy=None,
        decode_policy=expect["decode_policy"],
    )
    _fake_smg(monkeypatch, parsed)
    with pytest.raises(check_sglang.Failed, match=r"prefill_policy='cache_aware' \(plan: 'round_robin'\)"):
        check_sglang.check_router(case)
