"""The pinned EKS add-on versions (pdkit/model/data/addons.yaml) against what EKS lists for the cluster's Kubernetes version.

One reading serves both callers: `pdkit preflight` (its "EKS add-ons" row) and the gate `make deploy` runs in
`pdkit deploy-check`, before `cdk deploy` creates anything. A pin EKS does not list as compatible would otherwise
surface 20 minutes into the cluster stack's create, as an AWS::EKS::Addon failure that rolls the stack back.

EKS: "Before you create an Amazon EKS add-on you need to verify that the Amazon EKS add-on version is compatible
with your cluster", with DescribeAddonVersions for the add-on and the cluster's Kubernetes version
(https://docs.aws.amazon.com/eks/latest/userguide/addon-compat.html). A version is compatible when one of its
`compatibilities` names the cluster version (API_Compatibility: clusterVersion, defaultVersion). The answer is
paginated (nextToken, at most 100 per page: API_DescribeAddonVersions), and EKS does not promise an order, so the
newest is found by comparing versions, with or without the leading v (eksctl sorts them too:
pkg/addons/default/kube_proxy_test.go, "Latest, unordered list to ensure we sort correctly").
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pdkit import console
from pdkit.errors import KitError
from pdkit.model.catalog import addons
from pdkit.model.plan import Plan
from pdkit.ops import aws_errors

PINS_FILE = "pdkit/model/data/addons.yaml"
_VERSION = re.compile(r"^v?(\d+)\.(\d+)\.(\d+)(?:-eksbuild\.(\d+))?$")


@dataclass(frozen=True)
class Offered:
    version: str
    default: bool


@dataclass(frozen=True)
class Verdict:
    """One pinned add-on: whether EKS lists the pin as compatible with the cluster version, and what it lists."""

    name: str
    pinned: str
    kubernetes_version: str
    offered: tuple[Offered, ...]

    @property
    def compatible(self) -> bool:
        return any(o.version == self.pinned for o in self.offered)

    @property
    def newest(self) -> str | None:
        return max((o.version for o in self.offered), key=version_key, default=None)

    @property
    def default(self) -> str | None:
        return next((o.version for o in self.offered if o.default), None)

    def problem(self) -> str:
        if not self.offered:
            return f"EKS lists no version of add-on {self.name} for Kubernetes {self.kubernetes_version}"
        return f"{self.name} {self.pinned} is not listed as compatible with Kubernetes {self.kubernetes_version}"

    def fix(self) -> str:
        if not self.offered:
            return f"check the add-on name and the region: `aws eks describe-addon-versions --addon-name {self.name} --kubernetes-version {self.kubernetes_version}`"
        default = f"; EKS's default is {self.default}" if self.default and self.default != self.newest else ""
        return f"pin {self.name}: {self.newest} (the newest EKS lists for Kubernetes {self.kubernetes_version}{default}) in {PINS_FILE}"


def version_key(version: str) -> tuple[int, ...]:
    """v1.23.0-eksbuild.1 -> (1, 23, 0, 1); a version of another form sorts below every one of this form."""
    match = _VERSION.match(version)
    return tuple(int(part or 0) for part in match.groups()) if match else (-1,)


def offered(eks: Any, name: str, kubernetes_version: str) -> tuple[Offered, ...]:
    """Every version of `name` EKS lists as compatible with `kubernetes_version`, over all pages."""
    found: list[Offered] = []
    for page in eks.get_paginator("describe_addon_versions").paginate(addonName=name, kubernetesVersion=kubernetes_version):
        for addon in page.get("addons", []):
            if addon.get("addonName", name) != name:
                continue
            for row in addon.get("addonVersions", []):
                matching = [c for c in row.get("compatibilities", []) if c.get("clusterVersion") == kubernetes_version]
                if matching and "addonVersion" in row:
                    found.append(Offered(row["addonVersion"], any(c.get("defaultVersion") for c in matching)))
    return tuple(found)


def check(eks: Any, pins: Mapping[str, str], kubernetes_version: str) -> list[Verdict]:
    """One verdict per pin, in name order: the function preflight's row and the deploy gate share."""
    return [Verdict(name, pinned, kubernetes_version, offered(eks, name, kubernetes_version)) for name, pinned in sorted(pins.items())]


def refusal(verdicts: list[Verdict]) -> KitError | None:
    """One line naming every pin EKS does not list as compatible, and the pin to use instead; None when all are."""
    bad = [v for v in verdicts if not v.compatible]
    if not bad:
        return None
    return KitError(
        "the EKS add-on pins do not fit the cluster's Kubernetes version, so the cluster stack would fail at its add-ons: "
        + "; ".join(v.problem() for v in bad)
        + ". Nothing was deployed. Fix: "
        + "; ".join(v.fix() for v in bad)
    )


def gate(plan: Plan, aws: Any) -> list[Verdict]:
    """Refuse the deploy (KitError, one line) unless EKS lists every managed add-on pin for the plan's Kubernetes
    version; the pins are the ones the cluster stack deploys (pdkit.model.catalog.addons)."""
    with aws_errors.translated(region=aws.region):
        verdicts = check(aws.eks, addons().managed, plan.kubernetes_version)
    refused = refusal(verdicts)
    if refused is not None:
        raise refused
    console.say(
        f"deploy check: EKS lists every pinned add-on version as compatible with Kubernetes {plan.kubernetes_version} "
        f"({', '.join(f'{v.name} {v.pinned}' for v in verdicts)})."
    )
    return verdicts
