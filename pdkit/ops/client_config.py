"""How long a boto3 call may take and how often it is tried: shared by the CLI (pdkit.ops.aws_clients) and the
Lambda functions (pdkit/functions/capacity_purchase.py), so neither imports the other's code.

botocore's defaults are 60 s connect, 60 s read and 3 attempts in standard mode. An explicit client
`Config(retries=...)` takes precedence over AWS_MAX_ATTEMPTS and the config file's max_attempts
(botocore args.ClientArgsCreator._compute_retry_max_attempts), so no environment setting can turn
purchase retries back on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Patience:
    """How long one API call may take: connect and read timeouts per attempt, and total attempts."""

    connect: float
    read: float
    attempts: int

    @property
    def worst_case(self) -> float:
        """Seconds before the call gives up on an endpoint that never answers (backoff for timeouts is
        rand * 0.05 * 2**i s in standard mode, botocore retries/standard.py, so it is left out)."""
        return self.attempts * (self.connect + self.read)

    def config(self) -> Any:
        from botocore.config import Config

        # total_max_attempts counts the first request: 1 means "never retried"
        # (https://botocore.amazonaws.com/v1/documentation/api/latest/reference/config.html, `retries`).
        # The mode is pinned so the count means the same whatever AWS_RETRY_MODE says.
        return Config(
            connect_timeout=self.connect,
            read_timeout=self.read,
            retries={"mode": "standard", "total_max_attempts": self.attempts},
        )


# Describe/list calls answer in well under a second; 3 x (5 + 12) s keeps the give-up under 60 s.
READS = Patience(connect=5, read=12, attempts=3)
# PurchaseCapacityBlock(Extension) takes no idempotency token: a retry after a lost answer can buy
# twice, so the call is sent once and an unclear answer is checked by a lookup, never by resending.
PURCHASE = Patience(connect=10, read=60, attempts=1)
