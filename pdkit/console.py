"""Terminal output for operators: tables, progress for long waits, JSON, and the typed confirmation prompt.

Data (tables, JSON) goes to stdout; progress goes to stderr so `--output json | jq` stays clean.
`interactive` and `ask` are the seams tests replace.
"""

from __future__ import annotations

import json
import re
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


# A command in backticks inside a cell (`pdkit nodes up --profile x`) moves below the table as a numbered line, so
# the terminal never folds it inside a cell, where a copy would paste it broken.
_COMMAND = re.compile(r"`((?:pdkit|make|aws|kubectl|cdk|helm) [^`]+)`")
# Each column border and its padding: "│ " before every column and " │" after the last (rich's default box).
_BORDER_PER_COLUMN = 3


def table(columns: Sequence[str], rows: Iterable[Sequence[object]], *, title: str | None = None, status_column: int | None = None) -> None:
    """Rows as a table in which no word breaks: ids, offering ids and ARNs stay whole, commands move below it as
    numbered lines, and when the words cannot fit the terminal's width each row is printed as `column: value` lines."""
    console = out()
    notes: list[str] = []

    def cell(value: object) -> str:
        def note(match: re.Match[str]) -> str:
            notes.append(match.group(1))
            return f"[{len(notes)}]"

        return _COMMAND.sub(note, str(value))

    body = [[cell(c) for c in row] for row in rows]
    widths = _widths(columns, body, console.width)
    if widths is None:
        _records(console, columns, body, title=title)
    else:
        t = Table(title=title, title_justify="left", header_style="bold", show_header=any(columns))
        fixed: list[int | None] = list(widths) if widths else [None] * len(columns)
        for name, width in zip(columns, fixed, strict=True):
            t.add_column(name, overflow="fold", width=width)
        for texts in body:
            # Text, not markup: AWS messages and ids may contain [brackets] that rich would swallow.
            cells = [Text(c) for c in texts]
            if status_column is not None:
                cells[status_column].stylize(STATUS_STYLE.get(texts[status_column], ""))
            t.add_row(*cells)
        console.print(t)
    for number, command in enumerate(notes, 1):
        console.print(f"[{number}] {command}", markup=False, highlight=False, soft_wrap=True)


def _widths(columns: Sequence[str], body: list[list[str]], available: int) -> list[int] | None:
    """Column widths in which no word is broken: each column starts at its longest line and gives up width, widest
    slack first, down to its longest word (header included). None when even the longest words cannot fit."""
    rows = [list(columns), *body]
    longest = [max((len(r[i]) for r in rows), default=1) or 1 for i in range(len(columns))]
    word = [max((len(w) for r in rows for w in r[i].split()), default=1) for i in range(len(columns))]
    room = available - _BORDER_PER_COLUMN * len(columns) - 1
    if sum(word) > room:
        return None
    widths = list(longest)
    while sum(widths) > room:
        slack = max(range(len(widths)), key=lambda i: widths[i] - word[i])
        widths[slack] -= 1
    return widths


def _records(console: Console, columns: Sequence[str], body: list[list[str]], *, title: str | None) -> None:
    """The narrow-terminal layout, never a word broken by rich: with headers, one block per row of `column: value`
    lines; without (a key-value table such as `capacity status`), one `key  value` line per row."""
    if title:
        console.print(title, markup=False, soft_wrap=True)
    if not any(columns):
        label = max((len(r[0]) for r in body), default=0)
        for key, *rest in body:
            console.print(f"  {key:<{label}}  {'  '.join(rest)}", markup=False, soft_wrap=True)
        return
    label = max(len(c) for c in columns)
    for row in body:
        console.print()
        for name, value in zip(columns, row, strict=True):
            console.print(f"  {name:<{label}}  {value}", markup=False, soft_wrap=True)


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
