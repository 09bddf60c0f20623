"""`pdkit render`: the serving layer of a profile as plain Kubernetes YAML, for kubectl and GitOps."""

from __future__ import annotations

import argparse

from pdkit.cli.commands import summary


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    p = sub.add_parser(
        "render",
        parents=[common],
        help=summary("render"),
    )
    p.add_argument("--out", required=True, metavar="DIR", help="directory to write one YAML file per object into")
    p.add_argument(
        "--registry",
        help="ECR registry of the built images (default: <account>.dkr.ecr.<region>.amazonaws.com from the profile's aws.account; "
        "required when the profile sets none)",
    )
    p.add_argument("--image", help="serving image URI (default: the plan's repository and tag in --registry)")
    p.add_argument("--router-image", help="router image URI (default: the serving image)")
    p.add_argument(
        "--weights-bucket",
        help="S3 bucket holding the imported weights (default: the plan's; required when the profile sets no aws.account)",
    )
    p.set_defaults(handler=run)


def refuse_bad_names(args: argparse.Namespace) -> None:
    """A bucket S3 would never create or an image reference no runtime parses is refused before anything is written."""
    from pdkit.errors import KitError
    from pdkit.model import service_names

    checks = (
        ("--registry", args.registry, service_names.registry_problem, "e.g. 123456789012.dkr.ecr.eu-south-2.amazonaws.com"),
        ("--image", args.image, service_names.image_problem, "e.g. 123456789012.dkr.ecr.eu-south-2.amazonaws.com/pdkit/sglang-efa:TAG"),
        ("--router-image", args.router_image, service_names.image_problem, "a full image reference, as for --image"),
        (
            "--weights-bucket",
            args.weights_bucket,
            service_names.bucket_problem,
            "the bucket the serving stack made (its WeightsBucket output)",
        ),
    )
    for flag, value, problem_of, example in checks:
        problem = problem_of(value) if value is not None else None
        if problem:
            raise KitError(f"{flag} {value!r} {problem}. Fix: {example}")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from pdkit.cli.context import in_context, load_plan, refuse_placeholders
    from pdkit.errors import KitError
    from pdkit.render.pod import to_yaml
    from pdkit.render.serving import inputs, manifests, names

    the_plan = load_plan(args.profile)
    refuse_bad_names(args)
    serving = inputs.from_plan(
        the_plan, registry=args.registry, image=args.image, router_image=args.router_image, weights_bucket=args.weights_bucket
    )
    refuse_placeholders(
        the_plan,
        "pdkit render",
        (
            (serving.image, "--registry"),
            (serving.router_image, "--registry"),
            (serving.weights_bucket, "--weights-bucket"),
        ),
    )
    objs = manifests.render(the_plan, serving)
    out = Path(args.out)
    try:
        out.mkdir(parents=True, exist_ok=True)
        for stale in out.glob("[0-9][0-9]-*.yaml"):
            stale.unlink()
        for i, obj in enumerate(objs):
            (out / f"{i:02d}-{obj['kind'].lower()}-{obj['metadata']['name']}.yaml").write_text(to_yaml([obj]))
    except OSError as err:
        # mkdir onto an existing file (FileExistsError), a read-only or foreign directory (PermissionError), a full disk.
        where = f" ({err.filename})" if err.filename and str(err.filename) != str(out) else ""
        raise KitError(
            f"cannot write the manifests into --out {out}{where}: {err.strerror or err}. "
            "Fix: --out DIR, a directory you can write (it is created if missing; its NN-*.yaml files are replaced)"
        ) from None
    print(f"Wrote {len(objs)} objects for {the_plan.name} into {out}/ (namespace {names.namespace(the_plan)}).")
    print(
        in_context(
            args,
            f"Next: kubectl apply --server-side -f {out}/   (needs the LWS chart's DisaggregatedSet CRD; runbooks/02-serve.md), then `pdkit status`",
        )
    )
    return 0
