"""Serving stack: the weights bucket, the pods' read-only identity, and the rendered objects applied."""

from __future__ import annotations

import json

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
    assert bucket["DeletionPolicy"] == "Retain"
    assert "LoggingConfiguration" in props


def test_weights_bucket_refuses_plain_http(kit):
    policies = kit.template("serving").find_resources("AWS::S3::BucketPolicy")
    assert any('"aws:SecureTransport":"false"' in json.dumps(p, separators=(",", ":")) for p in policies.values())


def test_bucket_name_comes_from_the_plan(kit):
    name = json.dumps(_bucket(kit)["Properties"]["BucketName"])
    assert "glm51-2p2d-weights-" in name
    assert "-eu-south-2" in name


def test_pods_get_read_only_access_through_pod_identity(kit):
    t = kit.template("serving")
    t.has_resource_properties(
        "AWS::EKS::PodIdentityAssociation", {"Namespace": "pd-serving", "ServiceAccount": "glm51-2p2d-weights-reader"}
    )
    (role,) = t.find_resources("AWS::IAM::Role").values()
    trust = role["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]
    assert trust["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    assert sorted(trust["Action"]) == ["sts:AssumeRole", "sts:TagSession"]
    actions = {
        a
        for p in t.find_resources("AWS::IAM::ManagedPolicy").values()
        for s in p["Properties"]["PolicyDocument"]["Statement"]
        for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])
    }
    assert actions == {"s3:ListBucket", "s3:GetObject", "kms:Decrypt"}


def test_rendered_objects_are_applied_through_the_cluster(kit):
    (manifest,) = kit.template("serving").find_resources("Custom::AWSCDK-EKS-KubernetesResource").values()
    text = json.dumps(manifest["Properties"]["Manifest"])
    assert text.count("LeaderWorkerSet") >= 2
    assert "glm51-2p2d-router" in text
    assert "sglang-efa" in text, "pods run the image the images stack builds"
