"""`pdkit` imports only what the chosen command needs (pdkit.cli.commands.COMMANDS, after pip's command table).

`pdkit --help` is the first thing an operator runs, and every command's startup is paid on each call of a
scripted runbook. The time itself is measured by `make bench` (benchmarks/bench.py --cli-only: `pdkit --help`
against a bare start of the same interpreter, goal within 0.1 s); these tests pin the property that keeps it
there: which modules a command line imports.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from pdkit.cli import commands
from pdkit.cli.main import build_parser, main

# The profile model and its validation (pydantic, PyYAML) cost about 0.13 s to import; no help needs them.
HEAVY = ("pydantic", "yaml", "pdkit.model.plan", "pdkit.model.profile", "pdkit.deployment", "boto3", "botocore")


def imported_after(argv: list[str]) -> set[str]:
    """The modules a fresh interpreter holds after `pdkit ARGV` (help exits through SystemExit)."""
    code = (
        "import json, sys\nfrom pdkit.cli.main import main\n"
        f"try:\n    main({argv!r})\nexcept SystemExit:\n    pass\n"
        "print(json.dumps(sorted(sys.modules)))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return set(json.loads(out.strip().splitlines()[-1]))


def command_modules(modules: set[str]) -> set[str]:
    return {m.removeprefix("pdkit.cli.commands.") for m in modules if m.startswith("pdkit.cli.commands.")}


def test_top_level_help_imports_no_command_module_and_no_profile_model():
    """The list of commands comes from the table alone: 0.17 s before, when every command module and, through
    them, the plan and pydantic were imported to print it."""
    loaded = imported_after(["--help"])
    assert command_modules(loaded) == set()
    assert [m for m in HEAVY if m in loaded] == []


@pytest.mark.parametrize(("argv", "module"), [(["plan", "--help"], "plan"), (["--profile", "x", "capacity", "buy", "--help"], "capacity")])
def test_a_command_imports_its_own_module_only(argv, module):
    loaded = imported_after(argv)
    assert command_modules(loaded) == {module}
    assert [m for m in HEAVY if m in loaded] == []


def test_top_level_help_lists_every_command_with_its_table_summary(capsys):
    with pytest.raises(SystemExit):
        main(["--help"])
    text = " ".join(capsys.readouterr().out.split())
    for name, command in commands.COMMANDS.items():
        assert f"{name} {command.summary}" in text, name


def test_each_module_registers_the_command_the_table_names_with_the_table_summary():
    """The table and the modules cannot drift: each module registers exactly its table name, in table order."""
    sub = build_parser()._subparsers._group_actions[0]  # the full parser, every module registered
    assert list(sub.choices) == list(commands.COMMANDS)
    assert {a.dest: a.help for a in sub._choices_actions} == {n: c.summary for n, c in commands.COMMANDS.items()}


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["plan"], "plan"),
        (["--profile", "capacity", "plan"], "plan"),  # the value of --profile is not a command
        (["--aws-profile", "ops", "--region", "eu-south-2", "nodes", "up"], "nodes"),
        (["--profile=capacity", "status"], "status"),
        (["-h"], None),
        ([], None),
        (["--", "smoke"], "smoke"),
    ],
)
def test_the_chosen_command_is_found_past_the_global_options(argv, expected):
    assert commands.chosen(argv) == expected


def test_an_unknown_command_is_answered_with_every_real_choice(capsys):
    with pytest.raises(SystemExit) as exit_:
        main(["nosuch"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "invalid choice: 'nosuch'" in err
    for name in commands.COMMANDS:
        assert f"'{name}'" in err


def test_a_chosen_command_runs_its_handler(capsys):
    """Registering only the chosen command still runs it in full (plan needs no AWS)."""
    assert main(["plan", "--output", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["name"]
