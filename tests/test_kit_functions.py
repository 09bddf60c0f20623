"""The kit's Lambda functions as deployed: reserved concurrency only on request, and dead-letter queues
EventBridge can actually write to."""

from __future__ import annotations

import pytest

from tests.conftest import synth

ACCOUNT = "123456789012"
RULE_STACKS = ("capacity", "observability")


def _kit_functions(kit):
    for name in kit.stacks:
        for logical, fn in kit.template_json(name)["Resources"].items():
            if fn["Type"] == "AWS::Lambda::Function" and fn["Properties"].get("Handler", "").startswith("pdkit.functions."):
                yield name, logical, fn["Properties"]


def test_no_kit_function_reserves_concurrency_by_default(kit):
    """New accounts have a Lambda concurrency quota of 10 and Lambda keeps at least that much unreserved
    (100, or the whole quota below 100), so any reservation fails the first deploy: "Specified
    ReservedConcurrentExecutions for function decreases account's UnreservedConcurrentExecution below its
    minimum value of [10]" (https://docs.aws.amazon.com/lambda/latest/dg/configuration-concurrency.html)."""
    found = list(_kit_functions(kit))
    assert len(found) >= 5
    assert [(stack, logical) for stack, logical, props in found if "ReservedConcurrentExecutions" in props] == []


@pytest.fixture(scope="module")
def reserved_kit(raw_with):
    return synth(raw_with("cluster.lambda_reserved_concurrency", 2))


@pytest.fixture(scope="module")
def raw_with():
    import copy

    import yaml

    from pdkit.model import profile_files

    def change(dotted, value):
        raw = copy.deepcopy(yaml.safe_load(profile_files.resolve(None).read_text()))
        *parents, leaf = dotted.split(".")
        node = raw
        for part in parents:
            node = node.setdefault(part, {})
        node[leaf] = value
        return raw

    return change


def test_an_opt_in_reservation_covers_exactly_the_plans_functions(reserved_kit):
    """What `pdkit preflight` checks against the quota (plan.function_concurrency.total) is what the templates reserve."""
    reserved = [
        props["ReservedConcurrentExecutions"] for _, _, props in _kit_functions(reserved_kit) if "ReservedConcurrentExecutions" in props
    ]
    wanted = reserved_kit.plan.function_concurrency
    assert reserved == [2] * len(wanted.functions)
    assert sum(reserved) == wanted.total


def _resolve(value, region):
    """A template string with the pseudo parameters filled in (Fn::Join of literals and Refs)."""
    if isinstance(value, str):
        return value
    if "Ref" in value:
        return {"AWS::AccountId": ACCOUNT, "AWS::Region": region, "AWS::Partition": "aws"}[value["Ref"]]
    sep, parts = value["Fn::Join"]
    return sep.join(_resolve(p, region) for p in parts)


def _as_list(value):
    return value if isinstance(value, list) else [value]


@pytest.mark.parametrize("stack", RULE_STACKS)
def test_eventbridge_may_use_the_key_of_every_rule_dead_letter_queue(kit, stack):
    """EventBridge, not the function, sends a failed event to a rule target's dead-letter queue; with SSE-KMS
    under a customer-managed key, SQS calls KMS on EventBridge's behalf, so the key policy must allow
    events.amazonaws.com kms:GenerateDataKey and kms:Decrypt, scoped with aws:SourceArn to the rule
    (https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-rule-dlq.html;
    https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-least-privilege-policy.html).
    Without it "Capacity Block Delivered" is lost with no trace."""
    resources = kit.template_json(stack)["Resources"]
    region = kit.plan.region
    admitted: dict[str, set[str]] = {}
    for logical, r in resources.items():
        if r["Type"] != "AWS::KMS::Key":
            continue
        for statement in r["Properties"]["KeyPolicy"]["Statement"]:
            if statement.get("Principal") == {"Service": "events.amazonaws.com"}:
                assert statement["Effect"] == "Allow"
                assert set(_as_list(statement["Action"])) == {"kms:GenerateDataKey", "kms:Decrypt"}
                (arns,) = statement["Condition"]["ArnEquals"].values()
                assert list(statement["Condition"]["ArnEquals"]) == ["aws:SourceArn"]
                admitted.setdefault(logical, set()).update(_resolve(a, region) for a in _as_list(arns))
    needed: dict[str, set[str]] = {}
    rules = [r for r in resources.values() if r["Type"] == "AWS::Events::Rule"]
    assert rules
    for rule in rules:
        for target in rule["Properties"]["Targets"]:
            queue = target["DeadLetterConfig"]["Arn"]["Fn::GetAtt"][0]
            key = resources[queue]["Properties"]["KmsMasterKeyId"]["Fn::GetAtt"][0]
            assert "Name" in rule["Properties"], "the rule's ARN is spelled from its name in the key policy"
            needed.setdefault(key, set()).add(f"arn:aws:events:{region}:{ACCOUNT}:rule/{rule['Properties']['Name']}")
    assert admitted == needed, "each key admits EventBridge for exactly the rules whose dead letters it encrypts"


@pytest.mark.parametrize("value", [0, -1])
def test_a_reservation_of_zero_is_refused_with_the_fix(raw_with, value):
    """Reserved concurrency 0 throttles a function: "To throttle a function, set the reserved concurrency to zero"
    (https://docs.aws.amazon.com/lambda/latest/dg/configuration-concurrency.html); the lifecycle would never drain."""
    from pdkit.errors import ProfileError
    from pdkit.model import profile_files

    with pytest.raises(ProfileError) as err:
        profile_files.parse(raw_with("cluster.lambda_reserved_concurrency", value))
    text = str(err.value)
    assert "cluster.lambda_reserved_concurrency" in text
    assert "remove the field to reserve nothing" in text


# AWS's managed policy AWSLambdaVPCAccessExecutionRole, policy version v3 (edited 2024-01-05), its one statement's
# actions as published: https://docs.aws.amazon.com/aws-managed-policy/latest/reference/AWSLambdaVPCAccessExecutionRole.html
AWS_LAMBDA_VPC_ACCESS_V3 = [
    "logs:CreateLogGroup",
    "logs:CreateLogStream",
    "logs:PutLogEvents",
    "ec2:CreateNetworkInterface",
    "ec2:DescribeNetworkInterfaces",
    "ec2:DescribeSubnets",
    "ec2:DeleteNetworkInterface",
    "ec2:AssignPrivateIpAddresses",
    "ec2:UnassignPrivateIpAddresses",
]


def _role_actions(template, role_logical_id):
    """Every action the role's customer-managed policies (its ManagedPolicyArns in this stack) grant."""
    actions = set()
    for arn in template["Resources"][role_logical_id]["Properties"].get("ManagedPolicyArns", []):
        policy = template["Resources"].get(arn.get("Ref", "")) if isinstance(arn, dict) else None
        for statement in policy["Properties"]["PolicyDocument"]["Statement"] if policy else []:
            actions |= set(_as_list(statement["Action"]))
    return actions


@pytest.mark.parametrize(("profile", "at_least"), [("glm51-fp8-2p2d", 5), ("rehearsal-glm51-fp8-2p2d", 1)])
def test_every_kit_function_has_the_vpc_access_that_aws_managed_policy_lists(profile, at_least):
    """A function in a VPC needs every EC2 action of AWSLambdaVPCAccessExecutionRole: v3 added ec2:DescribeSubnets,
    which the kit's own list lacked. Its logs actions come from the kit's log-group statement (CreateLogGroup is not
    needed: the kit creates the group)."""
    from tests.conftest import kit_of

    kit = kit_of(profile)
    needed = {a for a in AWS_LAMBDA_VPC_ACCESS_V3 if a.startswith("ec2:")} | {"logs:CreateLogStream", "logs:PutLogEvents"}
    checked = 0
    for stack, _logical, props in _kit_functions(kit):
        assert "VpcConfig" in props
        template = kit.template_json(stack)
        role = props["Role"]["Fn::GetAtt"][0]
        missing = needed - _role_actions(template, role)
        assert not missing, f"{stack} {_logical}: {sorted(missing)}"
        checked += 1
    assert checked >= at_least
