"""The timeline bundle: what EC2 and Kubernetes said during a start-up, kept past the events' one-hour life.

kube-apiserver deletes events an hour after their last occurrence (`--event-ttl`, default 1h0m0s:
https://kubernetes.io/docs/reference/command-line-tools-reference/kube-apiserver/), and a pod's log
goes with its container, so `pdkit timeline --capture DIR` copies them into DIR while the run goes on.
Every capture merges into what DIR already holds; `pdkit timeline --from DIR` reads it offline.

Layout (documented for operators in runbooks/06-observability.md, "Start-up timeline"):

    meta.json                      {"format": FORMAT, "deployment", "namespace", "captures": [ISO 8601 times]}
    ec2/describe-instances.json    DescribeInstances response shape: {"Reservations": [{"Instances": [...]}]}
    ec2/capacity-reservation.json  DescribeCapacityReservations response shape (absent without a block)
    kube/nodes.json                NodeList as the API returns it (JSON, camelCase)
    kube/pods.json                 PodList
    kube/events.json               EventList (core/v1): every event any capture saw, one per metadata.uid
    logs/<pod>/<container>.log     the container's log, each line prefixed with its RFC 3339 time
                                   (the API's `timestamps=true`, as `kubectl logs --timestamps`)

Merging: instances by InstanceId, nodes and pods by metadata.uid (the newest capture wins, objects
gone from the cluster are kept), events by metadata.uid, log lines by their text (a line seen twice
is kept once), captures appended.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

from pdkit.errors import KitError
from pdkit.model.plan import ROLE_LABEL, Plan

FORMAT = "pdkit-timeline-bundle/1"
NODEGROUP_TAG = "eks:nodegroup-name"
# The start-up lines come first; past this a log is request traffic (limitBytes reads from the start).
LOG_LIMIT_BYTES = 32 * 2**20
# Node events are recorded in the default namespace (the kubelet's node reference has no namespace).
NODE_EVENTS_NAMESPACE = "default"

Obj = dict[str, Any]


@dataclass
class Bundle:
    deployment: str
    namespace: str
    captures: list[str] = field(default_factory=list)
    instances: list[Obj] = field(default_factory=list)
    reservation: Obj | None = None
    nodes: list[Obj] = field(default_factory=list)
    pods: list[Obj] = field(default_factory=list)
    events: list[Obj] = field(default_factory=list)
    logs: dict[tuple[str, str], list[str]] = field(default_factory=dict)


# --- capture ------------------------------------------------------------------------------------------


def capture(plan: Plan, *, ec2: Any, core: Any, now: datetime) -> Bundle:
    """One snapshot: the GPU node groups' instances, the block, the GPU nodes, the serving pods, their events and logs."""
    from pdkit.ops import kube

    namespace = plan.namespace
    bundle = Bundle(deployment=plan.name, namespace=namespace, captures=[now.isoformat()])
    pages = ec2.get_paginator("describe_instances").paginate(Filters=_instance_filters(plan))
    bundle.instances = [_plain(i) for page in pages for r in page.get("Reservations", []) for i in r.get("Instances", [])]
    if not plan.reservation_is_placeholder:
        bundle.reservation = _plain(ec2.describe_capacity_reservations(CapacityReservationIds=[plan.reservation_id]))

    def read(fn: Any, *args: Any, **kwargs: Any) -> Any:
        response = kube.call(
            f"call {fn.__name__}", lambda: fn(*args, _preload_content=False, _request_timeout=kube.TIMEOUT_SECONDS, **kwargs)
        )
        return json.loads(response.data) if kwargs.get("container") is None else response.data.decode("utf-8", "replace")

    selector = f"{ROLE_LABEL} in ({','.join(plan.roles)})"
    bundle.nodes = read(core.list_node, label_selector=selector).get("items", [])
    bundle.pods = read(core.list_namespaced_pod, namespace).get("items", [])
    node_names = {n["metadata"]["name"] for n in bundle.nodes}
    node_events = read(core.list_namespaced_event, NODE_EVENTS_NAMESPACE, field_selector="involvedObject.kind=Node").get("items", [])
    bundle.events = read(core.list_namespaced_event, namespace).get("items", []) + [
        e for e in node_events if e.get("involvedObject", {}).get("name") in node_names
    ]
    for pod in bundle.pods:
        name = pod["metadata"]["name"]
        for container in _started_containers(pod):
            text = read(core.read_namespaced_pod_log, name, namespace, container=container, timestamps=True, limit_bytes=LOG_LIMIT_BYTES)
            bundle.logs[(name, container)] = text.splitlines()
    return bundle


def _instance_filters(plan: Plan) -> list[Obj]:
    """The GPU node groups' instances, by the tags EKS managed node groups put on them (any state: a terminated
    instance still says when it launched)."""
    return [
        {"Name": "tag:eks:cluster-name", "Values": [plan.cluster_name]},
        {"Name": f"tag:{NODEGROUP_TAG}", "Values": [r.node_group_name for r in plan.roles.values()]},
    ]


def _started_containers(pod: Obj) -> list[str]:
    """Containers that have run (a log exists): running now or terminated."""
    status = pod.get("status", {})
    found = []
    for s in (status.get("initContainerStatuses") or []) + (status.get("containerStatuses") or []):
        state = s.get("state") or {}
        if "running" in state or "terminated" in state or s.get("lastState", {}).get("terminated"):
            found.append(s["name"])
    return found


def _plain(value: Any) -> Any:
    """An AWS response as JSON would carry it (datetimes as ISO 8601), without ResponseMetadata."""
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items() if k != "ResponseMetadata"}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    if isinstance(value, datetime):
        return value.isoformat()
    return value


# --- merge ----------------------------------------------------------------------------------------------


def merge(old: Bundle, new: Bundle) -> Bundle:
    logs = dict(old.logs)
    for key, lines in new.logs.items():
        logs[key] = _merge_lines(logs.get(key, []), lines)
    return Bundle(
        deployment=new.deployment,
        namespace=new.namespace,
        captures=old.captures + [c for c in new.captures if c not in old.captures],
        instances=_merge_by(old.instances, new.instances, lambda i: i.get("InstanceId")),
        reservation=new.reservation or old.reservation,
        nodes=_merge_by(old.nodes, new.nodes, _uid),
        pods=_merge_by(old.pods, new.pods, _uid),
        events=_merge_by(old.events, new.events, _uid),
        logs=logs,
    )


def _uid(obj: Obj) -> Any:
    meta = obj.get("metadata", {})
    return meta.get("uid") or (meta.get("namespace"), meta.get("name"))


def _merge_by(old: Iterable[Obj], new: Iterable[Obj], key: Any) -> list[Obj]:
    merged = {key(o): o for o in old}
    merged.update({key(o): o for o in new})
    return list(merged.values())


def _merge_lines(old: list[str], new: list[str]) -> list[str]:
    seen = dict.fromkeys(old)
    seen.update(dict.fromkeys(new))
    # The timestamp prefix sorts as text (RFC 3339 in UTC, fixed width from the API); sorted() is stable.
    return sorted(seen, key=lambda line: line.split(" ", 1)[0])


# --- files ----------------------------------------------------------------------------------------------


def write(directory: Path, bundle: Bundle) -> None:
    (directory / "ec2").mkdir(parents=True, exist_ok=True)
    (directory / "kube").mkdir(exist_ok=True)
    meta = {"format": FORMAT, "deployment": bundle.deployment, "namespace": bundle.namespace, "captures": bundle.captures}
    _dump(directory / "meta.json", meta)
    _dump(directory / "ec2" / "describe-instances.json", {"Reservations": [{"Instances": bundle.instances}]})
    if bundle.reservation is not None:
        _dump(directory / "ec2" / "capacity-reservation.json", bundle.reservation)
    _dump(directory / "kube" / "nodes.json", {"kind": "NodeList", "apiVersion": "v1", "items": bundle.nodes})
    _dump(directory / "kube" / "pods.json", {"kind": "PodList", "apiVersion": "v1", "items": bundle.pods})
    _dump(directory / "kube" / "events.json", {"kind": "EventList", "apiVersion": "v1", "items": bundle.events})
    for (pod, container), lines in bundle.logs.items():
        path = directory / "logs" / pod / f"{container}.log"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(f"{line}\n" for line in lines), encoding="utf-8")


def read(directory: Path) -> Bundle:
    if not (directory / "meta.json").is_file():
        raise KitError(f"{directory} is not a timeline bundle (no meta.json). Fix: capture one with `pdkit timeline --capture {directory}`")
    meta = _load(directory / "meta.json")
    if meta.get("format") != FORMAT:
        raise KitError(f"{directory}/meta.json: format {meta.get('format')!r} is not {FORMAT!r}. Fix: capture it again with this pdkit")
    reservation_path = directory / "ec2" / "capacity-reservation.json"
    logs: dict[tuple[str, str], list[str]] = {}
    for path in sorted((directory / "logs").glob("*/*.log")):
        logs[(path.parent.name, path.stem)] = path.read_text(encoding="utf-8", errors="replace").splitlines()
    return Bundle(
        deployment=str(meta.get("deployment", "")),
        namespace=str(meta.get("namespace", "")),
        captures=list(meta.get("captures", [])),
        instances=[i for r in _load(directory / "ec2" / "describe-instances.json").get("Reservations", []) for i in r.get("Instances", [])],
        reservation=_load(reservation_path) if reservation_path.is_file() else None,
        nodes=_load(directory / "kube" / "nodes.json").get("items", []),
        pods=_load(directory / "kube" / "pods.json").get("items", []),
        events=_load(directory / "kube" / "events.json").get("items", []),
        logs=logs,
    )


def capture_into(directory: Path, new: Bundle) -> Bundle:
    """Merge a fresh capture into DIR (created when missing) and return the merged bundle."""
    if (directory / "meta.json").is_file():
        old = read(directory)
        if old.deployment and old.deployment != new.deployment:
            raise KitError(
                f"{directory} holds deployment {old.deployment!r}, not {new.deployment!r}. Fix: capture {new.deployment} into another directory"
            )
        new = merge(old, new)
    write(directory, new)
    return new


def _dump(path: Path, data: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n", encoding="utf-8")
    tmp.replace(path)


def _load(path: Path) -> Any:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise KitError(
            f"{path} is missing from the bundle. Fix: capture again with `pdkit timeline --capture {path.parent.parent}`"
        ) from None
    except (OSError, ValueError) as err:
        raise KitError(f"{path}: not readable JSON ({str(err).splitlines()[0][:120]}). Fix: capture the bundle again") from None
    if not isinstance(data, dict):
        raise KitError(f"{path}: expected a JSON object. Fix: capture the bundle again")
    return data
