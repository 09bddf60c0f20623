"""boto3 clients for one command, made in one place, with timeouts and retries the operator can wait for.

Clients are created on first use inside a handler, so `pdkit --help` never imports boto3. boto3
itself applies the credential chain (--aws-profile, AWS_PROFILE, SSO, ...) and `AWS_ENDPOINT_URL` /
`AWS_ENDPOINT_URL_<SERVICE>`; nothing here overrides them, so the CLI works against any endpoint
the operator configures (https://docs.aws.amazon.com/sdkref/latest/guide/feature-ss-endpoints.html).

Timeouts and attempts are set in pdkit.ops.client_config (shared with the purchase Lambda), not left to botocore's defaults (60 s connect, 60 s read, 3
attempts in standard mode): a read command gives up within `READS.worst_case` seconds, and a
purchase is sent exactly once (`PURCHASE`). An explicit client `Config(retries=...)` takes
precedence over AWS_MAX_ATTEMPTS and the config file's max_attempts (botocore
args.ClientArgsCreator._compute_retry_max_attempts), so an operator setting cannot turn purchase
retries back on. Tests replace `make_client` with Stubber-wrapped clients.
"""

from __future__ import annotations

import argparse
import os
import threading
from typing import Any

from pdkit.errors import KitError
from pdkit.model.plan import Plan
from pdkit.ops.aws_errors import endpoint_override, profile_not_found
from pdkit.ops.client_config import PURCHASE, READS, Patience

__all__ = ["PURCHASE", "READS", "Aws", "Patience", "make_client"]

# A call that has not answered after this many seconds gets a "waiting for ..." line on stderr.
WAIT_NOTICE_AFTER = 2.0


def aws_session(*, aws_profile: str | None, region: str) -> Any:
    """A boto3 session for the operator's credentials (--aws-profile, else AWS_PROFILE / the SDK chain)."""
    import boto3
    import botocore.exceptions

    try:
        return boto3.Session(profile_name=aws_profile, region_name=region)
    except botocore.exceptions.ProfileNotFound:
        raise profile_not_found(aws_profile) from None


def malformed_endpoint(service: str, err: ValueError) -> KitError | ValueError:
    """The one line for an AWS_ENDPOINT_URL* value botocore cannot use; the ValueError itself when no variable is set."""
    name = endpoint_override(service=service)
    if name is None:
        return err
    return KitError(
        f"{name}={os.environ[name].strip()} is not an endpoint URL botocore accepts ({err}). "
        f"Fix: a full URL with its scheme (e.g. http://127.0.0.1:4566), or unset {name} to use AWS"
    )


def make_client(service: str, *, aws_profile: str | None, region: str, patience: Patience | None = None) -> Any:
    """A boto3 client for `service` ("ec2", "eks", "sts", "service-quotas"), with credentials resolved afresh.
    `patience` defaults to READS (looked up at call time, so tests can shorten it)."""
    patience = patience or READS

    session = aws_session(aws_profile=aws_profile, region=region)
    try:
        client = session.client(service, config=patience.config())
    except ValueError as err:
        # botocore refuses an endpoint URL it cannot parse ("Invalid endpoint: localhost:4566", "Invalid IPv6 URL")
        # when the client is made, with a bare ValueError.
        raise malformed_endpoint(service, err) from None
    WaitNotice(client, patience).attach()
    return client


class WaitNotice:
    """Says on stderr which call the command is waiting for once it takes longer than WAIT_NOTICE_AFTER.

    Hooks botocore's per-call events (before-call, after-call, after-call-error), so every API call
    of the client is covered, retries included, and nothing is printed for calls that answer fast.
    """

    def __init__(self, client: Any, patience: Patience) -> None:
        self.client = client
        self.patience = patience
        self._lock = threading.Lock()
        self._timer: threading.Timer | None = None
        self._shown: Any = None

    def attach(self) -> None:
        events = self.client.meta.events
        events.register("before-call", self._start, unique_id=f"pdkit-wait-start-{id(self)}")
        events.register("after-call", self._stop, unique_id=f"pdkit-wait-stop-{id(self)}")
        events.register("after-call-error", self._stop, unique_id=f"pdkit-wait-error-{id(self)}")

    def _start(self, model: Any = None, **_: Any) -> None:
        self._stop()
        operation = getattr(model, "name", "the call")
        timer = threading.Timer(WAIT_NOTICE_AFTER, self._show, args=(operation,))
        timer.daemon = True
        with self._lock:
            self._timer = timer
        timer.start()

    def _show(self, operation: str) -> None:
        from pdkit import console

        attempts = "once, no retries" if self.patience.attempts == 1 else f"{self.patience.attempts} attempts"
        text = (
            f"Waiting for {operation} at {self.client.meta.endpoint_url} (gives up after {self.patience.worst_case:.0f} s; {attempts})..."
        )
        with self._lock:
            if self._timer is None:
                return
            self._shown = console.waiting(text)

    def _stop(self, **_: Any) -> None:
        with self._lock:
            timer, shown = self._timer, self._shown
            self._timer = self._shown = None
        if timer is not None:
            timer.cancel()
        if shown is not None:
            shown.stop()


class Aws:
    """The AWS clients of one command: one region, one credentials profile, each client made once."""

    def __init__(self, *, aws_profile: str | None, region: str) -> None:
        self.aws_profile = aws_profile
        self.region = region
        self._clients: dict[str, Any] = {}
        self._purchase_ec2: Any = None

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
    def purchase_ec2(self) -> Any:
        """The EC2 client for PurchaseCapacityBlock(Extension) only: one attempt, never retried."""
        if self._purchase_ec2 is None:
            self._purchase_ec2 = make_client("ec2", aws_profile=self.aws_profile, region=self.region, patience=PURCHASE)
        return self._purchase_ec2

    @property
    def eks(self) -> Any:
        return self.client("eks")

    @property
    def sts(self) -> Any:
        return self.client("sts")

    @property
    def quotas(self) -> Any:
        return self.client("service-quotas")
