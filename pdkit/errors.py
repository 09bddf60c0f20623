"""Errors an operator can fix. The CLI and app.py print them as one line, never a traceback."""

from __future__ import annotations

import reprlib
from typing import Any

# A value quoted in an error is cut to this many characters: an alias bomb or a pasted blob under
# one field must still fit on one line (reprlib also stops at shared and self-referencing objects).
SHOWN_CHARS = 80
_SHORT = reprlib.Repr()  # keyword arguments need Python 3.12; the kit supports 3.11
_SHORT.maxlevel, _SHORT.maxdict, _SHORT.maxlist, _SHORT.maxtuple, _SHORT.maxset = 3, 4, 4, 4, 4
_SHORT.maxstring = _SHORT.maxother = SHOWN_CHARS
_SHORT.maxlong = 40


def short(value: Any, limit: int = SHOWN_CHARS) -> str:
    """repr(value) cut to `limit` characters, without ever expanding the whole value."""
    text = _SHORT.repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def clip(text: str, limit: int = SHOWN_CHARS) -> str:
    """Plain text (a parser's message, a key) cut to `limit` characters."""
    return text if len(text) <= limit else text[: limit - 3] + "..."


def one_line(text: str) -> str:
    """Never let a pasted value break the one-line contract (a quoted key may hold a newline)."""
    return " ".join(text.splitlines())


class KitError(Exception):
    """A problem with input (profile, argument, AWS state) that has a known fix."""


class ProfileError(KitError):
    """A profile value that cannot be deployed, with the field, the value and the fix."""

    def __init__(self, field: str, value: Any, problem: str, fix: str, *, source: str = "") -> None:
        self.field = field
        self.value = value
        self.problem = problem
        self.fix = fix
        self.source = source
        super().__init__(str(self))

    def with_source(self, source: str) -> ProfileError:
        return ProfileError(self.field, self.value, self.problem, self.fix, source=source)

    def __str__(self) -> str:
        where = f"{self.source}: " if self.source else ""
        value = "(missing)" if self.value is _MISSING else short(self.value)
        field = self.field if len(self.field) <= SHOWN_CHARS and self.field.isprintable() else short(self.field)
        return one_line(f"{where}{field} = {value}: {self.problem}. Fix: {self.fix}")


class _Missing:
    def __repr__(self) -> str:
        return "(missing)"


_MISSING: Any = _Missing()
MISSING: Any = _MISSING


class Interrupted(KitError):
    """The process was told to stop (a second Ctrl-C, SIGTERM, SIGHUP) while a purchase was with EC2 or being looked
    for: the CLI ends with exit 130 like any interrupt, after saying what was sent and how to find what it bought."""
