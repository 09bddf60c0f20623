"""Container images in the plan: ECR repository names and tags derived from containers/versions.yaml.

containers/versions.py owns that file's format and the tag rule (a hash of the build args, the Dockerfile
and every file its build context admits, so an immutable registry never sees the same tag twice); the plan
asks it rather than repeating the rule. The serving image's hash-locked Python set
(containers/sglang-efa/requirements.lock) is in its build context, so re-locking it gives a new tag.
"""

from __future__ import annotations

import importlib.util
import sys
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

from pdkit.errors import ProfileError

ROOT = Path(__file__).resolve().parents[2]
# The serving image each MoE all-to-all backend runs from (containers/versions.yaml builds both from one
# Dockerfile): UCCL-EP's deep_ep wrapper, or upstream DeepEP as SGLang's own sgl-deep-ep wheel ships it.
# `none` needs no deep_ep at all and runs from the UCCL-EP image.
A2A_IMAGES = {"uccl-ep": "sglang-efa", "deepep": "sglang-deepep", "none": "sglang-efa"}


@dataclass(frozen=True)
class ImagePlan:
    name: str
    repository: str  # ECR repository name (build) or full registry path (external)
    tag: str
    build: bool

    def uri(self, registry: str) -> str:
        """With `registry` = <account>.dkr.ecr.<region>.amazonaws.com (a CDK token at deploy time)."""
        return f"{self.repository}:{self.tag}" if not self.build else f"{registry}/{self.repository}:{self.tag}"


@cache
def _versions_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("pdkit_container_versions", ROOT / "containers" / "versions.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the class is created
    spec.loader.exec_module(module)
    return module


def plan_images(deployment: str, versions_file: str, *, source: str, registry: str | None) -> dict[str, ImagePlan]:
    path = (ROOT / versions_file).resolve()
    if not path.is_file():
        raise ProfileError("images.versions_file", versions_file, "no such file in the repository", "use containers/versions.yaml")
    versions = _versions_module()
    try:
        doc = versions.load(path)
    except versions.VersionsError as exc:
        raise ProfileError(
            "images.versions_file", versions_file, f"invalid: {exc}", "fix the file (tests/containers explains each rule)"
        ) from None
    if source == "external" and not registry:
        raise ProfileError(
            "images.registry",
            None,
            "images.source is external but no registry is set",
            "set images.registry to <registry>/<prefix>, or use source: build",
        )
    out = {}
    for image in doc["images"]:
        tag = versions.image_tag(doc, image)
        repository = f"{registry}/{image}" if source == "external" else f"{deployment}/{image}"
        out[image] = ImagePlan(name=image, repository=repository, tag=tag, build=source == "build")
    return out


def context_files_outside_containers(versions_file: str = "containers/versions.yaml") -> list[str]:
    """Files outside containers/ that some image's build context admits (its Dockerfile.dockerignore), e.g. the
    pdkit modules the serving image copies: the images stack's source asset must carry exactly these too."""
    versions = _versions_module()
    doc = versions.load((ROOT / versions_file).resolve())
    files = {path.relative_to(ROOT).as_posix() for image in doc["images"] for path in versions.context_files(doc, image)}
    return sorted(name for name in files if not name.startswith("containers/"))


def component(name: str, versions_file: str = "containers/versions.yaml") -> dict[str, Any]:
    """One component of the versions file (e.g. the SGLang or router pin), for code that must agree with the images."""
    versions = _versions_module()
    components: dict[str, Any] = versions.load((ROOT / versions_file).resolve())["components"]
    return dict(components[name])
