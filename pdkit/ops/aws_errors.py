"""AWS failures as one line an operator can act on: what failed, why, and the command that fixes it.

Only failures with a known cause are translated. Anything else (including botocore's Stubber
assertions in tests) propagates, so a bug is never disguised as an operator error.
"""

from __future__ import annotations

import os
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
    "GetTemplate": "cloudformation",
    "DescribeStacks": "cloudformation",
    "GetParameter": "ssm",
    "GetAccountSettings": "lambda",
    "ListFunctions": "lambda",
    "GetFunctionConcurrency": "lambda",
    # pdkit rehearse's teardown check (pdkit/ops/rehearsal.py)
    "ListNodegroups": "eks",
    "GetResources": "tag",
    "DescribeKey": "kms",
    "DescribeLogGroups": "logs",
}
# Operations whose IAM action has another name. ListObjectsV2 is allowed by s3:ListBucket:
# https://docs.aws.amazon.com/AmazonS3/latest/API/API_ListObjectsV2.html
_ACTION_OF = {"ListObjectsV2": "s3:ListBucket"}


def error_code(err: BaseException) -> str | None:
    """The AWS error code of a botocore ClientError, else None."""
    response = getattr(err, "response", None)
    if not isinstance(response, dict):
        return None
    code = response.get("Error", {}).get("Code")
    return str(code) if code else None


def iam_action(err: BaseException) -> str:
    operation = str(getattr(err, "operation_name", "") or "the operation")
    return _ACTION_OF.get(operation) or f"{_SERVICE_OF.get(operation, 'ec2')}:{operation}"


def is_denied(err: BaseException) -> bool:
    return error_code(err) in DENIED


def stack_missing(err: BaseException) -> bool:
    """Asked for by name, a stack that does not exist is a ValidationError "Stack with id X does not exist"."""
    message = str(getattr(err, "response", {}).get("Error", {}).get("Message", ""))
    return error_code(err) == "ValidationError" and "does not exist" in message


def explain(err: BaseException, *, region: str) -> KitError | None:
    """The operator-facing KitError for an AWS failure, or None when it is not one we understand."""
    from botocore import exceptions as bx

    if isinstance(err, bx.ClientError):
        return _client_error(err, region=region)
    if isinstance(err, bx.EndpointConnectionError | bx.ConnectTimeoutError | bx.ReadTimeoutError | bx.ConnectionClosedError):
        return _unreachable(err, region=region)
    if isinstance(err, bx.UnauthorizedSSOTokenError | bx.SSOTokenLoadError | bx.TokenRetrievalError | bx.SSOError):
        return KitError(
            "your AWS SSO session has expired or was never started. Fix: `aws sso login --profile NAME`, then pass --aws-profile NAME"
        )
    if isinstance(err, bx.NoCredentialsError | bx.PartialCredentialsError | bx.CredentialRetrievalError):
        return KitError(
            "no usable AWS credentials found. Fix: `aws configure sso` (or `aws sso login --profile NAME`), then pass --aws-profile NAME or set AWS_PROFILE"
        )
    if isinstance(err, bx.ProfileNotFound):
        return profile_not_found(None)
    if isinstance(err, bx.NoRegionError):
        return KitError("no AWS region. Fix: pass --region, or set aws.region in the deployment profile")
    return None


def endpoint_variables(service: str) -> tuple[str, str]:
    """The two environment variables that set `service`'s endpoint, in the SDK's order: AWS_ENDPOINT_URL_<SERVICE ID>,
    then AWS_ENDPOINT_URL. The service id is botocore's (aliases resolved, hyphens to
    underscores, upper case, as configprovider.ConfiguredEndpointProvider): `service-quotas` -> AWS_ENDPOINT_URL_SERVICE_QUOTAS.
    https://docs.aws.amazon.com/sdkref/latest/guide/feature-ss-endpoints.html
    """
    from botocore import utils

    client = utils.SERVICE_NAME_ALIASES.get(service, service)
    hyphenized = utils.CLIENT_NAME_TO_HYPHENIZED_SERVICE_ID_OVERRIDES.get(client, client)
    return f"AWS_ENDPOINT_URL_{hyphenized.replace('-', '_').upper()}", "AWS_ENDPOINT_URL"


def endpoint_override(url: str | None = None, *, service: str | None = None) -> str | None:
    """The AWS_ENDPOINT_URL* variable that pointed the SDK away from AWS, or None.

    With `url` (the endpoint a failed call used), only a variable holding that URL: a variable of another service
    cannot have sent this call anywhere, so an STS failure never blames AWS_ENDPOINT_URL_EC2. Without it, the variable
    the SDK reads for `service` (AWS_ENDPOINT_URL_<SERVICE> overrides AWS_ENDPOINT_URL), or, with no service known,
    the global AWS_ENDPOINT_URL alone. AWS_IGNORE_CONFIGURED_ENDPOINT_URLS=true turns them all off.
    https://docs.aws.amazon.com/sdkref/latest/guide/feature-ss-endpoints.html
    """
    if os.environ.get("AWS_IGNORE_CONFIGURED_ENDPOINT_URLS", "").strip().lower() == "true":
        return None
    set_ = {k: v.strip().rstrip("/") for k, v in os.environ.items() if k.startswith("AWS_ENDPOINT_URL") and v.strip()}
    candidates = endpoint_variables(service) if service else tuple(sorted(set_, key=len, reverse=True))
    wanted = (url or "").rstrip("/")
    if wanted:
        return next((k for k in candidates if set_.get(k) == wanted), None)
    if service:
        return next((k for k in candidates if k in set_), None)
    return "AWS_ENDPOINT_URL" if "AWS_ENDPOINT_URL" in set_ else None


def profile_not_found(aws_profile: str | None) -> KitError:
    """ProfileNotFound, naming where the profile name came from: --aws-profile, or AWS_PROFILE in the environment."""
    if aws_profile:
        return KitError(
            f"AWS credentials profile {aws_profile!r} (from --aws-profile) not found. Fix: `aws configure list-profiles`, "
            "then pass one of those, or drop --aws-profile to use AWS_PROFILE / the SDK's default chain"
        )
    name = os.environ.get("AWS_PROFILE") or os.environ.get("AWS_DEFAULT_PROFILE")
    var = "AWS_PROFILE" if os.environ.get("AWS_PROFILE") else "AWS_DEFAULT_PROFILE"
    return KitError(
        f"AWS credentials profile {name!r} not found; it comes from {var} in your environment. "
        f"Fix: `aws configure list-profiles`, then `export {var}=` one of those (or `unset {var}`), or pass --aws-profile NAME"
    )


def _unreachable(err: Any, *, region: str) -> KitError:
    """No answer from the endpoint: refused, timed out, or the connection dropped. The override is the first suspect."""
    from botocore import exceptions as bx

    url = str(getattr(err, "kwargs", {}).get("endpoint_url") or "the AWS endpoint")
    if isinstance(err, bx.ReadTimeoutError):
        what = f"{url} accepted the connection but did not answer in time"
    elif isinstance(err, bx.ConnectTimeoutError):
        what = f"{url} did not accept a connection in time"
    elif isinstance(err, bx.ConnectionClosedError):
        what = f"{url} closed the connection without an answer"
    else:
        what = f"cannot reach {url}"
    override = endpoint_override(url)
    if override:
        return KitError(
            f"{what} (the endpoint comes from {override}={os.environ[override].strip()}, not AWS). "
            f"Fix: start or repair that endpoint, or unset {override} to use AWS in {region}"
        )
    if isinstance(err, bx.EndpointConnectionError):
        return KitError(
            f"{what}: the region {region!r} may not exist or not offer this service, or the network or proxy is wrong. "
            "Fix: check --region / aws.region (`aws ec2 describe-regions`) and your network"
        )
    return KitError(f"{what}. Fix: check the network or proxy (HTTPS_PROXY), then run the command again")


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
        # The kit tags each purchase on create, which EC2 also authorizes as ec2:CreateTags
        # (https://docs.aws.amazon.com/AWSEC2/latest/UserGuide/supported-iam-actions-tagging.html).
        also = " and ec2:CreateTags (the purchase is tagged on create)" if action == "ec2:PurchaseCapacityBlock" else ""
        return KitError(
            f"your AWS identity is not allowed to call {action} in {region}{decode}. Fix: add {action}{also} to your IAM role or policy, "
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
