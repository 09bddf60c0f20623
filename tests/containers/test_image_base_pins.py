"""Base images: list every reference not yet pinned by digest (a warning, not a failure); malformed fails.

Digests cannot be resolved without registry access, so the list is reported, as a pytest warning in
the warnings summary and as the JUnit property `unpinned_base_images`, until someone runs
containers/pin_digests.py on a networked machine. A malformed reference fails.
"""

from __future__ import annotations

import warnings
from types import ModuleType
from typing import Any

import pytest
from suite_warnings import UnpinnedBaseImage

Doc = dict[str, Any]


def base_image_references(doc: Doc, versions: ModuleType) -> list[tuple[str, str]]:
    """(where, reference) for every base image: versions.yaml components and every Dockerfile FROM."""
    references = []
    for name, component in doc["components"].items():
        if component["kind"] == "base-image":
            references.append((f"versions.yaml components.{name}", versions.image_ref(component)))
    for image in doc["images"]:
        args = versions.build_args(doc, image)
        text = versions.dockerfile_path(doc, image).read_text()
        stages: set[str] = set()
        for stage in versions.dockerfile_stages(text):
            var = versions.VAR_REF.match(stage.base)
            if var:
                references.append((f"{doc['images'][image]['dockerfile']} FROM {stage.base}", args[var.group("name")]))
            elif stage.base.lower() not in stages:
                references.append((f"{doc['images'][image]['dockerfile']} FROM", stage.base))
            stages.add(stage.alias.lower())
    return references


def unpinned(references: list[tuple[str, str]], versions: ModuleType) -> list[str]:
    """Parse every reference (raises on malformed) and return the ones without a digest."""
    return [f"{where}: {ref}" for where, ref in references if not versions.parse_image_ref(ref).pinned]


def test_list_base_images_not_pinned_by_digest(doc: Doc, versions: ModuleType, record_property: Any) -> None:
    """Passes, but records and warns about every tag-only base image (the list pin_digests.py would fix)."""
    references = base_image_references(doc, versions)
    assert references, "no base image found"
    missing = unpinned(references, versions)
    record_property("unpinned_base_images", "; ".join(missing))
    if missing:
        warnings.warn(
            UnpinnedBaseImage(
                f"{len(missing)} base image reference(s) pinned by tag only (run containers/pin_digests.py, or --set the digest a build printed):\n  "
                + "\n  ".join(missing)
            ),
            stacklevel=1,
        )


def test_the_listing_sees_digests(doc: Doc, versions: ModuleType) -> None:
    """Once pin_digests.py has set a digest, the reference drops off the list."""
    for component in doc["components"].values():
        if component["kind"] == "base-image":
            component["digest"] = "sha256:" + "0" * 64
    assert unpinned(base_image_references(doc, versions), versions) == []


@pytest.mark.parametrize(
    "reference",
    [
        "nvidia/cuda",  # no tag, no digest
        "nvidia/cuda:latest",
        "nvidia/cuda:13.0.3@sha256:abc",  # short digest
        "nvidia/cuda@md5:" + "0" * 32,
        "NVIDIA/cuda:13.0.3",  # uppercase repository
        "nvidia/cuda:bad tag",
        "nvidia/cuda:-leading-dash",
    ],
)
def test_malformed_references_fail(reference: str, versions: ModuleType) -> None:
    with pytest.raises(versions.VersionsError):
        versions.parse_image_ref(reference)


@pytest.mark.parametrize(
    "reference",
    [
        "docker.io/nvidia/cuda:13.0.3-cudnn-devel-ubuntu24.04",
        "nvidia/cuda:13.0.3-cudnn-devel-ubuntu24.04@sha256:" + "a" * 64,
        "public.ecr.aws/docker/library/ubuntu:24.04",
        "localhost:5000/team/image@sha256:" + "b" * 64,
    ],
)
def test_wellformed_references_parse(reference: str, versions: ModuleType) -> None:
    assert str(versions.parse_image_ref(reference)) == reference


def test_a_literal_from_is_listed_and_malformed_fails(doc: Doc, versions: ModuleType, tmp_path: Any, monkeypatch: Any) -> None:
    """The listing reads the Dockerfiles too: a malformed FROM there fails the listing test itself."""
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM ubuntu\nRUN true\n")
    monkeypatch.setattr(versions, "dockerfile_path", lambda _doc, _image: bad)
    with pytest.raises(versions.VersionsError, match="needs a tag or a digest"):
        unpinned(base_image_references(doc, versions), versions)


DOCKER_HUB_HOSTS = {"docker.io", "index.docker.io", "registry-1.docker.io"}


def test_no_base_image_is_pulled_from_docker_hub(doc: Doc, versions: ModuleType, pin_digests: ModuleType) -> None:
    """CodeBuild pulls base images anonymously from shared addresses, where Docker Hub answers `toomanyrequests`
    (https://docs.docker.com/docker-hub/usage/pulls/). NVIDIA publishes the CUDA images on its own registry
    (https://catalog.ngc.nvidia.com/orgs/nvidia/containers/cuda), which serves anonymous pulls; a reference
    without a registry host is Docker Hub too (pin_digests.split_repository, tested in test_image_pin_digests.py).
    """
    for where, reference in base_image_references(doc, versions):
        host, _ = pin_digests.split_repository(versions.parse_image_ref(reference).repository)
        assert host not in DOCKER_HUB_HOSTS, f"{where}: {reference} comes from Docker Hub"


def test_a_digest_a_build_records_pins_the_next_build(doc: Doc, versions: ModuleType, pin_digests: ModuleType, tmp_path: Any) -> None:
    """The three agree: containers/build.sh records `<component>=<digest>` for each base image it resolved, and passes it
    through `build_args.py --pin`; `pin_digests.py --set` takes the same line and writes versions.yaml, after which the
    base image is pinned (and drops off the unpinned list) and build_args renders image:tag@digest.
    """
    digest = "sha256:" + "c" * 64
    names = versions.base_images(doc, "sglang-efa")
    assert names == ["cuda_base"]
    script = (versions.CONTAINERS_DIR / "build.sh").read_text()
    assert 'echo "${component}=${digest}" >>"${record}"' in script
    assert "--pin=${component}=${digest}" in script
    path = tmp_path / "versions.yaml"
    path.write_text(versions.VERSIONS_FILE.read_text())
    assert pin_digests.main(["--versions", str(path), "--set", f"cuda_base={digest}"]) == 0
    # The router image's own base (python_slim_base) is pinned the same way.
    others = [name for name, c in doc["components"].items() if c["kind"] == "base-image" and name != "cuda_base"]
    for name in others:
        assert pin_digests.main(["--versions", str(path), "--set", f"{name}={digest}"]) == 0
    pinned = versions.load(path)
    assert pinned["components"]["cuda_base"]["digest"] == digest
    assert unpinned(base_image_references(pinned, versions), versions) == []
    rendered = dict(versions.build_args(pinned, "sglang-efa"))
    versions.pin_base_image(doc, "sglang-efa", f"cuda_base={digest}")
    assert versions.build_args(doc, "sglang-efa") == rendered, "a build's --pin renders what the pinned versions.yaml renders"


@pytest.mark.parametrize("pin", ["sglang=sha256:" + "c" * 64, "cuda_base=sha256:short", "cuda_base"])
def test_set_refuses_what_is_not_a_base_image_digest(
    pin: str, pin_digests: ModuleType, versions: ModuleType, tmp_path: Any, capsys: Any
) -> None:
    path = tmp_path / "versions.yaml"
    path.write_text(versions.VERSIONS_FILE.read_text())
    assert pin_digests.main(["--versions", str(path), "--set", pin]) == 1
    assert capsys.readouterr().err.count("\n") == 1, "one line naming the problem"
    assert path.read_text() == versions.VERSIONS_FILE.read_text()
    with pytest.raises(versions.VersionsError):
        versions.pin_base_image(versions.load(path), "sglang-efa", pin)


def test_a_build_cannot_override_a_pinned_digest(doc: Doc, versions: ModuleType) -> None:
    doc["components"]["cuda_base"]["digest"] = "sha256:" + "a" * 64
    with pytest.raises(versions.VersionsError, match="cannot use another digest"):
        versions.pin_base_image(doc, "sglang-efa", "cuda_base=sha256:" + "b" * 64)
