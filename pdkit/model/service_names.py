"""Names the services themselves refuse, checked before the kit writes them anywhere.

A manifest naming a bucket S3 would never create, or an image reference the kubelet cannot parse, applies cleanly
and fails minutes later at the first S3 read or image pull, far from its cause. Each rule is the service's own,
with its source; each function returns the problem in words, or None for a name the service accepts.
"""

from __future__ import annotations

import re

# S3 general purpose bucket naming rules: https://docs.aws.amazon.com/AmazonS3/latest/userguide/bucketnamingrules.html
_BUCKET = re.compile(r"[a-z0-9][a-z0-9.-]{1,61}[a-z0-9]")
_BUCKET_PREFIXES = ("xn--", "sthree-", "amzn-s3-demo-")
_BUCKET_SUFFIXES = ("-s3alias", "--ol-s3", ".mrap", "--x-s3", "--table-s3")
_IPV4 = re.compile(r"\d{1,3}(\.\d{1,3}){3}")


def bucket_problem(name: str) -> str | None:
    """Why S3 would refuse `name` as a general purpose bucket name; None when it follows S3's rules."""
    if not _BUCKET.fullmatch(name):
        return "is not 3-63 lowercase letters, digits, dots or hyphens, beginning and ending with a letter or digit"
    if ".." in name:
        return "has two adjacent periods"
    if _IPV4.fullmatch(name):
        return "is formatted as an IP address"
    bad = next((p for p in _BUCKET_PREFIXES if name.startswith(p)), None) or next((s for s in _BUCKET_SUFFIXES if name.endswith(s)), None)
    if bad:
        return f"uses {bad!r}, which S3 reserves"
    return None


# The image reference grammar container runtimes parse (distribution/reference, regexp.go; the kubelet and containerd
# use it): [domain[:port]/]path-component(/path-component)*[:tag][@digest].
# https://github.com/distribution/reference/blob/main/reference.go
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*|\[[0-9a-fA-F:]+\])(?::[0-9]+)?"
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
_REGISTRY = re.compile(rf"{_DOMAIN}(?:/{_PATH_COMPONENT})*")
_REFERENCE = re.compile(rf"(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*(?::{_TAG})?(?:@{_DIGEST})?")
# distribution/reference: "the total length of a named reference is limited to 255 characters".
_NAME_MAX = 255


def registry_problem(registry: str) -> str | None:
    """Why `registry` (a registry host, with an optional port and repository path, no scheme) cannot prefix an image."""
    if "://" in registry:
        return "has a URL scheme; an image reference names the registry host alone"
    if not _REGISTRY.fullmatch(registry):
        return "is not a registry host[:port][/path] (lowercase path components of letters, digits and . _ -)"
    return None


def image_problem(reference: str) -> str | None:
    """Why a container runtime would refuse `reference` as an image reference."""
    if "://" in reference:
        return "has a URL scheme; an image reference is host/repository:tag"
    if not _REFERENCE.fullmatch(reference):
        return "is not an image reference (registry/repository[:tag][@sha256:digest], repository in lowercase)"
    name = reference.split("@")[0].rsplit(":", 1)[0] if ":" in reference.split("/")[-1] else reference.split("@")[0]
    if len(name) > _NAME_MAX:
        return f"has a repository name of {len(name)} characters, more than the {_NAME_MAX} runtimes accept"
    return None
