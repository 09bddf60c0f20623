"""Every AWS call the kit makes at run time is allowed to the role that makes it.

Three kinds of callers, read from the synthesized templates (what CloudFormation deploys):
- CodeBuild projects: `aws <service> <operation>` and registry commands in the buildspec and in the
  containers/ scripts it runs, with the project's service role;
- Image Builder components (ami/components/*.yaml, embedded in the template), with the role of the
  instance profile in the pipeline's infrastructure configuration (stacks/ami_builder.py);
- kit Lambda functions (pdkit/functions/*.py and the pdkit modules they import): every boto3 client
  method that is an operation of the client's service (botocore's service model), with the function's role.

CLI, boto3 and registry names are not IAM action names, so every call goes through the explicit tables
below, read from the Service Authorization Reference
(https://docs.aws.amazon.com/service-authorization/latest/reference/reference_policies_actions-resources-contextkeys.html:
list_amazonelasticcontainerregistry.html, list_amazonec2.html, list_amazoneks.html, list_amazonsns.html,
list_amazoncloudwatch.html, list_awscodebuild.html, list_awscloudformation.html) and ECR's
"IAM permissions for pushing an image" (https://docs.aws.amazon.com/AmazonECR/latest/userguide/image-push-iam.html)
and "Pulling an image" (https://docs.aws.amazon.com/AmazonECR/latest/userguide/docker-pull-ecr-image.html).
A call missing from the tables fails the test until someone reads the reference and adds it.
"""

from __future__ import annotations

import ast
import fnmatch
import json
import re
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import botocore.session
import yaml
from botocore import xform_name

ROOT = Path(__file__).resolve().parent.parent

# `aws <service> <operation>` (AWS CLI v2) -> IAM actions.
CLI_ACTIONS: dict[tuple[str, str], frozenset[str]] = {
    # The CLI calls GetAuthorizationToken and prints the password part of the token.
    ("ecr", "get-login-password"): frozenset({"ecr:GetAuthorizationToken"}),
    ("ecr", "describe-images"): frozenset({"ecr:DescribeImages"}),
}
ECR_PUSH = frozenset(
    {
        "ecr:BatchCheckLayerAvailability",
        "ecr:InitiateLayerUpload",
        "ecr:UploadLayerPart",
        "ecr:CompleteLayerUpload",
        "ecr:PutImage",
        "ecr:BatchGetImage",
    }
)
ECR_PULL = frozenset({"ecr:BatchGetImage", "ecr:GetDownloadUrlForLayer"})
# Registry clients: (tool, subcommand) -> IAM actions when the registry is the kit's ECR; an empty set is a
# command that calls no AWS API (local image store, or a public registry such as nvcr.io).
REGISTRY_ACTIONS: dict[tuple[str, str], frozenset[str]] = {
    ("docker", "push"): ECR_PUSH,  # containers/build.sh pushes to the kit's ECR repository
    ("docker", "login"): frozenset(),  # uses the token get-login-password already fetched
    ("docker", "pull"): frozenset(),  # base images from nvcr.io (containers/versions.yaml), not ECR
    ("docker", "image"): frozenset(),  # image inspect: local
    ("docker", "buildx"): frozenset(),  # buildx build --load: into the local image store
    ("docker", "run"): frozenset(),  # the import smoke test, --network none
    ("ctr", "pull"): ECR_PULL,  # ami/components/serving-image.yaml pulls the serving image from ECR
    ("ctr", "label"): frozenset(),
    ("ctr", "list"): frozenset(),
    ("ctr", "check"): frozenset(),
}
# boto3 (service, method) -> IAM action.
BOTO3_ACTIONS: dict[tuple[str, str], str] = {
    ("ec2", "describe_capacity_reservations"): "ec2:DescribeCapacityReservations",
    ("ec2", "describe_capacity_block_offerings"): "ec2:DescribeCapacityBlockOfferings",
    ("ec2", "purchase_capacity_block"): "ec2:PurchaseCapacityBlock",
    # EC2 User Guide, instance topology prerequisites (IAM permissions); list_amazonec2.html names no resource type for it.
    ("ec2", "describe_instance_topology"): "ec2:DescribeInstanceTopology",
    # The lifecycle's drain marker on its reservation (list_amazonec2.html: CreateTags, resource type capacity-reservation).
    ("ec2", "create_tags"): "ec2:CreateTags",
    ("eks", "describe_nodegroup"): "eks:DescribeNodegroup",
    ("eks", "update_nodegroup_config"): "eks:UpdateNodegroupConfig",
    ("sns", "publish"): "sns:Publish",
    ("cloudwatch", "put_metric_data"): "cloudwatch:PutMetricData",
    ("codebuild", "start_build"): "codebuild:StartBuild",
    ("cloudformation", "describe_stacks"): "cloudformation:DescribeStacks",
}

AWS_CLI = re.compile(r"\baws\s+([a-z0-9-]+)\s+([a-z0-9-]+)")
DOCKER = re.compile(r"\bdocker\s+([a-z]+)")
CTR = re.compile(r"\bctr\s+(?:--namespace\s+\S+\s+)?images\s+([a-z]+)")
RUNS_SCRIPT = re.compile(r"\bbash\s+(containers/[\w./-]+\.sh)\b")


# ---- who may do what: Allow statements of a role's policies, as CloudFormation attaches them ----------


def _statements(document: dict[str, Any]) -> Iterator[dict[str, Any]]:
    for statement in document.get("Statement", []):
        if statement.get("Effect") == "Allow":
            yield statement


def role_actions(template: dict[str, Any], role: str) -> set[str]:
    """Action patterns allowed to a role: its inline policies, its customer-managed policies, and Policy resources naming it."""
    resources = template["Resources"]
    documents = [policy["PolicyDocument"] for policy in resources[role]["Properties"].get("Policies", [])]
    for arn in resources[role]["Properties"].get("ManagedPolicyArns", []):
        if isinstance(arn, dict) and "Ref" in arn and arn["Ref"] in resources:
            documents.append(resources[arn["Ref"]]["Properties"]["PolicyDocument"])
    for resource in resources.values():
        if resource["Type"] in ("AWS::IAM::Policy", "AWS::IAM::ManagedPolicy") and {"Ref": role} in resource["Properties"].get("Roles", []):
            documents.append(resource["Properties"]["PolicyDocument"])
    actions: set[str] = set()
    for document in documents:
        for statement in _statements(document):
            action = statement["Action"]
            actions.update([action] if isinstance(action, str) else action)
    return actions


def allowed(action: str, patterns: set[str]) -> bool:
    return any(fnmatch.fnmatchcase(action.lower(), pattern.lower()) for pattern in patterns)


def _role_of_arn(value: Any) -> str:
    assert isinstance(value, dict), f"role given as {value!r}, not a role of this template"
    assert "Fn::GetAtt" in value, f"role given as {value!r}, not a role of this template"
    return str(value["Fn::GetAtt"][0])


# ---- what each caller calls --------------------------------------------------------------------------


def shell_calls(text: str) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """(aws CLI calls, registry commands) in shell text, comment lines left out."""
    code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith("#"))
    registry = [("docker", sub) for sub in DOCKER.findall(code)] + [("ctr", sub) for sub in CTR.findall(code)]
    return AWS_CLI.findall(code), registry


def buildspec_text(project: dict[str, Any]) -> str:
    spec = json.loads(project["Properties"]["Source"]["BuildSpec"])
    commands = [command for phase in spec["phases"].values() for command in phase.get("commands", [])]
    text = "\n".join(commands)
    # Scripts the buildspec runs make calls with the same role.
    return text + "".join("\n" + (ROOT / script).read_text() for script in sorted(set(RUNS_SCRIPT.findall(text))))


def component_text(component: dict[str, Any]) -> str:
    document = yaml.safe_load(component["Properties"]["Data"])
    return "\n".join(
        str(command) for phase in document["phases"] for step in phase["steps"] for command in step.get("inputs", {}).get("commands", [])
    )


@cache
def operations(service: str) -> frozenset[str]:
    """boto3 method names of a service's operations, from botocore's service model."""
    model = botocore.session.get_session().get_service_model(service)
    return frozenset(xform_name(name) for name in model.operation_names)


def _imported_modules(path: Path) -> Iterator[Path]:
    for node in ast.walk(ast.parse(path.read_text())):
        names = (
            [node.module or ""]
            if isinstance(node, ast.ImportFrom)
            else [a.name for a in node.names]
            if isinstance(node, ast.Import)
            else []
        )
        for name in names:
            candidate = ROOT / (name.replace(".", "/") + ".py")
            if name.startswith("pdkit.") and candidate.is_file():
                yield candidate


def handler_modules(handler: str) -> list[Path]:
    """The handler's module and every pdkit module it imports, transitively."""
    start = ROOT / (handler.rsplit(".", 1)[0].replace(".", "/") + ".py")
    seen: list[Path] = []
    todo = [start]
    while todo:
        path = todo.pop()
        if path not in seen:
            seen.append(path)
            todo.extend(_imported_modules(path))
    return seen


def boto3_calls(path: Path) -> list[tuple[str, str]]:
    """(service, method) for every call of a method that is an operation of a service the module makes a client for."""
    tree = ast.parse(path.read_text())
    services: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "client" and node.args:
            first = node.args[0]
            if isinstance(first, ast.Constant) and isinstance(first.value, str):
                services.add(first.value)
        # {name: boto3.client(name) for name in ("ec2", "eks", "sns")}
        if isinstance(node, ast.DictComp | ast.ListComp | ast.SetComp | ast.GeneratorExp):
            for generator in node.generators:
                if isinstance(generator.iter, ast.Tuple | ast.List) and ".client(" in ast.unparse(node):
                    services.update(e.value for e in generator.iter.elts if isinstance(e, ast.Constant) and isinstance(e.value, str))
    calls = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            owners = [service for service in sorted(services) if node.func.attr in operations(service)]
            assert len(owners) <= 1, f"{path.name}: {node.func.attr} is an operation of {owners}; name the service in BOTO3_ACTIONS"
            calls.extend((owner, node.func.attr) for owner in owners)
    return calls


def test_every_aws_call_is_allowed_to_the_role_that_makes_it(kit):
    """Today's failure this catches: the buildspec's `aws ecr describe-images` without ecr:DescribeImages on the build role."""
    missing: list[str] = []
    unmapped: list[str] = []
    checked: dict[str, int] = {"codebuild": 0, "imagebuilder": 0, "lambda": 0}

    def expect(where: str, call: str, actions: frozenset[str], granted: set[str]) -> None:
        missing.extend(
            f"{where}: {call} needs {action}"
            for action in sorted(actions)
            if not allowed(action, granted) and f"{where}: {call} needs {action}" not in missing
        )

    def shell(where: str, text: str, granted: set[str]) -> None:
        cli, registry = shell_calls(text)
        for service, operation in cli:
            if (service, operation) not in CLI_ACTIONS:
                unmapped.append(f"{where}: aws {service} {operation}")
                continue
            expect(where, f"aws {service} {operation}", CLI_ACTIONS[service, operation], granted)
        for tool, sub in registry:
            if (tool, sub) not in REGISTRY_ACTIONS:
                unmapped.append(f"{where}: {tool} {sub}")
                continue
            expect(where, f"{tool} {sub}", REGISTRY_ACTIONS[tool, sub], granted)

    for name in kit.stacks:
        template = kit.template_json(name)
        resources = template["Resources"]
        for logical_id, resource in resources.items():
            kind, props = resource["Type"], resource.get("Properties", {})
            if kind == "AWS::CodeBuild::Project":
                checked["codebuild"] += 1
                shell(f"{name}/{logical_id}", buildspec_text(resource), role_actions(template, _role_of_arn(props["ServiceRole"])))
            elif kind == "AWS::ImageBuilder::ImagePipeline":
                checked["imagebuilder"] += 1
                infrastructure = resources[props["InfrastructureConfigurationArn"]["Fn::GetAtt"][0]]["Properties"]
                profile = resources[infrastructure["InstanceProfileName"]["Ref"]]["Properties"]
                (role,) = [entry["Ref"] for entry in profile["Roles"]]
                granted = role_actions(template, role)
                recipe = resources[props["ImageRecipeArn"]["Fn::GetAtt"][0]]["Properties"]
                for entry in recipe["Components"]:
                    component = entry["ComponentArn"]["Fn::GetAtt"][0]
                    shell(f"{name}/{component}", component_text(resources[component]), granted)
            elif kind == "AWS::Lambda::Function" and str(props.get("Handler", "")).startswith("pdkit.functions."):
                checked["lambda"] += 1
                granted = role_actions(template, _role_of_arn(props["Role"]))
                for module in handler_modules(props["Handler"]):
                    for service, method in boto3_calls(module):
                        where = f"{name}/{logical_id} ({module.relative_to(ROOT)})"
                        if (service, method) not in BOTO3_ACTIONS:
                            unmapped.append(f"{where}: {service}.{method}")
                            continue
                        expect(where, f"{service}.{method}", frozenset({BOTO3_ACTIONS[service, method]}), granted)

    assert checked["codebuild"] >= 1, checked
    assert checked["imagebuilder"] >= 1, checked
    assert checked["lambda"] >= 5, checked
    assert not unmapped, "calls without an IAM mapping (read the Service Authorization Reference, add them above):\n" + "\n".join(unmapped)
    assert not missing, "calls their role is not allowed to make:\n" + "\n".join(missing)
