"""The router's ports, in a module that imports nothing, so `pdkit smoke --help` can print them without loading the plan.

The router Service answers on ROUTER_PORT too: with the VPC CNI's network policies, a Service's port must be its
container port (https://docs.aws.amazon.com/eks/latest/userguide/cni-network-policy.html, Considerations).
"""

from __future__ import annotations

ROUTER_PORT = 8000
ROUTER_METRICS_PORT = 29000
