"""The node image pipeline stack: parent, encryption, where the AMI id goes, the builder, logs, policy."""

from __future__ import annotations

import json
from typing import Any

from pdkit.render import ami
from tests.conftest import Kit, plan_of, synth


def _image_key_id(kit: Kit) -> str:
    stack = kit.stacks["ami"]
    return str(stack.resolve(stack.key.node.default_child.logical_id))


def _image_key(kit: Kit) -> dict[str, Any]:
    return {"Fn::GetAtt": [_image_key_id(kit), "Arn"]}


def test_parent_is_the_eks_nvidia_ami_of_the_plans_kubernetes_version(kit):
    """Drivers, fabric manager and EFA come from the EKS AL2023 NVIDIA AMI of the cluster's version (the one version the
    add-on pins fit), through SSM."""
    parent = kit.one("ami", "AWS::ImageBuilder::ImageRecipe")["ParentImage"]
    assert (
        parent == f"ssm:/aws/service/eks/optimized-ami/{kit.plan.kubernetes_version}/amazon-linux-2023/x86_64/nvidia/recommended/image_id"
    )
    assert ami.parent_image_parameter("1.37").startswith("/aws/service/eks/optimized-ami/1.37/"), "the path is built, not hard-coded"


def test_recipe_runs_every_component_in_order_with_the_plans_values(kit):
    components = kit.one("ami", "AWS::ImageBuilder::ImageRecipe")["Components"]
    logicals = [c["ComponentArn"]["Fn::GetAtt"][0] for c in components]
    names = [kit.template_json("ami")["Resources"][logical]["Properties"]["Name"] for logical in logicals]
    assert [n.removeprefix(f"{kit.plan.name}-").rsplit("-", 1)[0] for n in names] == list(ami.COMPONENTS)
    params = {p["Name"]: p["Value"] for c in components for p in c["Parameters"]}
    image = kit.plan.images[ami.SERVING_IMAGE]
    uri = json.dumps(params["ImageUri"])
    assert f"/{image.repository}:{image.tag}" in uri
    assert params["MinimumDriverBranch"] == [str(ami.NVIDIA_DRIVER_MIN_BRANCH)]


def test_component_documents_are_the_files_in_ami(kit):
    for name in ami.COMPONENTS:
        found = kit.template("ami").find_resources(
            "AWS::ImageBuilder::Component", {"Properties": {"Data": ami.component_text(name), "Platform": "Linux"}}
        )
        assert len(found) == 1, name


def test_recipe_and_components_are_named_after_their_content(kit):
    """Recipes and components are immutable: a changed one under the same name collides on replacement."""
    recipe = kit.one("ami", "AWS::ImageBuilder::ImageRecipe")
    assert recipe["Name"] == f"{kit.plan.name}-gpu-node-{ami.recipe_fingerprint(kit.plan)}"
    names = {c["Properties"]["Name"] for c in kit.template("ami").find_resources("AWS::ImageBuilder::Component").values()}
    assert names == {f"{kit.plan.name}-{name}-{ami.component_fingerprint(name)}" for name in ami.COMPONENTS}


def test_recipe_name_changes_with_what_is_baked_in(monkeypatch):
    plan = plan_of()
    before = ami.recipe_fingerprint(plan)
    changed = ami.component_path("container-limits").read_text() + "\n# changed\n"
    monkeypatch.setattr(ami, "component_text", lambda name: changed if name == "container-limits" else ami.component_path(name).read_text())
    assert ami.recipe_fingerprint(plan) != before


def test_components_are_encrypted_with_the_image_key(kit):
    key = _image_key(kit)
    for component in kit.template("ami").find_resources("AWS::ImageBuilder::Component").values():
        assert component["Properties"]["KmsKeyId"] == key


def test_image_key_rotates_and_is_kept(kit):
    key = kit.template_json("ami")["Resources"][_image_key_id(kit)]
    assert key["Properties"]["EnableKeyRotation"] is True
    assert key["DeletionPolicy"] == "Retain"


def test_image_key_serves_ebs_through_ec2_only_in_this_account(kit):
    """Node groups' Auto Scaling and Image Builder's test instance restore the AMI's snapshots through EC2."""
    key = kit.template_json("ami")["Resources"][_image_key_id(kit)]
    (statement,) = [s for s in key["Properties"]["KeyPolicy"]["Statement"] if s.get("Sid") == "EbsThroughEc2ForThisAccount"]
    assert statement["Condition"]["StringEquals"]["kms:ViaService"] == f"ec2.{kit.plan.region}.amazonaws.com"
    assert statement["Condition"]["StringEquals"]["kms:CallerAccount"] == {"Ref": "AWS::AccountId"}
    assert "kms:CreateGrant" in statement["Action"]


def test_build_volume_and_distributed_ami_are_encrypted_with_the_image_key(kit):
    key = _image_key(kit)
    (root,) = kit.one("ami", "AWS::ImageBuilder::ImageRecipe")["BlockDeviceMappings"]
    assert root["DeviceName"] == ami.ROOT_DEVICE
    assert root["Ebs"]["Encrypted"] is True
    assert root["Ebs"]["KmsKeyId"] == key
    assert root["Ebs"]["VolumeSize"] == ami.ROOT_VOLUME_GIB
    (distribution,) = kit.one("ami", "AWS::ImageBuilder::DistributionConfiguration")["Distributions"]
    assert distribution["AmiDistributionConfiguration"]["KmsKeyId"] == key
    assert distribution["Region"] == kit.plan.region


def test_each_build_publishes_its_ami_id_as_the_candidate_not_the_live_parameter(kit):
    """A build must never move nodes: the launch template reads the promoted parameter, builds write the candidate."""
    (distribution,) = kit.one("ami", "AWS::ImageBuilder::DistributionConfiguration")["Distributions"]
    (parameter,) = distribution["SsmParameterConfigurations"]
    assert parameter == {"ParameterName": f"/pdkit/{kit.plan.name}/ami/gpu-candidate", "DataType": "aws:ec2:image"}
    assert ami.image_parameter(kit.plan.name) == f"/pdkit/{kit.plan.name}/ami/gpu"
    assert parameter["ParameterName"] != ami.image_parameter(kit.plan.name)


def test_builder_uses_imdsv2_with_hop_limit_1(kit):
    options = kit.one("ami", "AWS::ImageBuilder::InfrastructureConfiguration")["InstanceMetadataOptions"]
    assert options == {"HttpTokens": "required", "HttpPutResponseHopLimit": 1}


def test_builder_runs_in_a_private_subnet(kit):
    subnet = kit.one("ami", "AWS::ImageBuilder::InfrastructureConfiguration")["SubnetId"]
    private = {kit.stacks["network"].resolve(s.subnet_id)["Ref"] for s in kit.stacks["network"].vpc.private_subnets}
    output = json.dumps(subnet)
    assert any(f"Ref{logical}" in output or logical in output for logical in private), output
    assert not any(kit.stacks["network"].resolve(s.subnet_id)["Ref"] in output for s in kit.stacks["network"].vpc.public_subnets)


def test_builder_needs_no_gpu(kit):
    """The parent loads NVIDIA kmods only when a device is present; a GPU builder would only cost more."""
    types = kit.one("ami", "AWS::ImageBuilder::InfrastructureConfiguration")["InstanceTypes"]
    assert types == list(ami.BUILDER_INSTANCE_TYPES)
    assert not any(t.startswith(("p", "g")) for t in types)


def test_builder_has_no_inbound_and_https_out_only(kit):
    group = kit.one("ami", "AWS::EC2::SecurityGroup")
    assert "SecurityGroupIngress" not in group
    assert [(e["IpProtocol"], e["FromPort"], e["ToPort"]) for e in group["SecurityGroupEgress"]] == [("tcp", 443, 443)]


def test_failed_builds_terminate_their_instance(kit):
    assert kit.one("ami", "AWS::ImageBuilder::InfrastructureConfiguration")["TerminateInstanceOnFailure"] is True


def test_builder_pulls_only_the_serving_repository(kit):
    policy = kit.one("ami", "AWS::IAM::ManagedPolicy")["PolicyDocument"]["Statement"]
    pulls = [s for s in policy if "ecr:BatchGetImage" in s["Action"]]
    (pull,) = pulls
    image = kit.plan.images[ami.SERVING_IMAGE]
    assert json.dumps(pull["Resource"]).endswith(f':repository/{image.repository}"]]}}')
    assert not any(
        a.startswith("ecr:Put") or a == "ecr:*" for s in policy for a in ([s["Action"]] if isinstance(s["Action"], str) else s["Action"])
    )


def test_build_and_pipeline_logs_are_encrypted_kept_and_used(kit):
    logging = kit.one("ami", "AWS::ImageBuilder::ImagePipeline")["LoggingConfiguration"]
    groups = kit.template("ami").find_resources("AWS::Logs::LogGroup")
    assert {logging["ImageLogGroupName"]["Ref"], logging["PipelineLogGroupName"]["Ref"]} == set(groups)
    retention = kit.plan.log_retention_days
    for group in groups.values():
        assert group["Properties"]["KmsKeyId"]["Fn::GetAtt"][1] == "Arn"
        assert group["Properties"]["RetentionInDays"] == retention
        assert group["Properties"]["LogGroupName"].startswith("/aws/imagebuilder/")
        # Kept on update and delete, not on a failed first create (fixed name: stacks/retention.py).
        assert (group["DeletionPolicy"], group["UpdateReplacePolicy"]) == ("RetainExceptOnCreate", "Retain")


def test_pipeline_is_manual_and_tests_every_image(kit):
    """No schedule: a build costs builder time and a 20+ GB pull, and runs only when an operator asks."""
    pipeline = kit.one("ami", "AWS::ImageBuilder::ImagePipeline")
    assert "Schedule" not in pipeline
    assert pipeline["Status"] == "ENABLED"
    assert pipeline["ImageTestsConfiguration"]["ImageTestsEnabled"] is True


# cdk-nag and cfn-lint run on every stack of every profile in tests/test_policy.py and tests/test_cfn_lint.py.


def test_second_profile_builds_the_same_pipeline():
    other = synth("glm51-fp8-4p4d")
    assert f"/{other.plan.kubernetes_version}/" in other.one("ami", "AWS::ImageBuilder::ImageRecipe")["ParentImage"]
