"""The image-build custom resource (pdkit/functions/start_build.py) answers every request CloudFormation sends, once.

The requests are the CloudFormation User Guide's examples (tests/fixtures/cfn_requests.py), whose placeholder
ResourceProperties carry no ProjectName: the handler used to read `event["ResourceProperties"]["ProjectName"]`
before any try, so it raised and CloudFormation got no answer until the resource's ServiceTimeout (an hour by
default: https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-resource-cloudformation-customresource.html).
"""

from __future__ import annotations

import pytest

from pdkit.functions import start_build
from tests.fixtures.cfn_requests import request

NO_AWS = object()  # any CodeBuild call on it raises AttributeError: these answers need none


def _answers(event):
    sent = []
    start_build.handler(event, None, codebuild=NO_AWS, respond=lambda e, **kw: sent.append(kw))
    return sent


FIX = "Fix: the images stack writes the request (stacks/images_stack.py): deploy it again with `make deploy`"


@pytest.mark.parametrize(("kind", "physical"), [("Create", "not-started"), ("Update", "custom resource provider-defined physical id")])
def test_the_docs_examples_without_a_project_are_refused(kind, physical):
    assert _answers(request(kind)) == [
        {"success": False, "reason": f"image build not started: ResourceProperties lack ProjectName. {FIX}", "physical_id": physical}
    ]


@pytest.mark.parametrize("props", [None, "p", ["p"]])
def test_properties_that_are_not_an_object_are_refused(props):
    (answer,) = _answers(request("Create", ResourceProperties=props))
    assert answer["success"] is False


def test_the_docs_delete_example_succeeds_with_its_physical_id():
    (answer,) = _answers(request("Delete"))
    assert (answer["success"], answer["physical_id"]) == (True, "custom resource provider-defined physical id")


def test_an_unknown_request_type_is_refused():
    (answer,) = _answers(request("Create", RequestType="Replace", ResourceProperties={"ProjectName": "p"}))
    assert answer["reason"].startswith("image build not started: unknown RequestType 'Replace'")
