"""The README's profile reference matches the profile model: every field documented, none invented."""

from __future__ import annotations

import argparse
import contextlib
import io
import re
import shlex

from pydantic import BaseModel

from pdkit.cli.main import build_parser
from pdkit.model.profile import Profile
from pdkit.model.profile_files import ROOT


def _fields(model: type[BaseModel], prefix: str = "") -> set[str]:
    out = set()
    for name, info in model.model_fields.items():
        path = f"{prefix}{name}"
        annotation = info.annotation
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            out |= _fields(annotation, f"{path}.")
        else:
            out.add(path)
    return out


def _documented() -> str:
    readme = (ROOT / "README.md").read_text()
    return readme[readme.index("## Profile reference") : readme.index("### Placement group")]


def test_every_profile_field_is_in_the_readme():
    table = _documented()
    missing = []
    for path in sorted(_fields(Profile)):
        role_form = re.sub(r"^roles\.(prefill|decode)\.", "roles.*.", path)
        leaf = path.rsplit(".", 1)[-1]
        if (
            f"`{path}`" not in table
            and f"`{role_form}`" not in table
            and not (f"`{role_form.rsplit('.', 1)[0]}." in table and leaf in table)
        ):
            missing.append(path)
    assert missing == []


DOCS = [ROOT / "README.md", *sorted((ROOT / "runbooks").glob("*.md")), ROOT / "containers" / "README.md", ROOT / "ami" / "README.md"]


def test_relative_links_in_docs_resolve():
    broken = []
    for doc in DOCS:
        for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", doc.read_text()):
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (doc.parent / target).exists():
                broken.append(f"{doc.relative_to(ROOT)} -> {target}")
    assert broken == []


def test_make_targets_named_in_docs_exist():
    makefile = (ROOT / "Makefile").read_text() + "".join(p.read_text() for p in (ROOT / "mk").glob("*.mk"))
    targets = set(re.findall(r"^([a-zA-Z][\w-]*):", makefile, re.M))
    named = {t for doc in DOCS for t in re.findall(r"`make ([a-z][\w-]*)", doc.read_text())}
    assert named - targets == set()


# --- pdkit command lines in the docs ---------------------------------------------------------------------
# The convention (runbooks/README.md, "Commands in these runbooks"): a line in a fenced code block that runs
# `pdkit` is a command to copy, so the real parser must accept it whole. An inline `pdkit ...` span in prose
# is a mention: it may leave out required arguments, but the command and every --flag it names must exist.

COMMAND_DOCS = [ROOT / "README.md", *sorted((ROOT / "runbooks").glob("*.md"))]
_FENCE = re.compile(r"^\s*(```|~~~)")
_RUNS_PDKIT = re.compile(r"(^|[;&|]\s*)([A-Z_]+=\S+\s+)*(\$\s+)?(\.venv/bin/)?pdkit\s")
_OPERATORS = frozenset(";&|<>()")


def _fenced_lines(text: str) -> list[tuple[int, str]]:
    """(line number, line) of every fenced code line, with backslash continuations joined."""
    lines: list[tuple[int, str]] = []
    inside, pending, start = False, "", 0
    for number, line in enumerate(text.splitlines(), 1):
        if _FENCE.match(line):
            inside = not inside
            continue
        if not inside:
            continue
        if not pending:
            start = number
        pending = f"{pending} {line.strip()}".strip()
        if pending.endswith("\\"):
            pending = pending[:-1]
            continue
        lines.append((start, pending))
        pending = ""
    return lines


def _pdkit_argvs(command: str) -> list[list[str]]:
    """The arguments of each `pdkit` invocation in a shell line: env assignments, $(...), redirections, pipes,
    `&&` chains and comments handled the way the shell splits them."""
    if not _RUNS_PDKIT.search(command):
        return []
    lexer = shlex.shlex(re.sub(r"\$\([^)]*\)", "VALUE", command), posix=True, punctuation_chars=True)
    lexer.whitespace_split = True
    lexer.commenters = "#"
    segments: list[list[str]] = [[]]
    for token in lexer:
        if set(token) <= _OPERATORS:
            segments.append([])
        else:
            segments[-1].append(token)
    argvs = []
    for words in segments:
        while words and re.match(r"^[A-Z_]+=", words[0]):
            words = words[1:]
        if words and words[0] in ("pdkit", ".venv/bin/pdkit"):
            argvs.append(words[1:])
    return argvs


def _parse_error(argv: list[str]) -> str | None:
    """What the real parser says about argv (None when it accepts it). parse_args only: nothing runs."""
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
            build_parser().parse_args(argv)
    except SystemExit as exit_:
        return None if exit_.code == 0 else (err.getvalue().strip().splitlines() or ["refused"])[-1]
    return None


def _mention_error(argv: list[str]) -> str | None:
    """A mention names an existing command (`pdkit nodes`, `pdkit capacity buy`) and only flags it takes."""
    parser = top = build_parser()
    path: list[str] = []
    words = iter(w.strip("[]") for w in argv)
    for word in words:
        if word.startswith("-"):
            flag = word.split("=", 1)[0]
            action = parser._option_string_actions.get(flag) or top._option_string_actions.get(flag)
            if action is None:
                return f"`pdkit {' '.join(path)}` takes no {flag}"
            if action.nargs != 0 and "=" not in word:
                next(words, None)  # the flag's value
            continue
        subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
        if not subs:
            continue  # a positional value of the command
        if word not in subs[0].choices:
            return f"`pdkit {' '.join(path)}` has no command {word!r} (choose from {', '.join(subs[0].choices)})"
        parser = subs[0].choices[word]
        path.append(word)
    return None if path else "names no command"


def _commands() -> tuple[list[tuple[str, list[str]]], list[tuple[str, list[str]]]]:
    commands, mentions = [], []
    for doc in COMMAND_DOCS:
        text = doc.read_text()
        name = doc.relative_to(ROOT)
        for number, line in _fenced_lines(text):
            commands += [(f"{name}:{number}", argv) for argv in _pdkit_argvs(line)]
        for match in re.finditer(r"`(pdkit [^`]*)`", text):
            number = text[: match.start()].count("\n") + 1
            mentions += [(f"{name}:{number}", argv) for argv in _pdkit_argvs(match.group(1))]
    return commands, mentions


def test_every_pdkit_command_line_in_the_docs_is_real():
    """Each fenced `pdkit` line goes through pdkit.cli.main's real parser (argparse parse_args, no handler runs):
    a flag renamed in the code, a missing required argument or a bad choice fails here, not on the operator.
    Inline `pdkit ...` spans in prose may leave out arguments, but not invent commands or flags."""
    commands, mentions = _commands()
    assert len(commands) >= 25, "the runbooks hold the deploy-to-report path as fenced commands"
    assert len(mentions) >= 80
    refused = [f"{where}: pdkit {' '.join(argv)} -> {error}" for where, argv in commands if (error := _parse_error(argv))]
    wrong = [f"{where}: `pdkit {' '.join(argv)}`: {error}" for where, argv in mentions if (error := _mention_error(argv))]
    assert refused + wrong == []
