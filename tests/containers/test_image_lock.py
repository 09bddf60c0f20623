"""The serving image's hash-locked Python set: containers/sglang-efa/requirements.lock.

Without a lock, `pip install sglang==... torch==...` resolves ~216 packages afresh on every build: a
rebuild of the same tag can ship other kernels, and SGLang's humming-kernels[cu13] pulled nvcc 13.5
beside the image's CUDA 13.0.3. The lock pins every package with the sha256 of its wheel for the image's
CPython and platform; the Dockerfile installs it in pip's hash-checking mode without resolving.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from container_paths import CONTAINERS_DIR, REPO_ROOT, canonical, load_module

Doc = dict[str, Any]
IMAGE = "sglang-efa"
LOCK = CONTAINERS_DIR / IMAGE / "requirements.lock"
SOURCE = CONTAINERS_DIR / IMAGE / "requirements.in"
# Components the runtime stage gets from the lock (nanobind and ninja are uccl-build tools; ninja is also
# an SGLang dependency, so it is compared when present).
RUNTIME_COMPONENTS = ("sglang", "router", "boto3", "nixl", "mooncake", "torch", "nccl")
REQUIREMENT = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]+\])?==(?P<version>\S+?)(?P<cont> \\)?$")
HASH = re.compile(r"^--hash=sha256:[0-9a-f]{64}$")
# Packages whose version is the CUDA Toolkit release they belong to: what cuda-toolkit 13.0.3.0's wheel
# metadata requires at 13.0.x (nvidia-cuda-runtime==13.0.96.*, nvidia-cuda-nvcc==13.0.88.*,
# nvidia-nvvm==13.0.88.*, nvidia-nvjitlink>=13.0.88, nvidia-nvtx==13.0.85.*, ...), and the cuda-python
# bindings, versioned after the toolkit headers they wrap. cuBLAS, cuFFT, cuRAND, cuSOLVER, cuSPARSE and
# cuFile carry their own version numbers (cuda-toolkit 13.0.3.0 requires nvidia-cublas==13.1.1.3.*).
CUDA_VERSIONED = re.compile(
    r"^(cuda-toolkit|cuda-bindings|cuda-python|nvidia-cuda-[a-z-]+|"
    r"nvidia-(nvjitlink|nvvm|nvtx|nvfatbin|nvptxcompiler|nvml-dev|nvdisasm|npp|nvjpeg))$"
)
OTHER_CUDA_MAJOR = re.compile(r"-cu(?:da)?(?P<major>1[0-9])$")
# nvidia-cutlass-dsl 4.8.0's metadata requires nvidia-cutlass-dsl-libs-cu12==4.8.0 unconditionally (the
# cu13 libraries come on top, through its [cu13] extra, which the lock also holds); no constraint removes it.
OTHER_CUDA_MAJOR_ALLOWED = {"nvidia-cutlass-dsl-libs-cu12"}


def parse_lock(text: str) -> dict[str, tuple[str, list[str]]]:
    """name -> (version, hashes) of a pip requirements file in the form pip-compile and uv write."""
    entries: dict[str, tuple[str, list[str]]] = {}
    current: str | None = None
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if not raw[0].isspace():
            match = REQUIREMENT.match(line)
            assert match, f"line {number}: {line!r} is not `name==version` (hash-checking mode needs an exact pin)"
            current = canonical(match.group("name"))
            assert current not in entries, f"line {number}: {current} is locked twice"
            entries[current] = (match.group("version"), [])
            continue
        assert current is not None, f"line {number}: option before any requirement"
        value = line.removesuffix("\\").strip()
        assert HASH.match(value), f"line {number}: {value!r} is not a --hash=sha256:<64 hex> option"
        entries[current][1].append(value.removeprefix("--hash=sha256:"))
    return entries


def cuda_mismatches(entries: dict[str, tuple[str, list[str]]], cuda_version: str) -> list[str]:
    """CUDA Toolkit packages of another CUDA major.minor than the base image's, and packages built for another CUDA major."""
    major, minor = cuda_version.split(".")[:2]
    problems = []
    for name, (version, _) in sorted(entries.items()):
        if CUDA_VERSIONED.match(name) and version.split(".")[:2] != [major, minor]:
            problems.append(f"{name}=={version} is not CUDA {major}.{minor}")
        other = OTHER_CUDA_MAJOR.search(name)
        if other and other.group("major") != major and name not in OTHER_CUDA_MAJOR_ALLOWED:
            problems.append(f"{name} is built for CUDA {other.group('major')}")
    return problems


@pytest.fixture(scope="module")
def lock() -> dict[str, tuple[str, list[str]]]:
    return parse_lock(LOCK.read_text())


def test_every_locked_package_is_pinned_with_a_hash(lock: dict[str, tuple[str, list[str]]]) -> None:
    """pip's hash-checking mode (https://pip.pypa.io/en/stable/topics/secure-installs/) rejects any requirement
    not pinned with `==` or without a --hash; the image build would fail on the first such line."""
    assert len(lock) > 100, "the whole set, not just the direct pins"
    assert [name for name, (_, hashes) in lock.items() if not hashes] == []
    text = LOCK.read_text()
    assert not re.search(r"^\s*(-e|--index-url|--extra-index-url|--find-links|-f)\b", text, flags=re.MULTILINE)


def test_lock_pins_what_versions_yaml_pins(lock: dict[str, tuple[str, list[str]]], doc: Doc) -> None:
    """The selftest compares the installed sglang, torch, NCCL, router, NIXL, Mooncake and boto3 with the build
    args from versions.yaml (containers/kit/selftest.py); a lock that disagrees would fail the build at its end."""
    components = doc["components"]
    for name in doc["images"][IMAGE]["components"]:
        component = components[name]
        if component["kind"] != "pypi":
            continue
        package = canonical(component["package"])
        if name in RUNTIME_COMPONENTS:
            assert package in lock, f"{name}: {package} is not in {LOCK.name}"
        if package in lock:
            assert lock[package][0] == component["version"], (
                f"{name}: lock has {package}=={lock[package][0]}, versions.yaml {component['version']}"
            )


def test_requirements_in_pins_what_versions_yaml_pins(doc: Doc) -> None:
    """Re-resolving (`make lock-images`) starts from requirements.in: its direct pins must be versions.yaml's too."""
    pins = {}
    for raw in SOURCE.read_text().splitlines():
        match = REQUIREMENT.match(raw.split("#", 1)[0].strip())
        if match:
            pins[canonical(match.group("name"))] = match.group("version")
    for name in RUNTIME_COMPONENTS:
        component = doc["components"][name]
        assert pins.get(canonical(component["package"])) == component["version"], name
    assert pins["cuda-toolkit"].startswith(doc["components"]["cuda_base"]["cuda_version"])


def test_mooncake_wheel_is_the_hash_checked_one(lock: dict[str, tuple[str, list[str]]], doc: Doc) -> None:
    """versions.yaml pins the Mooncake EFA wheel by sha256 (read from PyPI); the lock installs exactly that file."""
    mooncake = doc["components"]["mooncake"]
    assert lock[canonical(mooncake["package"])][1] == [mooncake["sha256"]]


def test_lock_targets_the_image_python(doc: Doc) -> None:
    """Wheel tags are per interpreter (cp312): a lock resolved for the kit's Python 3.11 would not install in the image."""
    header = LOCK.read_text().splitlines()[0]
    assert f"CPython {doc['components']['python']['version']}," in header
    assert "x86_64-manylinux" in header


def test_one_cuda_minor_in_the_lock(lock: dict[str, tuple[str, list[str]]], doc: Doc) -> None:
    """cuda-toolkit 13.0.3.0 (torch 2.14.1 requires it) pins its components to CUDA 13.0 (its wheel METADATA);
    humming-kernels 0.1.12, which SGLang 0.5.23 requires as humming-kernels[cu13], asks for nvidia-cuda-nvcc and
    nvidia-cuda-cccl without a version (its METADATA), so an unconstrained resolution installs nvcc 13.5."""
    assert cuda_mismatches(lock, doc["components"]["cuda_base"]["cuda_version"]) == []
    assert "nvidia-cuda-nvcc" in lock, "SGLang's JIT needs nvcc from the same CUDA"
    # The check fires on what `uv pip compile` resolved for requirements.in without its CUDA lines (nvcc, crt and
    # nvvm 13.5.37, cccl 13.3.5.0.6, cuda-bindings 13.4.4 beside cuda-toolkit 13.0.3.0), plus a CUDA 12 runtime.
    unconstrained = {
        "cuda-toolkit": ("13.0.3.0", []),
        "nvidia-cuda-runtime": ("13.0.96", []),
        "nvidia-cuda-nvcc": ("13.5.37", []),
        "nvidia-cuda-crt": ("13.5.37", []),
        "nvidia-nvvm": ("13.5.37", []),
        "nvidia-cuda-cccl": ("13.3.5.0.6", []),
        "cuda-bindings": ("13.4.4", []),
        "nvidia-cublas": ("13.1.1.3", []),
        "nvidia-cutlass-dsl-libs-cu12": ("4.8.0", []),
        "nvidia-cuda-runtime-cu12": ("12.9.79", []),
    }
    problems = cuda_mismatches(unconstrained, "13.0.3")
    flagged = {problem.split("==")[0].split(" ")[0] for problem in problems}
    assert flagged == {
        "nvidia-cuda-nvcc",
        "nvidia-cuda-crt",
        "nvidia-nvvm",
        "nvidia-cuda-cccl",
        "cuda-bindings",
        "nvidia-cuda-runtime-cu12",
    }


def test_nothing_versions_yaml_excludes_is_locked(lock: dict[str, tuple[str, list[str]]], doc: Doc) -> None:
    """sgl-deep-ep (replaced by UCCL-EP's deep_ep), non-EFA Mooncake and sglang-router stay out; UCCL's own
    dependency is in, because its wheels are installed with --no-deps (uccl's pyproject.toml at versions.yaml's
    commit: dependencies = ["intervaltree"])."""
    assert sorted(canonical(name) for name in doc["not_installed"] if canonical(name) in lock) == []
    assert "intervaltree" in lock
    assert "uccl" not in lock
    assert "deep-ep" not in lock


def _runtime_runs(doc: Doc, versions: ModuleType) -> list[str]:
    (runtime,) = [
        stage for stage in versions.dockerfile_stages(versions.dockerfile_path(doc, IMAGE).read_text()) if stage.name == "runtime"
    ]
    return [str(instruction) for instruction in runtime.instructions if instruction.keyword == "RUN"]


def test_dockerfile_installs_the_lock_with_require_hashes(doc: Doc, versions: ModuleType) -> None:
    """The runtime stage installs requirements.lock in hash-checking mode without resolving (--no-deps), wheels
    only; every other pip install there takes local wheels with --no-deps, so nothing comes from the index unlocked."""
    lock_path = LOCK.relative_to(REPO_ROOT).as_posix()
    installs = []
    for run in _runtime_runs(doc, versions):
        mounts = dict(re.findall(r"--mount=type=bind,source=(\S+?),target=(\S+)", run))
        for command in re.findall(r"pip install ([^&]*)", run):
            words = command.split()
            assert "--no-deps" in words, f"pip install {command}: resolves from the index"
            requirement_files = [words[i + 1] for i, word in enumerate(words) if word == "-r"]
            if requirement_files:
                assert [mounts.get(lock_path)] == requirement_files, f"pip install {command}: not the lock"
                assert "--require-hashes" in words
                assert "--only-binary=:all:" in words
            else:
                assert all(word.startswith("--") or word.endswith(".whl") for word in words), f"pip install {command}"
            installs.append(bool(requirement_files))
    assert installs.count(True) == 1, "exactly one install of the lock"


def test_lock_is_part_of_the_image_tag(doc: Doc, versions: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    """The ECR repositories are IMMUTABLE (a pushed tag cannot be overwritten: https://docs.aws.amazon.com/AmazonECR/
    latest/userguide/image-tag-mutability.html), so a changed lock must give the image a new tag in the plan."""
    from pdkit.model import images

    assert LOCK in versions.context_files(doc, IMAGE)
    before = images.plan_images("d", "containers/versions.yaml", source="build", registry=None)[IMAGE].tag
    read_bytes = Path.read_bytes
    monkeypatch.setattr(Path, "read_bytes", lambda self: read_bytes(self) + (b"#\n" if self == LOCK else b""))
    after = images.plan_images("d", "containers/versions.yaml", source="build", registry=None)[IMAGE].tag
    assert after != before


def test_make_lock_images_re_resolves_the_lock() -> None:
    """`make lock-images` runs the generator, which resolves requirements.in for the image's Python and platform."""
    result = subprocess.run(["make", "-n", "lock-images"], capture_output=True, text=True, check=True, cwd=REPO_ROOT)
    assert "containers/sglang-efa/lock.py" in result.stdout


def test_generator_keeps_only_the_platform_wheel_hashes() -> None:
    """`uv pip compile --generate-hashes` writes the hash of every file of a release, every platform
    (https://github.com/astral-sh/uv/issues/3516); its pylock.toml (PEP 751) lists only the target's wheels."""
    lock_py = load_module("image_lock", CONTAINERS_DIR / IMAGE / "lock.py")
    requirements = (
        "# header\nxxhash==4.1.0 \\\n    --hash=sha256:" + "a" * 64 + " \\\n    --hash=sha256:" + "b" * 64 + "\n    # via sglang\n"
    )
    pylock = (
        '[[packages]]\nname = "xxhash"\nversion = "4.1.0"\n'
        'wheels = [{ url = "https://x/xxhash-4.1.0-cp312-cp312-manylinux_2_28_x86_64.whl", hashes = { sha256 = "' + "b" * 64 + '" } }]\n'
    )
    out = lock_py.keep_platform_hashes(requirements, lock_py.platform_hashes(pylock))
    assert out == "# header\nxxhash==4.1.0 \\\n    --hash=sha256:" + "b" * 64 + "\n    # via sglang\n"
    with pytest.raises(lock_py.LockError, match="no wheel"):
        lock_py.platform_hashes('[[packages]]\nname = "intervaltree"\nversion = "3.1.0"\n')
