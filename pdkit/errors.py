"""Errors an operator can fix. The CLI and app.py print them as one line, never a traceback."""

from __future__ import annotations

from typing import Any


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
        value = "(missing)" if self.value is _MISSING else repr(self.value)
        return f"{where}{self.field} = {value}: {self.problem}. Fix: {self.fix}"


class _Missing:
    def __repr__(self) -> str:
        return "(missing)"


_MISSING: Any = _Missing()
MISSING: Any = _MISSING
