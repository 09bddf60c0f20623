"""Warnings the suite reports for someone to act on, not failures.

They live here, not in the test module that raises them: with `pytest -n` (make test), pytest-xdist's
controller re-creates a worker's warning by importing its category's module, and the controller imports
no test module (https://github.com/pytest-dev/pytest-xdist/blob/v3.8.0/src/xdist/workermanage.py, unserialize_warning_message).
"""

from __future__ import annotations


class UnpinnedBaseImage(UserWarning):
    """A base image is pinned by tag only; run containers/pin_digests.py on a machine with registry access."""
