"""The base of every kit stack: the availability zones come from the plan, and the rules every stack's
resources follow whoever wrote them (the kit, CDK, a construct library) are applied here, once."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import aws_cdk as cdk
from constructs import Construct

from stacks.custom_resource_timeout import ServiceTimeoutFromHandler
from stacks.ec2_text import Ec2DescriptionsAccepted
from stacks.retention import RetainExceptOnCreateWhenNamed


class KitStack(cdk.Stack):
    """AZ names map to different physical zones per account, and a later Capacity Block may land in another
    AZ, so the plan names every AZ of the region. Overriding `availability_zones` keeps synth offline (no
    context lookup, which needs credentials once an account is set) and the VPC's subnets stable:
    https://docs.aws.amazon.com/cdk/api/v2/python/aws_cdk/Stack.html#aws_cdk.Stack.availability_zones
    """

    def __init__(self, scope: Construct, id_: str, *, zones: Sequence[str], **kwargs: Any) -> None:
        self._zones = list(zones)
        super().__init__(scope, id_, **kwargs)
        # A failed first create must be retryable: no retained fixed name, no hour-long wait (stacks/retention.py,
        # stacks/custom_resource_timeout.py).
        cdk.Aspects.of(self).add(RetainExceptOnCreateWhenNamed())
        cdk.Aspects.of(self).add(ServiceTimeoutFromHandler())
        # A description EC2 refuses fails at synth, not half-way through the first deploy (stacks/ec2_text.py).
        cdk.Aspects.of(self).add(Ec2DescriptionsAccepted())

    @property
    def availability_zones(self) -> list[str]:
        return self._zones
