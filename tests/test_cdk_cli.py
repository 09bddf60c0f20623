"""The real CDK CLI synthesizes the default profile with no AWS credentials and no context lookups."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

from pdkit.cli.context import load_plan
from pdkit.model import profile_files


@pytest.mark.cli
def test_cdk_synth_offline_without_credentials(tmp_path):
    cdk = shutil.which("cdk")
    assert cdk, "the pinned CDK CLI is installed by `make setup` (node_modules/.bin on PATH)"
    env = {k: v for k, v in os.environ.items() if not k.startswith("AWS_")}
    env.update(
        HOME=str(tmp_path),
        AWS_CONFIG_FILE=str(tmp_path / "none"),
        AWS_SHARED_CREDENTIALS_FILE=str(tmp_path / "none"),
        AWS_EC2_METADATA_DISABLED="true",
    )
    out = tmp_path / "cdk.out"
    result = subprocess.run(
        [cdk, "synth", "--quiet", "--no-notices", "-o", str(out)],
        cwd=profile_files.ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "end-of-life" not in result.stderr, "jsii ran on an end-of-life Node: .venv/bin must come first on PATH"
    manifest = json.loads((out / "manifest.json").read_text())
    assert "missing" not in manifest, "synth needed a context lookup"
    expected = sorted(f"{name}.template.json" for name in load_plan(None).stack_names.values())
    assert sorted(p.name for p in out.glob("*.template.json")) == expected
    assert not (profile_files.ROOT / "cdk.context.json").exists()
