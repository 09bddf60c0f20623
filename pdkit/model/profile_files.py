"""Find and load deployment profiles: `NAME` resolves to deployments/NAME.yaml (an operator's own, from `pdkit init`)
or else config/NAME.yaml (shipped), anything else is a path.

`cdk synth -c profile=...` and `pdkit --profile ...` both come through here, so they agree; the
default is named once, in cdk.json's context ("profile"). A broken file of any kind (not text, too
large, duplicate keys, an alias bomb, a value out of range) ends in one line naming the file or the
field and the fix.
"""

from __future__ import annotations

import codecs
import difflib
import json
import stat
from pathlib import Path
from typing import Any, cast

import annotated_types
import yaml
from pydantic import ValidationError
from pydantic.fields import FieldInfo
from yaml._yaml import CParser  # libyaml, bundled in PyYAML's wheels
from yaml.composer import Composer
from yaml.constructor import SafeConstructor
from yaml.resolver import Resolver

from pdkit.errors import MISSING, KitError, ProfileError, clip, one_line, short
from pdkit.model.profile import FieldFix, Profile

ROOT = Path(__file__).resolve().parents[2]
CONFIG_DIR = ROOT / "config"
# An operator's own profiles (`pdkit init`): not tracked (.gitignore), found by name before config/.
OWN_DIR = ROOT / "deployments"
CDK_JSON = ROOT / "cdk.json"

# The shipped profiles are ~2 KB and ~100 YAML nodes; these bounds are far above that and far below
# what hurts. Aliases count every time they are used: PyYAML shares the aliased objects, but
# validation and error messages walk them once per use (a billion-laughs file under `description:`
# took 49 s and 2.5 GB before a MemoryError). https://en.wikipedia.org/wiki/Billion_laughs_attack
MAX_BYTES = 1 << 20
MAX_NODES = 5_000
MAX_DEPTH = 32


def default_profile_name() -> str:
    try:
        return str(json.loads(CDK_JSON.read_text())["context"]["profile"])
    except (OSError, KeyError, ValueError) as exc:
        raise KitError(f"{CDK_JSON}: no context.profile ({exc}). Fix: restore cdk.json from the repository") from None


def available_profiles() -> list[str]:
    return sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))


def resolve(ref: str | None) -> Path:
    """A profile reference (name, path or None for the default) to an existing regular file."""
    ref = ref or default_profile_name()
    candidate = Path(ref).expanduser()
    if candidate.suffix in (".yaml", ".yml") or "/" in ref:
        if candidate.is_file():
            return candidate.resolve()
        if candidate.is_dir():
            raise KitError(f"profile {ref!r} is a directory. Fix: pass the .yaml file inside it, e.g. {ref.rstrip('/')}/<name>.yaml")
        if candidate.exists():
            raise KitError(
                f"profile {ref!r} is not a regular file (a pipe or device?). Fix: save the profile to a .yaml file and pass that"
            )
        raise KitError(
            f"profile file {ref!r} does not exist. Fix: check the path, or use a name from config/: {', '.join(available_profiles())}"
        )
    for folder in (OWN_DIR, CONFIG_DIR):
        named = folder / f"{ref}.yaml"
        if named.is_file():
            return named
    close = difflib.get_close_matches(ref, available_profiles(), n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise KitError(
        f"no profile named {short(ref)} in config/. Fix: {hint}use one of {', '.join(available_profiles())} or a path to a .yaml file"
    )


def load(ref: str | None) -> tuple[Profile, Path]:
    path = resolve(ref)
    return parse_text(_read_text(path), source=str(path)), path


def parse_text(text: str, *, source: str) -> Profile:
    """A profile from its YAML text, through the same bounded loader and validation as a file."""
    path = source
    try:
        loader = _ProfileLoader(text)
        try:
            raw = loader.get_single_data()
        finally:
            loader.dispose()
    except _Refused as exc:
        raise KitError(f"{path}: {exc.problem}{_at(exc.mark)}. Fix: {exc.fix}") from None
    except yaml.YAMLError as exc:
        raise KitError(f"{path}: {_yaml_problem(exc, text)}") from None
    if not isinstance(raw, dict):
        raise KitError(f"{path}: a profile is a YAML mapping (name:, aws:, capacity:, ...). Fix: start from config/glm51-fp8-2p2d.yaml")
    return parse(raw, source=source)


def _read_text(path: Path) -> str:
    """The file as UTF-8 text, refusing what is not a small text file before parsing it."""
    try:
        info = path.stat()
        if not stat.S_ISREG(info.st_mode):
            raise KitError(f"{path}: not a regular file. Fix: save the profile to a .yaml file and pass that")
        if info.st_size > MAX_BYTES:
            raise KitError(
                f"{path}: {info.st_size} bytes; a profile is a few KB (limit {MAX_BYTES}). Fix: pass the profile file, not a data file"
            )
        with path.open("rb") as f:
            data = f.read(MAX_BYTES + 1)
    except OSError as exc:
        raise KitError(f"{path}: cannot read it ({exc.strerror}). Fix: check the file's permissions") from None
    if len(data) > MAX_BYTES:
        raise KitError(f"{path}: over {MAX_BYTES} bytes; a profile is a few KB. Fix: pass the profile file, not a data file")
    if data.startswith((codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE)):
        raise KitError(f"{path}: UTF-16 text. Fix: save it as UTF-8 (e.g. `iconv -f UTF-16 -t UTF-8`)")
    if b"\0" in data:
        raise KitError(f"{path}: a binary file, not YAML text. Fix: pass the profile's .yaml file (start from config/glm51-fp8-2p2d.yaml)")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = data[: exc.start].count(b"\n") + 1
        raise KitError(
            f"{path}: not UTF-8 text (byte 0x{data[exc.start]:02x} at line {line}). Fix: save it as UTF-8 (e.g. `iconv -f LATIN1 -t UTF-8`)"
        ) from None


def _yaml_problem(exc: yaml.YAMLError, text: str) -> str:
    """PyYAML's own words for where and what, with the fix for that kind of error."""
    if isinstance(exc, yaml.reader.ReaderError):
        line = text.encode()[: exc.position].count(b"\n") + 1  # libyaml counts bytes of the UTF-8 text
        return (
            f"control character U+{exc.character:04X} at line {line}, not allowed in YAML. Fix: delete it (it is invisible in most editors)"
        )
    mark = getattr(exc, "problem_mark", None)
    said = [str(part) for part in (getattr(exc, "context", None), getattr(exc, "problem", None)) if part]
    what = f": {one_line(clip(': '.join(said), 120))}" if said else ""
    if isinstance(exc, yaml.constructor.ConstructorError):
        fix = "quote the value to keep it as text, and use no !tags"
    elif "single document" in what:
        fix = "keep one document per file (remove the second `---`)"
    elif "undefined alias" in what:
        fix = "define the anchor (&name) before the alias (*name), or write the value out"
    elif "nesting depth" in what:
        fix = "a profile nests at most 4 levels; close the brackets"
    else:
        fix = "check indentation and quoting there"
    return f"not valid YAML{_at(mark)}{what}. Fix: {fix}"


def _at(mark: Any) -> str:
    return f" at line {mark.line + 1}" if mark is not None else ""


class _Refused(Exception):
    def __init__(self, problem: str, fix: str, mark: Any) -> None:
        super().__init__(problem)
        self.problem, self.fix, self.mark = problem, fix, mark


class _ProfileLoader(CParser, Composer, SafeConstructor, Resolver):
    """SafeLoader's constructor and resolver on libyaml's event parser, with a composer that refuses
    duplicate keys (PyYAML keeps the last one silently), bounds alias expansion and nesting, and turns
    a constructor's ValueError into a YAML error.

    libyaml scans in C and stops flow nesting at 1000 levels; PyYAML's pure-Python scanner looks ahead
    through every open bracket (seconds for a 1 MiB file of them, then a RecursionError in the composer).
    The YAML spec requires mapping keys to be unique: https://yaml.org/spec/1.2.2/#mapping
    PyYAML's SafeConstructor does not check it: https://github.com/yaml/pyyaml/issues/165
    """

    get_single_node = Composer.get_single_node  # CParser's own composes in C, past our checks

    def __init__(self, stream: str) -> None:
        CParser.__init__(self, stream)
        Composer.__init__(self)
        SafeConstructor.__init__(self)
        Resolver.__init__(self)
        self._expanded: dict[int, int] = {}  # id(node) -> nodes it stands for when every alias is expanded
        self._nodes = 0
        self._depth = 0

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            event: Any = self.peek_event()
            target = self.anchors.get(event.anchor)
            if target is not None and id(target) not in self._expanded:
                raise _Refused(
                    f"alias *{event.anchor} is used inside its own anchor",
                    "replace the alias with the values it stands for",
                    event.start_mark,
                )
            shared = super().compose_node(parent, index)
            self._count(self._expanded[id(shared)], event.start_mark)
            return shared
        self._depth += 1
        if self._depth > MAX_DEPTH:
            raise _Refused(
                f"nested deeper than {MAX_DEPTH} levels",
                "a profile nests at most 4 levels; flatten it",
                cast(Any, self.peek_event()).start_mark,
            )
        node = cast(yaml.Node, super().compose_node(parent, index))  # None only at the end of a stream, never mid-document
        self._depth -= 1
        if isinstance(node, yaml.MappingNode):
            children = [n for pair in node.value for n in pair]
        else:
            children = node.value if isinstance(node, yaml.SequenceNode) else []
        # A long string weighs one value per 256 characters, so aliasing it cannot multiply it either.
        own = 1 + len(node.value) // 256 if isinstance(node, yaml.ScalarNode) else 1
        self._expanded[id(node)] = own + sum(self._expanded[id(child)] for child in children)
        self._count(own, node.start_mark)
        return node

    def _count(self, nodes: int, mark: Any) -> None:
        self._nodes += nodes
        if self._nodes > MAX_NODES:
            raise _Refused(
                f"expands to more than {MAX_NODES} YAML values (each use of an alias counts again); a profile has about 100",
                "remove the anchors (&name) and aliases (*name) or the repeated data",
                mark,
            )

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen: dict[Any, Any] = {}
        for key_node, _ in node.value:
            if key_node.tag == "tag:yaml.org,2002:merge" or not isinstance(key_node, yaml.ScalarNode):
                continue
            key = self.construct_object(key_node, deep=True)
            if key in seen:
                raise _Refused(
                    f"duplicate key {short(key)} at lines {seen[key].line + 1} and {key_node.start_mark.line + 1} (YAML keeps only the last)",
                    "keep one of them",
                    None,
                )
            seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)

    def construct_object(self, node: yaml.Node, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, OverflowError) as exc:
            # e.g. a date like 2026-13-45, or an integer beyond Python's 4300-digit limit
            # (https://docs.python.org/3/library/stdtypes.html#int-max-str-digits)
            raise yaml.constructor.ConstructorError(None, None, f"cannot read this value ({clip(str(exc), 60)})", node.start_mark) from None


def parse(raw: dict[str, Any], *, source: str = "") -> Profile:
    try:
        return Profile.model_validate(raw)
    except ValidationError as exc:
        raise _first_error(exc).with_source(source) from None


def _first_error(exc: ValidationError) -> ProfileError:
    errors = exc.errors()
    err = errors[0]
    field = ".".join(str(p) for p in err["loc"])
    more = f" (and {len(errors) - 1} more problem{'s' if len(errors) > 2 else ''})" if len(errors) > 1 else ""
    kind = err["type"]
    cause = (err.get("ctx") or {}).get("error")
    if isinstance(cause, FieldFix):
        return ProfileError(field, err["input"], cause.problem + more, cause.fix)
    if kind == "missing":
        return ProfileError(field, MISSING, "required field is missing" + more, f"add `{err['loc'][-1]}:` (see README, Profile reference)")
    if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        info = _field_info(err["loc"])
        bound = bound_text(info) if info else None
        if bound:
            return ProfileError(field, err["input"], f"must be {bound}" + more, f"use a value {bound}")
    if kind == "extra_forbidden":
        known = _known_fields(err["loc"][:-1])
        key = str(err["loc"][-1])
        close = difflib.get_close_matches(key, known, n=1) if len(key) <= 64 else []
        fix = f"did you mean {close[0]!r}?" if close else f"remove it; known fields here: {', '.join(known)}"
        return ProfileError(field, err["input"], "unknown field" + more, fix)
    if kind == "literal_error":
        return ProfileError(field, err["input"], "not an allowed value" + more, f"use {err['ctx']['expected']}")
    expected = {
        "int_parsing": "a whole number",
        "int_type": "a whole number",
        "int_from_float": "a whole number",
        "float_parsing": "a number",
        "float_type": "a number",
        "bool_parsing": "true or false",
        "bool_type": "true or false",
        "string_type": "a string (quote it)",
        "model_type": "a mapping of fields",
        "dict_type": "a mapping of fields",
        "tuple_type": "a list",
        "list_type": "a list",
        "ip_v4_network": "an IPv4 CIDR like 10.0.0.0/16",
        "datetime_from_date_parsing": "an ISO 8601 time like 2026-12-01T11:30:00Z",
        "datetime_parsing": "an ISO 8601 time like 2026-12-01T11:30:00Z",
    }.get(kind)
    if expected:
        return ProfileError(field, err["input"], f"wrong type, expected {expected}" + more, f"write {field} as {expected}")
    return ProfileError(field, err["input"], clip(err["msg"], 120) + more, "see README, Profile reference, for the allowed values")


def _known_fields(loc: tuple[Any, ...]) -> list[str]:
    model = _model_at(loc)
    return list(model.model_fields) if model else []


def _model_at(loc: tuple[Any, ...]) -> Any:
    """The section model at a location of the profile (roles.decode -> Role), or None."""
    model: Any = Profile
    for part in loc:
        info = model.model_fields.get(str(part))
        if info is None:
            return None
        model = _section_type(info)
        if model is None:
            return None
    return model


def _section_type(info: FieldInfo) -> Any:
    candidates = [info.annotation, *getattr(info.annotation, "__args__", ())]  # Optional[Section] too
    return next((t for t in candidates if hasattr(t, "model_fields")), None)


def _field_info(loc: tuple[Any, ...]) -> FieldInfo | None:
    model = _model_at(loc[:-1])
    info: FieldInfo | None = model.model_fields.get(str(loc[-1])) if model else None
    return info


def bound_text(info: FieldInfo) -> str | None:
    """The numeric range a field accepts, as the error and README state it: "in (0.3, 0.96)", ">= 1"."""
    low: tuple[str, Any] | None = None
    high: tuple[str, Any] | None = None
    for rule in info.metadata:
        if isinstance(rule, annotated_types.Gt):
            low = ("(", rule.gt)
        elif isinstance(rule, annotated_types.Ge):
            low = ("[", rule.ge)
        elif isinstance(rule, annotated_types.Lt):
            high = (")", rule.lt)
        elif isinstance(rule, annotated_types.Le):
            high = ("]", rule.le)
    whole = int in (info.annotation, *getattr(info.annotation, "__args__", ()))
    if whole:  # whole numbers: state the first and last allowed value, not an open bound
        if low and low[0] == "(":
            low = ("[", int(low[1]) + 1)
        if high and high[0] == ")":
            high = ("]", int(high[1]) - 1)
    if low and high:
        return f"in {low[0]}{low[1]}, {high[1]}{high[0]}"
    if low:
        return f"{'>' if low[0] == '(' else '>='} {low[1]}"
    if high:
        return f"{'<' if high[0] == ')' else '<='} {high[1]}"
    return None
