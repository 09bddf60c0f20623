"""The `pdkit` commands: one module each, exposing `register(subparsers, common)`, listed once below.

As pip's command table does (`pip/_internal/commands/__init__.py`: name -> module and summary, and only the
chosen command's module is imported), `pdkit --help` is printed from this table alone; only the command on
the command line is imported and registered in full. Modules import heavy dependencies (the profile model,
pydantic, boto3) inside their handlers, so a command's own `--help` stays fast as well.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from importlib import import_module
from typing import NamedTuple


class Command(NamedTuple):
    module: str
    summary: str


# Order is the order of `pdkit --help`: the operator's path.
COMMANDS: dict[str, Command] = {
    "init": Command("init", "start a deployment profile of your own from a shipped one, with your account, region, AZ and admins"),
    "plan": Command("plan", "show what the profile deploys: nodes, parallelism, memory, messages per token"),
    "capacity": Command("capacity", "find, buy, check and extend the EC2 Capacity Block"),
    "preflight": Command(
        "preflight", "check the reservation, interconnect, quotas, add-on pins and cluster before deploying; exit 0 only without FAIL"
    ),
    "deploy-check": Command(
        "deploy_check", "refuse a deploy that changes the GPU launch template or node groups while they run nodes (make deploy runs it)"
    ),
    "topology": Command("topology", "network placement of the running GPU nodes per role (DescribeInstanceTopology)"),
    "nodes": Command("nodes", "scale the GPU node groups: up to the plan's sizes, or down to 0"),
    "weights": Command("weights", "import the model from the Hugging Face Hub into the weights bucket (in-region Job); verify the bucket"),
    "render": Command("render", "write the serving manifests (namespace, DisaggregatedSet, router, budgets) as plain YAML"),
    "status": Command("status", "the deployment against its plan: node groups, nodes, GPUs, EFA, serving; exit 0 when all OK"),
    "timeline": Command(
        "timeline",
        "start-up phases from instance launch to first token, per node and pod, against the plan; capture a bundle while it runs",
    ),
    "smoke": Command("smoke", "send one chat completion through the router: TTFT, tokens/s and the answer"),
    "validate": Command(
        "validate", "run the fabric checks on the GPU nodes (EFA, fi_pingpong, nccl-tests, UCCL-EP): PASS/FAIL with next steps"
    ),
    "bench": Command("bench", "benchmark the deployment through the router (bench_serving, PD mode, concurrency sweep); results as JSONL"),
    "report": Command(
        "report", "write report.md and plots from `pdkit bench` results, beside the seed's EFA/RoCE figures and the latency model"
    ),
    "rehearse": Command(
        "rehearse",
        "on-demand dress rehearsal: cost estimate, deploy, nodes up, validate, bench, report, timeline, destroy, verified teardown",
    ),
}
MODULES = tuple(c.module for c in COMMANDS.values())

# Options of the top-level parser that take a value (pdkit.cli.main): the word after them is not a command.
TAKES_VALUE = ("--profile", "--aws-profile", "--region")


def summary(name: str) -> str:
    """The one-line help of command `name`, for its own module's `add_parser(help=...)`."""
    return COMMANDS[name].summary


def chosen(argv: Sequence[str]) -> str | None:
    """The command named on the command line (the first word that is not an option or an option's value)."""
    words = iter(argv)
    for word in words:
        if word == "--":
            return next(words, None)
        if word in TAKES_VALUE:
            next(words, None)
        elif not word.startswith("-"):
            return word
    return None


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser, argv: Sequence[str]) -> None:
    """Every command, in table order: the chosen one in full from its module, the others from the table alone, so
    that `pdkit --help` lists them all and an unknown command is answered with the real choices."""
    picked = chosen(argv)
    for name, command in COMMANDS.items():
        if name == picked:
            import_module(f"pdkit.cli.commands.{command.module}").register(sub, common)
        else:
            sub.add_parser(name, help=command.summary, add_help=False)


def register_every(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    """Every command in full, in table order (for documentation and tests that walk every command's options)."""
    for command in COMMANDS.values():
        import_module(f"pdkit.cli.commands.{command.module}").register(sub, common)
