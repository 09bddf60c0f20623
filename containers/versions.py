"""containers/versions.yaml: load, validate, turn into build args, and lint Dockerfiles against it.

Used by build_args.py, pin_digests.py and tests/containers. Needs PyYAML (in the kit's venv); the
in-image self-test does not import this module.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

CONTAINERS_DIR = Path(__file__).resolve().parent
REPO_ROOT = CONTAINERS_DIR.parent
VERSIONS_FILE = CONTAINERS_DIR / "versions.yaml"

KINDS = ("base-image", "distro-package", "tarball", "pypi", "git")
# Fields that describe a component rather than pin it; never passed to a build.
DESCRIPTIVE_FIELDS = {"kind", "source", "notes", "build_args", "ref_from"}
OPTIONAL_EMPTY_FIELDS = {"digest", "sha256"}

ARG_NAME = re.compile(r"^[A-Z][A-Z0-9_]*$")
COMPONENT_NAME = re.compile(r"^[a-z][a-z0-9_]*$")
IMAGE_NAME = re.compile(r"^[a-z0-9][a-z0-9-]*$")
HEX40 = re.compile(r"^[0-9a-f]{40}$")
HEX64 = re.compile(r"^[0-9a-f]{64}$")
GPG_FINGERPRINT = re.compile(r"^[0-9A-F]{40}$")
DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
# registry/path/name as Docker accepts it (lowercase path components, optional registry host:port).
IMAGE_REPOSITORY = re.compile(r"^(?:[a-z0-9.-]+(?::[0-9]+)?/)?[a-z0-9]+(?:[._-][a-z0-9]+)*(?:/[a-z0-9]+(?:[._-][a-z0-9]+)*)*$")
IMAGE_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
PYPI_NAME = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?$")
PEP440_PUBLIC = re.compile(r"^\d+(\.\d+)*((a|b|rc)\d+)?(\.post\d+)?(\.dev\d+)?$")
GIT_TAG = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._/-]*$")
LATEST = re.compile(r"\blatest\b", re.IGNORECASE)


class VersionsError(ValueError):
    """versions.yaml is malformed; the message names the field and what is wrong."""


@dataclass(frozen=True)
class ImageRef:
    """A parsed container image reference: repository[:tag][@digest]."""

    repository: str
    tag: str | None
    digest: str | None

    @property
    def pinned(self) -> bool:
        return self.digest is not None

    def __str__(self) -> str:
        text = self.repository
        if self.tag:
            text += f":{self.tag}"
        if self.digest:
            text += f"@{self.digest}"
        return text


def parse_image_ref(ref: str) -> ImageRef:
    """Parse `repo[:tag][@sha256:...]`; raise VersionsError on anything malformed."""
    rest, _, digest = ref.partition("@")
    if "@" in ref and not DIGEST.match(digest):
        raise VersionsError(f"image reference {ref!r}: digest must be sha256:<64 lowercase hex>")
    last_slash = rest.rfind("/")
    colon = rest.rfind(":")
    tag: str | None = None
    repository = rest
    if colon > last_slash:
        repository, tag = rest[:colon], rest[colon + 1 :]
        if not IMAGE_TAG.match(tag):
            raise VersionsError(f"image reference {ref!r}: tag {tag!r} is not a valid tag")
        if LATEST.search(tag):
            raise VersionsError(f"image reference {ref!r}: 'latest' is not a pin")
    if not IMAGE_REPOSITORY.match(repository):
        raise VersionsError(f"image reference {ref!r}: repository {repository!r} is not valid")
    if tag is None and "@" not in ref:
        raise VersionsError(f"image reference {ref!r}: needs a tag or a digest")
    return ImageRef(repository=repository, tag=tag, digest=digest or None)


def load(path: Path = VERSIONS_FILE) -> dict[str, Any]:
    """Read and validate versions.yaml."""
    try:
        doc = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        raise VersionsError(f"{path}: not valid YAML: {exc}") from exc
    validate(doc)
    assert isinstance(doc, dict)
    return doc


def field(component: Mapping[str, Any], dotted: str) -> Any:
    """Look up `a.b.c` in a component mapping."""
    value: Any = component
    for part in dotted.split("."):
        if not isinstance(value, Mapping) or part not in value:
            raise KeyError(dotted)
        value = value[part]
    return value


def image_ref(component: Mapping[str, Any]) -> str:
    """image:tag, plus @digest when pinned."""
    ref = f"{component['image']}:{component['tag']}"
    if component.get("digest"):
        ref += f"@{component['digest']}"
    return ref


def base_images(doc: Mapping[str, Any], image: str) -> list[str]:
    """Names of the base-image components an image is built from."""
    return [name for name in doc["images"][image]["components"] if doc["components"][name]["kind"] == "base-image"]


def pin_base_image(doc: dict[str, Any], image: str, pin: str) -> None:
    """Apply COMPONENT=sha256:... (a digest a build just resolved) to one of the image's base images, in memory."""
    name, _, digest = pin.partition("=")
    _require(name in base_images(doc, image), f"--pin {pin}", f"{image} has no base image {name!r} ({', '.join(base_images(doc, image))})")
    _require(DIGEST.match(digest) is not None, f"--pin {pin}", "the digest must be sha256:<64 hex>")
    pinned = doc["components"][name]["digest"]
    _require(pinned in ("", digest), f"--pin {pin}", f"versions.yaml pins {name} to {pinned}; a build cannot use another digest")
    doc["components"][name] = {**doc["components"][name], "digest": digest}


def component_arg_value(component: Mapping[str, Any], source: str) -> str:
    if source == "ref":
        return image_ref(component)
    return str(field(component, source))


def build_args(doc: Mapping[str, Any], image: str) -> dict[str, str]:
    """Every --build-arg of an image, in a stable order: its components' args, then its settings."""
    if image not in doc["images"]:
        raise VersionsError(f"unknown image {image!r}; known: {', '.join(sorted(doc['images']))}")
    spec = doc["images"][image]
    args: dict[str, str] = {}
    for name in spec["components"]:
        component = doc["components"][name]
        for arg, source in component.get("build_args", {}).items():
            args[arg] = component_arg_value(component, source)
    for arg, value in (spec.get("settings") or {}).items():
        args[arg] = str(value)
    return args


def build_target(doc: Mapping[str, Any], image: str) -> str:
    """The Dockerfile stage an image is (`docker build --target`); "" builds the last stage."""
    return str(doc["images"][image].get("target") or "")


def dockerfile_path(doc: Mapping[str, Any], image: str) -> Path:
    return REPO_ROOT / str(doc["images"][image]["dockerfile"])


def context_path(doc: Mapping[str, Any], image: str) -> Path:
    return REPO_ROOT / str(doc["images"][image]["context"])


def dockerignore_path(doc: Mapping[str, Any], image: str) -> Path:
    """The Dockerfile-specific ignore file (`<Dockerfile>.dockerignore`), which BuildKit prefers to the context's."""
    return Path(f"{dockerfile_path(doc, image)}.dockerignore")


def image_tag(doc: Mapping[str, Any], image: str) -> str:
    """An immutable-registry-friendly tag that changes whenever anything that goes into the image changes.

    Hashes the build args, the Dockerfile and every file of its build context, i.e. what the
    `<Dockerfile>.dockerignore` allow-list admits (kit scripts, and for serving the pdkit staging modules).
    """
    digest = hashlib.sha256()
    digest.update(json.dumps(build_args(doc, image), sort_keys=True).encode())
    # Two images from one Dockerfile differ only by the stage they build (sglang-efa / sglang-deepep).
    digest.update(f"target={build_target(doc, image)}".encode())
    for path in [dockerfile_path(doc, image), *context_files(doc, image)]:
        digest.update(path.relative_to(REPO_ROOT).as_posix().encode())
        digest.update(path.read_bytes())
    return f"{image}-{digest.hexdigest()[:12]}"


# --------------------------------------------------------------------------------------------------
# Build context: the <Dockerfile>.dockerignore allow-list, matched as Docker matches it
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class IgnoreRule:
    pattern: str
    negated: bool
    regex: re.Pattern[str]


def _glob_regex(pattern: str) -> str:
    """Docker's .dockerignore glob (Go filepath.Match plus `**`) as a regex over a slash-separated path."""
    out: list[str] = []
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if pattern.startswith("**/", i):
            out.append("(?:.*/)?")
            i += 3
            continue
        if pattern.startswith("**", i):
            out.append(".*")
            i += 2
            continue
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[" and "]" in pattern[i + 1 :]:
            end = pattern.index("]", i + 1)
            out.append("[" + pattern[i + 1 : end].replace("\\", "\\\\") + "]")  # Go's [a-z] / [^a-z] read as in a regex
            i = end
        elif char == "\\" and i + 1 < len(pattern):
            i += 1
            out.append(re.escape(pattern[i]))
        else:
            out.append(re.escape(char))
        i += 1
    return "".join(out)


def parse_dockerignore(text: str) -> list[IgnoreRule]:
    """Rules in file order (comments and blank lines dropped, leading `/` and `./` and trailing `/` removed)."""
    rules: list[IgnoreRule] = []
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        negated = line.startswith("!")
        pattern = os.path.normpath(line[1:].strip() if negated else line).replace(os.sep, "/").lstrip("/")
        rules.append(IgnoreRule(pattern, negated, re.compile(f"^{_glob_regex(pattern)}$")))
    return rules


def ignored(relative: str, rules: list[IgnoreRule]) -> bool:
    """Docker's rule: the last pattern matching the path or one of its parent directories decides."""
    parts = relative.split("/")
    prefixes = ["/".join(parts[: i + 1]) for i in range(len(parts))]
    excluded = False
    for rule in rules:
        if any(rule.regex.match(prefix) for prefix in prefixes):
            excluded = not rule.negated
    return excluded


def _may_readmit(directory: str, rules: list[IgnoreRule]) -> bool:
    """Could a `!pattern` admit something below this (excluded) directory? Only then is it walked."""
    parts = directory.split("/")
    for rule in rules:
        if not rule.negated:
            continue
        pattern_parts = rule.pattern.split("/")
        for index, part in enumerate(pattern_parts):
            if "**" in part:
                return True
            if index == len(parts):
                return True
            if not re.fullmatch(_glob_regex(part), parts[index]):
                break
    return False


def context_files(doc: Mapping[str, Any], image: str) -> list[Path]:
    """Every file the image's build context sends to BuildKit: the context minus its Dockerfile's ignore file."""
    root = context_path(doc, image)
    ignore_file = dockerignore_path(doc, image)
    rules = parse_dockerignore(ignore_file.read_text()) if ignore_file.is_file() else []
    files: list[Path] = []
    for directory, subdirs, names in os.walk(root):
        base = Path(directory).relative_to(root).as_posix()
        prefix = "" if base == "." else base + "/"
        subdirs[:] = sorted(d for d in subdirs if not ignored(prefix + d, rules) or _may_readmit(prefix + d, rules))
        files += [Path(directory) / name for name in sorted(names) if not ignored(prefix + name, rules)]
    return sorted(files)


COPY_LINE = re.compile(r"^(?:COPY|ADD)\s+(?P<body>.+)$", re.IGNORECASE)
BIND_MOUNT = re.compile(r"--mount=(?P<options>\S*type=bind\S*)")


def context_sources(text: str) -> list[str]:
    """Context paths a Dockerfile reads: COPY/ADD sources (not --from=) and RUN bind mounts without from=."""
    sources: list[str] = []
    for instruction in dockerfile_instructions(text):
        copy = COPY_LINE.match(instruction)
        if copy:
            body = copy.group("body").strip()
            flags: list[str] = []
            while body.startswith("--"):
                flag, _, body = body.partition(" ")
                flags.append(flag)
                body = body.strip()
            if any(flag.startswith("--from=") for flag in flags):
                continue
            words = json.loads(body) if body.startswith("[") else body.split()
            sources += [os.path.normpath(word).lstrip("/") for word in words[:-1]]
        elif instruction.upper().startswith("RUN "):
            for mount in BIND_MOUNT.finditer(instruction):
                options: dict[str, str] = {}
                for option in mount.group("options").split(","):
                    key, _, value = option.partition("=")
                    options[key] = value
                if "from" not in options:
                    sources.append(os.path.normpath(options.get("source") or options.get("src") or ".").lstrip("/"))
    return sources


def _covers(source: str, relative: str) -> bool:
    if source == ".":
        return True
    return relative == source or relative.startswith(source + "/") or re.fullmatch(_glob_regex(source), relative) is not None


def lint_context(text: str, doc: Mapping[str, Any], image: str, *, where: str = "Dockerfile") -> list[str]:
    """The allow-list admits exactly what the Dockerfile copies: no COPY of a missing file, no file the image never copies."""
    problems: list[str] = []
    ignore_file = dockerignore_path(doc, image)
    if not ignore_file.is_file():
        return [f"{where}: no {ignore_file.name} next to it: the build context would be all of {context_path(doc, image)}"]
    root = context_path(doc, image)
    files = [path.relative_to(root).as_posix() for path in context_files(doc, image)]
    sources = context_sources(text)
    for source in sources:
        if not any(_covers(source, relative) for relative in files):
            problems.append(
                f"{where}: COPY {source}: not in the build context ({ignore_file.name} does not admit it, or it does not exist)"
            )
    for relative in files:
        if not any(_covers(source, relative) for source in sources):
            problems.append(f"{where}: {ignore_file.name} admits {relative}, which no COPY uses (it would still change the tag)")
    return problems


# --------------------------------------------------------------------------------------------------
# Schema
# --------------------------------------------------------------------------------------------------


def _require(condition: bool, where: str, message: str) -> None:
    if not condition:
        raise VersionsError(f"{where}: {message}")


def _nonempty_str(value: Any) -> bool:
    return isinstance(value, str) and value.strip() != ""


def _scalars(value: Any, prefix: str) -> Iterator[tuple[str, Any]]:
    if isinstance(value, Mapping):
        for key, inner in value.items():
            yield from _scalars(inner, f"{prefix}.{key}")
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            yield from _scalars(inner, f"{prefix}[{index}]")
    else:
        yield prefix, value


def _validate_component(name: str, component: Any) -> None:
    where = f"components.{name}"
    _require(COMPONENT_NAME.match(name) is not None, where, "component names are lower_snake_case")
    _require(isinstance(component, Mapping), where, "must be a mapping")
    kind = component.get("kind")
    _require(kind in KINDS, f"{where}.kind", f"must be one of {', '.join(KINDS)} (got {kind!r})")
    _require(_nonempty_str(component.get("source")), f"{where}.source", "say where the value was read")
    _require(_nonempty_str(component.get("notes")), f"{where}.notes", "say why this version and what to watch")
    for key, value in _scalars({k: v for k, v in component.items() if k not in DESCRIPTIVE_FIELDS}, where):
        _require(isinstance(value, str), key, f"must be a quoted string (got {type(value).__name__} {value!r})")
        if key.rsplit(".", 1)[-1] not in OPTIONAL_EMPTY_FIELDS:
            _require(value != "", key, "must not be empty")
        _require(not re.search(r"\s", value), key, "must not contain whitespace")
        _require(not LATEST.search(value), key, "'latest' is not a pin")

    if kind == "base-image":
        for key in ("image", "tag"):
            _require(_nonempty_str(component.get(key)), f"{where}.{key}", "required for a base image")
        _require("digest" in component, f"{where}.digest", 'required ("" until pin_digests.py sets it)')
        digest = component["digest"]
        _require(digest == "" or DIGEST.match(digest) is not None, f"{where}.digest", "must be empty or sha256:<64 hex>")
        parse_image_ref(image_ref(component))
    elif kind == "pypi":
        _require(PYPI_NAME.match(str(component.get("package", ""))) is not None, f"{where}.package", "a PyPI project name")
        _require(PEP440_PUBLIC.match(str(component.get("version", ""))) is not None, f"{where}.version", "a public PEP 440 version")
        if "sha256" in component:
            _require(HEX64.match(component["sha256"]) is not None, f"{where}.sha256", "64 lowercase hex")
    elif kind == "git":
        _require(str(component.get("repo", "")).startswith("https://"), f"{where}.repo", "an https:// URL")
        has_commit = "commit" in component
        _require(has_commit != ("ref_from" in component), where, "pin a full commit, or name the field it follows with ref_from (not both)")
        if has_commit:
            _require(HEX40.match(component["commit"]) is not None, f"{where}.commit", "a full 40-hex commit SHA")
        if "tag" in component:
            _require(GIT_TAG.match(component["tag"]) is not None, f"{where}.tag", "not a valid git tag")
    elif kind == "tarball":
        url = str(component.get("url", ""))
        _require(url.startswith("https://") and "{version}" in url, f"{where}.url", "an https:// URL template containing {version}")
        _require(_nonempty_str(component.get("version")), f"{where}.version", "required")
        fingerprint = str(component.get("gpg_fingerprint", ""))
        _require(GPG_FINGERPRINT.match(fingerprint) is not None, f"{where}.gpg_fingerprint", "40 uppercase hex, no spaces")
        sha = component.get("sha256", "")
        _require(sha == "" or HEX64.match(sha) is not None, f"{where}.sha256", "empty or 64 lowercase hex")
    elif kind == "distro-package":
        _require(_nonempty_str(component.get("version")), f"{where}.version", "required")

    mapping = component.get("build_args")
    _require(isinstance(mapping, Mapping) and len(mapping) > 0, f"{where}.build_args", "map at least one ARG to a field")
    for arg, source in mapping.items():
        _require(ARG_NAME.match(str(arg)) is not None, f"{where}.build_args.{arg}", "ARG names are UPPER_SNAKE_CASE")
        if source == "ref":
            _require(kind == "base-image", f"{where}.build_args.{arg}", "'ref' only exists on base images")
            continue
        try:
            value = field(component, str(source))
        except KeyError:
            raise VersionsError(f"{where}.build_args.{arg}: field {source!r} does not exist") from None
        _require(isinstance(value, str), f"{where}.build_args.{arg}", f"field {source!r} is not a scalar string")
        _require(source not in DESCRIPTIVE_FIELDS, f"{where}.build_args.{arg}", f"{source!r} is descriptive, not a pin")


def validate(doc: Any) -> None:
    """Raise VersionsError with the path of the first problem found."""
    _require(isinstance(doc, Mapping), "versions.yaml", "must be a mapping")
    allowed = {"schema_version", "images", "components", "not_installed"}
    unknown = set(doc) - allowed
    _require(not unknown, "versions.yaml", f"unknown top-level keys: {', '.join(sorted(unknown))}")
    _require(doc.get("schema_version") == 1, "schema_version", "must be 1")
    components = doc.get("components")
    images = doc.get("images")
    _require(isinstance(components, Mapping) and len(components) > 0, "components", "must be a non-empty mapping")
    _require(isinstance(images, Mapping) and len(images) > 0, "images", "must be a non-empty mapping")
    for name, component in components.items():
        _validate_component(str(name), component)
    for name, component in components.items():
        if "ref_from" in component:
            target, _, path = str(component["ref_from"]).partition(".")
            _require(target in components, f"components.{name}.ref_from", f"unknown component {target!r}")
            try:
                field(components[target], path)
            except KeyError:
                raise VersionsError(f"components.{name}.ref_from: {component['ref_from']!r} does not exist") from None

    used: set[str] = set()
    for image, spec in images.items():
        where = f"images.{image}"
        _require(IMAGE_NAME.match(str(image)) is not None, where, "image names are lower-kebab-case")
        _require(isinstance(spec, Mapping), where, "must be a mapping")
        for key in ("dockerfile", "context", "description"):
            _require(_nonempty_str(spec.get(key)), f"{where}.{key}", "required")
        _require((REPO_ROOT / spec["dockerfile"]).is_file(), f"{where}.dockerfile", f"{spec['dockerfile']} does not exist")
        _require((REPO_ROOT / spec["context"]).is_dir(), f"{where}.context", f"{spec['context']} is not a directory")
        _require(
            Path(f"{REPO_ROOT / spec['dockerfile']}.dockerignore").is_file(),
            f"{where}.dockerfile",
            f"{spec['dockerfile']}.dockerignore is missing: the allow-list of what the build context may send",
        )
        if "target" in spec:
            stages = [alias for _, alias in dockerfile_stage_names((REPO_ROOT / spec["dockerfile"]).read_text())]
            _require(
                spec["target"] in stages, f"{where}.target", f"no stage {spec['target']!r} in {spec['dockerfile']} ({', '.join(stages)})"
            )
        names = spec.get("components")
        _require(isinstance(names, list) and len(names) > 0, f"{where}.components", "a non-empty list")
        _require(len(set(names)) == len(names), f"{where}.components", "lists a component twice")
        base_images = 0
        seen_args: dict[str, str] = {}
        for name in names:
            _require(name in components, f"{where}.components", f"unknown component {name!r}")
            base_images += components[name]["kind"] == "base-image"
            for arg in components[name]["build_args"]:
                _require(arg not in seen_args, f"{where}.components", f"ARG {arg} comes from both {seen_args.get(arg)} and {name}")
                seen_args[arg] = name
            if "ref_from" in components[name]:
                source = str(components[name]["ref_from"]).split(".")[0]
                _require(source in names, f"{where}.components", f"{name} follows {source}, which the image does not list")
        _require(base_images >= 1, f"{where}.components", "needs a base-image component")
        used.update(names)
        settings = spec.get("settings") or {}
        _require(isinstance(settings, Mapping), f"{where}.settings", "must be a mapping")
        for arg, value in settings.items():
            key = f"{where}.settings.{arg}"
            _require(ARG_NAME.match(str(arg)) is not None, key, "ARG names are UPPER_SNAKE_CASE")
            _require(arg not in seen_args, key, f"already set by component {seen_args.get(arg)}")
            _require(isinstance(value, str) and value != "", key, "a non-empty quoted string")
            _require(not re.search(r"\s", value) and not LATEST.search(value), key, "no whitespace, no 'latest'")
    unused = set(components) - used
    _require(not unused, "components", f"not used by any image: {', '.join(sorted(unused))}")
    not_installed = doc.get("not_installed") or {}
    _require(isinstance(not_installed, Mapping), "not_installed", "a mapping of name -> reason")
    for name, reason in not_installed.items():
        _require(_nonempty_str(reason), f"not_installed.{name}", "give the reason")


# --------------------------------------------------------------------------------------------------
# Dockerfile rules: every version comes in as an ARG without a default, fed from versions.yaml
# --------------------------------------------------------------------------------------------------

# A dotted number that is not part of a word, a path or a variable: 1.2, v2.19.6, 13.0.3-cudnn.
VERSION_LITERAL = re.compile(r"(?<![\w$./{-])v?\d+\.\d+(?:\.\d+)*")
ARG_LINE = re.compile(r"^ARG\s+(?P<body>.+)$", re.IGNORECASE)
FROM_LINE = re.compile(r"^FROM\s+(?:--platform=\S+\s+)?(?P<image>\S+)(?:\s+AS\s+(?P<alias>\S+))?\s*$", re.IGNORECASE)
VAR_REF = re.compile(r"^\$\{?(?P<name>[A-Za-z_][A-Za-z0-9_]*)\}?$")


def dockerfile_instructions(text: str) -> list[str]:
    """Logical instructions: continuation lines joined, comments and blank lines dropped."""
    instructions: list[str] = []
    current = ""
    for raw in text.splitlines():
        line = raw.strip()
        if not current and (not line or line.startswith("#")):
            continue
        if current and line.startswith("#"):
            continue
        if line.endswith("\\"):
            current += line[:-1] + " "
            continue
        current += line
        instructions.append(current.strip())
        current = ""
    if current.strip():
        instructions.append(current.strip())
    return instructions


def dockerfile_stage_names(text: str) -> list[tuple[str, str]]:
    """(FROM image, stage alias) of every stage, in order; the alias is "" for an unnamed stage."""
    out = []
    for instruction in dockerfile_instructions(text):
        match = FROM_LINE.match(instruction)
        if match:
            out.append((match.group("image"), match.group("alias") or ""))
    return out


def dockerfile_args(text: str) -> dict[str, str | None]:
    """ARG name -> default (None when declared without one). Later declarations keep the first default seen."""
    args: dict[str, str | None] = {}
    for instruction in dockerfile_instructions(text):
        match = ARG_LINE.match(instruction)
        if not match:
            continue
        for token in match.group("body").split():
            name, eq, default = token.partition("=")
            if name not in args or args[name] is None:
                args[name] = default if eq else None
    return args


def pinned_values(doc: Mapping[str, Any], image: str) -> set[str]:
    """Values that are pins (contain a digit) and so must appear nowhere but versions.yaml."""
    values = set(build_args(doc, image).values())
    for name in doc["images"][image]["components"]:
        component = doc["components"][name]
        for key, value in _scalars({k: v for k, v in component.items() if k not in DESCRIPTIVE_FIELDS}, name):
            if key.rsplit(".", 1)[-1] not in {"package", "image"}:
                values.add(str(value))
    return {value for value in values if len(value) >= 3 and re.search(r"\d", value)}


def lint_text_for_pins(text: str, pins: set[str], *, where: str) -> list[str]:
    """Version-looking literals, literal copies of pinned values and 'latest' in code (comments ignored)."""
    problems: list[str] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        code = raw.split("#", 1)[0] if not raw.lstrip().startswith("#!") else ""
        for match in VERSION_LITERAL.finditer(code):
            problems.append(f"{where}:{number}: version literal {match.group(0)!r}: take it from versions.yaml through an ARG")
        for value in sorted(pins):
            if value in code:
                problems.append(f"{where}:{number}: {value!r} is pinned in versions.yaml; use its ARG instead")
        if LATEST.search(code):
            problems.append(f"{where}:{number}: 'latest' is not a pin")
    return problems


def lint_dockerfile(text: str, doc: Mapping[str, Any], image: str, *, where: str = "Dockerfile") -> list[str]:
    """Everything that makes a Dockerfile disagree with versions.yaml. Empty list = clean."""
    problems: list[str] = []
    expected = build_args(doc, image)
    declared = dockerfile_args(text)
    for name, default in declared.items():
        if default is not None:
            problems.append(f"{where}: ARG {name} has a default ({default!r}); every ARG comes from build_args.py, without defaults")
        if name not in expected:
            problems.append(f"{where}: ARG {name} is not produced by build_args.py for {image} (add it to versions.yaml)")
    for name in expected:
        if name not in declared:
            problems.append(f"{where}: build_args.py passes {name} but the Dockerfile never declares ARG {name}")

    base_args = {
        arg
        for component in doc["images"][image]["components"]
        for arg, source in doc["components"][component]["build_args"].items()
        if source == "ref"
    }
    stages: set[str] = set()
    for instruction in dockerfile_instructions(text):
        match = FROM_LINE.match(instruction)
        if not match:
            continue
        base = match.group("image")
        var = VAR_REF.match(base)
        if var:
            if var.group("name") not in base_args:
                problems.append(f"{where}: FROM {base}: only a base-image ARG from versions.yaml may be a FROM")
        elif base.lower() not in stages:
            problems.append(f"{where}: FROM {base}: base images come from versions.yaml (FROM ${{ARG}}) or an earlier stage")
        if match.group("alias"):
            stages.add(match.group("alias").lower())
    problems.extend(lint_stage_args(text, set(expected), where=where))
    problems.extend(lint_text_for_pins(text, pinned_values(doc, image), where=where))
    problems.extend(lint_context(text, doc, image, where=where))
    return problems


KIT_SCRIPT = re.compile(r"/opt/kit/([\w.-]+\.sh)\b")
REQUIRED_ENV = re.compile(r"\$\{([A-Z][A-Z0-9_]*):\?")
VAR_USE = re.compile(r"\$\{?([A-Z][A-Z0-9_]*)")


def dockerfile_stages(text: str) -> list[tuple[str, list[str]]]:
    """(stage name or index, instructions after its FROM) for every stage."""
    stages: list[tuple[str, list[str]]] = []
    for instruction in dockerfile_instructions(text):
        match = FROM_LINE.match(instruction)
        if match:
            stages.append((match.group("alias") or str(len(stages)), []))
        elif stages:
            stages[-1][1].append(instruction)
    return stages


def lint_stage_args(text: str, build_arg_names: set[str], *, where: str, kit_dir: Path | None = None) -> list[str]:
    """A build arg is only visible in a stage that declares it: catch ${X} (or a kit script needing X) without ARG X.

    Kit scripts state their inputs as `: "${X:?...}"`; a RUN of /opt/kit/<script>.sh needs those ARGs in its stage.
    """
    kit = kit_dir or CONTAINERS_DIR / "kit"
    problems: list[str] = []
    for stage, instructions in dockerfile_stages(text):
        declared = {
            name for line in instructions if (m := ARG_LINE.match(line)) for name in (t.split("=")[0] for t in m.group("body").split())
        }
        for line in instructions:
            if ARG_LINE.match(line):
                continue
            used = set(VAR_USE.findall(line)) & build_arg_names
            if line.upper().startswith("RUN "):
                for script in KIT_SCRIPT.findall(line):
                    path = kit / script
                    if path.is_file():
                        used |= set(REQUIRED_ENV.findall(path.read_text())) & build_arg_names
            for name in sorted(used - declared):
                problems.append(f"{where}: stage {stage} uses {name} without declaring ARG {name} in that stage (it would be empty)")
    return problems
