"""Dockerfiles: hadolint clean, and every version comes from versions.yaml through build args.

The rule enforced: every ARG is declared WITHOUT a default and is produced by build_args.py for that
image (and every build arg it produces is declared); no version-looking literal, no copy of a pinned
value and no `latest` in Dockerfiles or in the scripts they copy; base images only via FROM ${ARG}.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import yaml
from container_paths import CONTAINERS_DIR, HADOLINT_CONFIG, KIT_DIR, REPO_ROOT, dockerfiles, tool
from docker.utils.build import PatternMatcher

Doc = dict[str, Any]
IMAGES = ["sglang-efa", "sglang-deepep", "validation"]


def hadolint(path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [tool("hadolint"), "--no-color", "--config", str(HADOLINT_CONFIG), str(path)],
        capture_output=True,
        text=True,
        check=False,
    )


@pytest.mark.parametrize("path", dockerfiles(), ids=lambda p: str(p.relative_to(CONTAINERS_DIR)))
def test_hadolint_clean(path: Path) -> None:
    result = hadolint(path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_hadolint_can_fail(tmp_path: Path) -> None:
    """The same hadolint run and config do flag a bad Dockerfile (so a green run means something)."""
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM ubuntu:latest\nUSER root\nRUN cd /tmp && pip install requests\n")
    result = hadolint(bad)
    assert result.returncode != 0
    assert "DL3007" in result.stdout
    assert "DL3003" in result.stdout


def test_every_ignored_hadolint_rule_has_a_reason() -> None:
    """Each `- DLxxxx` under `ignored:` is preceded by a comment that names the rule and explains it."""
    lines = HADOLINT_CONFIG.read_text().splitlines()
    config = yaml.safe_load(HADOLINT_CONFIG.read_text())
    assert config["failure-threshold"] == "info"
    for rule in config.get("ignored", []):
        index = next(i for i, line in enumerate(lines) if line.strip() == f"- {rule}")
        comment = []
        for line in reversed(lines[:index]):
            if not line.strip().startswith("#"):
                break
            comment.append(line)
        assert any(rule in line for line in comment), f"{rule}: no comment naming it right above"
        assert sum(len(line) for line in comment) > 80, f"{rule}: the reason is too thin"


@pytest.mark.parametrize("image", IMAGES)
def test_dockerfile_agrees_with_versions(image: str, doc: Doc, versions: ModuleType) -> None:
    """No ARG default, no ARG outside build_args.py, no version literal, no `latest`, FROM only ${ARG}."""
    path = versions.dockerfile_path(doc, image)
    assert versions.lint_dockerfile(path.read_text(), doc, image, where=str(path)) == []


@pytest.mark.parametrize("image", IMAGES)
def test_build_args_output_matches_dockerfile_args(image: str, doc: Doc, versions: ModuleType) -> None:
    """What `build_args.py IMAGE` prints covers every ARG the image's target stages declare, and each is declared
    somewhere in the Dockerfile (images of one component set, sglang-efa and sglang-deepep, share the args)."""
    result = subprocess.run(
        [sys.executable, str(CONTAINERS_DIR / "build_args.py"), image], capture_output=True, text=True, check=True, cwd=REPO_ROOT
    )
    printed = dict(line.removeprefix("--build-arg=").split("=", 1) for line in result.stdout.splitlines())
    assert all(line.startswith("--build-arg=") for line in result.stdout.splitlines())
    declared = versions.dockerfile_args(versions.image_dockerfile(doc, image))
    assert set(declared) <= set(printed) <= set(versions.dockerfile_args(versions.dockerfile_path(doc, image).read_text()))
    assert printed == versions.build_args(doc, image)


def test_build_args_formats(doc: Doc) -> None:
    script = str(CONTAINERS_DIR / "build_args.py")
    as_json = subprocess.run([sys.executable, script, "validation", "--format", "json"], capture_output=True, text=True, check=True)
    as_env = subprocess.run([sys.executable, script, "validation", "--format", "env"], capture_output=True, text=True, check=True)
    assert dict(line.split("=", 1) for line in as_env.stdout.splitlines()) == json.loads(as_json.stdout)
    check = subprocess.run([sys.executable, script, "--check"], capture_output=True, text=True, check=False)
    assert check.returncode == 0, check.stdout
    unknown = subprocess.run([sys.executable, script, "nope"], capture_output=True, text=True, check=False)
    assert unknown.returncode == 1
    assert "unknown image" in unknown.stderr


MUTATIONS: dict[str, tuple[str, str, str]] = {
    # name: (replace this, with this, expected message)
    "arg default equal to versions.yaml": ("ARG SGLANG_VERSION\n", "ARG SGLANG_VERSION=0.5.23\n", "has a default"),
    "arg default differing": ("ARG TORCH_VERSION\n", "ARG TORCH_VERSION=2.9.0\n", "has a default"),
    "arg not in versions.yaml": ("ARG SGLANG_VERSION\n", "ARG SGLANG_VERSION\nARG FLASHINFER_VERSION\n", "not produced by build_args.py"),
    "arg never declared": ("ARG MOONCAKE_WHEEL_SHA256\n", "", "never declares ARG MOONCAKE_WHEEL_SHA256"),
    "pinned literal in RUN": ('"torch==${TORCH_VERSION}"', '"torch==2.14.1"', "version literal"),
    "unpinned-style literal": ('"ninja==${NINJA_VERSION}"', '"ninja==1.11.1"', "version literal"),
    "commit literal": (
        "/opt/kit/build-uccl-ep.sh /wheels",
        "UCCL_COMMIT=da914a2054c29725464803e379bb3b98de90dfa1 /opt/kit/build-uccl-ep.sh /wheels",
        "pinned in versions.yaml",
    ),
    "literal base image": (
        "FROM ${CUDA_DEVEL_IMAGE} AS efa-base",
        "FROM nvidia/cuda:13.0.3-cudnn-devel-ubuntu24.04 AS efa-base",
        "FROM nvidia/cuda",
    ),
    "base image from a non-base arg": ("FROM ${CUDA_DEVEL_IMAGE} AS efa-base", "FROM ${RUNTIME_USER} AS efa-base", "only a base-image ARG"),
    "arg missing in the stage using it": (
        "ARG TORCH_CUDA_ARCH_LIST\nRUN apt-get update",
        "RUN apt-get update",
        "stage uccl-build uses TORCH_CUDA_ARCH_LIST",
    ),
    "arg a kit script needs, missing in its stage": ("ARG LIBFABRIC_VERSION\nSHELL", "SHELL", "stage efa-base uses LIBFABRIC_VERSION"),
    "latest": ("pip uninstall --yes sgl-deep-ep", "pip install --upgrade uccl==latest", "'latest'"),
    "heredoc (dockerfile-parse would read its body as instructions)": (
        "RUN echo /opt/pdkit >",
        "RUN <<EOF\necho /opt/pdkit\nEOF\nRUN echo /opt/pdkit >",
        "a heredoc",
    ),
    "COPY of a file the allow-list does not admit": (
        "COPY pdkit/__init__.py /opt/pdkit/pdkit/",
        "COPY pdkit/model/plan.py pdkit/__init__.py /opt/pdkit/pdkit/",
        "COPY pdkit/model/plan.py: not in the build context",
    ),
    "allow-list admits what no COPY uses": (
        "COPY pdkit/pods/__init__.py pdkit/pods/staging.py pdkit/pods/weights_manifest.py pdkit/pods/weights_import.py pdkit/pods/compile_cache.py /opt/pdkit/pdkit/pods/\n",
        "COPY pdkit/pods/__init__.py pdkit/pods/staging.py pdkit/pods/weights_import.py pdkit/pods/compile_cache.py /opt/pdkit/pdkit/pods/\n",
        "admits pdkit/pods/weights_manifest.py, which no COPY uses",
    ),
}


@pytest.mark.parametrize("case", sorted(MUTATIONS))
def test_version_rules_fire(case: str, doc: Doc, versions: ModuleType) -> None:
    """Each rule of the docstring fails the serving Dockerfile when exactly that rule is broken."""
    text = versions.dockerfile_path(doc, "sglang-efa").read_text()
    old, new, message = MUTATIONS[case]
    assert old in text, f"mutation {case!r} no longer applies; update it"
    problems = versions.lint_dockerfile(text.replace(old, new, 1), doc, "sglang-efa")
    assert any(message in problem for problem in problems), problems


def test_comments_may_mention_versions(doc: Doc, versions: ModuleType) -> None:
    text = versions.dockerfile_path(doc, "sglang-efa").read_text()
    assert versions.lint_dockerfile(text + "# bumped from 0.5.22 to 0.5.23\n", doc, "sglang-efa") == []


KIT_FILES = sorted(path for path in KIT_DIR.rglob("*") if path.is_file() and "__pycache__" not in path.parts)


@pytest.mark.parametrize("path", KIT_FILES, ids=lambda p: str(p.relative_to(CONTAINERS_DIR)))
def test_files_copied_into_images_pin_nothing(path: Path, doc: Doc, versions: ModuleType) -> None:
    """Scripts and the self-test take every version from build args or expected.json, never their own."""
    pins = versions.pinned_values(doc, "sglang-efa") | versions.pinned_values(doc, "validation")
    assert versions.lint_text_for_pins(path.read_text(), pins, where=str(path)) == []


def _stages(text: str, versions: ModuleType) -> dict[str, Any]:
    return {stage.name: stage for stage in versions.dockerfile_stages(text)}


def _stage_text(text: str, name: str, versions: ModuleType) -> str:
    return "\n".join(map(str, _stages(text, versions)[name].instructions))


def _stage(text: str, name: str) -> str:
    match = re.search(rf"^FROM \S+ AS {name}\n(.*?)(?=^FROM |\Z)", text, flags=re.MULTILINE | re.DOTALL)
    assert match, f"stage {name} not found"
    return match.group(0)


@pytest.mark.parametrize("stage", ["efa-base", "uccl-build"])
def test_validation_builds_on_the_serving_stages(stage: str, doc: Doc, versions: ModuleType) -> None:
    """Validation must test the same EFA user space and UCCL-EP build that serves: one Dockerfile, each shared
    stage written once and built by both targets."""
    path = versions.dockerfile_path(doc, "validation")
    assert path == versions.dockerfile_path(doc, "sglang-efa")
    text = path.read_text()
    assert [found.alias for found in versions.dockerfile_stages(text)].count(stage) == 1
    for image in ("sglang-efa", "validation"):
        assert _stage(text, stage) in versions.image_dockerfile(doc, image)


def test_a_target_builds_only_the_stages_it_needs(doc: Doc, versions: ModuleType) -> None:
    """BuildKit builds a --target's FROM chain and the stages it copies or mounts from, nothing else
    (https://docs.docker.com/build/building/multi-stage/#differences-between-legacy-builder-and-buildkit):
    the lint and the tag of each image see exactly those stages."""

    def stages(image: str) -> set[str]:
        return {stage.alias for stage in versions.dockerfile_stages(versions.image_dockerfile(doc, image))}

    assert stages("validation") == {"efa-base", "uccl-build", "tools-build", "validation"}
    assert stages("sglang-deepep") == {"efa-base", "runtime", "serving-deepep"}, "the deepep target never builds UCCL-EP"
    assert stages("sglang-efa") == {"efa-base", "uccl-build", "runtime", "serving-uccl-ep"}
    text = versions.dockerfile_path(doc, "validation").read_text()
    assert len(versions.image_dockerfile(doc, "validation").splitlines()) == len(text.splitlines()), "line numbers kept"


@pytest.mark.parametrize("image", IMAGES)
def test_runtime_is_non_root_and_self_tested_last(image: str, doc: Doc, versions: ModuleType) -> None:
    instructions = [str(i) for i in versions.dockerfile_instructions(versions.image_dockerfile(doc, image))]
    users = [line for line in instructions if line.startswith("USER ")]
    assert users
    assert users[-1] == "USER ${RUNTIME_UID}"
    assert instructions[-1] == "RUN python /opt/kit/selftest.py"
    assert doc["images"][image]["settings"]["RUNTIME_UID"] != "0"


def runtime_env(doc: Doc, versions: ModuleType, image: str) -> dict[str, str]:
    """KEY=VALUE pairs of the ENV instructions of the stages the image's target builds (comments do not count)."""
    env: dict[str, str] = {}
    for instruction in versions.dockerfile_instructions(versions.image_dockerfile(doc, image)):
        if instruction.keyword == "ENV":
            env.update(word.split("=", 1) for word in instruction.words if "=" in word)
    return env


@pytest.mark.parametrize("image", IMAGES)
def test_runtime_sets_efa_environment(image: str, doc: Doc, versions: ModuleType) -> None:
    """The defaults without which NCCL and Mooncake silently fall back to TCP."""
    env = runtime_env(doc, versions, image)
    wanted = {"FI_PROVIDER": "efa", "FI_EFA_USE_DEVICE_RDMA": "1", "FI_EFA_FORK_SAFE": "1", "NCCL_NET_PLUGIN": "ofi"}
    if image.startswith("sglang-"):
        wanted["MOONCAKE_PROTOCOL"] = "efa"
    assert {key: env.get(key) for key in wanted} == wanted
    assert env["LD_LIBRARY_PATH"].startswith("/opt/amazon/efa/lib:/opt/amazon/ofi-nccl/lib:")


def test_serving_image_replaces_deep_ep_and_hash_checks_mooncake(doc: Doc, versions: ModuleType) -> None:
    text = versions.dockerfile_path(doc, "sglang-efa").read_text()
    runtime = _stage_text(text, "runtime", versions)
    assert "--require-hashes" in runtime
    assert "deep_ep" not in runtime.replace("sgl-deep-ep", ""), "the shared stage installs no deep_ep: each target brings its own"
    uccl = _stage_text(text, doc["images"]["sglang-efa"]["target"], versions)
    assert "pip uninstall --yes sgl-deep-ep" in uccl
    assert "from=uccl-build" in uccl


def test_deepep_image_installs_sgl_deep_ep_hash_checked_without_uccl(doc: Doc, versions: ModuleType) -> None:
    """The sglang-deepep target installs SGLang's pinned sgl-deep-ep (sglang 0.5.23 requires sgl-deep-ep==0.1.2.post1,
    pypi.org/project/sglang/0.5.23) by versions.yaml's sha256, and never touches the UCCL-EP build stage."""
    target = doc["images"]["sglang-deepep"]["target"]
    assert target != doc["images"]["sglang-efa"]["target"]
    deepep = _stage_text(versions.dockerfile_path(doc, "sglang-deepep").read_text(), target, versions)
    assert "--require-hashes" in deepep
    assert "${SGL_DEEP_EP_SHA256}" in deepep
    assert "uccl" not in deepep.lower()
    assert "record --profile serving-deepep" in deepep
    assert doc["components"]["sgl_deep_ep"]["package"] == "sgl-deep-ep"


def test_efa_installer_is_signature_checked_with_container_flags() -> None:
    """No unverified download: the installer script checks the pinned GPG fingerprint before extracting."""
    script = (KIT_DIR / "install-efa-installer.sh").read_text()
    assert "--skip-kmod --skip-limit-conf --no-verify" in script
    verify = script.index("VALIDSIG")
    assert verify < script.index("tar -xzf") < script.index("efa_installer.sh --yes")
    assert not re.search(r"\|\s*(ba)?sh\b", script), "no curl | sh"


@pytest.mark.parametrize(
    ("image", "profile"), [("sglang-efa", "serving"), ("sglang-deepep", "serving-deepep"), ("validation", "validation")]
)
def test_runtime_stage_declares_what_the_selftest_records(
    image: str, profile: str, doc: Doc, versions: ModuleType, selftest: ModuleType
) -> None:
    """`selftest.py record` reads build args in the image's last stage; an undeclared one would be empty there."""
    stages = _stages(versions.dockerfile_path(doc, image).read_text(), versions)
    declared = stages[doc["images"][image].get("target") or "runtime"].args
    needed = {arg for arg, key in selftest.EXPECTED_FROM_BUILD_ARGS.items() if key in selftest.REQUIRED_KEYS[profile]}
    assert needed <= declared, sorted(needed - declared)


# --------------------------------------------------------------------------------------------------
# Build context: the Dockerfile.dockerignore allow-lists, matched with Docker's rules
# --------------------------------------------------------------------------------------------------


def test_allow_list_admits_named_paths_only(tmp_path: Path, versions: ModuleType) -> None:
    """The allow-list shape (`*`, then `!file` or `!dir`, then `**/__pycache__`) walked with docker-py's port of
    Docker's rules: exactly the named files and the files under a named directory, a leading / meaning the context
    root, and no bytecode even inside an admitted directory. docker-py's per-path matches() would admit that
    bytecode: it checks one parent directory only (moby/patternmatcher's deprecated Matches); its walk, which
    versions.py uses, skips the excluded __pycache__ directory first, as BuildKit's walker does."""
    for name in ["kit/bin/a.sh", "kit/bin/__pycache__/a.pyc", "kit/other.sh", "pdkit/pods/staging.py", "pdkit/plan.py", ".venv/x"]:
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text("")
    patterns = ["*", "!kit/bin", "!/pdkit/pods/staging.py", "**/__pycache__"]
    assert versions.admitted(tmp_path, patterns) == ["kit/bin/a.sh", "pdkit/pods/staging.py"]
    assert not PatternMatcher(patterns).matches("kit/bin/__pycache__/a.pyc"), "docker-py's single-parent matches()"


def test_context_sources_reads_copy_add_and_bind_mounts(versions: ModuleType) -> None:
    text = (
        "FROM x AS a\n"
        "COPY --chmod=0755 --link containers/kit/a.sh ./containers/kit/b.sh /opt/kit/\n"
        "COPY --from=a /opt/x /opt/x\n"
        'ADD ["pdkit/__init__.py", "/opt/pdkit/pdkit/"]\n'
        "RUN --mount=type=bind,source=containers/kit/c.sh,target=/c.sh --mount=type=bind,from=a,source=/w,target=/w true\n"
        "RUN --mount=type=cache,target=/root/.cache/pip \\\n    --mount=source=containers/kit/d.sh,target=/d.sh pip --version\n"
    )
    assert versions.context_sources(text) == [
        "containers/kit/a.sh",
        "containers/kit/b.sh",
        "pdkit/__init__.py",
        "containers/kit/c.sh",
        "containers/kit/d.sh",
    ]


@pytest.mark.parametrize("image", IMAGES)
def test_build_context_is_exactly_what_the_dockerfile_copies(image: str, doc: Doc, versions: ModuleType) -> None:
    """The allow-list sends only files a COPY reads (lint_context, part of lint_dockerfile: test_dockerfile_agrees_with_versions
    and the "COPY of a file the allow-list does not admit" / "allow-list admits what no COPY uses" mutations); no secret,
    venv or cdk.out goes to BuildKit (or into the tag)."""
    files = {p.relative_to(versions.context_path(doc, image)).as_posix() for p in versions.context_files(doc, image)}
    assert files
    allowed = ("containers/kit/", "pdkit/", "containers/sglang-efa/requirements.lock")
    assert all(name.startswith(allowed) for name in files), sorted(files)
    assert not any("__pycache__" in name for name in files)
    assert versions.dockerignore_patterns(versions.dockerignore_path(doc, image))[0] == "*", "an allow-list"


def test_validation_image_carries_no_pdkit(doc: Doc, versions: ModuleType) -> None:
    files = {p.relative_to(versions.REPO_ROOT).as_posix() for p in versions.context_files(doc, "validation")}
    assert not any(name.startswith("pdkit/") for name in files)


@pytest.mark.parametrize("image", IMAGES)
def test_readme_builds_with_the_versions_file_context(image: str, doc: Doc) -> None:
    """The documented local build uses the same Dockerfile and context as versions.yaml (and the CodeBuild spec)."""
    readme = (CONTAINERS_DIR / "README.md").read_text()
    block = re.search(rf"python containers/build_args.py {image}\)\n(docker buildx build .*?)\n(?:\n|```)", readme, flags=re.DOTALL)
    assert block, f"no local build command for {image} in containers/README.md"
    command = block.group(1)
    spec = doc["images"][image]
    assert f"-f {spec['dockerfile']} " in command
    assert command.rstrip().endswith(f"--load {spec['context']}"), command


# Flags each instruction may carry in the Dockerfile frontend built into BuildKit v0.11 (Docker Engine 23.0, the
# Docker of CodeBuild's standard:7.0 image: aws/aws-codebuild-docker-images ubuntu/standard/7.0/Dockerfile,
# DOCKER_VERSION). That frontend is Dockerfile syntax 1.5: RUN --mount (stable since 1.2) with these mount types,
# COPY/ADD --link (1.4), --chmod, --chown, COPY --from (https://docs.docker.com/reference/dockerfile/,
# https://docs.docker.com/build/buildkit/frontend/). Later flags (COPY --parents/--exclude, ADD --checksum) need
# a `# syntax` image pulled from Docker Hub at build time.
BUILTIN_FRONTEND_FLAGS = {
    "FROM": {"--platform"},
    "RUN": {"--mount"},
    "COPY": {"--from", "--chown", "--chmod", "--link"},
    "ADD": {"--chown", "--chmod", "--link"},
}
BUILTIN_MOUNT_TYPES = {"bind", "cache", "tmpfs", "secret", "ssh"}


@pytest.mark.parametrize("path", dockerfiles(), ids=lambda p: str(p.relative_to(CONTAINERS_DIR)))
def test_built_in_frontend_only(path: Path, versions: ModuleType) -> None:
    """No `# syntax=` directive: it makes BuildKit pull docker/dockerfile from Docker Hub on every build, and anonymous
    pulls from CodeBuild's shared addresses hit Docker Hub's limits (https://docs.docker.com/docker-hub/usage/pulls/:
    `toomanyrequests`). Without it BuildKit uses its built-in frontend, so every flag used must be one it knows.
    """
    text = path.read_text()
    directives = [line for line in text.splitlines() if re.match(r"^#\s*syntax\s*=", line, re.IGNORECASE)]
    assert not directives, (
        f"{path.name}: {directives[0]} pulls the frontend from Docker Hub; the built-in frontend covers these Dockerfiles"
    )
    for instruction in versions.dockerfile_instructions(text):
        flags = {flag.split("=", 1)[0] for flag in instruction.flags}
        assert flags <= BUILTIN_FRONTEND_FLAGS.get(instruction.keyword, set()), f"{path.name}: {str(instruction)[:80]}"
        for mount in instruction.mounts():
            assert mount["type"] in BUILTIN_MOUNT_TYPES, f"{path.name}: {mount}"
