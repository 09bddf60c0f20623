"""Shared fixtures: the default profile's plan and its app, synthesized once per test run."""

from __future__ import annotations

import copy
import functools
import importlib.util
import json
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import pytest
import yaml
from aws_cdk.assertions import Template

# On CI a skipped test fails: the hook is this conftest's (tests/no_skips.py, checked by tests/test_no_skips.py).
from no_skips import pytest_runtest_makereport  # noqa: F401

from pdkit import deployment
from pdkit.model import profile_files
from pdkit.model.plan import Plan
from pdkit.model.profile import PLACEHOLDER_RESERVATION
from pdkit.model.thresholds import Thresholds, derive
from stacks.kit import build_kit

ROOT = Path(__file__).resolve().parent.parent
# The feature flags of cdk.json, so tests synthesize exactly what `cdk synth` does.
CDK_CONTEXT = {k: v for k, v in json.loads((ROOT / "cdk.json").read_text())["context"].items() if k != "profile"}


def new_app() -> cdk.App:
    return cdk.App(context=CDK_CONTEXT)


@dataclass
class Kit:
    app: cdk.App
    plan: Plan
    stacks: dict[str, cdk.Stack]
    assembly: cdk.cx_api.CloudAssembly

    def template(self, name: str) -> Template:
        return Template.from_stack(self.stacks[name])

    def template_json(self, name: str) -> dict[str, Any]:
        return json.loads((Path(self.assembly.directory) / self.stacks[name].template_file).read_text())

    def properties(self, name: str, kind: str) -> list[dict[str, Any]]:
        """The Properties of every `kind` resource in stack `name`."""
        return [r["Properties"] for r in self.template(name).find_resources(kind).values()]

    def one(self, name: str, kind: str) -> dict[str, Any]:
        """The Properties of the one `kind` resource in stack `name` (fails when there are none or several)."""
        (found,) = self.properties(name, kind)
        return found


def synth(profile: dict[str, Any] | str | None = None, *, with_policy: bool = False) -> Kit:
    """Build the kit for a profile (a name, a raw dict or None for the default), without policy plugins."""
    if isinstance(profile, dict):
        the_plan = deployment.build(profile_files.parse(profile), profile_path="<test>")
    else:
        the_plan = deployment.load(profile)
    app = new_app()
    stacks = build_kit(app, the_plan, with_policy=with_policy)
    return Kit(app=app, plan=the_plan, stacks=stacks, assembly=app.synth())


@functools.cache
def plan_of(name: str | None = None) -> Plan:
    """The checked plan of a named profile (None: the default), loaded once per run: read it, never change it."""
    return deployment.load(name)


@pytest.fixture(scope="session")
def plan() -> Plan:
    """The default profile's plan (plan_of(None)), for tests that only read it."""
    return plan_of()


@pytest.fixture(scope="session")
def th(plan: Plan) -> Thresholds:
    """The default plan's validation thresholds (pdkit/model/thresholds.py)."""
    return derive(plan)


# capacity.purchase of the `bought` kit: the offering the capacity stack buys and the fee the profile confirms.
PURCHASE = {"offering_id": "cb-0123456789abcdef0", "confirm_upfront_fee_usd": "98765.43"}


@pytest.fixture(scope="session")
def bought() -> Kit:
    """The default profile with capacity.purchase (PURCHASE) instead of a reservation id, synthesized once."""
    raw = yaml.safe_load(profile_files.resolve(None).read_text())
    raw["capacity"] |= {"reservation_id": PLACEHOLDER_RESERVATION, "purchase": PURCHASE}
    return synth(raw)


@pytest.fixture(scope="session")
def custom_kit() -> Kit:
    """The default profile on the kit's own node image (ami.source: custom), synthesized once."""
    raw = yaml.safe_load(profile_files.resolve(None).read_text())
    raw.setdefault("ami", {})["source"] = "custom"
    return synth(raw)


def policy_findings(app: cdk.App) -> list[str]:
    """Unacknowledged AwsSolutions and NIST 800-53 rev5 findings, as 'rule at construct path'."""
    from stacks.policy import packs

    found = []
    for pack in packs(app):
        for violation in pack.validate_scope(app).violations:
            found += [f"{violation.rule_name} at {r.construct_path}" for r in violation.violating_resources]
    return found


@functools.cache
def kit_of(name: str) -> Kit:
    """The kit of a named profile, synthesized once per run (the `kit` fixture is the default's): read it, never change it."""
    return synth(name)


@pytest.fixture(scope="session")
def kit() -> Kit:
    return kit_of(profile_files.default_profile_name())


@pytest.fixture
def default_raw() -> dict[str, Any]:
    """The default profile as a plain dict, to mutate in tests."""
    return copy.deepcopy(yaml.safe_load(profile_files.resolve(None).read_text()))


@pytest.fixture
def raw_with() -> Callable[..., dict[str, Any]]:
    """`raw_with("capacity.instance_count", 6)` -> default profile with one field changed (None deletes it)."""
    base = yaml.safe_load(profile_files.resolve(None).read_text())

    def change(*pairs: Any) -> dict[str, Any]:
        raw = copy.deepcopy(base)
        for dotted, value in zip(pairs[::2], pairs[1::2], strict=True):
            *parents, leaf = dotted.split(".")
            node = raw
            for key in parents:
                node = node.setdefault(key, {})
            if value is None:
                node.pop(leaf, None)
            else:
                node[leaf] = copy.deepcopy(value)  # a test that then edits raw must not edit the caller's (shared) value
        return raw

    return change


# The fixtures that synthesize a whole CDK app (see pytest_collection_modifyitems).
SYNTHESIZING = {"kit", "rehearsal_kit", "bought", "custom_kit"}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Under `make mutation` a mutant is judged by its own module's killers only (MODULES in
    tests/mutation/score.py), not by whatever else in the selection reaches it: stricter, and the slow
    tests of other modules (real botocore timeouts, CLI runs) no longer run for every plan mutant."""
    mutant = os.environ.get("MUTANT_UNDER_TEST", "")
    if "__mutmut_" not in mutant:
        return
    spec = importlib.util.spec_from_file_location("mutation_score", Path(__file__).parent / "mutation" / "score.py")
    assert spec
    assert spec.loader
    score = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(score)
    if mutant in score.equivalents(Path(__file__).parent / "mutation" / "equivalent.toml"):
        # Listed as equivalent, with its reason, and left out of the score: running its tests (up to 5 s each,
        # a fifth of a full run) could not change a number. pytest reports "no tests ran" (mutmut: "no tests").
        config.hook.pytest_deselected(items=items[:])
        items[:] = []
        return
    killers = [Path(f).name for f in score.MODULES[score.module_of(mutant)]]
    # Tests that synthesize an app are no killers: mutmut forks every mutant's run from one process, whose
    # jsii node process (started when aws_cdk is imported) the children then share, and two children
    # talking to it at once garble its answers ("'dict' object has no attribute 'ref'"): a false kill.
    judged = [item for item in items if item.path.name in killers and not SYNTHESIZING & set(getattr(item, "fixturenames", ()))]
    config.hook.pytest_deselected(items=[item for item in items if item not in judged])
    # In the order MODULES lists them (the fine-grained files first): with -x a killed mutant stops at the first failure.
    items[:] = sorted(judged, key=lambda item: killers.index(item.path.name))
