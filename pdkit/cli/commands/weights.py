"""`pdkit weights import|verify`: the model's weights in the bucket, imported by an in-region Job and checked against their manifest."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pdkit.cli.commands import summary

if TYPE_CHECKING:
    from pdkit.errors import KitError
    from pdkit.model.plan import Plan
    from pdkit.ops.aws_clients import Aws
    from pdkit.ops.kube import Kube
    from pdkit.pods.weights_manifest import FileEntry, Manifest
    from pdkit.render.serving.inputs import ServingInputs

HASH_CHUNK = 16 * 1024 * 1024
SHOWN_EXTRAS = 5


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser], common: argparse.ArgumentParser) -> None:
    p = sub.add_parser("weights", help=summary("weights"))
    actions = p.add_subparsers(dest="weights_command", metavar="ACTION", required=True)
    imp = actions.add_parser(
        "import",
        parents=[common],
        help="run the import Job on the system nodes: Hub -> S3, streamed, with a manifest of sizes and sha256 (resumable)",
    )
    imp.add_argument("--wait", action="store_true", help="follow the Job until it finishes; exit 0 only when the import completed")
    imp.add_argument("--restart", action="store_true", help="replace a Job that is still running (the new pod keeps what is imported)")
    imp.add_argument("--render", action="store_true", help="print the Job as YAML and exit; touches no cluster and no AWS API")
    imp.add_argument("--kube-context", metavar="NAME", help="kubeconfig context (default: the current one; KUBECONFIG is honoured)")
    imp.add_argument(
        "--bucket",
        help="weights bucket (default: the plan's <name>-weights-<account>-<region>; with --render and no aws.account, required)",
    )
    imp.add_argument(
        "--registry",
        help="ECR registry of the serving image (default: <account>.dkr.ecr.<region>.amazonaws.com; with --render and no aws.account, required)",
    )
    imp.add_argument("--image", help="image for the Job (default: the plan's serving image: python3, boto3 and pdkit/pods)")
    imp.add_argument("--workers", type=int, default=8, metavar="N", help="files streamed at once (default 8; memory grows with it)")
    imp.add_argument(
        "--deadline-hours", type=float, metavar="H", help="the Job's activeDeadlineSeconds (default: from the checkpoint size)"
    )
    imp.set_defaults(handler=run_import)

    ver = actions.add_parser(
        "verify",
        parents=[common],
        help="check the bucket against the manifest: every file present at its size and sha256; exit 0 when all match",
    )
    ver.add_argument(
        "--deep", action="store_true", help="also download every object and hash it (reads the whole checkpoint: run it in the region)"
    )
    ver.add_argument("--bucket", help="weights bucket (default: the plan's <name>-weights-<account>-<region>)")
    ver.add_argument("--workers", type=int, default=16, metavar="N", help="objects checked at once (default 16)")
    ver.add_argument("--output", choices=("text", "json"), default="text")
    ver.set_defaults(handler=run_verify)


# --- shared ---------------------------------------------------------------------------------------------


def _account(plan: Plan, aws: Aws) -> str:
    from pdkit.ops import aws_errors

    if plan.account:
        return plan.account
    with aws_errors.translated(region=aws.region):
        return str(aws.sts.get_caller_identity()["Account"])


def _gb(n: int | float) -> str:
    return f"{n / 1e9:.1f} GB"


# --- import ---------------------------------------------------------------------------------------------


def run_import(args: argparse.Namespace) -> int:
    from pdkit import console
    from pdkit.cli.context import load_plan, refuse_placeholders
    from pdkit.errors import KitError
    from pdkit.ops import kube
    from pdkit.ops.aws_clients import Aws
    from pdkit.render.pod import to_yaml
    from pdkit.render.serving import inputs, names, weights_job

    plan = load_plan(args.profile)
    aws = Aws.for_args(args, plan)
    if args.workers < 1:
        raise KitError("--workers must be at least 1")
    # --render touches no AWS API, so without aws.account the registry and bucket come from the flags.
    account = plan.account or (inputs.PLACEHOLDER_ACCOUNT if args.render else _account(plan, aws))
    # A rehearsal runs its block's images, from the block's registry (plan.image_region).
    registry = args.registry or (plan.image_registry(account) if plan.rehearses else f"{account}.dkr.ecr.{aws.region}.amazonaws.com")
    serving = inputs.from_plan(plan, registry=registry, image=args.image, weights_bucket=args.bucket or plan.weights.bucket(account))
    refuse_placeholders(plan, "pdkit weights import", ((serving.image, "--registry"), (serving.weights_bucket, "--bucket")))
    token_arn = plan.weights.hf_token_secret_arn
    deadline = int(args.deadline_hours * 3600) if args.deadline_hours else weights_job.deadline_seconds(plan)
    job = weights_job.render(
        plan,
        image=serving.image,
        bucket=serving.weights_bucket,
        prefix=serving.weights_prefix,
        token_secret_arn=token_arn,
        workers=args.workers,
        deadline_s=deadline,
    )
    if args.render:
        print(to_yaml([job]), end="")
        return 0

    ns, name = names.namespace(plan), job["metadata"]["name"]
    writer = weights_job.service_account_name(plan)
    try:
        cluster = kube.connect(args.kube_context)
        return _run_job(args, plan, job, cluster, ns=ns, name=name, writer=writer, serving=serving, token_arn=token_arn, deadline=deadline)
    except kube.KubeUnreachable as err:
        console.say(f"Kubernetes: {err}", stderr=True)
        console.say(
            "The endpoint is private; open the access path through the SSM-managed host (cluster stack output AccessHostId):", stderr=True
        )
        for step, command in enumerate(kube.access_path(plan, aws.region), 1):
            console.say(f"  {step}. {command}", stderr=True)
        return 1


def _run_job(
    args: argparse.Namespace,
    plan: Plan,
    job: dict[str, Any],
    cluster: Kube,
    *,
    ns: str,
    name: str,
    writer: str,
    serving: ServingInputs,
    token_arn: str | None,
    deadline: int,
) -> int:
    from pdkit import console
    from pdkit.cli.context import in_context, pdkit_command
    from pdkit.errors import KitError
    from pdkit.ops import weights

    if not cluster.service_account_exists(ns, writer):
        raise KitError(
            f"service account {ns}/{writer} does not exist, so the Job would get no AWS access. Fix: deploy the serving stack "
            f"(it creates the account, its writer role and the Pod Identity association), or `pdkit render` and kubectl apply"
        )
    current = cluster.job(ns, name)
    if current is not None and not current.finished and not args.restart:
        console.say(f"Job {ns}/{name} is already importing; leaving it running (--restart replaces it, and the new pod resumes).")
    else:
        cluster.replace(job)
        token = f"Hub token from {token_arn}" if token_arn else "no Hub token (the model is not gated)"
        console.say(
            f"Job {ns}/{name} started on the system nodes: {plan.model.id}@{plan.weights.revision} -> s3://{serving.weights_bucket}/{serving.weights_prefix} "
            f"(~{plan.model.checkpoint_gb} GB streamed through the NAT gateway; {token}; deadline {deadline / 3600:.1f} h)."
        )
    if not args.wait:
        console.say(f"Follow it: {pdkit_command(args, 'weights import --wait')}   (attaches)   or   kubectl -n {ns} logs -f job/{name}")
        return 0
    console.say("Watching the Job (Ctrl-C stops watching; the import goes on).", stderr=True)
    try:
        outcome = weights.watch(cluster, ns, name, say=lambda line: console.say(line, stderr=True), timeout_s=deadline + 600)
    except KeyboardInterrupt:
        console.say(f"Stopped watching; the Job goes on: kubectl -n {ns} logs -f job/{name}", stderr=True)
        return 130
    if outcome.succeeded:
        last = [line for line in outcome.log_tail.splitlines() if line.strip()]
        console.say(last[-1] if last else f"Job {name} completed.")
        console.say(f"Next: {pdkit_command(args, 'weights verify')}")
        return 0
    console.say(f"Import failed: {outcome.failure}.")
    for line in outcome.log_tail.splitlines()[-20:]:
        console.say(f"  | {line}")
    console.say(in_context(args, _failure_fix(outcome.failure or "", ns, name)))
    return 1


def _failure_fix(failure: str, ns: str, name: str) -> str:
    if failure.startswith("DeadlineExceeded"):
        return (
            "Fix: the Hub was slower than the deadline assumes; run again with a larger --deadline-hours (files already imported are kept)."
        )
    if failure.startswith("PodFailurePolicy"):
        return "Fix: a retry cannot help until the error line above is acted on; then run `pdkit weights import` again."
    return (
        f"Fix: act on the log above (all of it: kubectl -n {ns} logs job/{name}); `pdkit weights import` again resumes where this stopped."
    )


# --- verify ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Report:
    bucket: str
    prefix: str
    manifest: Manifest
    problems: list[tuple[str, str]]
    extras: list[str]
    deep: bool

    @property
    def ok(self) -> bool:
        return not self.problems

    def to_dict(self) -> dict[str, Any]:
        m = self.manifest
        return {
            "bucket": self.bucket,
            "prefix": self.prefix,
            "manifest": {
                "model": m.model,
                "revision": m.revision,
                "files": len(m.files),
                "total_bytes": m.total_bytes,
                "digest": m.digest(),
            },
            "deep": self.deep,
            "ok": self.ok,
            "problems": [{"path": p, "problem": why} for p, why in self.problems],
            "not_in_manifest": self.extras,
        }


def run_verify(args: argparse.Namespace) -> int:
    from pdkit import console
    from pdkit.cli.context import in_context, load_plan
    from pdkit.ops.aws_clients import Aws

    plan = load_plan(args.profile)
    aws = Aws.for_args(args, plan)
    bucket = args.bucket or plan.weights.bucket(_account(plan, aws))
    prefix = plan.weights.prefix
    s3 = aws.client("s3")
    with s3_errors(bucket=bucket, prefix=prefix, region=aws.region):
        manifest = load(s3, bucket, prefix)
        if args.deep:
            console.say(
                f"--deep: downloading and hashing {len(manifest.files)} objects, {_gb(manifest.total_bytes)} "
                "(from inside the region this is free and takes minutes; from elsewhere it is billed as data transfer out)",
                stderr=True,
            )
        if not args.deep:  # a listing and one HEAD per file: seconds, no progress display
            report = verify(s3, bucket, prefix, manifest, workers=max(1, args.workers), deep=False)
        else:
            with console.progress() as bar:
                task = bar.add_task("bytes hashed", total=manifest.total_bytes)
                report = verify(
                    s3, bucket, prefix, manifest, workers=max(1, args.workers), deep=True, checked=lambda size: bar.advance(task, size)
                )
    if args.output == "json":
        console.print_json(report.to_dict())
        return 0 if report.ok else 1
    m = report.manifest
    console.say(f"s3://{bucket}/{prefix}: manifest {m.digest()[:12]} of {m.model}@{m.revision}, {len(m.files)} files, {_gb(m.total_bytes)}")
    for path, why in report.problems:
        console.say(f"FAIL  {path}: {why}")
    if report.extras:
        shown = ", ".join(report.extras[:SHOWN_EXTRAS]) + (
            f" and {len(report.extras) - SHOWN_EXTRAS} more" if len(report.extras) > SHOWN_EXTRAS else ""
        )
        console.say(
            f"{len(report.extras)} objects under the prefix are not in the manifest (an older revision's?); staging ignores them: {shown}"
        )
    if report.ok:
        how = "content hashed (--deep)" if report.deep else "sha256 recorded at import; --deep hashes the content"
        console.say(f"All {len(m.files)} files match the manifest: size and sha256 ({how}).")
        return 0
    content = [p for p, why in report.problems if why.startswith("content")]
    if content:
        console.say(
            in_context(
                args,
                f"Fix: objects whose content differs keep their recorded sha256, so an import would skip them: delete them first "
                f"(aws s3 rm s3://{bucket}/{prefix}{content[0]}), then run `pdkit weights import`.",
            )
        )
    else:
        console.say(
            in_context(args, "Fix: run `pdkit weights import` again: it uploads every file that is missing or differs from the Hub.")
        )
    return 1


def load(s3: Any, bucket: str, prefix: str) -> Manifest:
    from pdkit.errors import KitError
    from pdkit.pods.weights_manifest import ManifestError, load_manifest

    try:
        return load_manifest(s3, bucket, prefix)
    except ManifestError as err:
        raise KitError(f"no usable manifest under s3://{bucket}/{prefix}: {err}") from None


def verify(
    s3: Any,
    bucket: str,
    prefix: str,
    manifest: Manifest,
    *,
    workers: int,
    deep: bool,
    checked: Callable[[int], None] = lambda _size: None,
) -> Report:
    """The bucket against its manifest: ListObjectsV2 for presence and sizes, HeadObject for the sha256
    recorded at import, and with `deep` every object downloaded and hashed."""
    from concurrent.futures import ThreadPoolExecutor

    from pdkit.pods.weights_manifest import MANIFEST_NAME, SHA256_METADATA

    listed: dict[str, int] = {}
    for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
        for obj in page.get("Contents", []):
            listed[obj["Key"][len(prefix) :]] = int(obj["Size"])
    files = sorted(manifest.files, key=lambda f: f.path)

    def check(entry: FileEntry) -> str | None:
        if entry.path not in listed:
            return "missing"
        if listed[entry.path] != entry.size:
            return f"{listed[entry.path]} bytes in the bucket, {entry.size} in the manifest"
        key = f"{prefix}{entry.path}"
        recorded = s3.head_object(Bucket=bucket, Key=key).get("Metadata", {}).get(SHA256_METADATA, "")
        if recorded != entry.sha256:
            return f"sha256 recorded on the object ({recorded or 'none'}) differs from the manifest"
        if deep:
            actual = _hash_object(s3, bucket, key)
            if actual != entry.sha256:
                return f"content hashes to {actual}, the manifest says {entry.sha256}"
        return None

    def check_and_count(entry: FileEntry) -> str | None:
        why = check(entry)
        checked(entry.size)
        return why

    with ThreadPoolExecutor(max_workers=workers) as pool:
        results = list(pool.map(check_and_count, files))
    problems = [(f.path, why) for f, why in zip(files, results, strict=True) if why]
    known = {f.path for f in files} | {MANIFEST_NAME}
    extras = sorted(path for path in listed if path not in known)
    return Report(bucket=bucket, prefix=prefix, manifest=manifest, problems=problems, extras=extras, deep=deep)


def _hash_object(s3: Any, bucket: str, key: str) -> str:
    import hashlib

    body = s3.get_object(Bucket=bucket, Key=key)["Body"]
    digest = hashlib.sha256()
    try:
        while chunk := body.read(HASH_CHUNK):
            digest.update(chunk)
    finally:
        body.close()
    return digest.hexdigest()


# --- S3 errors, one line each ----------------------------------------------------------------------------

_S3_DENIED = frozenset({"AccessDenied", "403", "Forbidden", "AllAccessDisabled"})
_WRONG_REGION = frozenset({"PermanentRedirect", "AuthorizationHeaderMalformed", "301", "IllegalLocationConstraintException"})
_S3_ACTION = {"ListObjectsV2": "s3:ListBucket", "HeadObject": "s3:GetObject", "GetObject": "s3:GetObject"}


@contextmanager
def s3_errors(*, bucket: str, prefix: str, region: str) -> Iterator[None]:
    """S3 failures as one line with the fix; credentials and network failures as pdkit.ops.aws_errors says them."""
    from pdkit.errors import KitError
    from pdkit.ops import aws_errors

    try:
        yield
    except KitError:
        raise
    except Exception as err:
        code = aws_errors.error_code(err)
        if code is None or code in aws_errors.CREDENTIALS:
            kit = aws_errors.explain(err, region=region)
            if kit is None:
                raise
            raise kit from None
        raise _s3_error(err, code, bucket=bucket, prefix=prefix, region=region) from None


def _s3_error(err: Any, code: str, *, bucket: str, prefix: str, region: str) -> KitError:
    from pdkit.errors import KitError

    operation = str(getattr(err, "operation_name", "") or "the S3 call")
    message = str(err.response.get("Error", {}).get("Message", "") or "").split("\n")[0].strip()
    where = f"s3://{bucket}/{prefix}"
    if code == "NoSuchBucket":
        return KitError(
            f"bucket {bucket} does not exist in this account. Fix: deploy the serving stack (it creates the bucket), or pass --bucket"
        )
    if code in _S3_DENIED or "kms" in message.lower():
        action = _S3_ACTION.get(operation, f"s3:{operation}")
        kms = " and kms:Decrypt on the serving stack's weights key" if operation != "ListObjectsV2" else ""
        detail = f": {message}" if message and message not in ("Forbidden", "Access Denied") else ""
        return KitError(
            f"your AWS identity may not {operation} on {where} ({code}{detail}). Fix: allow {action} on the bucket's prefix{kms}, "
            "or use credentials that have it (--aws-profile)"
        )
    if code in _WRONG_REGION:
        return KitError(f"bucket {bucket} is not in {region} ({code}). Fix: pass the profile's region (--region) or the right --bucket")
    if code in {"SlowDown", "503", "RequestTimeout", "InternalError"}:
        return KitError(f"S3 kept failing {operation} on {where} ({code}) after retries. Fix: wait a minute and run the command again")
    request_id = err.response.get("ResponseMetadata", {}).get("RequestId", "")
    rid = f" (request id {request_id})" if request_id else ""
    return KitError(f"S3 {operation} on {where} failed in {region}: {code}: {message or 'no message'}{rid}. Fix: act on the AWS message")
