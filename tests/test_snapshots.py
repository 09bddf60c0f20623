"""Normalized whole-template snapshots: any change to what the kit deploys shows up as a diff.

Re-record deliberately with `make update-snapshots` and review the diff. Asset hashes, account ids
and the CDK version metadata are normalized so a CDK bump does not rewrite every snapshot.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from syrupy.extensions.json import JSONSnapshotExtension

from pdkit.cli.context import load_plan
from pdkit.model.plan import STACKS

HASH = re.compile(r"[0-9a-f]{64}")
# Image tags are content hashes of containers/ (pdkit/model/images.py): a Dockerfile edit is not a template change.
# Image Builder names carry a 10-hex content fingerprint (pdkit/render/ami.py): the content itself is in the snapshot.
FINGERPRINTED_NAME = re.compile(r"^([a-z0-9-]+)-[0-9a-f]{10}$")
IMAGE_TAG = re.compile(r"\b(" + "|".join(map(re.escape, load_plan(None).images)) + r")-[0-9a-f]{12}\b")
ACCOUNT = re.compile(r"(?<![0-9])[0-9]{12}(?![0-9])")


def normalize(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: normalize(v) for k, v in value.items() if k != "CDKMetadata"}
    if isinstance(value, list):
        return [normalize(v) for v in value]
    if isinstance(value, str):
        value = IMAGE_TAG.sub(r"\1-<tag>", ACCOUNT.sub("<account>", HASH.sub("<asset-hash>", value)))
        return FINGERPRINTED_NAME.sub(r"\1-<fingerprint>", value)
    return value


@pytest.fixture
def snapshot_json(snapshot):
    return snapshot.use_extension(JSONSnapshotExtension)


def test_normalize_hides_hashes_and_accounts():
    raw = {
        "S3Key": "ab" * 32 + ".zip",
        "Arn": "arn:aws:iam::123456789012:role/x",
        "Resources": {"CDKMetadata": {}},
        "Image": "r/sglang-efa:sglang-efa-0123456789ab",
    }
    assert normalize(raw) == {
        "S3Key": "<asset-hash>.zip",
        "Arn": "arn:aws:iam::<account>:role/x",
        "Resources": {},
        "Image": "r/sglang-efa:sglang-efa-<tag>",
    }


@pytest.mark.parametrize("stack", STACKS)
def test_stack_snapshot(kit, snapshot_json, stack):
    assert normalize(kit.template_json(stack)) == snapshot_json


def test_make_update_snapshots_re_records_every_snapshot():
    """`make update-snapshots` lists every test module whose tests take a syrupy fixture (snapshot, snapshot_json):
    a module left out would keep a stale snapshot after a deliberate change, and fail until re-recorded by hand."""
    import ast
    import re
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    taking = set()
    for module in sorted((root / "tests").glob("test_*.py")):
        for node in ast.walk(ast.parse(module.read_text())):
            takes = isinstance(node, ast.FunctionDef) and {a.arg for a in node.args.args} & {"snapshot", "snapshot_json"}
            if takes and node.name.startswith("test_"):
                taking.add(f"tests/{module.name}")
    listed = re.search(r"^SNAPSHOT_TESTS := (.*)$", (root / "Makefile").read_text(), re.M)
    assert listed is not None
    assert set(listed.group(1).split()) == taking
