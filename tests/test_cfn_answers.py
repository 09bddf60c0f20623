"""The answer every kit custom resource sends CloudFormation (pdkit/functions/cfn_response.py) fits its limits, in bytes.

"The total size of the response body can't exceed 4096 bytes" and PhysicalResourceId "can be up to 1 KB in size"
(https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/crpg-ref-responses.html). The body is JSON, where
every non-ASCII character of a reason is escaped to six bytes (\\u00e9) or twelve (a surrogate pair): the old cut to
3,500 characters let a reason with accents or an EC2 message quoting a non-ASCII tag run to 21,000 bytes, an answer
CloudFormation cannot take, and the stack waits for the timeout instead of showing the failure. The request is the
CloudFormation User Guide's Create example (tests/fixtures/cfn_requests.py).
"""

from __future__ import annotations

import json

import pytest

from pdkit.functions import cfn_response
from tests.fixtures.cfn_requests import request

EVENT = request("Create", ResponseURL="https://cloudformation-custom-resource-response-uswest2.s3.amazonaws.com/signed")


def _body(**answer):
    raw = cfn_response.body(EVENT, **({"success": False, "reason": "", "physical_id": "cr-0123456789abcdef0"} | answer))
    return raw, json.loads(raw)


def test_a_short_answer_is_sent_as_is():
    _raw, sent = _body(success=True, reason="reservation cr-0123456789abcdef0 matches the profile", data={"ReservationId": "cr-1"})
    assert sent == {
        "Status": "SUCCESS",
        "Reason": "reservation cr-0123456789abcdef0 matches the profile",
        "PhysicalResourceId": "cr-0123456789abcdef0",
        "StackId": EVENT["StackId"],
        "RequestId": EVENT["RequestId"],
        "LogicalResourceId": EVENT["LogicalResourceId"],
        "Data": {"ReservationId": "cr-1"},
    }


@pytest.mark.parametrize("char", ["x", "é", "\u2014", "\U0001f680"], ids=["ascii", "latin", "dash", "astral"])
def test_a_long_reason_is_cut_to_the_byte_limit_keeping_its_start(char):
    raw, sent = _body(reason="Capacity Block check failed: " + char * 5000)
    assert len(raw) <= cfn_response.MAX_BODY_BYTES
    assert len(raw) > cfn_response.MAX_BODY_BYTES - 12, "as much of the reason as fits, not a fixed character count"
    assert sent["Reason"].startswith("Capacity Block check failed: " + char)
    assert sent["Reason"].endswith(cfn_response.CUT)


def test_the_limit_is_the_body_at_exactly_4096_bytes():
    empty = len(_body(reason="")[0])
    fits = "a" * (cfn_response.MAX_BODY_BYTES - empty)
    raw, sent = _body(reason=fits)
    assert (len(raw), sent["Reason"]) == (4096, fits), "a body of exactly 4,096 bytes is sent untouched"
    raw, sent = _body(reason=fits + "a")
    assert len(raw) <= 4096
    assert sent["Reason"].endswith(cfn_response.CUT)


def test_a_physical_id_over_1_kb_fails_the_request_and_is_cut():
    raw, sent = _body(success=True, reason="bought", physical_id="é" * 600)
    assert sent["Status"] == "FAILED"
    assert len(sent["PhysicalResourceId"].encode()) <= cfn_response.MAX_PHYSICAL_ID_BYTES
    assert sent["Reason"].startswith("the handler's physical id is over CloudFormation's 1 KB limit (1200 bytes); bought")
    assert len(raw) <= 4096


def test_attributes_that_alone_overflow_the_body_are_dropped_and_the_answer_says_so():
    """Consumers read the attributes with Fn::GetAtt: an answer without them must not pass as a success."""
    raw, sent = _body(success=True, reason="bought cr-1", data={"ReservationId": "cr-1", "Notes": "n" * 5000})
    assert "Data" not in sent
    assert sent["Status"] == "FAILED"
    assert sent["Reason"] == "the attributes (Data) do not fit CloudFormation's 4,096-byte answer; bought cr-1"
    assert len(raw) <= 4096


def test_attributes_that_fit_are_kept_and_the_reason_gives_way():
    raw, sent = _body(success=True, reason="r" * 5000, data={"ReservationId": "cr-1", "StartDate": "2026-12-05T11:30:00+00:00"})
    assert sent["Status"] == "SUCCESS"
    assert sent["Data"] == {"ReservationId": "cr-1", "StartDate": "2026-12-05T11:30:00+00:00"}
    assert len(raw) <= 4096


def test_send_puts_that_body_to_the_response_url():
    sent = []
    cfn_response.send(EVENT, success=False, reason="é" * 5000, physical_id="p", opener=lambda req, timeout: sent.append((req, timeout)))
    ((req, timeout),) = sent
    assert (req.get_method(), req.full_url, timeout) == ("PUT", EVENT["ResponseURL"], 30)
    assert req.data == cfn_response.body(EVENT, success=False, reason="é" * 5000, physical_id="p")
    assert req.get_header("Content-type") == "", "the pre-signed URL is signed for an empty content type"


@pytest.mark.parametrize("missing", ["StackId", "RequestId", "LogicalResourceId"])
def test_a_request_without_its_ids_cannot_be_answered_and_says_which(missing):
    event = {k: v for k, v in EVENT.items() if k != missing}
    with pytest.raises(ValueError, match=f"the request has no {missing}"):
        cfn_response.send(event, success=True, reason="", physical_id="p", opener=lambda req, timeout: None)


@pytest.mark.parametrize("reason", ["é" * 5000, "\U0001f680" * 3000, "x" * 9000], ids=["latin", "astral", "ascii"])
def test_send_never_puts_more_than_4096_bytes(reason):
    """Through `send` alone, as every handler calls it: the PUT body is at most 4,096 bytes whatever the reason's
    characters (3,500 accented characters used to be 21,000 bytes of JSON)."""
    sent = []
    cfn_response.send(EVENT, success=False, reason=reason, physical_id="cr-0123456789abcdef0", opener=lambda req, timeout: sent.append(req))
    ((req),) = sent
    assert len(req.data) <= 4096
    assert json.loads(req.data)["Reason"].startswith(reason[:100])
