"""Find and load deployment profiles: `NAME` resolves to config/NAME.yaml, anything else is a path.

`cdk synth -c profile=...` and `pdkit --profile ...` both come through here, so they agree; the
default is named once, in cdk.json's context ("profile").
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from pdkit.errors import MISSING, KitError, ProfileError
from pdkit.profile import FieldFix, Profile

ROOT = Path(__file__).resolve().parent.parent
CONFIG_DIR = ROOT / "config"
CDK_JSON = ROOT / "cdk.json"


def default_profile_name() -> str:
    try:
        return str(json.loads(CDK_JSON.read_text())["context"]["profile"])
    except (OSError, KeyError, ValueError) as exc:
        raise KitError(f"{CDK_JSON}: no context.profile ({exc}). Fix: restore cdk.json from the repository") from None


def available_profiles() -> list[str]:
    return sorted(p.stem for p in CONFIG_DIR.glob("*.yaml"))


def resolve(ref: str | None) -> Path:
    """A profile reference (name, path or None for the default) to an existing file."""
    ref = ref or default_profile_name()
    candidate = Path(ref).expanduser()
    if candidate.suffix in (".yaml", ".yml") or "/" in ref:
        if candidate.is_file():
            return candidate.resolve()
        raise KitError(
            f"profile file {ref!r} does not exist. Fix: check the path, or use a name from config/: {', '.join(available_profiles())}"
        )
    named = CONFIG_DIR / f"{ref}.yaml"
    if named.is_file():
        return named
    close = difflib.get_close_matches(ref, available_profiles(), n=1)
    hint = f"did you mean {close[0]!r}? " if close else ""
    raise KitError(
        f"no profile named {ref!r} in config/. Fix: {hint}use one of {', '.join(available_profiles())} or a path to a .yaml file"
    )


def load(ref: str | None) -> tuple[Profile, Path]:
    path = resolve(ref)
    try:
        raw = yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        raise KitError(f"{path}: not valid YAML{where}. Fix: check indentation and quoting there") from None
    if not isinstance(raw, dict):
        raise KitError(f"{path}: a profile is a YAML mapping (name:, aws:, capacity:, ...). Fix: start from config/glm51-fp8-2p2d.yaml")
    return parse(raw, source=str(path)), path


def parse(raw: dict[str, Any], *, source: str = "") -> Profile:
    try:
        return Profile.model_validate(raw)
    except ValidationError as exc:
        raise _first_error(exc, raw).with_source(source) from None


def _first_error(exc: ValidationError, raw: dict[str, Any]) -> ProfileError:
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
    if kind == "extra_forbidden":
        known = _known_fields(err["loc"][:-1])
        close = difflib.get_close_matches(str(err["loc"][-1]), known, n=1)
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
    return ProfileError(field, err["input"], err["msg"] + more, "see README, Profile reference, for the allowed values")


def _known_fields(loc: tuple[Any, ...]) -> list[str]:
    model: Any = Profile
    for part in loc:
        info = model.model_fields.get(str(part)) if hasattr(model, "model_fields") else None
        if info is None or not hasattr(info.annotation, "model_fields"):
            return []
        model = info.annotation
    return list(model.model_fields)
