"""The house rules of ARCHITECTURE.md: imports run downward between pdkit's layers, and no module uses
another module's private (`_name`) names.

The layers are import-linter contracts ([tool.importlinter] in pyproject.toml; `make lint` runs
`lint-imports` on the tree). These tests show the contracts fire on a copy of the tree with one upward
import added, and check the private-name rule, which import-linter has no contract for (ruff's
PLC2701 exempts first-party modules).
"""

from __future__ import annotations

import ast
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).parent / "lint-imports"


def _tree_copy(tmp_path: Path) -> Path:
    for part in ("pdkit", "stacks"):
        shutil.copytree(ROOT / part, tmp_path / part, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copyfile(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def _lint(tree: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(LINT_IMPORTS), "--no-cache"], cwd=tree, env={"PYTHONPATH": str(tree)}, capture_output=True, text=True, check=False
    )


def test_the_tree_keeps_its_layers(tmp_path: Path) -> None:
    result = _lint(_tree_copy(tmp_path))
    assert result.returncode == 0, result.stdout[-3000:]


@pytest.mark.parametrize(
    ("module", "line", "contract"),
    [
        ("pdkit/model/catalog.py", "from pdkit.ops import capacity", "pdkit layers"),
        ("pdkit/render/ami.py", "from pdkit.cli import context", "pdkit layers"),
        ("pdkit/pods/staging.py", "from pdkit.errors import KitError", "pods run in the images"),
        ("pdkit/render/node_config.py", "import boto3", "no AWS or Kubernetes clients"),
        ("pdkit/model/plan.py", "import aws_cdk", "pdkit has no CDK imports"),
        ("stacks/kit.py", "from pdkit.cli import main", "stacks render the plan"),
    ],
)
def test_an_import_against_the_layers_is_refused(tmp_path: Path, module: str, line: str, contract: str) -> None:
    tree = _tree_copy(tmp_path)
    target = tree / module
    target.write_text(target.read_text() + f"\n{line}\n")
    result = _lint(tree)
    assert result.returncode != 0, f"{line!r} in {module} passed the contracts"
    broken = result.stdout.split("Broken contracts", 1)[-1]
    assert contract in broken.replace("\n", " "), result.stdout[-2000:]


def _private_uses(path: Path) -> list[str]:
    """`from pdkit.x import _y` and `x._y` on a name bound to an imported pdkit module."""
    tree = ast.parse(path.read_text())
    modules: set[str] = set()
    found: list[str] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "pdkit":
            for alias in node.names:
                if alias.name.startswith("_") and not alias.name.startswith("__"):
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: from {node.module} import {alias.name}")
                modules.add(alias.asname or alias.name)
        elif isinstance(node, ast.Import):
            modules |= {alias.asname or alias.name for alias in node.names if alias.name.split(".")[0] == "pdkit"}
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.value, ast.Name)
            and node.value.id in modules
            and node.attr.startswith("_")
            and not node.attr.startswith("__")
        ):
            found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {node.value.id}.{node.attr}")
    return found


def test_no_module_uses_another_modules_private_names() -> None:
    files = [*sorted((ROOT / "pdkit").rglob("*.py")), *sorted((ROOT / "stacks").rglob("*.py")), ROOT / "app.py"]
    found = [use for path in files for use in _private_uses(path)]
    assert not found, "make these names public (or move the code to where it is used):\n" + "\n".join(found)


def test_the_private_name_check_can_fail(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text("from pdkit.functions import reservation_guard\nfrom pdkit.model.plan import _role\nreservation_guard._x()\n")
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    assert len(_private_uses(probe)) == 2
