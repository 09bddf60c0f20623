"""Snapshots of the rendered serving manifests: any change to what the kit deploys shows up as a diff.

Re-record deliberately with `pytest tests/test_serving_snapshots.py --snapshot-update` and review the
diff. Image tags are normalized: they hash containers/versions.yaml and the Dockerfiles, which the
images issue changes on its own schedule.
"""

from __future__ import annotations

from typing import Any

import pytest
from syrupy.extensions.json import JSONSnapshotExtension

from pdkit import deployment
from pdkit.model import profile_files
from pdkit.render.serving import inputs, manifests


def normalize(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: (v.rsplit(":", 1)[0] + ":<tag>" if k == "image" else normalize(v)) for k, v in value.items()}
    if isinstance(value, list):
        return [normalize(v) for v in value]
    return value


def test_normalize_hides_only_image_tags():
    obj = {"containers": [{"image": "000000000000.dkr.ecr.eu-south-2.amazonaws.com/x/sglang-efa:sglang-efa-0123456789ab", "name": "a:b"}]}
    assert normalize(obj) == {"containers": [{"image": "000000000000.dkr.ecr.eu-south-2.amazonaws.com/x/sglang-efa:<tag>", "name": "a:b"}]}


@pytest.fixture
def snapshot_json(snapshot):
    return snapshot.use_extension(JSONSnapshotExtension)


@pytest.mark.parametrize("name", profile_files.available_profiles())
def test_rendered_manifests(name, snapshot_json):
    the_plan = deployment.load(name)  # a rehearsal runs its block's images (pdkit/deployment.py)
    assert normalize(manifests.render(the_plan, inputs.from_plan(the_plan))) == snapshot_json
