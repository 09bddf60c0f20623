"""containers/pin_digests.py without a network: digest rewriting, buildx and registry resolution with fakes."""

from __future__ import annotations

import io
import json
import subprocess
import urllib.error
from email.message import Message
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from container_paths import CONTAINERS_DIR

DIGEST = "sha256:" + "ab" * 32


def test_set_digest_changes_one_line_and_stays_valid(pin_digests: ModuleType, versions: ModuleType, tmp_path: Path) -> None:
    original = (CONTAINERS_DIR / "versions.yaml").read_text()
    updated = pin_digests.set_digest(original, "cuda_base", DIGEST)
    changed = [(a, b) for a, b in zip(original.splitlines(), updated.splitlines(), strict=True) if a != b]
    assert changed == [('    digest: ""', f'    digest: "{DIGEST}"')]
    path = tmp_path / "versions.yaml"
    path.write_text(updated)
    doc = versions.load(path)
    assert doc["components"]["cuda_base"]["digest"] == DIGEST
    assert versions.build_args(doc, "sglang-efa")["CUDA_DEVEL_IMAGE"].endswith(f"@{DIGEST}")


def test_set_digest_refuses_bad_input(pin_digests: ModuleType) -> None:
    text = (CONTAINERS_DIR / "versions.yaml").read_text()
    with pytest.raises(ValueError, match="sha256"):
        pin_digests.set_digest(text, "cuda_base", "sha256:short")
    with pytest.raises(KeyError):
        pin_digests.set_digest(text, "nope", DIGEST)
    with pytest.raises(KeyError, match="no digest"):
        pin_digests.set_digest(text, "sglang", DIGEST)


@pytest.mark.parametrize(
    ("repository", "expected"),
    [
        ("docker.io/nvidia/cuda", ("registry-1.docker.io", "nvidia/cuda")),
        ("nvidia/cuda", ("registry-1.docker.io", "nvidia/cuda")),
        ("ubuntu", ("registry-1.docker.io", "library/ubuntu")),
        ("public.ecr.aws/docker/library/ubuntu", ("public.ecr.aws", "docker/library/ubuntu")),
        ("nvcr.io/nvidia/cuda", ("nvcr.io", "nvidia/cuda")),
        ("localhost:5000/x", ("localhost:5000", "x")),
    ],
)
def test_split_repository(repository: str, expected: tuple[str, str], pin_digests: ModuleType) -> None:
    assert pin_digests.split_repository(repository) == expected


def test_buildx_resolution(pin_digests: ModuleType) -> None:
    calls: list[list[str]] = []

    def run(argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        calls.append(argv)
        manifest = {"mediaType": "application/vnd.oci.image.index.v1+json", "digest": DIGEST, "size": 1}
        return subprocess.CompletedProcess(argv, 0, stdout=json.dumps(manifest), stderr="")

    assert pin_digests.resolve_with_buildx("docker.io/nvidia/cuda", "13.0.3-cudnn-devel-ubuntu24.04", run=run) == DIGEST
    assert calls[0][:4] == ["docker", "buildx", "imagetools", "inspect"]
    assert calls[0][4] == "docker.io/nvidia/cuda:13.0.3-cudnn-devel-ubuntu24.04"

    def failing(argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.CompletedProcess(argv, 1, stdout="", stderr="not found")

    with pytest.raises(RuntimeError, match="not found"):
        pin_digests.resolve_with_buildx("docker.io/nvidia/cuda", "nope", run=failing)


class _Response:
    def __init__(self, headers: dict[str, str], body: bytes = b"") -> None:
        self.headers = Message()
        for key, value in headers.items():
            self.headers[key] = value
        self._body = io.BytesIO(body)

    def read(self) -> bytes:
        return self._body.read()


def test_registry_resolution_with_anonymous_token(pin_digests: ModuleType) -> None:
    """401 with a Bearer challenge -> fetch an anonymous token -> HEAD the manifest again -> digest header."""
    seen: list[Any] = []

    def opener(request: Any, timeout: float) -> _Response:
        seen.append(request)
        if isinstance(request, str):
            assert request.startswith("https://auth.docker.io/token?")
            assert "scope=repository%3Anvidia%2Fcuda%3Apull" in request
            return _Response({}, json.dumps({"token": "t0ken"}).encode())
        if "Authorization" not in request.headers:
            challenge = Message()
            challenge["WWW-Authenticate"] = (
                'Bearer realm="https://auth.docker.io/token",service="registry.docker.io",scope="repository:nvidia/cuda:pull"'
            )
            raise urllib.error.HTTPError(request.full_url, 401, "Unauthorized", challenge, None)
        assert request.headers["Authorization"] == "Bearer t0ken"
        assert "application/vnd.oci.image.index.v1+json" in request.headers["Accept"]
        return _Response({"Docker-Content-Digest": DIGEST})

    digest = pin_digests.resolve_with_registry("docker.io/nvidia/cuda", "13.0.3-cudnn-devel-ubuntu24.04", opener=opener)
    assert digest == DIGEST
    assert seen[0].full_url == "https://registry-1.docker.io/v2/nvidia/cuda/manifests/13.0.3-cudnn-devel-ubuntu24.04"
    assert seen[0].get_method() == "HEAD"


def test_registry_resolution_rejects_missing_digest(pin_digests: ModuleType) -> None:
    def opener(request: Any, timeout: float) -> _Response:
        return _Response({})

    with pytest.raises(RuntimeError, match="Docker-Content-Digest"):
        pin_digests.resolve_with_registry("nvcr.io/nvidia/cuda", "13.0.3", opener=opener)


def test_main_pins_unpinned_images(pin_digests: ModuleType, versions: ModuleType, tmp_path: Path, monkeypatch: Any) -> None:
    path = tmp_path / "versions.yaml"
    path.write_text((CONTAINERS_DIR / "versions.yaml").read_text())
    monkeypatch.setattr(pin_digests, "resolve_with_registry", lambda repository, tag: DIGEST)
    assert pin_digests.main(["--versions", str(path), "--method", "registry", "--dry-run"]) == 0
    assert versions.load(path)["components"]["cuda_base"]["digest"] == ""
    assert pin_digests.main(["--versions", str(path), "--method", "registry"]) == 0
    assert versions.load(path)["components"]["cuda_base"]["digest"] == DIGEST
