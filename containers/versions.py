"""containers/versions.yaml: load, validate, turn into build args, and lint Dockerfiles against it.

Used by build_args.py, pin_digests.py and tests/containers. Needs PyYAML, pydantic, docker (docker-py, for Docker's
.dockerignore rules) and dockerfile-parse: in the kit's venv (requirements.in) and installed on the CodeBuild host by
the images stack at the same pins; the in-image self-test does not import this module.
"""

from __future__ import annotations

import hashlib
import io
import json
import os
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from docker.utils.build import PatternMatcher
from docker.utils.fnmatch import fnmatchcase
from dockerfile_parse import DockerfileParser
from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError, field_validator, model_validator

CONTAINERS_DIR = Path(__file__).resolve().parent
REPO_ROOT = CONTAINERS_DIR.parent
VERSIONS_FILE = CONTAINERS_DIR / "versions.yaml"

KINDS = ("base-image", "distro-package", "tarball", "binary", "pypi", "git")
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

    Hashes the build args, the Dockerfile stages its target builds and every build-context file they copy
    (admitted by the `<Dockerfile>.dockerignore` allow-list: kit scripts, and for serving the pdkit modules).
    """
    digest = hashlib.sha256()
    digest.update(json.dumps(build_args(doc, image), sort_keys=True).encode())
    # Two images from one Dockerfile differ only by the stage they build (sglang-efa / sglang-deepep).
    digest.update(f"target={build_target(doc, image)}".encode())
    # The stages the target builds, not the whole file: a change to another target's stage rebuilds nothing here.
    digest.update(dockerfile_path(doc, image).relative_to(REPO_ROOT).as_posix().encode())
    digest.update(image_dockerfile(doc, image).encode())
    for path in context_files(doc, image):
        digest.update(path.relative_to(REPO_ROOT).as_posix().encode())
        digest.update(path.read_bytes())
    return f"{image}-{digest.hexdigest()[:12]}"


# --------------------------------------------------------------------------------------------------
# Dockerfile syntax (dockerfile-parse) and the build context (docker-py's port of Docker's .dockerignore rules)
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Instruction:
    """One instruction as dockerfile-parse reads it (continuation lines joined, comments dropped), with its
    leading `--flag=value` words split off as BuildKit's parser does."""

    keyword: str
    flags: tuple[str, ...]
    rest: str
    line: int  # 0-based, its first line

    def __str__(self) -> str:
        return " ".join([self.keyword, *self.flags, self.rest])

    @property
    def words(self) -> list[str]:
        """Its arguments: a JSON array (`COPY ["a", "b"]`) or whitespace-separated words."""
        return list(json.loads(self.rest)) if self.rest.startswith("[") else self.rest.split()

    def flag(self, name: str) -> list[str]:
        return [flag.split("=", 1)[1] for flag in self.flags if flag.startswith(f"--{name}=")]

    def mounts(self) -> list[dict[str, str]]:
        """RUN --mount options, one dict per mount (type defaults to bind, as in BuildKit)."""
        return [{"type": "bind"} | dict(option.partition("=")[::2] for option in mount.split(",")) for mount in self.flag("mount")]


@dataclass(frozen=True)
class Stage:
    alias: str  # "" for an unnamed stage
    index: int
    base: str  # the FROM image: a base-image ARG or an earlier stage
    line: int
    instructions: list[Instruction]

    @property
    def name(self) -> str:
        return self.alias or str(self.index)

    @property
    def args(self) -> set[str]:
        return {word.split("=")[0] for instruction in self.instructions if instruction.keyword == "ARG" for word in instruction.words}

    @property
    def reads_from(self) -> set[str]:
        """The stages it needs besides its FROM: COPY --from=, RUN --mount=...,from= (lower case, as BuildKit names them)."""
        return {name.lower() for i in self.instructions for name in [*i.flag("from"), *(m["from"] for m in i.mounts() if "from" in m)]}


FLAGS = re.compile(r"((?:--\S+\s+)*)(.*)", re.DOTALL)


def dockerfile_instructions(text: str) -> list[Instruction]:
    instructions = []
    for entry in DockerfileParser(fileobj=io.BytesIO(text.encode())).structure:
        if entry["instruction"] == "COMMENT":
            continue
        flags, rest = FLAGS.fullmatch(entry["value"].strip()).groups()
        instructions.append(Instruction(entry["instruction"], tuple(flags.split()), rest, entry["startline"]))
    return instructions


def dockerfile_stages(text: str) -> list[Stage]:
    """Every stage, in file order."""
    stages: list[Stage] = []
    for instruction in dockerfile_instructions(text):
        if instruction.keyword == "FROM":
            base, *alias = instruction.words
            named = len(alias) == 2 and alias[0].upper() == "AS"
            stages.append(Stage(alias[1] if named else "", len(stages), base, instruction.line, []))
        elif stages:
            stages[-1].instructions.append(instruction)
    return stages


def dockerfile_args(text: str) -> dict[str, str | None]:
    """ARG name -> default (None when declared without one). Later declarations keep the first default seen."""
    args: dict[str, str | None] = {}
    for instruction in dockerfile_instructions(text):
        for word in instruction.words if instruction.keyword == "ARG" else []:
            name, eq, default = word.partition("=")
            if args.get(name) is None:
                args[name] = default if eq else None
    return args


def for_target(text: str, target: str | None) -> str:
    """The Dockerfile as one target builds it: the global ARGs and the stages the target needs (its FROM chain,
    COPY --from=, RUN --mount=...,from=), as BuildKit does; other stages' lines are blanked, so line numbers stay."""
    if target is None:
        return text
    lines = text.splitlines(keepends=True)
    stages = dockerfile_stages(text)
    by_name = {stage.name.lower(): stage for stage in stages}
    needed: set[str] = set()
    todo = [target.lower()]
    while todo:
        name = todo.pop()
        if name in by_name and name not in needed:
            needed.add(name)
            todo += [by_name[name].base.lower(), *by_name[name].reads_from]
    keep = set(range(stages[0].line if stages else len(lines)))
    for stage, end in zip(stages, [*(stage.line for stage in stages[1:]), len(lines)], strict=True):
        if stage.name.lower() in needed:
            keep |= set(range(stage.line, end))
    return "".join(line if i in keep else "\n" for i, line in enumerate(lines))


def image_dockerfile(doc: Mapping[str, Any], image: str) -> str:
    """The image's Dockerfile text as its target builds it (for_target)."""
    return for_target(dockerfile_path(doc, image).read_text(), doc["images"][image].get("target"))


def dockerignore_patterns(path: Path) -> list[str]:
    """The ignore file's patterns, read as docker-py reads a .dockerignore (stripped; blank and # lines dropped)."""
    return [line.strip() for line in path.read_text().splitlines() if line.strip() and not line.strip().startswith("#")]


def admitted(root: Path, patterns: list[str]) -> list[str]:
    """Every file under root the patterns let into the build context, relative to root.

    docker-py's PatternMatcher is its port of Docker's rules (github.com/docker/docker-py docker/utils/build.py).
    Its walk enters an excluded directory only when a `!` line starts with that directory's path, so allow-list
    lines name literal paths (a COPY the walk misses fails lint_context). Only the walk is used: its per-path
    matches() checks a single parent directory (moby/patternmatcher's deprecated Matches); tests/containers shows it.
    """
    return sorted(path for path in PatternMatcher(patterns).walk(str(root)) if (root / path).is_file())


def _admitted(doc: Mapping[str, Any], image: str) -> list[str]:
    """What the image's build context sends to BuildKit: the context minus its Dockerfile's ignore file."""
    ignore_file = dockerignore_path(doc, image)
    return admitted(context_path(doc, image), dockerignore_patterns(ignore_file) if ignore_file.is_file() else [])


def context_files(doc: Mapping[str, Any], image: str) -> list[Path]:
    """The build-context files that go into the image: admitted by the allow-list and read by its target's stages."""
    sources = context_sources(image_dockerfile(doc, image))
    return [context_path(doc, image) / path for path in _admitted(doc, image) if any(_covers(source, path) for source in sources)]


def context_sources(text: str) -> list[str]:
    """Context paths a Dockerfile reads: COPY/ADD sources (not --from=) and RUN bind mounts without from=."""
    sources: list[str] = []
    for instruction in dockerfile_instructions(text):
        if instruction.keyword in ("COPY", "ADD") and not instruction.flag("from"):
            sources += [os.path.normpath(word).lstrip("/") for word in instruction.words[:-1]]
        elif instruction.keyword == "RUN":
            binds = [mount for mount in instruction.mounts() if mount["type"] == "bind" and "from" not in mount]
            sources += [os.path.normpath(mount.get("source") or mount.get("src") or ".").lstrip("/") for mount in binds]
    return sources


def _covers(source: str, relative: str) -> bool:
    return source == "." or relative == source or relative.startswith(source + "/") or fnmatchcase(relative, source)


def lint_context(text: str, doc: Mapping[str, Any], image: str, *, where: str = "Dockerfile") -> list[str]:
    """The allow-list admits exactly what the Dockerfile copies: no COPY of a missing file, no file the image never copies."""
    problems: list[str] = []
    ignore_file = dockerignore_path(doc, image)
    if not ignore_file.is_file():
        return [f"{where}: no {ignore_file.name} next to it: the build context would be all of {context_path(doc, image)}"]
    files = _admitted(doc, image)
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


def _scalars(value: Any, prefix: str) -> Iterator[tuple[str, Any]]:
    if isinstance(value, Mapping):
        for key, inner in value.items():
            yield from _scalars(inner, f"{prefix}.{key}" if prefix else str(key))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            yield from _scalars(inner, f"{prefix}[{index}]")
    else:
        yield prefix, value


def _check(condition: bool, message: str) -> None:
    """Inside a pydantic validator: a ValueError becomes an error at the validator's location."""
    if not condition:
        raise ValueError(message)


NonEmpty = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1)]


class _Component(BaseModel):
    """What every component says: where the value was read, why this version, and which ARGs it feeds.
    Any further field (a nested mapping included) is a pin: a quoted string without whitespace or 'latest'."""

    model_config = ConfigDict(extra="allow")
    source: NonEmpty = Field(description="say where the value was read")
    notes: NonEmpty = Field(description="say why this version and what to watch")
    build_args: dict[str, str]
    ref_from: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _pins_are_strings(cls, data: Any) -> Any:
        if isinstance(data, Mapping):
            for key, value in _scalars({k: v for k, v in data.items() if k not in DESCRIPTIVE_FIELDS}, ""):
                _check(isinstance(value, str), f"{key}: must be a quoted string (got {type(value).__name__} {value!r})")
                _check(value != "" or key.rsplit(".", 1)[-1] in OPTIONAL_EMPTY_FIELDS, f"{key}: must not be empty")
                _check(not re.search(r"\s", value), f"{key}: must not contain whitespace")
                _check(not LATEST.search(value), f"{key}: 'latest' is not a pin")
        return data

    @model_validator(mode="after")
    def _build_args_name_pins(self) -> _Component:
        _check(len(self.build_args) > 0, "build_args: map at least one ARG to a field")
        fields = self.model_dump(exclude_none=True)
        for arg, source in self.build_args.items():
            _check(ARG_NAME.match(arg) is not None, f"build_args.{arg}: ARG names are UPPER_SNAKE_CASE")
            if source == "ref":
                _check(isinstance(self, BaseImage), f"build_args.{arg}: 'ref' only exists on base images")
                continue
            try:
                value = field(fields, source)
            except KeyError:
                raise ValueError(f"build_args.{arg}: field {source!r} does not exist") from None
            _check(isinstance(value, str), f"build_args.{arg}: field {source!r} is not a scalar string")
            _check(source not in DESCRIPTIVE_FIELDS, f"build_args.{arg}: {source!r} is descriptive, not a pin")
        return self


class BaseImage(_Component):
    kind: Literal["base-image"]
    image: NonEmpty
    tag: NonEmpty
    digest: Annotated[str, Field(pattern=r"^(sha256:[0-9a-f]{64})?$", description='"" until pin_digests.py sets it')]

    @model_validator(mode="after")
    def _parses(self) -> BaseImage:
        parse_image_ref(image_ref(self.model_dump()))
        return self


class Pypi(_Component):
    kind: Literal["pypi"]
    package: Annotated[str, Field(pattern=PYPI_NAME.pattern)]
    version: str
    sha256: Annotated[str, Field(pattern=HEX64.pattern)] | None = None

    @field_validator("version")
    @classmethod
    def _pep440(cls, version: str) -> str:
        _check(PEP440_PUBLIC.match(version) is not None, "a public PEP 440 version")
        return version


class Git(_Component):
    kind: Literal["git"]
    repo: Annotated[str, Field(pattern=r"^https://")]
    commit: Annotated[str, Field(pattern=HEX40.pattern, description="a full 40-hex commit SHA")] | None = None
    tag: Annotated[str, Field(pattern=GIT_TAG.pattern)] | None = None

    @model_validator(mode="after")
    def _commit_or_ref_from(self) -> Git:
        _check((self.commit is None) != (self.ref_from is None), "pin a full commit, or name the field it follows with ref_from (not both)")
        return self


class _Download(_Component):
    """A file downloaded from a URL template and checked before it is used."""

    url: str
    version: NonEmpty

    @field_validator("url")
    @classmethod
    def _template(cls, url: str) -> str:
        _check(url.startswith("https://") and "{version}" in url, "an https:// URL template containing {version}")
        return url


class Tarball(_Download):
    kind: Literal["tarball"]
    gpg_fingerprint: Annotated[str, Field(pattern=GPG_FINGERPRINT.pattern, description="40 uppercase hex, no spaces")]
    sha256: Annotated[str, Field(pattern=r"^([0-9a-f]{64})?$")] = ""


class Binary(_Download):
    """A single executable downloaded by URL and checked against its published sha256 before it is installed."""

    kind: Literal["binary"]
    sha256: Annotated[str, Field(pattern=HEX64.pattern)]


class DistroPackage(_Component):
    kind: Literal["distro-package"]
    version: NonEmpty


Component = Annotated[BaseImage | Pypi | Git | Tarball | Binary | DistroPackage, Field(discriminator="kind")]


class ImageSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")
    dockerfile: NonEmpty
    context: NonEmpty
    description: NonEmpty
    target: str | None = None
    components: list[str] = Field(min_length=1)
    settings: dict[str, str] = {}

    @model_validator(mode="after")
    def _files_exist(self) -> ImageSpec:
        _check((REPO_ROOT / self.dockerfile).is_file(), f"dockerfile: {self.dockerfile} does not exist")
        _check((REPO_ROOT / self.context).is_dir(), f"context: {self.context} is not a directory")
        _check(
            Path(f"{REPO_ROOT / self.dockerfile}.dockerignore").is_file(),
            f"dockerfile: {self.dockerfile}.dockerignore is missing: the allow-list of what the build context may send",
        )
        if self.target is not None:
            stages = [stage.name for stage in dockerfile_stages((REPO_ROOT / self.dockerfile).read_text())]
            _check(self.target in stages, f"target: no stage {self.target!r} in {self.dockerfile} ({', '.join(stages)})")
        _check(len(set(self.components)) == len(self.components), "components: lists a component twice")
        for arg, value in self.settings.items():
            _check(ARG_NAME.match(arg) is not None, f"settings.{arg}: ARG names are UPPER_SNAKE_CASE")
            _check(value != "", f"settings.{arg}: a non-empty quoted string")
            _check(not re.search(r"\s", value) and not LATEST.search(value), f"settings.{arg}: no whitespace, no 'latest'")
        return self


class VersionsFile(BaseModel):
    """containers/versions.yaml. Field-level rules are declared above; what spans components and images
    (ref_from targets, ARGs fed twice, unused components) is checked here."""

    model_config = ConfigDict(extra="forbid")
    schema_version: Literal[1]
    components: dict[str, Component] = Field(min_length=1)
    images: dict[str, ImageSpec] = Field(min_length=1)
    not_installed: dict[str, NonEmpty] = {}

    @model_validator(mode="after")
    def _cross_references(self) -> VersionsFile:
        components = {name: c.model_dump(exclude_none=True) for name, c in self.components.items()}
        for name, component in components.items():
            _check(COMPONENT_NAME.match(name) is not None, f"components.{name}: component names are lower_snake_case")
            if "ref_from" in component:
                target, _, path = component["ref_from"].partition(".")
                _check(target in components, f"components.{name}.ref_from: unknown component {target!r}")
                try:
                    field(components[target], path)
                except KeyError:
                    raise ValueError(f"components.{name}.ref_from: {component['ref_from']!r} does not exist") from None
        used: set[str] = set()
        for image, spec in self.images.items():
            where = f"images.{image}.components"
            _check(IMAGE_NAME.match(image) is not None, f"images.{image}: image names are lower-kebab-case")
            seen_args: dict[str, str] = {}
            for name in spec.components:
                _check(name in components, f"{where}: unknown component {name!r}")
                for arg in components[name]["build_args"]:
                    _check(arg not in seen_args, f"{where}: ARG {arg} comes from both {seen_args.get(arg)} and {name}")
                    seen_args[arg] = name
                if "ref_from" in components[name]:
                    source = components[name]["ref_from"].split(".")[0]
                    _check(source in spec.components, f"{where}: {name} follows {source}, which the image does not list")
            _check(any(components[n]["kind"] == "base-image" for n in spec.components), f"{where}: needs a base-image component")
            for arg in spec.settings:
                _check(arg not in seen_args, f"images.{image}.settings.{arg}: already set by component {seen_args.get(arg)}")
            used.update(spec.components)
        unused = set(components) - used
        _check(not unused, f"components: not used by any image: {', '.join(sorted(unused))}")
        return self


def _message(error: Any) -> str:
    """One pydantic error as `<dotted path in versions.yaml>: <problem>` (the union's kind tag left out)."""
    loc = [p for p in error["loc"] if p not in KINDS]
    where = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in loc).lstrip(".")
    message = str(error["msg"]).removeprefix("Value error, ")
    if error["type"] == "union_tag_invalid":
        where, message = f"{where}.kind", f"must be one of {', '.join(KINDS)} (got {error['ctx']['tag']!r})"
    elif error["type"] == "extra_forbidden":
        message = "unknown top-level key" if len(loc) == 1 else "unknown key"
    elif error["type"] == "value_error":
        # Validators name the field they checked ("build_args.X: ..."): append it to the location.
        field_path, sep, rest = message.partition(": ")
        if sep and " " not in field_path:
            where, message = ".".join(p for p in (where, field_path) if p), rest
    return f"{where or 'versions.yaml'}: {message}"


def validate(doc: Any) -> None:
    """Raise VersionsError with the path of the first problem found."""
    try:
        VersionsFile.model_validate(doc)
    except ValidationError as exc:
        raise VersionsError(_message(exc.errors()[0])) from None


# --------------------------------------------------------------------------------------------------
# Dockerfile rules: every version comes in as an ARG without a default, fed from versions.yaml
# --------------------------------------------------------------------------------------------------

# A dotted number that is not part of a word, a path or a variable: 1.2, v2.19.6, 13.0.3-cudnn.
VERSION_LITERAL = re.compile(r"(?<![\w$./{-])v?\d+\.\d+(?:\.\d+)*")
VAR_REF = re.compile(r"^\$\{?(?P<name>[A-Za-z_][A-Za-z0-9_]*)\}?$")


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
    """Everything that makes a Dockerfile (the stages the image's target builds) disagree with versions.yaml. Empty list = clean."""
    whole, text = text, for_target(text, doc["images"][image].get("target"))
    problems: list[str] = []
    expected = build_args(doc, image)
    declared = dockerfile_args(text)
    for name, default in declared.items():
        if default is not None:
            problems.append(f"{where}: ARG {name} has a default ({default!r}); every ARG comes from build_args.py, without defaults")
        if name not in expected:
            problems.append(f"{where}: ARG {name} is not produced by build_args.py for {image} (add it to versions.yaml)")
    # Images built from one file with the same components share build args: each must be declared in some stage.
    declared_anywhere = dockerfile_args(whole)
    for name in expected:
        if name not in declared_anywhere:
            problems.append(f"{where}: build_args.py passes {name} but the Dockerfile never declares ARG {name}")

    base_args = {
        arg
        for component in doc["images"][image]["components"]
        for arg, source in doc["components"][component]["build_args"].items()
        if source == "ref"
    }
    stages: set[str] = set()
    for stage in dockerfile_stages(text):
        var = VAR_REF.match(stage.base)
        if var:
            if var.group("name") not in base_args:
                problems.append(f"{where}: FROM {stage.base}: only a base-image ARG from versions.yaml may be a FROM")
        elif stage.base.lower() not in stages:
            problems.append(f"{where}: FROM {stage.base}: base images come from versions.yaml (FROM ${{ARG}}) or an earlier stage")
        if stage.alias:
            stages.add(stage.alias.lower())
    # dockerfile-parse reads a heredoc's body as instructions (https://github.com/containerbuildsystem/dockerfile-parse/issues/145).
    for instruction in dockerfile_instructions(text):
        if instruction.keyword in ("RUN", "COPY", "ADD") and any(re.match(r"<<(?!<)", word) for word in instruction.rest.split()):
            problems.append(f"{where}:{instruction.line + 1}: a heredoc; versions.py's parser (dockerfile-parse) does not read them")
    problems.extend(lint_stage_args(text, set(expected), where=where))
    problems.extend(lint_text_for_pins(text, pinned_values(doc, image), where=where))
    problems.extend(lint_context(whole, doc, image, where=where))
    return problems


KIT_SCRIPT = re.compile(r"/opt/kit/([\w.-]+\.sh)\b")
REQUIRED_ENV = re.compile(r"\$\{([A-Z][A-Z0-9_]*):\?")
VAR_USE = re.compile(r"\$\{?([A-Z][A-Z0-9_]*)")


def lint_stage_args(text: str, build_arg_names: set[str], *, where: str, kit_dir: Path | None = None) -> list[str]:
    """A build arg is only visible in a stage that declares it: catch ${X} (or a kit script needing X) without ARG X.

    Kit scripts state their inputs as `: "${X:?...}"`; a RUN of /opt/kit/<script>.sh needs those ARGs in its stage.
    """
    kit = kit_dir or CONTAINERS_DIR / "kit"
    problems: list[str] = []
    for stage in dockerfile_stages(text):
        for instruction in stage.instructions:
            if instruction.keyword == "ARG":
                continue
            used = set(VAR_USE.findall(str(instruction))) & build_arg_names
            if instruction.keyword == "RUN":
                for script in KIT_SCRIPT.findall(instruction.rest):
                    path = kit / script
                    if path.is_file():
                        used |= set(REQUIRED_ENV.findall(path.read_text())) & build_arg_names
            for name in sorted(used - stage.args):
                problems.append(f"{where}: stage {stage.name} uses {name} without declaring ARG {name} in that stage (it would be empty)")
    return problems
