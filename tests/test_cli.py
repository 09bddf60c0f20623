"""The pdkit CLI: fast start (no aws_cdk, no boto3 for local commands), text and JSON plans."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from pdkit.cli.main import main


def test_plan_text_names_what_an_operator_checks(capsys):
    assert main(["plan"]) == 0
    out = capsys.readouterr().out
    for words in ("4 x p5en.48xlarge in eu-south-2a", "16 EFA devices", "150 cross-node MoE messages per token", "placeholder"):
        assert words in out


def test_plan_json(capsys):
    assert main(["plan", "--output", "json", "--profile", "glm51-fp8-4p4d"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["instance_count"] == 8


def test_cli_never_imports_cdk_or_boto3_for_local_commands():
    """`pdkit` must start fast: aws_cdk (jsii + Node) costs seconds, boto3 ~0.3 s."""
    code = "import sys; from pdkit.cli.main import main; main(['plan']); print(sorted(m for m in ('aws_cdk', 'boto3', 'jsii') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip().endswith("[]")


def test_profile_is_accepted_before_or_after_the_command(capsys):
    assert main(["--profile", "glm51-fp8-4p4d", "plan", "--output", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["instance_count"] == 8
    assert main(["plan", "--profile", "glm51-fp8-4p4d", "--output", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["instance_count"] == 8
    assert main(["--profile", "glm51-fp8-4p4d", "plan", "--profile", "glm51-fp8-2p2d", "--output", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["instance_count"] == 4, "the command's own option wins"


def test_a_closed_stdout_pipe_is_one_line_and_a_non_zero_exit():
    """`pdkit plan --output json | head -c 5`: the reader goes away, the next write raises BrokenPipeError; one line on
    stderr and exit 1, and no second error from the interpreter's flush at exit (the Python docs' recipe,
    https://docs.python.org/3/library/signal.html#note-on-sigpipe). The pipe's read end is closed before the process
    starts, so its first write fails whatever the pipe buffer could hold (no race with a fast writer)."""
    import os

    read_end, write_end = os.pipe()
    os.close(read_end)
    try:
        done = subprocess.run(
            [sys.executable, "-m", "pdkit", "plan", "--output", "json"], stdout=write_end, stderr=subprocess.PIPE, text=True, check=False
        )
    finally:
        os.close(write_end)
    assert done.returncode == 1
    assert done.stderr == "pdkit: error: standard output closed before the command finished writing (a pipe such as `| head`)\n"


# Words an operator copies out of a table: a reservation, an offering, an instance, an ARN.
IDS = ("cr-0123456789abcdef0", "cb-0123456789abcdef0", "i-0123456789abcdef0", "arn:aws:iam::123456789012:role/pdkit-operators")


@pytest.mark.parametrize("width", range(80, 101, 5))
def test_no_id_or_command_breaks_inside_a_table_cell(monkeypatch, capsys, width):
    """At 80 to 100 columns (a laptop's split terminal) rich folded long words inside cells: an offering id over two
    lines cannot be pasted. Ids stay whole; backticked commands move below the table, one per line; and when the
    words cannot fit, each row becomes `column: value` lines."""
    from pdkit import console

    monkeypatch.setattr(console, "_PIPE_WIDTH", width)
    command = "pdkit capacity buy cb-0123456789abcdef0 --profile glm51-fp8-2p2d-tuned --aws-profile ops"
    console.table(
        ("offering", "AZ", "start", "end", "hours", "count", "upfront fee", "per instance-hour"),
        [(IDS[1], "eu-south-2a", "2026-12-05 11:30 UTC", "2026-12-07 11:30 UTC", 48, 4, "USD 98,765.43", "USD 514.40")],
    )
    console.table(
        ("check", "result", "detail", "fix"),
        [
            ("Capacity Block", "FAIL", f"reservation {IDS[0]} is expired; {IDS[2]} still runs", f"buy a new one: `{command}`"),
            ("Cluster access", "FAIL", f"{IDS[3]} has no access entry", "add it to cluster.admin_principal_arns"),
        ],
        status_column=1,
    )
    lines = capsys.readouterr().out.splitlines()
    # The table itself fits; a `column: value` line or a command line may be longer, printed whole for the terminal
    # to soft-wrap (a copy of it pastes as one line).
    assert all(len(line) <= width for line in lines if line[:1] in "┏┃┡│└")
    for word in IDS:
        assert any(word in line for line in lines), (word, "\n".join(lines))
    assert f"[1] {command}" in lines
    assert not any("`" in line for line in lines)


def test_a_table_that_fits_keeps_its_table_layout(monkeypatch, capsys):
    from pdkit import console

    monkeypatch.setattr(console, "_PIPE_WIDTH", 100)
    console.table(("", ""), [("reservation", IDS[0]), ("state", "active: instances can launch")])
    out = capsys.readouterr().out
    assert f"│ reservation │ {IDS[0]}" in out


def test_a_key_value_table_too_narrow_for_its_words_keeps_them_whole(monkeypatch, capsys):
    """`capacity status` prints a headerless key-value table; an ARN wider than the terminal allows stays one word."""
    from pdkit import console

    monkeypatch.setattr(console, "_PIPE_WIDTH", 40)
    console.table(("", ""), [("reservation", IDS[0]), ("admin", IDS[3])], title="Capacity Block")
    lines = capsys.readouterr().out.splitlines()
    assert lines == ["Capacity Block", f"  reservation  {IDS[0]}", f"  admin        {IDS[3]}"]
