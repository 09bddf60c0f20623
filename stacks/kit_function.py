"""A Python Lambda function with the kit's defaults: in the VPC, encrypted logs with retention,
a dead-letter queue for asynchronous invocations and for its EventBridge rules, explicit IAM.

No reserved concurrency unless the profile opts in (cluster.lambda_reserved_concurrency): Lambda
refuses any reservation that leaves fewer than its minimum unreserved (100, or the whole quota of
an account below 100, such as a new account's 10), so a default reservation fails the first deploy
(https://docs.aws.amazon.com/lambda/latest/dg/configuration-concurrency.html). The handlers are
written to be safe when two invocations overlap (pdkit/functions/).
"""

from __future__ import annotations

import aws_cdk as cdk
from aws_cdk import aws_ec2 as ec2
from aws_cdk import aws_events as events
from aws_cdk import aws_events_targets as targets
from aws_cdk import aws_iam as iam
from aws_cdk import aws_kms as kms
from aws_cdk import aws_lambda as lambda_
from aws_cdk import aws_sqs as sqs
from constructs import Construct

from stacks.encrypted_log_group import EncryptedLogGroup
from stacks.function_code import pdkit_code
from stacks.policy import acknowledge

RUNTIME = lambda_.Runtime.PYTHON_3_14
# What Lambda needs to attach a function to the VPC: the EC2 actions of AWS's managed policy
# AWSLambdaVPCAccessExecutionRole, v3 (2024-01-05, which added ec2:DescribeSubnets), on "*" as there:
# https://docs.aws.amazon.com/aws-managed-policy/latest/reference/AWSLambdaVPCAccessExecutionRole.html
# Lambda calls them with the function's role on network interfaces it names itself; "ec2:DescribeNetworkInterfaces
# ... only works if it's allowed on all resources", and a DeleteNetworkInterface without every resource id "may not
# be able to access the VPC" (https://docs.aws.amazon.com/lambda/latest/dg/configuration-vpc.html, execution role).
# Its logs actions are granted on the function's own log group instead (KitFunction, Basics).
VPC_ACCESS_ACTIONS = (
    "ec2:CreateNetworkInterface",
    "ec2:DescribeNetworkInterfaces",
    "ec2:DescribeSubnets",
    "ec2:DeleteNetworkInterface",
    "ec2:AssignPrivateIpAddresses",
    "ec2:UnassignPrivateIpAddresses",
)


class KitFunction(Construct):
    def __init__(
        self,
        scope: Construct,
        id_: str,
        *,
        handler: str,
        modules: tuple[str, ...],
        description: str,
        vpc: ec2.IVpc,
        key: kms.IKey,
        log_retention_days: int,
        environment: dict[str, str] | None = None,
        timeout_minutes: int = 2,
        reserved_concurrency: int | None = None,
    ) -> None:
        super().__init__(scope, id_)
        self.key = key
        logs = EncryptedLogGroup(self, "Logs", key=key, retention_days=log_retention_days)
        self.dead_letters = sqs.Queue(
            self, "DeadLetters", encryption_master_key=key, enforce_ssl=True, retention_period=cdk.Duration.days(14)
        )
        self.role = iam.Role(self, "Role", assumed_by=iam.ServicePrincipal("lambda.amazonaws.com"), description=description)
        basics = iam.ManagedPolicy(
            self,
            "Basics",
            statements=[
                iam.PolicyStatement(actions=["logs:CreateLogStream", "logs:PutLogEvents"], resources=[logs.log_group.log_group_arn]),
                iam.PolicyStatement(actions=["sqs:SendMessage"], resources=[self.dead_letters.queue_arn]),
                iam.PolicyStatement(actions=["kms:GenerateDataKey", "kms:Decrypt"], resources=[key.key_arn]),
                iam.PolicyStatement(actions=list(VPC_ACCESS_ACTIONS), resources=["*"]),
            ],
        )
        self.role.add_managed_policy(basics)
        self.security_group = ec2.SecurityGroup(
            self, "SecurityGroup", vpc=vpc, allow_all_outbound=False, description=f"{description}: HTTPS out only"
        )
        self.security_group.add_egress_rule(ec2.Peer.any_ipv4(), ec2.Port.tcp(443), "AWS APIs via endpoints or NAT")
        self.function = lambda_.Function(
            self,
            "Function",
            runtime=RUNTIME,
            handler=handler,
            code=pdkit_code(*modules),
            description=description,
            role=self.role.without_policy_updates(),
            environment=environment,
            timeout=cdk.Duration.minutes(timeout_minutes),
            memory_size=256,
            reserved_concurrent_executions=reserved_concurrency,
            dead_letter_queue=self.dead_letters,
            vpc=vpc,
            vpc_subnets=ec2.SubnetSelection(subnet_type=ec2.SubnetType.PRIVATE_WITH_EGRESS),
            security_groups=[self.security_group],
            log_group=logs.log_group,
        )
        acknowledge(
            basics,
            {
                "AwsSolutions-IAM5[Resource::*]": "Lambda's VPC actions as AWS's AWSLambdaVPCAccessExecutionRole grants them (on *): Lambda names the network interfaces itself, and its guide says DescribeNetworkInterfaces works only on * and a scoped DeleteNetworkInterface can cut the function off its VPC; nothing else in this role uses a wildcard resource.",
            },
        )
        if reserved_concurrency is None:
            acknowledge(
                self.function,
                {
                    "NIST.800.53.R5-LambdaConcurrency": "A reservation fails the deploy on accounts whose Lambda quota cannot spare it "
                    "(a new account's 10 spares none); it is opt-in (cluster.lambda_reserved_concurrency, checked by pdkit preflight), "
                    "and the handlers converge when invocations overlap instead of relying on a limit of one.",
                },
            )
        acknowledge(
            self.dead_letters,
            {
                "AwsSolutions-SQS3": "This queue is itself the dead-letter queue of the function; a dead-letter queue for it would only move the same failed events once more.",
            },
        )

    def rule(
        self,
        scope: Construct,
        id_: str,
        *,
        rule_name: str,
        description: str,
        retry_attempts: int,
        schedule: events.Schedule | None = None,
        event_pattern: events.EventPattern | None = None,
    ) -> events.Rule:
        """An EventBridge rule that invokes this function, with this function's dead-letter queue.

        EventBridge itself writes to that queue, and SQS encrypts with the queue's customer-managed key
        on its behalf: the key policy must let events.amazonaws.com use the key, for this rule only
        (https://docs.aws.amazon.com/eventbridge/latest/userguide/eb-rule-dlq.html,
        https://docs.aws.amazon.com/AWSSimpleQueueService/latest/SQSDeveloperGuide/sqs-least-privilege-policy.html).
        The rule's ARN is spelled from its fixed name: a reference to the rule itself would make the key
        depend on the rule, which depends on the queue, which depends on the key.
        """
        rule = events.Rule(
            scope,
            id_,
            rule_name=rule_name,
            description=description,
            schedule=schedule,
            event_pattern=event_pattern,
            targets=[targets.LambdaFunction(self.function, dead_letter_queue=self.dead_letters, retry_attempts=retry_attempts)],
        )
        arn = cdk.Stack.of(self).format_arn(service="events", resource="rule", resource_name=rule_name)
        added = self.key.add_to_resource_policy(
            iam.PolicyStatement(
                sid=f"EventBridgeDeadLetters{rule_name.title().replace('-', '')}"[:128],
                principals=[iam.ServicePrincipal("events.amazonaws.com")],
                actions=["kms:GenerateDataKey", "kms:Decrypt"],
                resources=["*"],
                conditions={"ArnEquals": {"aws:SourceArn": arn}},
            )
        )
        if not added.statement_added:
            raise ValueError(f"{self.node.path}: the dead-letter key must be a key of this app (its policy cannot be edited otherwise)")
        return rule

    def allow(self, id_: str, *statements: iam.PolicyStatement) -> iam.ManagedPolicy:
        """Permissions beyond the basics, as a customer-managed policy (no inline policies)."""
        policy = iam.ManagedPolicy(self, id_, statements=list(statements))
        self.role.add_managed_policy(policy)
        return policy
