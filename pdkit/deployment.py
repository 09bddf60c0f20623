"""The plan a profile deploys: pdkit.model.plan derives it; a rehearsal (`rehearses:`) is then held to its block
profile and runs the block's images (pdkit/rehearsal_rules.py). This sits above both, so the plan does
not import the serving renderers the comparison needs. Every entry point that turns a profile into a
deployment (`cdk synth`, the CLI, conformance) builds through here."""

from __future__ import annotations

from pathlib import Path

from pdkit import rehearsal_rules
from pdkit.errors import ProfileError
from pdkit.model import plan as planning
from pdkit.model import profile_files
from pdkit.model.plan import Plan
from pdkit.model.profile import Profile


def build(profile: Profile, *, profile_path: str | Path = "") -> Plan:
    """The profile's plan; for a rehearsal, checked against its block (RehearsalMismatch lists every difference)."""
    plan = planning.build(profile, profile_path=profile_path)
    if plan.rehearses is None:
        return plan
    try:
        block = rehearsal_rules.load_rehearsed(plan)
        rehearsal_rules.check(plan, block)
        return rehearsal_rules.adopt_block_images(plan, block)
    except ProfileError as err:
        raise err.with_source(str(profile_path)) from None


def load(ref: str | None) -> Plan:
    """The plan of a profile named in config/ or given as a path (None: cdk.json's default)."""
    profile, path = profile_files.load(ref)
    return build(profile, profile_path=path)
