"""Serving figures, every minute: PromQL in the Prometheus workspace -> CloudWatch metrics.

Evaluates pdkit/render/observability/figures.py against the workspace's query API (SigV4, service `aps`)
and publishes each result in PDKit/Serving (dimensions ClusterName, and Role for per-role figures),
where the serving dashboard, the serving alarms and `pdkit status` read them.
A query that fails is logged and skipped; the run fails only when every query does (then the
pipeline alarm pages instead of the serving alarms going quietly blind). Overlapping runs publish
the same minute's figures twice, which the alarms' 60 s statistics absorb. Standard library + boto3.
"""

from __future__ import annotations

import json
import math
import os
import urllib.parse
import urllib.request
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from typing import Any

from pdkit.render.observability import catalog as c
from pdkit.render.observability.figures import FIGURES, Figure

Query = Callable[[str], list[dict[str, Any]]]
BATCH = 20
TIMEOUT_SECONDS = 5
# Queries run side by side so a slow endpoint cannot push one run past the next minute.
PARALLEL = 8


def datums(figures: Iterable[Figure], query: Query, *, cluster: str, roles: list[str]) -> tuple[list[dict[str, Any]], list[str]]:
    """CloudWatch MetricData entries (without timestamps) and the metrics whose query failed."""
    out: list[dict[str, Any]] = []
    failed: list[str] = []
    figures = list(figures)
    with ThreadPoolExecutor(max_workers=PARALLEL) as pool:
        answers = list(pool.map(lambda f: _attempt(query, f.promql), figures))
    for figure, (result, error) in zip(figures, answers, strict=True):
        if error is not None:
            print(f"query for {figure.metric} failed: {error}")
            failed.append(figure.metric)
            continue
        values: dict[tuple[tuple[str, str], ...], float] = {}
        for sample in result:
            value = float(sample["value"][1])
            key = _dimensions(figure, sample.get("metric", {}))
            if math.isfinite(value) and key is not None and (not figure.by_role or dict(key)["Role"] in roles):
                values[key] = value
        if figure.absent_is_zero:
            for role in roles if figure.by_role else [None]:
                values.setdefault((("Role", role),) if role else (), 0.0)
        for key, value in sorted(values.items()):
            dims = [{"Name": "ClusterName", "Value": cluster}] + [{"Name": k, "Value": v} for k, v in key]
            out.append({"MetricName": figure.metric, "Dimensions": dims, "Value": value, "Unit": figure.unit})
    return out, failed


def _dimensions(figure: Figure, labels: dict[str, str]) -> tuple[tuple[str, str], ...] | None:
    """The CloudWatch dimensions (besides ClusterName) of one result sample; None when a label is missing."""
    wanted: tuple[tuple[str, str], ...] = ((c.ROLE, "Role"),) if figure.by_role else ()
    if figure.per_rank:
        wanted = ((c.DP_RANK, "DpRank"), (c.REPLICA, "Replica"), (c.ROLE, "Role"))
    if any(not labels.get(label) for label, _ in wanted):
        return None
    return tuple((name, labels[label]) for label, name in wanted)


def _attempt(query: Query, promql: str) -> tuple[list[dict[str, Any]], Exception | None]:
    try:
        return query(promql), None
    except Exception as err:
        return [], err


def signed_query(endpoint: str, region: str, *, credentials: Any = None, opener: Callable[..., Any] | None = None) -> Query:
    """A PromQL instant query against the workspace's Prometheus-compatible API, signed with SigV4."""
    from botocore.auth import SigV4Auth
    from botocore.awsrequest import AWSRequest

    url = endpoint.rstrip("/") + "/api/v1/query"
    if not url.startswith("https://"):
        raise ValueError(f"the workspace endpoint must be https: {endpoint}")
    open_url = opener or urllib.request.urlopen
    if credentials is None:
        import boto3

        credentials = boto3.Session().get_credentials()

    def run(promql: str) -> list[dict[str, Any]]:
        body = urllib.parse.urlencode({"query": promql})
        signed = AWSRequest(method="POST", url=url, data=body, headers={"Content-Type": "application/x-www-form-urlencoded"})
        SigV4Auth(credentials.get_frozen_credentials(), "aps", region).add_auth(signed)
        request = urllib.request.Request(url, data=body.encode(), headers=dict(signed.headers.items()), method="POST")  # noqa: S310 - https only, checked above
        with open_url(request, timeout=TIMEOUT_SECONDS) as response:
            payload = json.load(response)
        if payload.get("status") != "success":
            raise RuntimeError(f"{payload.get('errorType')}: {payload.get('error')}")
        result: list[dict[str, Any]] = payload["data"]["result"]
        return result

    return run


def handler(
    event: dict[str, Any], context: Any, *, query: Query | None = None, cloudwatch: Any = None, now: datetime | None = None
) -> dict[str, Any]:
    env = os.environ
    roles = [r for r in env["ROLES"].split(",") if r]
    run = query or signed_query(env["WORKSPACE_ENDPOINT"], env["AWS_REGION"])
    data, failed = datums(FIGURES, run, cluster=env["CLUSTER_NAME"], roles=roles)
    if failed and len(failed) == len(FIGURES):
        raise RuntimeError(f"every Prometheus query failed ({len(failed)}); see the log above")
    cw = cloudwatch or _cloudwatch()
    stamp = now or datetime.now(UTC)
    for i in range(0, len(data), BATCH):
        cw.put_metric_data(Namespace=c.SERVING_NAMESPACE, MetricData=[d | {"Timestamp": stamp} for d in data[i : i + BATCH]])
    return {"published": len(data), "failed": failed}


def _cloudwatch() -> Any:
    import boto3

    return boto3.client("cloudwatch")
