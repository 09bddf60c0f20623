"""cfn-lint on every synthesized template, for every shipped profile."""

from __future__ import annotations

import json

import pytest
from cfnlint.api import ManualArgs, lint

from pdkit.model import profile_files
from tests.conftest import kit_of


# The one allowance: W3005 ("DependsOn already enforced by a GetAtt") where a Lambda function declares
# DependsOn the very role it references in Properties.Role. aws-cdk-lib's lambda.Function always adds that
# dependency (so its role exists first); it is redundant and harmless. Nothing else is ignored.
def _allowed(match, template) -> bool:
    path = list(match.path or [])
    if match.rule.id != "W3005" or len(path) < 4 or path[0] != "Resources" or path[2] != "DependsOn":
        return False
    resource = template["Resources"][path[1]]
    depends = resource["DependsOn"]
    target = depends[path[3]] if isinstance(depends, list) else depends
    return resource["Type"] == "AWS::Lambda::Function" and resource["Properties"].get("Role") == {"Fn::GetAtt": [target, "Arn"]}


@pytest.mark.parametrize("profile", profile_files.available_profiles())
def test_templates_are_cfn_lint_clean(profile):
    built = kit_of(profile)
    for name in built.stacks:
        template = built.template_json(name)
        matches = lint(json.dumps(template), regions=[built.plan.region], config=ManualArgs(regions=[built.plan.region]))
        problems = [f"{m.rule.id} {m.message}" for m in matches if not _allowed(m, template)]
        assert problems == [], f"{name}: {problems}"
