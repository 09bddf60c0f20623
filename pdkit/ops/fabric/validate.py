"""`pdkit validate` end to end: refuse while serving holds the GPUs, list the nodes, run the four
phases (node-image, efa, nccl, uccl, mooncake) one after the other, judge the logs, and keep everything for the report.
"""

from __future__ import annotations

import json
import secrets
import shlex
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pdkit.errors import KitError
from pdkit.model.plan import Plan
from pdkit.model.thresholds import Thresholds, derive
from pdkit.ops.fabric import checks
from pdkit.ops.fabric.checks import Check
from pdkit.ops.kube import Cluster, JobRun, Waiting, run_jobs
from pdkit.render import fabric as manifests
from pdkit.render.serving import names
from pdkit.render.serving.drain import drain_plan

RESULT_VERSION = 1
# A scheduling failure of these kinds will not clear by itself within the next phase either.
BLOCKING = ("Insufficient", "didn't match", "untolerated taint", "ImagePull", "ErrImage")


@dataclass
class Outcome:
    plan: str
    run_id: str
    image: str
    started: str
    finished: str
    thresholds: Thresholds
    checks: list[Check]
    logs: dict[str, dict[int, str]] = field(default_factory=dict)
    # The serving image each role's checks ran in (uccl in decode's, mooncake in prefill's and decode's).
    role_images: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return checks.passed(self.checks)

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": RESULT_VERSION,
            "kind": "pdkit-validation",
            "plan": self.plan,
            "run_id": self.run_id,
            "image": self.image,
            "role_images": self.role_images,
            "started": self.started,
            "finished": self.finished,
            "ok": self.ok,
            "thresholds": self.thresholds.to_dict(),
            "checks": [c.to_dict() for c in self.checks],
        }

    def save(self, path: Path) -> list[Path]:
        """The result as JSON at `path`, each pod's log beside it in `<stem>-logs/`."""
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(self.to_dict(), indent=2) + "\n")
        written = [path]
        logs_dir = path.with_name(f"{path.stem}-logs")
        for key, by_index in self.logs.items():
            for index, text in sorted(by_index.items()):
                logs_dir.mkdir(parents=True, exist_ok=True)
                log = logs_dir / f"{key}-{index}.log"
                log.write_text(text)
                written.append(log)
        return written


def load(path: Path) -> dict[str, Any]:
    """A saved validation result, for `pdkit report --validate`."""
    try:
        data: dict[str, Any] = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError) as err:
        raise KitError(f"cannot read the validation result {path} ({err}). Fix: pass the JSON that `pdkit validate --out` wrote") from None
    if data.get("kind") != "pdkit-validation":
        raise KitError(f"{path} is not a `pdkit validate` result. Fix: pass the JSON that `pdkit validate --out` wrote")
    return data


def default_image(plan: Plan, registry: str | None) -> str:
    from pdkit.render.serving.inputs import default_registry

    return plan.images["validation"].uri(registry or default_registry(plan))


def role_images(plan: Plan, registry: str | None) -> dict[str, str]:
    """The serving image of each role: the checks that stand for a role run in it (pdkit/render/serving/role_pod.py)."""
    from pdkit.render.serving.inputs import from_plan

    inputs = from_plan(plan, registry=registry)
    return {name: inputs.role_image(name) for name in plan.roles}  # per role: its MoE backend decides the image


def ensure_serving_stopped(plan: Plan, cluster: Cluster) -> None:
    busy = cluster.serving_pods(names.namespace(plan))
    if busy:
        scale = "; ".join(shlex.join(c) for c in drain_plan(plan).kubectl_scale_down())
        restore = "; ".join(shlex.join(c) for c in drain_plan(plan).kubectl_restore())
        raise KitError(
            f"serving pods hold the GPU nodes ({', '.join(sorted(busy)[:4])}{', ...' if len(busy) > 4 else ''}); the validation Jobs need every "
            f"GPU and EFA device. Fix: {scale}; validate; then restore with {restore}"
        )


def run(
    plan: Plan,
    cluster: Cluster,
    *,
    image: str,
    phases: Sequence[str] = manifests.PHASES,
    keep: bool = False,
    waiting: Callable[[str], Waiting],
    say: Callable[[str], None] = lambda _line: None,
    run_id: str | None = None,
    role_images: dict[str, str] | None = None,
    now: Callable[[], datetime] = lambda: datetime.now(UTC),
) -> Outcome:
    th = derive(plan)
    run_id = run_id or secrets.token_hex(3)
    started = now()
    ensure_serving_stopped(plan, cluster)
    nodes = cluster.gpu_nodes()
    bundle = manifests.render(plan, th, image=image, run_id=run_id, role_images=role_images)
    cluster.create(bundle.namespace)
    if "node-image" in phases:
        for extra in bundle.extra_namespaces:
            cluster.create(extra)
    runs: dict[str, JobRun] = {}
    skipped: dict[str, str] = {}
    pods = {spec.key: spec.pods for spec in bundle.jobs}
    if not plan.decode.ep_spans_nodes and "uccl" in phases:
        skipped["UCCL-EP low latency"] = "decode EP fits in one node: no dispatch/combine crosses EFA"
    if not plan.runs_mooncake and "mooncake" in phases:
        skipped["Mooncake KV write"] = f"serving.kv_transfer is {plan.kv_transfer}: KV does not go through Mooncake"
    blocked: str | None = None
    created: list[dict[str, Any]] = []
    try:
        for obj in bundle.shared:
            cluster.create(obj)
            created.append(obj)
        for phase in manifests.PHASES:
            specs = bundle.phase(phase)
            if phase not in phases or not specs:
                continue
            if blocked:
                for spec in specs:
                    skipped[spec.key] = f"not run: {blocked}"
                continue
            say(f"{phase}: {', '.join(s.name for s in specs)} in namespace {bundle.namespace_name} ...")
            results = run_jobs(cluster, [(s.job, [s.service]) for s in specs], waiting=waiting(phase), keep=keep)
            for spec in specs:
                runs[spec.key] = results[spec.name]
                problem = results[spec.name].problem
                if problem and any(word in problem for word in BLOCKING):
                    blocked = f"{spec.key} could not run ({problem.split(':')[0]})"
            say(f"{phase}: done")
    finally:
        if not keep:
            for obj in reversed(created):
                cluster.delete(obj)
    rows = checks.evaluate(plan, th, nodes=nodes, runs=runs, pods=pods, skipped=skipped)
    return Outcome(
        plan=plan.name,
        run_id=run_id,
        image=image,
        started=started.isoformat(timespec="seconds"),
        finished=now().isoformat(timespec="seconds"),
        thresholds=th,
        checks=rows,
        logs={key: dict(r.logs) for key, r in runs.items()},
        role_images=dict(role_images or {}),
    )
