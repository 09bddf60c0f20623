"""containers/versions.yaml schema: the file loads, and each rule fires on a broken copy."""

from __future__ import annotations

import copy
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from container_paths import CONTAINERS_DIR, REPO_ROOT, dockerfiles

Doc = dict[str, Any]


def test_versions_file_is_valid(versions: ModuleType) -> None:
    """The real file passes the schema (the images, build args and Dockerfiles all hang off it): among its rules, every
    image's Dockerfile exists and every component an image lists is defined (BROKEN below shows both rules fire)."""
    doc = versions.load()
    assert set(doc["images"]) >= {"sglang-efa", "validation"}


def test_pins_the_stack_the_kit_is_built_for(doc: Doc) -> None:
    """The versions the rest of the kit assumes (SGLang flags, router CLI, CUDA 13 torch) are what is pinned."""
    components = doc["components"]
    assert components["sglang"]["version"] == "0.5.23"
    assert (components["router"]["package"], components["router"]["version"]) == ("smg", "1.13.0")
    assert components["router"]["module"] == "smg.launch_router"
    assert components["cuda_base"]["tag"].startswith(components["cuda_base"]["cuda_version"] + "-")
    assert components["cuda_base"]["cuda_version"].split(".")[0] == "13"
    assert components["nccl"]["package"].endswith("-cu13")
    assert components["mooncake"]["package"].endswith("-efa-cuda13")


def test_every_dockerfile_belongs_to_an_image(doc: Doc, versions: ModuleType) -> None:
    """A Dockerfile outside versions.yaml would be built with versions from nowhere."""
    listed = {versions.dockerfile_path(doc, image) for image in doc["images"]}
    assert set(dockerfiles()) == listed
    allow_lists = {path for path in CONTAINERS_DIR.rglob("*.dockerignore")}
    assert allow_lists == {versions.dockerignore_path(doc, image) for image in doc["images"]}, "one allow-list per Dockerfile"


def _set(path: str, value: Any = None) -> Callable[[Doc], None]:
    """Set the entry at dotted `path` of the document to `value`, or, with no value, delete it."""

    def mutate(doc: Doc) -> None:
        *parents, last = path.split(".")
        node = doc
        for part in parents:
            node = node[part]
        if value is None:
            del node[last]
        else:
            node[last] = value

    return mutate


BROKEN: dict[str, tuple[Callable[[Doc], None], str]] = {
    "no source": (_set("components.sglang.source"), "components.sglang.source"),
    "no notes": (_set("components.sglang.notes", " "), "components.sglang.notes"),
    "latest": (_set("components.sglang.version", "latest"), "latest"),
    "unquoted number": (_set("components.python.version", 3.12), "quoted string"),
    "unknown kind": (_set("components.sglang.kind", "wheel"), "components.sglang.kind"),
    "short commit": (_set("components.uccl.commit", "da914a2"), "components.uccl.commit"),
    "commit and ref_from": (_set("components.fabtests.commit", "a" * 40), "not both"),
    "bad ref_from": (_set("components.fabtests.ref_from", "efa_installer.bundles.nope"), "ref_from"),
    "bad digest": (_set("components.cuda_base.digest", "sha256:abc"), "components.cuda_base.digest"),
    "tag latest": (_set("components.cuda_base.tag", "latest"), "latest"),
    "bad fingerprint": (_set("components.efa_installer.gpg_fingerprint", "4E90 91BC"), "gpg_fingerprint"),
    "url without version": (_set("components.efa_installer.url", "https://example.com/efa.tar.gz"), "{version}"),
    "binary url over http": (_set("components.kubectl.url", "http://dl.k8s.io/release/{version}/kubectl"), "components.kubectl.url"),
    "bad wheel hash": (_set("components.mooncake.sha256", "123"), "components.mooncake.sha256"),
    "not pep440": (_set("components.sglang.version", "0.5.23-final"), "PEP 440"),
    "arg to missing field": (_set("components.sglang.build_args", {"SGLANG_VERSION": "nope"}), "does not exist"),
    "arg to notes": (_set("components.sglang.build_args", {"SGLANG_NOTES": "notes"}), "descriptive"),
    "lowercase arg": (_set("components.sglang.build_args", {"sglang_version": "version"}), "UPPER_SNAKE_CASE"),
    "ref on pypi": (_set("components.sglang.build_args", {"SGLANG_IMAGE": "ref"}), "base images"),
    "unknown component in image": (_set("images.sglang-efa.components", ["cuda_base", "nope"]), "unknown component"),
    "component twice": (_set("images.validation.components", ["cuda_base", "cuda_base"]), "twice"),
    "image without base": (_set("images.validation.components", ["python"]), "base-image"),
    "unused component": (
        _set(
            "components.extra",
            {"kind": "pypi", "package": "x", "version": "1.0", "source": "s", "notes": "n", "build_args": {"X_VERSION": "version"}},
        ),
        "not used",
    ),
    "arg from two components": (_set("components.sglang.build_args", {"TORCH_VERSION": "version"}), "comes from both"),
    "setting shadows component": (_set("images.sglang-efa.settings.SGLANG_VERSION", "1.0"), "already set"),
    "setting with space": (_set("images.sglang-efa.settings.RUNTIME_USER", "a b"), "whitespace"),
    "missing dockerfile": (_set("images.validation.dockerfile", "containers/nope/Dockerfile"), "does not exist"),
    "dockerfile without allow-list": (_set("images.validation.dockerfile", "containers/versions.py"), "dockerignore is missing"),
    "unknown top-level key": (_set("extras", {}), "unknown top-level"),
    "schema version": (_set("schema_version", 2), "schema_version"),
    "not_installed without reason": (_set("not_installed.gdrcopy", ""), "not_installed.gdrcopy"),
}


@pytest.mark.parametrize("case", sorted(BROKEN))
def test_schema_rejects(case: str, doc: Doc, versions: ModuleType) -> None:
    """Each schema rule fires on a copy of the real file with exactly that one thing broken."""
    mutate, message = BROKEN[case]
    broken = copy.deepcopy(doc)
    mutate(broken)
    with pytest.raises(versions.VersionsError, match=message.replace("{", r"\{").replace("}", r"\}")):
        versions.validate(broken)


def test_load_reports_yaml_errors(tmp_path: Any, versions: ModuleType) -> None:
    path = tmp_path / "versions.yaml"
    path.write_text("images: [unclosed\n")
    with pytest.raises(versions.VersionsError, match="not valid YAML"):
        versions.load(path)


def test_load_validates(tmp_path: Any, versions: ModuleType, doc: Doc) -> None:
    """load() is not just yaml.safe_load: a broken file on disk is refused."""
    doc["components"]["sglang"]["version"] = "latest"
    path = tmp_path / "versions.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(versions.VersionsError, match="latest"):
        versions.load(path)


def test_build_args_cover_component_fields(doc: Doc, versions: ModuleType) -> None:
    """build_args() renders each mapped field, and the base image as image:tag(@digest)."""
    args = versions.build_args(doc, "sglang-efa")
    assert args["SGLANG_VERSION"] == doc["components"]["sglang"]["version"]
    assert args["LIBFABRIC_VERSION"] == doc["components"]["efa_installer"]["bundles"]["libfabric"]
    base = doc["components"]["cuda_base"]
    assert args["CUDA_DEVEL_IMAGE"] == f"{base['image']}:{base['tag']}" + (f"@{base['digest']}" if base["digest"] else "")
    doc["components"]["cuda_base"]["digest"] = "sha256:" + "a" * 64
    assert versions.build_args(doc, "sglang-efa")["CUDA_DEVEL_IMAGE"].endswith("@sha256:" + "a" * 64)


def test_build_args_unknown_image(doc: Doc, versions: ModuleType) -> None:
    with pytest.raises(versions.VersionsError, match="unknown image"):
        versions.build_args(doc, "nope")


def test_image_tag_changes_with_any_input(doc: Doc, versions: ModuleType) -> None:
    """Tags go to immutable ECR repositories: a changed pin must give a new tag."""
    before = versions.image_tag(doc, "sglang-efa")
    assert before == versions.image_tag(doc, "sglang-efa")
    assert before.startswith("sglang-efa-")
    doc["components"]["sglang"]["version"] = "0.5.24"
    assert versions.image_tag(doc, "sglang-efa") != before


def _repo_copy(tmp_path: Path, doc: Doc, versions: ModuleType) -> Path:
    """The files image_tag reads (Dockerfiles, allow-lists, every context file) plus an unlisted pdkit module, in a scratch repo."""
    wanted = {versions.dockerfile_path(doc, image) for image in doc["images"]}
    wanted |= {versions.dockerignore_path(doc, image) for image in doc["images"]}
    wanted |= {path for image in doc["images"] for path in versions.context_files(doc, image)}
    wanted.add(REPO_ROOT / "pdkit" / "model" / "plan.py")
    for path in wanted:
        target = tmp_path / path.relative_to(REPO_ROOT)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(path.read_bytes())
    return tmp_path


def test_image_tag_follows_the_build_context(tmp_path: Path, doc: Doc, versions: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    """A change to a copied pdkit staging module gives the serving image a new tag; a pdkit module it does not copy does not."""
    before = {image: versions.image_tag(doc, image) for image in doc["images"]}
    monkeypatch.setattr(versions, "REPO_ROOT", _repo_copy(tmp_path, doc, versions))
    assert {image: versions.image_tag(doc, image) for image in doc["images"]} == before, "the scratch copy hashes the same"

    (tmp_path / "pdkit" / "model" / "plan.py").write_text("# edited\n")
    (tmp_path / "containers" / "kit" / "__pycache__").mkdir()
    (tmp_path / "containers" / "kit" / "__pycache__" / "selftest.cpython-312.pyc").write_bytes(b"\0")
    assert {image: versions.image_tag(doc, image) for image in doc["images"]} == before, "files outside the context do not count"

    staging = tmp_path / "pdkit" / "pods" / "staging.py"
    staging.write_text(staging.read_text() + "\n# a staging change\n")
    assert versions.image_tag(doc, "sglang-efa") != before["sglang-efa"]
    assert versions.image_tag(doc, "validation") == before["validation"], "validation does not copy pdkit"

    script = tmp_path / "containers" / "kit" / "bin" / "nccl-tests.sh"
    script.write_text(script.read_text() + "\n# a helper change\n")
    assert versions.image_tag(doc, "validation") != before["validation"]
