"""`pdkit rehearse`: a rehearsal profile from deploy through validate, bench and report to a verified teardown."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from pdkit.cli.commands import summary

if TYPE_CHECKING:
    from collections.abc import Sequence

    from pdkit.model.plan import Plan
    from pdkit.ops.rehearsal import Estimate, Outcome, Teardown


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    from pdkit.ops.rehearsal import DEFAULT_HOURS

    p = sub.add_parser(
        "rehearse",
        parents=[common],
        help=summary("rehearse"),
    )
    p.add_argument(
        "--hours", type=float, default=DEFAULT_HOURS, help=f"expected duration for the cost estimate (default {DEFAULT_HOURS:g})"
    )
    p.add_argument(
        "--gpu-usd-per-hour",
        type=float,
        metavar="PRICE",
        help="on-demand price of one GPU instance (default: pdkit/model/data/prices.yaml)",
    )
    p.add_argument("--out", metavar="DIR", type=Path, help="where results go (default: results/<name>/rehearsal)")
    where = p.add_mutually_exclusive_group()
    where.add_argument("--from-step", metavar="STEP", help="resume at STEP (the command a failed run prints)")
    where.add_argument("--only", metavar="STEP[,STEP...]", help="run only these steps, e.g. --only verify-teardown")
    p.add_argument("--yes", action="store_true", help="accept the cost estimate and the teardown after a failure without a prompt")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    import subprocess

    from pdkit import console
    from pdkit.cli.context import load_plan
    from pdkit.ops import aws_errors, rehearsal
    from pdkit.ops.aws_clients import Aws

    plan = load_plan(args.profile)
    rehearsal.require_rehearsal(plan)
    out = args.out or Path("results") / plan.name / "rehearsal"
    aws = Aws.for_args(args, plan)

    def verify() -> tuple[bool, str]:
        with aws_errors.translated(region=aws.region):
            found = rehearsal.check_teardown(plan, aws.client)
        show_teardown(found)
        return found.clean, "nothing left running" if found.clean else f"{len(found.left)} resource(s) still running"

    def runner(argv: Sequence[str]) -> int:
        console.say(f"$ {' '.join(argv)}")
        return subprocess.call(list(argv))  # noqa: S603 - the kit's own make targets and pdkit commands, built by pdkit.ops.rehearsal.steps

    all_steps = rehearsal.steps(
        profile=plan.profile_path or args.profile or plan.name,
        out=out,
        runner=runner,
        verify=verify,
        startup=lambda bundle_dir: rehearsal.write_startup(plan, bundle_dir, out / "report" / "startup.md"),
        admin_key_shell=admin_key_shell(plan),
    )
    chosen = rehearsal.select(all_steps, from_step=args.from_step, only=[s for s in (args.only or "").split(",") if s])
    if any(s.name == "deploy" for s in chosen):
        est = rehearsal.estimate(plan, hours=args.hours, gpu_usd_per_hour=args.gpu_usd_per_hour)
        show_estimate(plan, est)
        if not confirm("Type yes to create these resources: ", assume_yes=args.yes, refused="nothing was created"):
            return 1

    def offer(failed: str) -> bool:
        return confirm(f"{failed} failed. Tear the rehearsal down now (stops the hourly bill)? Type yes: ", assume_yes=args.yes, refused="")

    outcomes = rehearsal.run(chosen, offer_teardown=offer)
    return show_checklist(args, outcomes)


def confirm(prompt: str, *, assume_yes: bool, refused: str) -> bool:
    from pdkit import console

    if assume_yes:
        return True
    if not console.interactive():
        console.say(f"No terminal to confirm{': ' + refused if refused else ''}. Add --yes once you have read the above.", stderr=True)
        return False
    return console.ask(prompt).strip().lower() == "yes"


def show_estimate(plan: Plan, est: Estimate) -> None:
    from pdkit import console

    console.table(
        ("what", "USD/hour", "hours", "USD"),
        ((line.what, f"{line.usd_per_hour:,.2f}", f"{line.hours:g}", f"{line.usd:,.2f}") for line in est.lines),
        title=f"{plan.name}: estimated cost of the rehearsal in {plan.region}",
    )
    console.say(
        f"Estimate: about ${est.usd:,.2f} for {est.hours:g} h (prices as of {est.as_of}, pdkit/model/data/prices.yaml; check {est.source}). "
        "Data transfer, EBS, S3 requests and CodeBuild minutes are not included."
    )


def show_teardown(found: Teardown) -> None:
    from pdkit import console

    for item in found.left:
        console.say(f"FAIL: still running: {item}")
    if found.kept:
        console.table(
            ("kept on purpose", "name", "size/state", "USD/month"),
            ((k.kind, k.name, k.detail, f"{k.usd_per_month:,.2f}") for k in found.kept),
            title="Kept after teardown (runbooks/01-cluster.md says why)",
        )
    console.say(f"Kept resources cost about ${found.usd_per_month:,.2f}/month (estimate, pdkit/model/data/prices.yaml).")


def show_checklist(args: argparse.Namespace, outcomes: list[Outcome]) -> int:
    from pdkit import console
    from pdkit.cli.context import pdkit_command
    from pdkit.ops.rehearsal import first_failure

    console.table(
        ("step", "what", "result", "detail"),
        ((o.step, o.what, o.state, o.detail) for o in outcomes),
        title="Rehearsal checklist",
        status_column=2,
    )
    failed = first_failure(outcomes)
    if failed is None:
        console.say("Rehearsal passed.")
        return 0
    console.say(f"Resume from the failed step: {pdkit_command(args, f'rehearse --from-step {failed}')}")
    return 1


def admin_key_shell(plan: Plan) -> str:
    """Create SGLang's admin-key Secret unless it exists (the command of runbooks/02-serve.md, Prerequisites 5)."""
    import shlex

    from pdkit.render.serving import manifests, names

    get = ["kubectl", "-n", names.namespace(plan), "get", "secret", manifests.admin_key_secret(plan)]
    # The create command's last word holds `$(openssl rand -hex 32)` for the shell to expand: joined as is.
    create = manifests.admin_key_command(plan)
    return f"{shlex.join(get)} >/dev/null 2>&1 || {shlex.join(create[:-1])} {create[-1]}"
