"""One module per `pdkit` command group; each exposes `register(subparsers, common)`.

Modules import heavy dependencies (pydantic profile loading, boto3) inside their handlers, so
`pdkit --help` stays fast.
"""

from __future__ import annotations

import argparse
from importlib import import_module

# Order is the order of `pdkit --help`.
MODULES = (
    "plan",
    "capacity",
    "preflight",
    "deploy_check",
    "topology",
    "nodes",
    "weights",
    "render",
    "status",
    "timeline",
    "smoke",
    "validate",
    "bench",
    "report",
    "rehearse",
)


def register_all(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    for name in MODULES:
        module = import_module(f"pdkit.cli.commands.{name}")
        module.register(sub, common)
