"""Fixtures for the container tests: the modules under containers/, loaded by path."""

from __future__ import annotations

from types import ModuleType
from typing import Any

import pytest
from container_paths import CONTAINERS_DIR, KIT_DIR, load_module


@pytest.fixture(scope="session")
def versions() -> ModuleType:
    return load_module("versions", CONTAINERS_DIR / "versions.py")


@pytest.fixture(scope="session")
def selftest() -> ModuleType:
    return load_module("selftest", KIT_DIR / "selftest.py")


@pytest.fixture(scope="session")
def pin_digests(versions: ModuleType) -> ModuleType:
    return load_module("pin_digests", CONTAINERS_DIR / "pin_digests.py")


@pytest.fixture
def doc(versions: ModuleType) -> dict[str, Any]:
    """A fresh, validated copy of containers/versions.yaml (tests may mutate it)."""
    loaded: dict[str, Any] = versions.load()
    return loaded
