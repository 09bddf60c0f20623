"""containers/build.sh, run against a stand-in `docker` that records its calls (no Docker here).

What it encodes: `docker image inspect --format '{{index .RepoDigests 0}}'` prints `<repository>@sha256:...`, the
digest the pulled reference resolved to (https://docs.docker.com/reference/cli/docker/image/inspect/); the
OCI annotations org.opencontainers.image.base.name/base.digest name an image's base
(https://github.com/opencontainers/image-spec/blob/main/annotations.md); the import smoke test must run
(`docker run` of the built image, outside BuildKit) and pass before anything is pushed.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

from container_paths import CONTAINERS_DIR

DIGEST = "sha256:" + "d" * 64
REF = "111122223333.dkr.ecr.eu-south-2.amazonaws.com/glm51-2p2d/sglang-efa:sglang-efa-abc"

FAKE_DOCKER = """#!/usr/bin/env bash
echo "$*" >>"$DOCKER_LOG"
case "$1 $2" in
  "image inspect") echo "${3%%:*}@$FAKE_DIGEST" ;;
  "run --rm") exit "${SMOKE_EXIT:-0}" ;;
esac
"""


def run_build(
    tmp_path: Path, *args: str, smoke_exit: int = 0, image: str = "sglang-efa"
) -> tuple[subprocess.CompletedProcess[str], list[str]]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    docker = bin_dir / "docker"
    docker.write_text(FAKE_DOCKER)
    docker.chmod(0o755)
    log = tmp_path / "docker.log"
    log.write_text("")
    env = {
        # python3 with PyYAML (this interpreter's directory) for containers/build_args.py.
        "PATH": f"{bin_dir}:{Path(sys.executable).parent}:{os.environ['PATH']}",
        "DOCKER_LOG": str(log),
        "FAKE_DIGEST": DIGEST,
        "SMOKE_EXIT": str(smoke_exit),
    }
    result = subprocess.run(
        ["bash", str(CONTAINERS_DIR / "build.sh"), image, REF, *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    return result, log.read_text().splitlines()


def test_builds_from_the_digest_it_resolved_and_records_it(tmp_path: Path, doc: dict, versions: ModuleType) -> None:
    record = tmp_path / "base-digests.txt"
    result, calls = run_build(tmp_path, "--push", "--record", str(record))
    assert result.returncode == 0, result.stderr
    base = versions.image_ref(doc["components"]["cuda_base"])
    assert calls[0].startswith("pull ")
    assert calls[0].endswith(base)
    (build,) = [call for call in calls if call.startswith("buildx build")]
    assert f"--build-arg=CUDA_DEVEL_IMAGE={base}@{DIGEST}" in build.split(), "the build uses exactly the resolved digest"
    assert f"--label=org.opencontainers.image.base.digest={DIGEST}" in build.split()
    assert f"--label=org.opencontainers.image.base.name={base}" in build.split()
    assert "--load" in build.split()
    assert "--push" not in build.split()
    assert build.split()[-3:] == ["-f", doc["images"]["sglang-efa"]["dockerfile"], doc["images"]["sglang-efa"]["context"]]
    assert record.read_text() == f"cuda_base={DIGEST}\n"
    assert f"containers/pin_digests.py --set cuda_base={DIGEST}" in result.stdout, "the log says how to pin the next build"
    assert calls[-2].startswith("run --rm --network none")
    assert calls[-2].endswith(f"{REF} /opt/kit/import_smoke.py")
    assert calls[-1] == f"push {REF}"


def test_a_failed_import_smoke_test_pushes_nothing(tmp_path: Path) -> None:
    result, calls = run_build(tmp_path, "--push", smoke_exit=1)
    assert result.returncode != 0
    assert [call for call in calls if call.startswith("run --rm")], "the built image was run"
    assert not [call for call in calls if call.startswith("push")]


def test_without_push_it_only_builds_and_tests(tmp_path: Path) -> None:
    result, calls = run_build(tmp_path)
    assert result.returncode == 0, result.stderr
    assert calls[-1].startswith("run --rm")


def test_each_serving_image_is_built_as_its_own_target(tmp_path: Path, doc: dict) -> None:
    """sglang-efa and sglang-deepep share one Dockerfile; `docker build --target STAGE` stops at that stage
    (https://docs.docker.com/build/building/multi-stage/#stop-at-a-specific-build-stage), so each build names its own."""
    for image in ("sglang-efa", "sglang-deepep"):
        workdir = tmp_path / image
        workdir.mkdir()
        result, calls = run_build(workdir, image=image)
        assert result.returncode == 0, result.stderr
        (build,) = [call for call in calls if call.startswith("buildx build")]
        assert f"--target={doc['images'][image]['target']}" in build.split()
        assert build.split()[-3:] == ["-f", "containers/sglang-efa/Dockerfile", "."]
