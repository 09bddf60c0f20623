"""How the kit scales a DisaggregatedSet: one JSON patch of every role's replicas.

Standard library only: the block lifecycle Lambda (pdkit/functions/kube_api.py) ships this file in its
bundle, and the drain runbook and `pdkit nodes` render the same patch for kubectl and the Kubernetes client.
"""

from __future__ import annotations

from typing import Any


def roles_patch(replicas: dict[str, int]) -> list[dict[str, Any]]:
    """JSON patch (RFC 6902) of a DisaggregatedSet setting each role's replicas, `replicas` in spec.roles
    order: a `test` of the role's name guards each index, so a reordered object is refused, not
    mis-scaled. One patch for every role: the CRD wants replicas all zero or all non-zero."""
    patch: list[dict[str, Any]] = []
    for i, (role, count) in enumerate(replicas.items()):
        patch.append({"op": "test", "path": f"/spec/roles/{i}/name", "value": role})
        patch.append({"op": "replace", "path": f"/spec/roles/{i}/spec/replicas", "value": count})
    return patch
