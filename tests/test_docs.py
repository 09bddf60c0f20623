"""The README's profile reference matches the profile model: every field documented, none invented."""

from __future__ import annotations

import re

from pydantic import BaseModel

from pdkit.profile import Profile
from pdkit.profile_files import ROOT


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
