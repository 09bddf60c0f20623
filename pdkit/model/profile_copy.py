"""An operator's own deployment profile: a shipped profile's text with the operator's name, account, region, AZ
and admins written in, kept in deployments/ (untracked) instead of an edit of the tracked config/.

The copy is the shipped file's own text, comments and all, with only those lines changed, so it reads like the
profile it came from; the result is parsed back with the kit's loader, and a value that did not land where it was
meant to is refused before anything is written.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

import yaml

from pdkit.errors import KitError


@dataclass(frozen=True)
class Own:
    """What the operator fills in; None leaves the shipped value."""

    name: str
    account: str | None = None
    region: str | None = None
    availability_zone: str | None = None
    admin_principal_arns: Sequence[str] = ()


def copied(text: str, own: Own, *, source: str) -> str:
    """The shipped profile `text` with `own` written into it."""
    out = _set_top(text, "name", own.name)
    for key, value in (("account", own.account), ("region", own.region), ("availability_zone", own.availability_zone)):
        if value is not None:
            out = _set_nested(out, "aws", key, _scalar(value))
    if own.admin_principal_arns:
        out = _set_nested(out, "cluster", "admin_principal_arns", "[" + ", ".join(_scalar(a) for a in own.admin_principal_arns) + "]")
    header = f"# Made by `pdkit init {own.name} --from {source}` from config/{source}.yaml; yours to edit (deployments/ is not tracked).\n"
    out = header + out
    _check(out, own)
    return out


def _scalar(value: str) -> str:
    """A YAML double-quoted string: an account id stays a string (12 digits would read as a number)."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def _set_top(text: str, key: str, value: str) -> str:
    line = re.compile(rf"^{re.escape(key)}:.*$", re.M)
    if not line.search(text):
        raise KitError(f"the shipped profile has no top-level {key}: line to replace. Fix: restore config/ from the repository")
    return line.sub(lambda _m: f"{key}: {value}", text, count=1)


def _set_nested(text: str, section: str, key: str, value: str) -> str:
    """Replace `key:` inside the top-level `section:` block (two-space indent, as the shipped profiles are written),
    or add it as the section's first line."""
    lines = text.splitlines(keepends=True)
    start = next((i for i, ln in enumerate(lines) if re.match(rf"^{re.escape(section)}:\s*(#.*)?$", ln)), None)
    if start is None:
        return text + f"\n{section}:\n  {key}: {value}\n"
    end = next((i for i in range(start + 1, len(lines)) if lines[i].strip() and not lines[i].startswith((" ", "#"))), len(lines))
    for i in range(start + 1, end):
        if re.match(rf"^  {re.escape(key)}:", lines[i]):
            # A block list below the key (`  key:` then `    - ...`) goes with it.
            stop = next((j for j in range(i + 1, end) if not re.match(r"^    \S|^  - ", lines[j])), end)
            lines[i:stop] = [f"  {key}: {value}\n"]
            return "".join(lines)
    lines.insert(start + 1, f"  {key}: {value}\n")
    return "".join(lines)


def _check(text: str, own: Own) -> None:
    raw = yaml.safe_load(text)
    got = {
        "name": raw.get("name"),
        "aws.account": (raw.get("aws") or {}).get("account"),
        "aws.region": (raw.get("aws") or {}).get("region"),
        "aws.availability_zone": (raw.get("aws") or {}).get("availability_zone"),
        "cluster.admin_principal_arns": list((raw.get("cluster") or {}).get("admin_principal_arns") or []),
    }
    want = {
        "name": own.name,
        "aws.account": own.account,
        "aws.region": own.region,
        "aws.availability_zone": own.availability_zone,
        "cluster.admin_principal_arns": list(own.admin_principal_arns),
    }
    for key, value in want.items():
        if value not in (None, []) and got[key] != value:
            raise KitError(f"could not write {key} into the copy (it reads {got[key]!r}). Fix: copy the profile by hand and edit {key}")
