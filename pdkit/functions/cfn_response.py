"""Answer a CloudFormation custom resource request (the pre-signed S3 URL protocol).

"The total size of the response body can't exceed 4096 bytes", and PhysicalResourceId "can be up to 1 KB in size"
(https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/crpg-ref-responses.html). Both are counted here in
bytes of the body as sent (JSON escapes every non-ASCII character as \\uXXXX, six bytes or twelve), never in
characters: a body over the limit is an answer CloudFormation cannot take, and the stack waits for a timeout.
"""

from __future__ import annotations

import json
import urllib.request
from typing import Any

MAX_BODY_BYTES = 4096
MAX_PHYSICAL_ID_BYTES = 1024
CUT = " [...]"


def body(event: dict[str, Any], *, success: bool, reason: str, physical_id: str, data: dict[str, str] | None = None) -> bytes:
    """The JSON answer, within CloudFormation's limits: the Reason is shortened first (its start kept, where the
    problem is named); Data that alone overflows the body is dropped and the answer becomes FAILED, saying so; a
    physical id over 1 KB fails the request the same way."""
    for key in ("StackId", "RequestId", "LogicalResourceId"):
        if not isinstance(event.get(key), str):
            raise ValueError(f"the request has no {key}: not a CloudFormation custom resource request")
    if len(physical_id.encode()) > MAX_PHYSICAL_ID_BYTES:
        reason = f"the handler's physical id is over CloudFormation's 1 KB limit ({len(physical_id.encode())} bytes); {reason}"
        success, physical_id = False, physical_id.encode()[:MAX_PHYSICAL_ID_BYTES].decode(errors="ignore")
    answer: dict[str, Any] = {
        "Status": "SUCCESS" if success else "FAILED",
        "Reason": reason,
        "PhysicalResourceId": physical_id,
        "StackId": event["StackId"],
        "RequestId": event["RequestId"],
        "LogicalResourceId": event["LogicalResourceId"],
    }
    if data:
        answer["Data"] = data
    encoded = _encode(answer)
    if len(encoded) <= MAX_BODY_BYTES:
        return encoded
    if data and len(_encode(answer | {"Reason": ""})) > MAX_BODY_BYTES:
        answer.pop("Data")
        answer["Status"] = "FAILED"
        answer["Reason"] = reason = f"the attributes (Data) do not fit CloudFormation's 4,096-byte answer; {reason}"
        encoded = _encode(answer)
        if len(encoded) <= MAX_BODY_BYTES:
            return encoded
    # The longest start of the reason that fits (each character costs 1 to 12 bytes, so search on characters).
    low, high = 0, len(reason)
    while low < high:
        mid = (low + high + 1) // 2
        if len(_encode(answer | {"Reason": reason[:mid] + CUT})) <= MAX_BODY_BYTES:
            low = mid
        else:
            high = mid - 1
    return _encode(answer | {"Reason": reason[:low] + CUT})


def _encode(answer: dict[str, Any]) -> bytes:
    return json.dumps(answer).encode()


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
    url = event.get("ResponseURL")
    if not isinstance(url, str) or not url.startswith("https://"):
        raise ValueError("CloudFormation response URLs are https")
    payload = body(event, success=success, reason=reason, physical_id=physical_id, data=data)
    request = urllib.request.Request(url, data=payload, method="PUT", headers={"Content-Type": ""})  # noqa: S310 (scheme checked above)
    opener(request, timeout=30)
