"""AWS failures as one line an operator can act on: what failed, why, and the command that fixes it.

Only failures with a known cause are translated. Anything else (including botocore's Stubber
assertions in tests) propagates, so a bug is never disguised as an operator error.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from pdkit.errors import KitError

CREDENTIALS = frozenset(
    {
        "ExpiredToken",
        "ExpiredTokenException",
        "RequestExpired",
        "InvalidClientTokenId",
        "UnrecognizedClientException",
        "AuthFailure",
        "SignatureDoesNotMatch",
        "InvalidToken",
        "IncompleteSignature",
    }
)
DENIED = frozenset(
    {"AccessDenied", "AccessDeniedException", "UnauthorizedOperation", "Client.UnauthorizedOperation", "UnauthorizedException"}
)
THROTTLED = frozenset(
    {"Throttling", "ThrottlingException", "RequestLimitExceeded", "TooManyRequestsException", "RequestThrottled", "ThrottledException"}
)
RESERVATION_UNKNOWN = frozenset({"InvalidCapacityReservationId.NotFound", "InvalidCapacityReservationId.Malformed"})
# OptInRequired: the region is not enabled for the account. The others: the API does not exist at that endpoint.
UNSUPPORTED = frozenset({"OptInRequired", "UnsupportedOperation", "InvalidAction", "UnknownOperationException"})
# IAM service prefixes of the operations the kit calls that are not EC2 (for "not allowed to call eks:...").
_SERVICE_OF = {
    "GetCallerIdentity": "sts",
    "GetServiceQuota": "servicequotas",
    "GetAWSDefaultServiceQuota": "servicequotas",
    "DescribeCluster": "eks",
    "DescribeNodegroup": "eks",
    "UpdateNodegroupConfig": "eks",
    "DescribeUpdate": "eks",
    "DescribeAddonVersions": "eks",
}


def error_code(err: BaseException) -> str | None:
    """The AWS error code of a botocore ClientError, else None."""
    response = getattr(err, "response", None)
    if not isinstance(response, dict):
        return None
    code = response.get("Error", {}).get("Code")
    return str(code) if code else None


def iam_action(err: BaseException) -> str:
    operation = str(getattr(err, "operation_name", "") or "the operation")
    return f"{_SERVICE_OF.get(operation, 'ec2')}:{operation}"


def is_denied(err: BaseException) -> bool:
    return error_code(err) in DENIED


def explain(err: BaseException, *, region: str) -> KitError | None:
    """The operator-facing KitError for an AWS failure, or None when it is not one we understand."""
    from botocore import exceptions as bx

    if isinstance(err, bx.ClientError):
        return _client_error(err, region=region)
    if isinstance(err, bx.EndpointConnectionError):
        url = getattr(err, "kwargs", {}).get("endpoint_url", "the AWS endpoint")
        return KitError(
            f"cannot reach {url}: the region {region!r} may not exist or not offer this service, or the network, proxy or "
            f"AWS_ENDPOINT_URL* setting is wrong. Fix: check --region / aws.region (`aws ec2 describe-regions`) and your network"
        )
    if isinstance(err, bx.ConnectTimeoutError | bx.ReadTimeoutError):
        return KitError(f"AWS did not answer in time ({err}). Fix: check the network or proxy, then run the command again")
    if isinstance(err, bx.UnauthorizedSSOTokenError | bx.SSOTokenLoadError | bx.TokenRetrievalError | bx.SSOError):
        return KitError(
            "your AWS SSO session has expired or was never started. Fix: `aws sso login --profile NAME`, then pass --aws-profile NAME"
        )
    if isinstance(err, bx.NoCredentialsError | bx.PartialCredentialsError | bx.CredentialRetrievalError):
        return KitError(
            "no usable AWS credentials found. Fix: `aws configure sso` (or `aws sso login --profile NAME`), then pass --aws-profile NAME or set AWS_PROFILE"
        )
    if isinstance(err, bx.ProfileNotFound):
        return KitError(f"{err}. Fix: `aws configure list-profiles`, or drop --aws-profile to use AWS_PROFILE")
    if isinstance(err, bx.NoRegionError):
        return KitError("no AWS region. Fix: pass --region, or set aws.region in the deployment profile")
    return None


def _client_error(err: Any, *, region: str) -> KitError:
    code = error_code(err) or "Unknown"
    message = str(err.response.get("Error", {}).get("Message", "")).strip()
    first = message.split(". Encoded authorization failure message")[0].split("\n")[0]
    action = iam_action(err)
    if code in CREDENTIALS:
        return KitError(
            f"AWS rejected the credentials ({code}: {first}). Fix: refresh them (`aws sso login --profile NAME`, or new keys), "
            "then pass --aws-profile NAME or set AWS_PROFILE"
        )
    if code in DENIED:
        decode = " (decode details with `aws sts decode-authorization-message --encoded-message ...`)" if "Encoded" in message else ""
        return KitError(
            f"your AWS identity is not allowed to call {action} in {region}{decode}. Fix: add {action} to your IAM role or policy, "
            "or use credentials that have it (--aws-profile)"
        )
    if code in THROTTLED:
        return KitError(f"AWS throttled {action} even after retries ({code}). Fix: wait a minute and run the command again")
    if code in RESERVATION_UNKNOWN:
        return KitError(
            f"no such Capacity Reservation in {region} for these credentials ({code}: {first}). Fix: check capacity.reservation_id, "
            f"--region and --aws-profile; list yours with `aws ec2 describe-capacity-reservations --region {region}`"
        )
    if code in UNSUPPORTED:
        fix = (
            "enable the region for this account (AWS console, Account, AWS Regions)"
            if code == "OptInRequired"
            else "use a region that offers it"
        )
        return KitError(f"{action} is not available in {region} ({code}: {first}). Fix: {fix}, or pass --region")
    request_id = err.response.get("ResponseMetadata", {}).get("RequestId", "")
    rid = f" (request id {request_id})" if request_id else ""
    return KitError(f"{action} failed in {region}: {code}: {first}{rid}. Fix: act on the AWS message; AWS Support needs the request id")


@contextmanager
def translated(*, region: str) -> Iterator[None]:
    """Turn understood AWS failures inside the block into one-line KitErrors (exit 2, no traceback)."""
    try:
        yield
    except KitError:
        raise
    except Exception as err:
        kit = explain(err, region=region)
        if kit is None:
            raise
        raise kit from None
