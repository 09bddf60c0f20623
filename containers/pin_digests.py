#!/usr/bin/env python3
"""Pin every base image in containers/versions.yaml to the digest its tag points at today.

Run it on a machine that can reach the registries (this kit's CI cannot), review the diff, commit:

    python containers/pin_digests.py               # pin base images that have no digest yet
    python containers/pin_digests.py --refresh     # re-resolve every tag (after bumping a tag)
    python containers/pin_digests.py --dry-run     # print what would change
    python containers/pin_digests.py --method registry   # no Docker: anonymous registry API v2
    python containers/pin_digests.py --set cuda_base=sha256:...   # the digest a build resolved and printed

Uses `docker buildx imagetools inspect` when Docker is there (it follows your registry logins), else
the registry HTTP API with an anonymous pull token. The multi-arch index digest is pinned, so the
reference stays valid for every platform. Only the `digest:` line of each component changes; comments
and layout of versions.yaml are kept.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import versions

MANIFEST_TYPES = ", ".join(
    [
        "application/vnd.oci.image.index.v1+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.docker.distribution.manifest.v2+json",
    ]
)
DOCKER_HUB = "registry-1.docker.io"

Resolver = Callable[[str, str], str]


def split_repository(repository: str) -> tuple[str, str]:
    """docker.io/nvidia/cuda -> (registry-1.docker.io, nvidia/cuda); ghcr.io/a/b -> (ghcr.io, a/b)."""
    first, _, rest = repository.partition("/")
    if rest and ("." in first or ":" in first or first == "localhost"):
        host, path = first, rest
    else:
        host, path = "docker.io", repository
    if host == "docker.io":
        host = DOCKER_HUB
        if "/" not in path:
            path = f"library/{path}"
    return host, path


def parse_www_authenticate(header: str) -> dict[str, str]:
    """`Bearer realm="...",service="...",scope="..."` -> {realm, service, scope}."""
    scheme, _, params = header.partition(" ")
    if scheme.lower() != "bearer":
        raise RuntimeError(f"registry wants {scheme} auth; log in and use --method buildx")
    return dict(re.findall(r'(\w+)="([^"]*)"', params))


def resolve_with_registry(repository: str, tag: str, opener: Callable[..., Any] = urllib.request.urlopen) -> str:
    host, path = split_repository(repository)
    url = f"https://{host}/v2/{path}/manifests/{tag}"
    headers = {"Accept": MANIFEST_TYPES}
    request = urllib.request.Request(url, method="HEAD", headers=headers)
    try:
        response = opener(request, timeout=30)
    except urllib.error.HTTPError as exc:
        if exc.code != 401:
            raise
        challenge = parse_www_authenticate(exc.headers.get("WWW-Authenticate", ""))
        params: dict[str, str] = {key: challenge[key] for key in ("service", "scope") if key in challenge}
        query = urllib.parse.urlencode(params)
        token_response = opener(f"{challenge['realm']}?{query}", timeout=30)
        token = json.loads(token_response.read())
        headers["Authorization"] = f"Bearer {token.get('token') or token['access_token']}"
        response = opener(urllib.request.Request(url, method="HEAD", headers=headers), timeout=30)
    digest = response.headers.get("Docker-Content-Digest")
    if not digest or not versions.DIGEST.match(digest):
        raise RuntimeError(f"{url}: no usable Docker-Content-Digest header (got {digest!r})")
    return str(digest)


def resolve_with_buildx(repository: str, tag: str, run: Callable[..., subprocess.CompletedProcess[str]] = subprocess.run) -> str:
    ref = f"{repository}:{tag}"
    completed = run(
        ["docker", "buildx", "imagetools", "inspect", ref, "--format", "{{json .Manifest}}"],
        capture_output=True,
        text=True,
        check=False,
    )
    if completed.returncode != 0:
        raise RuntimeError(f"docker buildx imagetools inspect {ref} failed: {completed.stderr.strip()}")
    digest = json.loads(completed.stdout).get("digest", "")
    if not versions.DIGEST.match(digest):
        raise RuntimeError(f"docker buildx imagetools inspect {ref}: no digest in {completed.stdout[:200]!r}")
    return str(digest)


def set_digest(text: str, component: str, digest: str) -> str:
    """Replace the `digest:` line of components.<component> in versions.yaml text, keeping everything else."""
    if not versions.DIGEST.match(digest):
        raise ValueError(f"not a sha256 digest: {digest!r}")
    lines = text.splitlines(keepends=True)
    in_components = False
    start = None
    for index, line in enumerate(lines):
        if re.match(r"^components:\s*$", line):
            in_components = True
        elif in_components and re.match(rf"^  {re.escape(component)}:\s*$", line):
            start = index
            break
    if start is None:
        raise KeyError(f"components.{component} not found")
    for index in range(start + 1, len(lines)):
        line = lines[index]
        if line.strip() and not line.startswith("   ") and not line.lstrip().startswith("#"):
            break
        match = re.match(r"^(    digest:)\s*.*?(\r?\n)?$", line)
        if match:
            lines[index] = f'{match.group(1)} "{digest}"{match.group(2) or ""}'
            return "".join(lines)
    raise KeyError(f"components.{component} has no digest: line")


def set_from_build(path: Path, doc: dict[str, Any], pins: list[str], *, dry_run: bool) -> int:
    """Write COMPONENT=DIGEST pins (as a build resolved them) into versions.yaml; one line per problem, exit 1."""
    text = path.read_text()
    for pin in pins:
        name, _, digest = pin.partition("=")
        component = doc["components"].get(name)
        if component is None or component["kind"] != "base-image":
            bases = [n for n, c in doc["components"].items() if c["kind"] == "base-image"]
            print(
                f"pin_digests: --set {pin}: {name!r} is not a base image in versions.yaml (base images: {', '.join(bases)})",
                file=sys.stderr,
            )
            return 1
        if not versions.DIGEST.match(digest):
            print(f"pin_digests: --set {pin}: the digest must be sha256:<64 hex>, as the build printed it", file=sys.stderr)
            return 1
        print(f"{name}: {component['image']}:{component['tag']} -> {digest}")
        text = set_digest(text, name, digest)
    if not dry_run:
        path.write_text(text)
        versions.load(path)
        print(f"pinned {len(pins)} base image(s) in {path}; review the diff and commit")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Pin base images in versions.yaml by digest.")
    parser.add_argument("--refresh", action="store_true", help="re-resolve images that already have a digest")
    parser.add_argument("--dry-run", action="store_true", help="print the changes, write nothing")
    parser.add_argument("--method", choices=["auto", "buildx", "registry"], default="auto")
    parser.add_argument("--versions", type=Path, default=versions.VERSIONS_FILE)
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="COMPONENT=DIGEST",
        help="pin to a digest a build printed (containers/build.sh, CodeBuild's BASE_IMAGE_DIGESTS); no registry access",
    )
    args = parser.parse_args(argv)

    doc = versions.load(args.versions)
    if args.set:
        return set_from_build(args.versions, doc, args.set, dry_run=args.dry_run)
    method = args.method
    if method == "auto":
        method = "buildx" if shutil.which("docker") else "registry"
    resolve: Resolver = resolve_with_buildx if method == "buildx" else resolve_with_registry

    text = args.versions.read_text()
    changed = 0
    for name, component in doc["components"].items():
        if component["kind"] != "base-image" or (component["digest"] and not args.refresh):
            continue
        digest = resolve(component["image"], component["tag"])
        if digest == component["digest"]:
            print(f"{name}: {component['image']}:{component['tag']} still at {digest}")
            continue
        print(f"{name}: {component['image']}:{component['tag']} -> {digest}")
        text = set_digest(text, name, digest)
        changed += 1
    if changed and not args.dry_run:
        args.versions.write_text(text)
        versions.load(args.versions)
        print(f"pinned {changed} base image(s) in {args.versions}; review the diff and rebuild")
    elif not changed:
        print("nothing to pin")
    return 0


if __name__ == "__main__":
    sys.exit(main())
