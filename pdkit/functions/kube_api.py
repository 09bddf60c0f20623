"""Just enough of the Kubernetes API for the block lifecycle Lambda: standard library and boto3 only.
Separate from the operator's client (pdkit/ops/kube.py) by design: the Lambda ships without the
kubernetes package, signs its own EKS token and needs only a few calls.

Authentication is EKS's IAM scheme (aws-iam-authenticator, `aws eks get-token`): the bearer token is
`k8s-aws-v1.` + the unpadded base64url of a presigned STS GetCallerIdentity URL whose signed headers
include `x-k8s-aws-id: <cluster name>`. Signing is local (no STS call); EKS maps the role to the
Kubernetes groups of its access entry. TLS is verified against the cluster's own CA.
"""

from __future__ import annotations

import base64
import http.client
import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any

from pdkit.render.serving.scale import roles_patch

TOKEN_PREFIX = "k8s-aws-v1."  # noqa: S105 - the scheme prefix, not a secret
CLUSTER_ID_HEADER = "x-k8s-aws-id"
URL_EXPIRES_SECONDS = 60  # as `aws eks get-token`; EKS accepts a token for 15 minutes whatever this says
DS_GROUP_VERSION = "disaggregatedset.x-k8s.io/v1"
REQUEST_TIMEOUT_SECONDS = 10

Opener = Callable[..., Any]  # urlopen-like: opener(request, timeout=...) -> response with read()


class ApiError(Exception):
    """The API server could not be reached or refused a request; `status` is the HTTP status if any."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class Tokens:
    """Bearer tokens for `cluster`, signed with the session's credentials (the Lambda's role); a fresh
    one per request, so a drain that waits for minutes never outlives its token."""

    def __init__(self, cluster: str, *, session: Any = None) -> None:
        if session is None:
            import boto3

            session = boto3.session.Session()
        self._cluster = cluster
        self._sts = session.client("sts", region_name=session.region_name)
        self._sts.meta.events.register("before-sign.sts.GetCallerIdentity", self._add_cluster_header)

    def _add_cluster_header(self, request: Any, **_: Any) -> None:
        request.headers[CLUSTER_ID_HEADER] = self._cluster

    def __call__(self) -> str:
        url: str = self._sts.generate_presigned_url("get_caller_identity", Params={}, ExpiresIn=URL_EXPIRES_SECONDS, HttpMethod="GET")
        return TOKEN_PREFIX + base64.urlsafe_b64encode(url.encode()).decode().rstrip("=")


def token(cluster: str, *, session: Any = None) -> str:
    return Tokens(cluster, session=session)()


def tls_opener(ca_data: str) -> Opener:
    """An opener that trusts only the cluster CA (base64 PEM, as EKS reports certificateAuthority.data)."""
    context = ssl.create_default_context(cadata=base64.b64decode(ca_data).decode())
    return urllib.request.build_opener(urllib.request.HTTPSHandler(context=context)).open


class KubeApi:
    def __init__(self, endpoint: str, *, bearer: Callable[[], str], opener: Opener, timeout: float = REQUEST_TIMEOUT_SECONDS) -> None:
        if not endpoint.startswith("https://"):
            raise ValueError(f"the Kubernetes API endpoint must be https, got {endpoint!r}")
        self._endpoint = endpoint.rstrip("/")
        self._bearer = bearer
        self._opener = opener
        self._timeout = timeout

    def scale_roles(self, namespace: str, name: str, replicas: dict[str, int]) -> bool:
        """Set the DisaggregatedSet's role replicas (`roles_patch`); False when it does not exist. Its
        controller reverts any scaling of the LeaderWorkerSets it owns, so this is the one place to scale."""
        path = f"/apis/{DS_GROUP_VERSION}/namespaces/{_q(namespace)}/disaggregatedsets/{_q(name)}"
        try:
            self._call("PATCH", path, roles_patch(replicas), content_type="application/json-patch+json")
        except ApiError as exc:
            if exc.status == 404:
                return False
            raise
        return True

    def pods(self, namespace: str, selector: dict[str, str]) -> list[str]:
        """Names of the pods matching every label in `selector` (terminating pods included)."""
        query = urllib.parse.urlencode({"labelSelector": ",".join(f"{k}={v}" for k, v in selector.items())})
        found = self._call("GET", f"/api/v1/namespaces/{_q(namespace)}/pods?{query}")
        return [item["metadata"]["name"] for item in found.get("items", [])]

    def nodes(self, selector: str) -> list[dict[str, Any]]:
        """Nodes matching a label selector: name, labels and the EC2 instance id of `spec.providerID`
        (`aws:///<az>/<instance id>`), None while the node has not reported one."""
        query = urllib.parse.urlencode({"labelSelector": selector})
        found = self._call("GET", f"/api/v1/nodes?{query}")
        return [
            {
                "name": item["metadata"]["name"],
                "labels": item["metadata"].get("labels") or {},
                "instance_id": (item.get("spec", {}).get("providerID") or "").rsplit("/", 1)[-1] or None,
            }
            for item in found.get("items", [])
        ]

    def label_node(self, name: str, labels: dict[str, str]) -> None:
        """Merge-patch labels onto a Node (RFC 7386: the other labels stay as they are)."""
        self._call("PATCH", f"/api/v1/nodes/{_q(name)}", {"metadata": {"labels": labels}}, content_type="application/merge-patch+json")

    def _call(self, method: str, path: str, body: Any = None, *, content_type: str = "application/json") -> dict[str, Any]:
        headers = {"Authorization": f"Bearer {self._bearer()}", "Accept": "application/json"}
        data = None
        if body is not None:
            data = json.dumps(body).encode()
            headers["Content-Type"] = content_type
        request = urllib.request.Request(self._endpoint + path, data=data, method=method, headers=headers)  # noqa: S310 (https checked in __init__)
        try:
            with self._opener(request, timeout=self._timeout) as response:
                raw = response.read()
        except urllib.error.HTTPError as exc:
            raise ApiError(f"{method} {path}: HTTP {exc.code} {_status_message(exc)}", exc.code) from exc
        except (urllib.error.URLError, OSError, http.client.HTTPException, ValueError) as exc:
            raise ApiError(f"{method} {path}: {exc}") from exc
        loaded = json.loads(raw) if raw else {}
        return loaded if isinstance(loaded, dict) else {}


def from_env(env: Any, *, session: Any = None) -> KubeApi:
    """The client the Lambda uses: KUBE_ENDPOINT, KUBE_CA_DATA and CLUSTER_NAME from its environment."""
    return KubeApi(env["KUBE_ENDPOINT"], bearer=Tokens(env["CLUSTER_NAME"], session=session), opener=tls_opener(env["KUBE_CA_DATA"]))


def _q(segment: str) -> str:
    return urllib.parse.quote(segment, safe="")


def _status_message(exc: urllib.error.HTTPError) -> str:
    """The `message` of a Kubernetes Status body, when there is one."""
    try:
        status = json.loads(exc.read() or b"{}")
    except (ValueError, OSError):
        return str(exc.reason)
    return str(status.get("message", exc.reason)) if isinstance(status, dict) else str(exc.reason)
