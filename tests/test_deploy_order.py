"""`make deploy`'s order: the purchase stack first, right after the fee is typed, then every stack after the stacks
it reads (issue 25, items 4 and 7).

Why it matters: an offering can sell out while the cluster stack takes its 20-40 minutes, so the block is bought
before anything else but the network its function runs in; and a weak cross-stack reference (Fn::GetStackOutput,
cdk.json "@aws-cdk/core:defaultCrossStackReferences") does not lock its producer, so only the deploy order keeps a
consumer from being deployed against a producer that has not been updated yet (runbooks/01-cluster.md, "Deploy
order"). `cdk deploy STACK` deploys the stacks STACK depends on first, and `cdk deploy --all` deploys in dependency
order (AWS CDK Toolkit reference, cdk deploy: --exclusively "only deploy requested stacks, don't include
dependencies").
"""

from __future__ import annotations

import os
import subprocess
from collections.abc import Iterator
from typing import Any

import pytest

from pdkit.model.plan import PURCHASE_STACK, STACKS
from tests.conftest import ROOT


def _deploy_lines() -> list[str]:
    """GNU make's dry run of `make deploy`: the recipe lines in the order make runs them, none executed."""
    env = {k: v for k, v in os.environ.items() if k not in {"MAKEFLAGS", "MAKELEVEL", "MFLAGS", "PROFILE", "YES"}}
    out = subprocess.run(
        ["make", "--no-print-directory", "-n", "-o", "setup", "deploy"], capture_output=True, text=True, env=env, cwd=ROOT, check=True
    )
    return out.stdout.splitlines()


def test_make_deploy_buys_first_right_after_the_fee_is_typed():
    """synth, deploy-check (the typed fee), the purchase stack alone (it exists only with capacity.purchase: found in
    the synthesized assembly by its name), then every stack."""
    lines = _deploy_lines()
    check = next(i for i, line in enumerate(lines) if "pdkit deploy-check" in line)
    first = next(i for i, line in enumerate(lines) if f"grep -e '-{PURCHASE_STACK}$'" in line)
    purchase = next(i for i, line in enumerate(lines) if 'deploy --app cdk.out "$first"' in line)
    everything = next(i for i, line in enumerate(lines) if "deploy --app cdk.out --all" in line)
    assert any("synth" in line for line in lines[:check])
    assert check < first < purchase < everything
    assert "ls --app cdk.out" in lines[first]
    assert "--exclusively" not in "\n".join(lines)


def _reads(value: Any) -> Iterator[str]:
    if isinstance(value, dict):
        if isinstance(value.get("Fn::GetStackOutput"), dict):
            yield value["Fn::GetStackOutput"]["StackName"]
        for child in value.values():
            yield from _reads(child)
    elif isinstance(value, list):
        for child in value:
            yield from _reads(child)


@pytest.mark.parametrize("which", ["kit", "bought"])
def test_every_stack_depends_on_every_stack_it_reads(which, request):
    """A consumer of a weak reference is deployed after its producer only if it depends on it: every stack a template
    reads with Fn::GetStackOutput is among its stack's dependencies, with and without a purchase."""
    built = request.getfixturevalue(which)
    names = [*STACKS, *([PURCHASE_STACK] if which == "bought" else [])]
    for key in names:
        stack = built.stacks[key]
        read = set(_reads(built.template_json(key)))
        assert read <= {d.stack_name for d in stack.dependencies}, key
