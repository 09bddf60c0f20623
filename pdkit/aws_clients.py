"""boto3 clients for one command, made in one place.

Clients are created on first use inside a handler, so `pdkit --help` never imports boto3. boto3
itself applies the credential chain (--aws-profile, AWS_PROFILE, SSO, ...), retries and
`AWS_ENDPOINT_URL` / `AWS_ENDPOINT_URL_<SERVICE>`; nothing here overrides them, so the CLI works
against any endpoint the operator configures
(https://docs.aws.amazon.com/sdkref/latest/guide/feature-ss-endpoints.html).
Tests replace `make_client` with Stubber-wrapped clients.
"""

from __future__ import annotations

import argparse
from typing import Any

from pdkit.plan import Plan


def make_client(service: str, *, aws_profile: str | None, region: str) -> Any:
    """A boto3 client for `service` ("ec2", "eks", "sts", "service-quotas"), with credentials resolved afresh."""
    from pdkit.context import aws_session

    return aws_session(aws_profile=aws_profile, region=region).client(service)


class Aws:
    """The AWS clients of one command: one region, one credentials profile, each client made once."""

    def __init__(self, *, aws_profile: str | None, region: str) -> None:
        self.aws_profile = aws_profile
        self.region = region
        self._clients: dict[str, Any] = {}

    @classmethod
    def for_args(cls, args: argparse.Namespace, plan: Plan) -> Aws:
        """--region overrides the profile's region; --aws-profile picks credentials (else AWS_PROFILE / the SDK chain)."""
        return cls(aws_profile=args.aws_profile, region=args.region or plan.region)

    def client(self, service: str) -> Any:
        if service not in self._clients:
            self._clients[service] = make_client(service, aws_profile=self.aws_profile, region=self.region)
        return self._clients[service]

    @property
    def ec2(self) -> Any:
        return self.client("ec2")

    @property
    def eks(self) -> Any:
        return self.client("eks")

    @property
    def sts(self) -> Any:
        return self.client("sts")

    @property
    def quotas(self) -> Any:
        return self.client("service-quotas")
