"""Terminal output for operators: tables, progress for long waits, JSON, and the typed confirmation prompt.

Data (tables, JSON) goes to stdout; progress goes to stderr so `--output json | jq` stays clean.
`interactive` and `ask` are the seams tests replace.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Sequence
from datetime import datetime, timedelta
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

# Without a terminal rich assumes 80 columns and wraps table cells; logs and CI read better unwrapped.
_PIPE_WIDTH = 200
STATUS_STYLE = {"PASS": "green", "OK": "green", "WARN": "yellow", "WAIT": "yellow", "FAIL": "bold red"}


def out(*, stderr: bool = False) -> Console:
    console = Console(stderr=stderr, highlight=False)
    if not console.is_terminal:
        console = Console(stderr=stderr, highlight=False, width=_PIPE_WIDTH)
    return console


def say(text: str = "", *, stderr: bool = False) -> None:
    out(stderr=stderr).print(text, markup=False, soft_wrap=True)


def table(columns: Sequence[str], rows: Iterable[Sequence[object]], *, title: str | None = None, status_column: int | None = None) -> None:
    t = Table(title=title, title_justify="left", header_style="bold", show_header=any(columns))
    for name in columns:
        t.add_column(name, overflow="fold")
    for row in rows:
        # Text, not markup: AWS messages and ids may contain [brackets] that rich would swallow.
        cells = [Text(str(c)) for c in row]
        if status_column is not None:
            cells[status_column].stylize(STATUS_STYLE.get(str(row[status_column]), ""))
        t.add_row(*cells)
    out().print(t)


def print_json(data: Any) -> None:
    print(json.dumps(data, indent=2, default=_json_default))


def _json_default(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def progress() -> Progress:
    """A progress display on stderr for waits (node groups scaling, updates)."""
    return Progress(
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=out(stderr=True),
    )


class _Said:
    def stop(self) -> None:
        return None


def waiting(text: str) -> Any:
    """Show that a call is still waiting: a spinner on a terminal, else one line on stderr. Returns a thing to `.stop()`."""
    console = out(stderr=True)
    if console.is_terminal:
        status = console.status(text)
        status.start()
        return status
    console.print(text, markup=False, soft_wrap=True)
    return _Said()


def interactive() -> bool:
    """True when a person can answer a prompt (stdin and stdout are terminals)."""
    return sys.stdin.isatty() and sys.stdout.isatty()


def ask(prompt: str) -> str:
    """The typed answer; EOFError at an end of input, which pdkit.cli.main answers in one line (nothing was done)."""
    return input(prompt)


def when(moment: datetime | None) -> str:
    return moment.strftime("%Y-%m-%d %H:%M UTC") if moment else "-"


def span(delta: timedelta) -> str:
    """A duration as an operator says it: '2 d 4 h', '3 h 12 min', '7 min'; negative means past."""
    seconds = int(delta.total_seconds())
    sign = "-" if seconds < 0 else ""
    seconds = abs(seconds)
    days, rest = divmod(seconds, 86400)
    hours, rest = divmod(rest, 3600)
    minutes = rest // 60
    if days:
        return f"{sign}{days} d {hours} h"
    if hours:
        return f"{sign}{hours} h {minutes} min"
    return f"{sign}{minutes} min"
