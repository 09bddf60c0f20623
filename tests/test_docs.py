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
