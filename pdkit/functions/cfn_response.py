"""Answer a CloudFormation custom resource request (the pre-signed S3 URL protocol).

https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/crpg-ref-responses.html
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

MAX_REASON = 3500  # CloudFormation truncates long reasons; keep the fix visible.


def send(
    event: dict[str, Any],
    *,
    success: bool,
    reason: str,
    physical_id: str,
    data: dict[str, str] | None = None,
    opener: Any = urllib.request.urlopen,
) -> None:
    """`data` becomes the resource's attributes (Fn::GetAtt)."""
    answer: dict[str, Any] = {
        "Status": "SUCCESS" if success else "FAILED",
        "Reason": reason[:MAX_REASON],
        "PhysicalResourceId": physical_id,
        "StackId": event["StackId"],
        "RequestId": event["RequestId"],
        "LogicalResourceId": event["LogicalResourceId"],
    }
    if data:
        answer["Data"] = data
    body = json.dumps(answer).encode()
    url = event["ResponseURL"]
    if not url.startswith("https://"):
        raise ValueError("CloudFormation response URLs are https")
    request = urllib.request.Request(url, data=body, method="PUT", headers={"Content-Type": ""})  # noqa: S310 (scheme checked above)
    opener(request, timeout=30)
