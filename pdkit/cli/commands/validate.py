"""`pdkit validate`: prove the fabric before serving: EFA devices and fi_pingpong per node pair,
nccl-tests over EFA across every GPU node, UCCL-EP dispatch/combine on the decode group."""

from __future__ import annotations

import argparse

from pdkit.cli.commands import summary

EPILOG = """\
Runs Kubernetes Jobs on the GPU nodes (namespace <name>-validation) with the validation image, one
phase after another, and prints PASS/FAIL with the threshold and the next step for each check.
Serving must be scaled to zero first: the Jobs take every GPU and EFA device. Thresholds come from
the plan (pdkit/model/thresholds.py); runbooks/03-validate.md explains each one.

  pdkit validate --render > validation.yaml      # the manifests, no cluster needed
  pdkit validate --out results/validate.json     # run it; then pdkit report --validate ...
"""


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "validate",
        parents=[common],
        help=summary("validate"),
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--kube-context", metavar="NAME", help="kubeconfig context (default: the current one; KUBECONFIG is honoured)")
    p.add_argument(
        "--only",
        metavar="PHASES",
        default=None,
        help="comma-separated phases to run: node-image, efa, nccl, uccl, mooncake (default: all, in that order)",
    )
    p.add_argument("--image", metavar="URI", help="validation image (default: the plan's <registry>/<name>/validation:<tag>)")
    p.add_argument(
        "--serving-image",
        metavar="URI",
        help="serving image the role checks (UCCL-EP on decode) run in, as the role does (default: the plan's <registry>/<name>/sglang-efa:<tag>)",
    )
    p.add_argument(
        "--registry",
        metavar="HOST",
        help="ECR registry host (default: <account>.dkr.ecr.<region>.amazonaws.com from aws.account; required when the profile sets none)",
    )
    p.add_argument("--out", metavar="FILE", help="where to save the result JSON (default: results/<name>/validate-<time>.json)")
    p.add_argument("--keep", action="store_true", help="leave the Jobs and pods in place for debugging (they expire after an hour)")
    p.add_argument("--render", action="store_true", help="print the manifests as YAML and exit; touches no cluster")
    p.add_argument("--output", choices=("text", "json"), default="text")
    p.set_defaults(handler=run)


def run(args: argparse.Namespace) -> int:
    from datetime import UTC, datetime
    from pathlib import Path

    from pdkit.cli.context import in_context, load_plan, refuse_placeholders
    from pdkit.errors import KitError
    from pdkit.model.thresholds import derive
    from pdkit.ops.fabric import validate
    from pdkit.render import fabric as manifests
    from pdkit.render.pod import to_yaml

    plan = load_plan(args.profile)
    phases = tuple(p.strip() for p in args.only.split(",") if p.strip()) if args.only else manifests.PHASES
    unknown = [p for p in phases if p not in manifests.PHASES]
    if unknown or not phases:
        raise KitError(f"--only {args.only!r}: unknown phase(s) {unknown}. Fix: a comma-separated subset of {','.join(manifests.PHASES)}")
    image = args.image or validate.default_image(plan, args.registry)
    # The checks that stand for a role (UCCL-EP on decode, Mooncake on both) run in that role's serving image.
    roles = dict.fromkeys(plan.roles, args.serving_image) if args.serving_image else validate.role_images(plan, args.registry)
    in_role_image = {"decode"} if "uccl" in phases and plan.decode.ep_spans_nodes else set()
    if "mooncake" in phases and plan.runs_mooncake:
        in_role_image |= {"prefill", "decode"}
    refuse_placeholders(plan, "pdkit validate", ((image, "--registry"), *((roles[r], "--registry") for r in sorted(in_role_image))))
    if args.render:
        bundle = manifests.render(plan, derive(plan), image=image, run_id="render", role_images=roles)
        print(to_yaml(bundle.objects()), end="")
        return 0

    from pdkit import console
    from pdkit.ops import kube

    cluster = kube.connect(args.kube_context)
    outcome = validate.run(
        plan,
        cluster,
        image=image,
        role_images=roles,
        phases=phases,
        keep=args.keep,
        waiting=lambda phase: kube.Waiting(timeout_s=manifests.PHASE_DEADLINE_SECONDS[phase] + 120),
        say=lambda line: console.say(line, stderr=True),
    )
    stamp = datetime.now(UTC).strftime("%Y%m%d-%H%M%S")
    out = Path(args.out) if args.out else Path("results") / plan.name / f"validate-{stamp}.json"
    outcome.save(out)
    if args.output == "json":
        console.print_json(outcome.to_dict())
        return 0 if outcome.ok else 1
    console.table(
        ("status", "check", "target", "measured", "threshold", "next step"),
        ((c.status, c.name, c.target, c.measured, c.threshold, c.next_step) for c in outcome.checks),
        title=f"{plan.name}: fabric validation {outcome.run_id}",
        status_column=0,
    )
    console.say(f"Saved {out} (pod logs in {out.with_name(out.stem + '-logs')}).")
    if outcome.ok:
        console.say(
            in_context(
                args,
                f"The fabric is ready. Next: scale serving back up, then `pdkit bench`; add `--validate {out}` to `pdkit report`.",
            )
        )
        return 0
    console.say(in_context(args, "Fix the FAIL rows (next step column, runbooks/03-validate.md), then run `pdkit validate` again."))
    return 1
