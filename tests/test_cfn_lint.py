"""cfn-lint on every synthesized template, for every shipped profile."""

from __future__ import annotations

import json

import pytest
from cfnlint.api import ManualArgs, lint

from pdkit import profile_files
from tests.conftest import synth


@pytest.mark.parametrize("profile", profile_files.available_profiles())
def test_templates_are_cfn_lint_clean(profile, kit):
    built = kit if profile == profile_files.default_profile_name() else synth(profile)
    for name in built.stacks:
        template = built.template_json(name)
        matches = lint(json.dumps(template), regions=[built.plan.region], config=ManualArgs(regions=[built.plan.region]))
        problems = [f"{m.rule.id} {m.message}" for m in matches]
        assert problems == [], f"{name}: {problems}"
