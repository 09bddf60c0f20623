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


def _role_actions(t, role_logical):
    """Every action of the managed policies attached to one role."""
    role = t.to_json()["Resources"][role_logical]
    attached = {a["Ref"] for a in role["Properties"]["ManagedPolicyArns"]}
    policies = t.to_json()["Resources"]
    return {
        a
        for name in attached
        for s in policies[name]["Properties"]["PolicyDocument"]["Statement"]
        for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])
    }


def _pod_identity_role(t, service_account):
    (assoc,) = t.find_resources("AWS::EKS::PodIdentityAssociation", {"Properties": {"ServiceAccount": service_account}}).values()
    logical = assoc["Properties"]["RoleArn"]["Fn::GetAtt"][0]
    role = t.to_json()["Resources"][logical]
    trust = role["Properties"]["AssumeRolePolicyDocument"]["Statement"][0]
    assert trust["Principal"] == {"Service": "pods.eks.amazonaws.com"}
    assert sorted(trust["Action"]) == ["sts:AssumeRole", "sts:TagSession"]
    assert assoc["Properties"]["Namespace"] == "pd-serving"
    return logical


def test_serving_pods_read_the_weights_and_write_only_their_compile_cache(kit):
    """The pods read the checkpoint; the one thing they write is the warm compile-cache archive at drain
    (pdkit/pods/compile_cache.py), under this deployment's compile-cache prefix. S3 PutObject into an
    SSE-KMS bucket needs kms:GenerateDataKey (S3 user guide, "Using SSE-KMS", required permissions)."""
    t = kit.template("serving")
    role = _pod_identity_role(t, "glm51-2p2d-weights-reader")
    assert _role_actions(t, role) == {
        "s3:ListBucket",
        "s3:GetObject",
        "kms:Decrypt",
        "s3:PutObject",
        "s3:AbortMultipartUpload",
        "s3:ListMultipartUploadParts",
        "kms:GenerateDataKey",
    }
    resources = t.to_json()["Resources"]
    attached = {a["Ref"] for a in resources[role]["Properties"]["ManagedPolicyArns"]}
    for name in attached:
        for statement in resources[name]["Properties"]["PolicyDocument"]["Statement"]:
            actions = [statement["Action"]] if isinstance(statement["Action"], str) else statement["Action"]
            if "s3:PutObject" in actions:
                assert "compile-cache/glm51-2p2d/*" in json.dumps(statement["Resource"])
                assert "models/" not in json.dumps(statement["Resource"])


def test_import_job_writes_only_what_an_import_needs(kit):
    """No s3:DeleteObject on the checkpoint's files, no access to other prefixes, no Secrets Manager without a gated model."""
    t = kit.template("serving")
    role = _pod_identity_role(t, "glm51-2p2d-weights-writer")
    assert _role_actions(t, role) == {
        "s3:ListBucket",
        "s3:PutObject",
        "s3:GetObject",
        "s3:AbortMultipartUpload",
        "s3:ListMultipartUploadParts",
        "s3:DeleteObject",
        "kms:GenerateDataKey",
        "kms:Decrypt",
    }


def test_rendered_objects_are_applied_through_the_cluster(kit):
    (manifest,) = kit.template("serving").find_resources("Custom::AWSCDK-EKS-KubernetesResource").values()
    text = json.dumps(manifest["Properties"]["Manifest"])
    assert text.count("DisaggregatedSet") >= 1
    assert "glm51-2p2d-router" in text
    assert "sglang-efa" in text, "pods run the image the images stack builds"
