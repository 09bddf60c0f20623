"""The operator's path (runbooks/README.md, "The whole path") in the order that saves paid block time, with the
plan's own serving figures, and every `make` and `cdk` line as typed.

Before, the weights import (15-30 minutes on the system nodes) came after the GPU nodes joined, the rehearsal was
listed before the deploy it needs with a `cdk deploy -c profile=...` line that fails outside make (cdk is
node_modules/.bin's, and cdk.json runs the machine's python3), and `make bootstrap` appeared nowhere.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

from tests.conftest import plan_of

ROOT = Path(__file__).resolve().parent.parent
PATH_TABLE = (ROOT / "runbooks" / "README.md").read_text()


def steps() -> list[str]:
    section = PATH_TABLE.split("## The whole path", 1)[1].split("\n## ", 1)[0]
    return [line for line in section.splitlines() if re.match(r"\| \d+ \|", line)]


def first(words: str) -> int:
    return next(i for i, row in enumerate(steps()) if words in row)


def test_everything_that_needs_no_gpu_comes_before_the_block_starts():
    block_start = first("block start: nothing")
    for before in ("make bootstrap", "make rehearse", "pdkit capacity buy", "make deploy", "pdkit weights import", "pdkit weights verify"):
        assert first(before) < block_start, before
    assert first("make bootstrap") < first("make deploy")
    assert first("make images") <= first("make rehearse")
    assert first("make deploy") < first("pdkit weights import")


def test_each_step_says_how_long_it_takes():
    header = steps()[0]
    assert all(row.count("|") == header.count("|") for row in steps())
    takes = [row.split("|")[4].strip() for row in steps()]
    assert all(re.search(r"\d+ (min|h)", t) for t in takes), takes


def test_the_block_start_to_first_token_figures_are_the_plans():
    est = plan_of().estimates
    row = steps()[first("block start: nothing")]
    assert f"**{est.startup_budget_minutes:g} min** with warm compile caches" in row
    assert f"**{est.precompile_minutes + est.first_boot_budget_minutes:g} min** on the first boot" in row


def test_the_images_and_rehearsal_targets_run_what_the_runbook_says():
    """Real make, dry run: `make images` deploys the images stack (CDK adds its network dependency), `make rehearse`
    runs pdkit rehearse with the profile."""

    def dry(target: str) -> str:
        return subprocess.run(
            ["make", "-n", "-o", ".venv/.installed", "-o", "node_modules/.installed", target, "PROFILE=glm51-fp8-2p2d"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout

    assert "deploy --app cdk.out --require-approval broadening '*-images'" in dry("images")
    assert "pdkit rehearse --profile glm51-fp8-2p2d" in dry("rehearse")


def test_no_runbook_tells_the_operator_to_type_cdk_itself():
    """Outside make, `cdk` is not on PATH and cdk.json's `python3` is not the virtualenv's: every deploy goes through make."""
    for page in sorted((ROOT / "runbooks").glob("*.md")):
        text = page.read_text()
        fenced = re.findall(r"```(?:bash|sh)?\n(.*?)```", text, re.S)
        lines = [ln.strip() for block in fenced for ln in block.splitlines()]
        assert not [ln for ln in lines if ln.startswith(("cdk ", "npx cdk"))], page.name
        assert not re.findall(r"`cdk (?:deploy|synth|destroy|bootstrap) -c", text), page.name
