"""`make mutation`'s configuration agrees with itself (tests/mutation/score.py, [tool.mutmut] in pyproject.toml,
mk/mutation.mk, tests/mutation/equivalent.toml): a module renamed in one place but not the others would be
mutated without killers, or scored without being mutated, and nobody would notice until the slow run."""

from __future__ import annotations

import ast
import importlib.util
import re
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
