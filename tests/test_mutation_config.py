"""`make mutation`'s configuration agrees with itself (tests/mutation/score.py, [tool.mutmut] in pyproject.toml,
mk/mutation.mk, tests/mutation/equivalent.toml): a module renamed in one place but not the others would be
mutated without killers, or scored without being mutated, and nobody would notice until the slow run."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import re
import subprocess
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _score():
    spec = importlib.util.spec_from_file_location("mutation_score", ROOT / "tests" / "mutation" / "score.py")
    assert spec
    assert spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _make_list(name: str) -> list[str]:
    text = (ROOT / "mk" / "mutation.mk").read_text().replace("\\\n", " ")
    match = re.search(rf"^{name} := (.*)$", text, re.MULTILINE)
    assert match, f"{name} not in mk/mutation.mk"
    return match.group(1).split()


MUTMUT = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mutmut"]
MODULES = _score().MODULES


def test_the_mutated_files_are_the_scored_modules_and_the_ones_make_runs():
    assert sorted(MUTMUT["only_mutate"]) == sorted(m.replace(".", "/") + ".py" for m in MODULES)
    assert _make_list("MUTATION_MODULES") == list(MODULES)


def test_the_pytest_selection_is_every_modules_killers_and_each_exists():
    killers = {f for files in MODULES.values() for f in files}
    assert set(MUTMUT["pytest_add_cli_args_test_selection"]) == killers
    assert [f for f in sorted(killers) if not (ROOT / f).is_file()] == []


def test_every_plan_function_under_mutation_is_a_function_of_the_plan():
    """mutmut names a mutant of `_build` `x__build__mutmut_N`: a name that no longer exists selects nothing."""
    tree = ast.parse((ROOT / "pdkit" / "model" / "plan.py").read_text())
    functions = {node.name for node in tree.body if isinstance(node, ast.FunctionDef)}
    assert [f for f in _make_list("PLAN_FUNCTIONS") if f not in functions] == []


def test_every_listed_equivalent_has_a_reason_and_belongs_to_a_scored_module():
    score = _score()
    listed = tomllib.loads((ROOT / "tests" / "mutation" / "equivalent.toml").read_text())["mutant"]
    names: list[str] = []
    for entry in listed:
        assert len(entry.get("reason", "")) > 20, entry
        assert ("name" in entry) != ("names" in entry), entry
        names += entry.get("names", [entry.get("name")])
    assert len(names) == len(set(names)), "a mutant is listed twice"
    assert {score.module_of(n) for n in names} <= set(MODULES)


def _one_module_run(tmp_path: Path, codes: dict[str, int | None]) -> Path:
    """A mutants/ directory as `make mutation MODULE=pdkit.model.reservation` leaves it from scratch: mutmut's
    .meta file (exit_code_by_key, durations_by_key) for that module only."""
    meta = tmp_path / "mutants" / "pdkit" / "model" / "reservation.py.meta"
    meta.parent.mkdir(parents=True)
    meta.write_text(json.dumps({"exit_code_by_key": codes, "durations_by_key": dict.fromkeys(codes, 0.1)}))
    return tmp_path / "mutants"


def test_a_one_module_run_is_scored_on_that_module_alone(tmp_path, capsys):
    """MODULE=x judged the other eleven modules too, unrun (0%), so a fresh one-module run always failed."""
    score = _score()
    names = [f"pdkit.model.reservation.x_drain_at__mutmut_{i}" for i in range(1, 11)]
    mutants = _one_module_run(tmp_path, dict.fromkeys(names, 1))
    args = ["--mutants", str(mutants), "--equivalent", str(tmp_path / "none.toml"), "--fail-under", "90"]
    assert score.main([*args, "--module", "pdkit.model.reservation"]) == 0
    assert "pdkit.ops.purchase" not in capsys.readouterr().out
    assert score.main(args) == 1
    survivor = _one_module_run(tmp_path / "b", dict.fromkeys(names, 1) | {names[0]: 0, names[1]: 0})
    args[1] = str(survivor)
    assert score.main([*args, "--module", "pdkit.model.reservation"]) == 1
    assert f"survived (or timed out): {names[0]}" in capsys.readouterr().out


def test_a_module_name_not_under_mutation_is_refused_before_mutmut_runs(tmp_path, capsys):
    """A typo selected no mutant and mutmut ran its statistics for nothing; both make and the score name the choices."""
    assert _score().main(["--module", "pdkit.ops.purchas"]) == 2
    assert "one of: pdkit.ops.purchase," in capsys.readouterr().err
    env = {k: v for k, v in os.environ.items() if k not in {"MAKEFLAGS", "MAKELEVEL", "MFLAGS"}}
    # -o: take the installs as they are (this runs inside `make test`, after them).
    made = subprocess.run(
        ["make", "--no-print-directory", "-o", ".venv/.installed", "-o", "node_modules/.installed", "mutation", "MODULE=pdkit.ops.purchas"],
        capture_output=True,
        text=True,
        env=env,
        cwd=ROOT,
        check=False,
    )
    assert made.returncode == 2
    assert "MODULE=pdkit.ops.purchas is not under mutation; one of: pdkit.ops.purchase" in made.stderr
    assert "mutmut" not in made.stdout


def test_a_one_module_run_calls_no_other_modules_equivalent_stale(tmp_path, capsys):
    """A fresh one-module run has no results for the other modules: their listed equivalents are not stale."""
    score = _score()
    mutants = _one_module_run(tmp_path, {"pdkit.model.reservation.x_drain_at__mutmut_1": 1})
    listed = tmp_path / "equivalent.toml"
    listed.write_text('[[mutant]]\nname = "pdkit.ops.purchase.x_buy__mutmut_1"\nreason = "a reason long enough to be one"\n')
    args = ["--mutants", str(mutants), "--equivalent", str(listed)]
    score.main([*args, "--module", "pdkit.model.reservation"])
    assert "no longer generates" not in capsys.readouterr().out
    score.main(args)
    assert "lists pdkit.ops.purchase.x_buy__mutmut_1, which mutmut no longer generates" in capsys.readouterr().out


class _Item:
    def __init__(self, file: str, fixtures: tuple[str, ...] = ()):
        self.path = ROOT / "tests" / file
        self.fixturenames = fixtures


class _Config:
    def __init__(self):
        self.deselected: list[_Item] = []
        self.hook = self

    def pytest_deselected(self, items):
        self.deselected += items


def _modify(monkeypatch, mutant: str, items: list[_Item]) -> tuple[list[_Item], list[_Item]]:
    """tests/conftest.py's pytest_collection_modifyitems as a mutmut child runs it (MUTANT_UNDER_TEST set)."""
    from tests.conftest import pytest_collection_modifyitems

    monkeypatch.setenv("MUTANT_UNDER_TEST", mutant)
    config = _Config()
    pytest_collection_modifyitems(config, items)
    return items, config.deselected


def test_a_mutant_runs_its_own_modules_killers_only_and_no_synthesizing_test(monkeypatch):
    guard, rules, other, synth = (
        _Item("test_guard_protocol.py"),
        _Item("test_guard_rollback.py"),
        _Item("test_plan.py"),
        _Item("test_guard_protocol.py", ("kit",)),
    )
    kept, dropped = _modify(monkeypatch, "pdkit.functions.reservation_guard.x_handler__mutmut_7", [other, rules, guard, synth])
    assert kept == [guard, rules]
    assert set(dropped) == {other, synth}


def test_a_listed_equivalent_runs_no_test(monkeypatch):
    """Left out of the score with its reason, so its tests (up to 5 s each) could not change a number."""
    listed = _score().equivalents(ROOT / "tests" / "mutation" / "equivalent.toml")
    mutant = next(n for n in listed if n.startswith("pdkit.pods.weights_manifest."))
    items = [_Item("test_weights_verify.py"), _Item("test_serving_weights.py")]
    kept, dropped = _modify(monkeypatch, mutant, list(items))
    assert (kept, dropped) == ([], items)
    kept, _ = _modify(monkeypatch, mutant.rsplit("_", 1)[0] + "_999999", list(items))
    assert kept == items
