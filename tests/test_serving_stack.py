"""Serving stack: the weights bucket, the pods' read-only identity, and the rendered objects applied."""

from __future__ import annotations

import json

import pytest
from aws_cdk.assertions import Match


def _bucket(kit):
    buckets = kit.template("serving").find_resources("AWS::S3::Bucket", {"Properties": {"BucketName": Match.any_value()}})
    (bucket,) = buckets.values()
    return bucket


def test_weights_bucket_is_kms_encrypted_versioned_private_and_retained(kit):
    bucket = _bucket(kit)
    props = bucket["Properties"]
    assert props["BucketEncryption"]["ServerSideEncryptionConfiguration"][0]["ServerSideEncryptionByDefault"]["SSEAlgorithm"] == "aws:kms"
    assert props["VersioningConfiguration"] == {"Status": "Enabled"}
    assert props["PublicAccessBlockConfiguration"] == {
        "BlockPublicAcls": True,
        "BlockPublicPolicy": True,
        "IgnorePublicAcls": True,
        "RestrictPublicBuckets": True,
    }
    # Kept on update and delete, not on a failed first create (fixed name: stacks/retention.py).
    assert (bucket["DeletionPolicy"], bucket["UpdateReplacePolicy"]) == ("RetainExceptOnCreate", "Retain")
    assert "LoggingConfiguration" in props
    (rule,) = props["LifecycleConfiguration"]["Rules"]
    assert rule["NoncurrentVersionExpiration"] == {"NoncurrentDays": 7}, "an overwritten checkpoint is not kept forever"
    assert rule["AbortIncompleteMultipartUpload"] == {"DaysAfterInitiation": 1}


def test_weights_bucket_refuses_plain_http(kit):
    policies = kit.template("serving").find_resources("AWS::S3::BucketPolicy")
    assert any('"aws:SecureTransport":"false"' in json.dumps(p, separators=(",", ":")) for p in policies.values())


def test_bucket_name_comes_from_the_plan(kit):
    name = json.dumps(_bucket(kit)["Properties"]["BucketName"])
    assert "glm51-2p2d-weights-" in name
    assert "-eu-south-2" in name


def _statements(t, service_account):
    """Every statement of the managed policies attached to the Pod Identity role of one service account, after
    checking that only EKS Pod Identity (with session tags) assumes it, for pods in the serving namespace."""
    (assoc,) = t.find_resources("AWS::EKS::PodIdentityAssociation", {"Properties": {"ServiceAccount": service_account}}).values()
    assert assoc["Properties"]["Namespace"] == "pd-serving"
    resources = t.to_json()["Resources"]
    role = resources[assoc["Properties"]["RoleArn"]["Fn::GetAtt"][0]]["Properties"]
    trust = role["AssumeRolePolicyDocument"]["Statement"][0]
    assert trust["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    assert sorted(trust["Action"]) == ["sts:AssumeRole", "sts:TagSession"]
    return [s for arn in role["ManagedPolicyArns"] for s in resources[arn["Ref"]]["Properties"]["PolicyDocument"]["Statement"]]


def _actions(statement):
    return [statement["Action"]] if isinstance(statement["Action"], str) else statement["Action"]


READ = {"s3:ListBucket", "s3:GetObject", "kms:Decrypt"}
MULTIPART = {"s3:PutObject", "s3:AbortMultipartUpload", "s3:ListMultipartUploadParts", "kms:GenerateDataKey"}


@pytest.mark.parametrize(
    ("account", "actions"),
    [("glm51-2p2d-weights-reader", READ | MULTIPART), ("glm51-2p2d-weights-writer", READ | MULTIPART | {"s3:DeleteObject"})],
    ids=["serving-pods", "import-job"],
)
def test_pod_identity_roles_allow_only_what_their_pods_do(kit, account, actions):
    """The serving pods read the checkpoint and write one thing, the warm compile-cache archive at drain
    (pdkit/pods/compile_cache.py); S3 PutObject into an SSE-KMS bucket needs kms:GenerateDataKey (S3 user guide,
    "Using SSE-KMS", required permissions). The import Job writes only what an import needs: no s3:DeleteObject on
    the checkpoint's files, no access to other prefixes, no Secrets Manager without a gated model."""
    assert {a for s in _statements(kit.template("serving"), account) for a in _actions(s)} == actions


def test_serving_pods_write_only_their_compile_cache(kit):
    """The reader's PutObject is under this deployment's compile-cache prefix, never the checkpoint's."""
    writes = [s for s in _statements(kit.template("serving"), "glm51-2p2d-weights-reader") if "s3:PutObject" in _actions(s)]
    assert writes
    for statement in writes:
        assert "compile-cache/glm51-2p2d/*" in json.dumps(statement["Resource"])
        assert "models/" not in json.dumps(statement["Resource"])


def test_rendered_objects_are_applied_through_the_cluster(kit):
    (manifest,) = kit.template("serving").find_resources("Custom::AWSCDK-EKS-KubernetesResource").values()
    text = json.dumps(manifest["Properties"]["Manifest"])
    assert text.count("DisaggregatedSet") >= 1
    assert "glm51-2p2d-router" in text
    assert "sglang-efa" in text, "pods run the image the images stack builds"
