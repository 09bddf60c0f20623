"""Every numeric bound of the profile models is stated once, by the model, and repeated from it:
the error for an out-of-range value names the whole range, and README's profile table lists it."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pdkit.errors import ProfileError
from pdkit.model import profile_files
from pdkit.model.profile import Profile

README = Path(__file__).resolve().parent.parent / "README.md"


def _bounded_fields(model=Profile, prefix=""):
    for name, info in model.model_fields.items():
        section = profile_files._section_type(info)
        if section is not None:
            yield from _bounded_fields(section, f"{prefix}{name}.")
        elif profile_files.bound_text(info):
            yield f"{prefix}{name}", info


BOUNDED = dict(_bounded_fields())


def _readme_rows() -> dict[str, str]:
    """README profile table: every dotted field (`a.b` / `c` rows name siblings of a.b) -> its row."""
    text = README.read_text()
    table = text[text.index("## Profile reference") :]
    table = table[: table.index("\n\n", table.index("| field |"))]
    rows = {}
    for line in table.splitlines():
        cells = line.split("|")
        if len(cells) < 4 or not cells[1].strip().startswith("`"):
            continue
        names = re.findall(r"`([^`]+)`", cells[1])
        first = names[0]
        parent = first.rsplit(".", 1)[0] + "." if "." in first else ""
        for name in names:
            rows[name if "." in name or name == first else parent + name] = line
    return rows


def _readme_name(path: str) -> str:
    return re.sub(r"^roles\.(prefill|decode)\.", "roles.*.", path)


def test_some_bounds_found():
    """The walk over the models finds the constrained fields (so the tests below cannot pass empty)."""
    assert "roles.decode.mem_fraction_static" in BOUNDED
    assert profile_files.bound_text(BOUNDED["roles.decode.mem_fraction_static"]) == "in (0.3, 0.96)"
    assert len(BOUNDED) >= 20


@pytest.mark.parametrize("path", sorted({_readme_name(p) for p in BOUNDED}))
def test_readme_table_states_every_bound(path):
    """README's profile table shows each field's range exactly as the model (and so the error) states it."""
    rows = _readme_rows()
    assert path in rows, f"README profile table has no row for {path}"
    bound = profile_files.bound_text(BOUNDED[path.replace("roles.*.", "roles.decode.")])
    meaning = rows[path].split("|")[3]
    assert bound in meaning, f"README row for {path} should say {bound!r}: {rows[path]}"


REQUIRED_SIBLINGS = {"capacity.purchase.": ("capacity.purchase.offering_id", "cb-0123456789abcdef0")}


def _outside(info) -> float | int:
    """A value just outside the field's range: the upper bound if there is one, else below the lower."""
    import annotated_types

    kinds = {type(rule): rule for rule in info.metadata}
    if annotated_types.Lt in kinds:
        return kinds[annotated_types.Lt].lt
    if annotated_types.Le in kinds:
        return kinds[annotated_types.Le].le + 1
    if annotated_types.Gt in kinds:
        return kinds[annotated_types.Gt].gt
    return kinds[annotated_types.Ge].ge - 1


@pytest.mark.parametrize("path", sorted(BOUNDED))
def test_range_error_names_the_range(raw_with, path):
    """Pydantic reports only the violated side of a range (error types greater_than, less_than, ...:
    https://docs.pydantic.dev/latest/errors/validation_errors/#greater_than); the message must name the
    whole range and use it as the fix (issue 13: "mem_fraction_static = 1.5: use a value in (0.3, 0.96)")."""
    info = BOUNDED[path]
    value = _outside(info)
    # A bounded field inside an opt-in section needs that section's required siblings, or the missing one is reported first.
    siblings = [item for prefix, pair in REQUIRED_SIBLINGS.items() if path.startswith(prefix) for item in pair]
    with pytest.raises(ProfileError) as caught:
        profile_files.parse(raw_with(path, value, *siblings), source="t.yaml")
    bound = profile_files.bound_text(info)
    assert str(caught.value).startswith(f"t.yaml: {path} = {value!r}: must be {bound}")
    assert f"Fix: use a value {bound}" in str(caught.value)


def test_mem_fraction_message_as_the_issue_asks(raw_with):
    with pytest.raises(ProfileError) as caught:
        profile_files.parse(raw_with("roles.decode.mem_fraction_static", 1.5))
    assert str(caught.value) == ("roles.decode.mem_fraction_static = 1.5: must be in (0.3, 0.96). Fix: use a value in (0.3, 0.96)")
