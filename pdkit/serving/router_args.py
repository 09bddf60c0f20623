"""The PD router's command line: every prefill and decode replica registered, rendered from the plan.

Router pin: smg 1.13.0 (the Shepherd Model Gateway), not sglang-router 0.3.2. Checked against the
sources (the sglang 0.5.23, sglang-router 0.3.2 and smg 1.13.0 wheels):
- PD mode is the same protocol in both: the router adds bootstrap_host / bootstrap_port /
  bootstrap_room to each request and sends it to one prefill and one decode server; SGLang 0.5.23's
  GenerateReqInput still takes exactly those fields, and both routers parse this command line.
- sglang-router 0.3.2 (2026-01) is the last release of the gateway inside the SGLang repository; its
  maintainers moved it out as smg and froze the in-tree copy (smg-project discussion #657). smg
  1.13.0 (2026-10) is of the same month as SGLang 0.5.23 and knows 0.5.23's request fields
  (routed_dp_rank, disagg_prefill_dp_rank) that 0.3.2 predates; 0.3.2 only sends the
  data_parallel_rank spelling that 0.5.23 keeps as a deprecated alias.
- smg recognises an SGLang worker by /v1/models owned_by "sglang", which 0.5.23 serves.
No dp-aware routing: prefill resolves its attention-DP rank from the bootstrap room by itself
(load_balance_method follow_bootstrap_room), which an injected DP rank would override.
"""

from __future__ import annotations

from pdkit.images import component
from pdkit.plan import Plan
from pdkit.serving.names import leader_host
from pdkit.serving.sglang_args import BOOTSTRAP_PORT, SGLANG_PORT

# The pin lives in containers/versions.yaml (what the image installs); conformance checks this package.
_ROUTER = component("router")
ROUTER_PACKAGE: str = _ROUTER["package"]
ROUTER_VERSION = str(_ROUTER["version"])
ROUTER_MODULE: str = _ROUTER["module"]
ROUTER_PORT = 8000
ROUTER_METRICS_PORT = 29000
# Minutes the router keeps waiting for workers beyond the server start-up budget (staging the weights
# happens before the SGLang container and its probes start).
STAGING_GRACE_MINUTES = 15


def worker_url(plan: Plan, role: str, replica: int) -> str:
    return f"http://{leader_host(plan, role, replica)}:{SGLANG_PORT}"


def worker_startup_timeout_secs(plan: Plan) -> int:
    return int((plan.estimates.startup_budget_minutes + max(plan.estimates.staging_minutes, STAGING_GRACE_MINUTES)) * 60)


def router_argv(plan: Plan) -> list[str]:
    router = plan.profile.serving.router
    argv = ["python3", "-m", ROUTER_MODULE, "--pd-disaggregation"]
    for i in range(plan.prefill.replicas):
        argv += ["--prefill", worker_url(plan, "prefill", i), str(BOOTSTRAP_PORT)]
    for i in range(plan.decode.replicas):
        argv += ["--decode", worker_url(plan, "decode", i)]
    argv += [
        "--policy",
        router.policy,
        "--host",
        "0.0.0.0",  # noqa: S104 - the pod IP, behind the internal load balancer
        "--port",
        str(ROUTER_PORT),
        "--prometheus-host",
        "0.0.0.0",  # noqa: S104 - the pod IP, behind the internal load balancer
        "--prometheus-port",
        str(ROUTER_METRICS_PORT),
        # The router holds requests until the workers answer /health; a 760 GB model takes this long.
        "--worker-startup-timeout-secs",
        str(worker_startup_timeout_secs(plan)),
        "--health-check-endpoint",
        "/health",
    ]
    return argv
