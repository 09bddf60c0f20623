"""The PD router's command line, rendered from the plan: it discovers the prefill and decode leaders by label.

The DisaggregatedSet names its LeaderWorkerSets per slice and revision, so no worker URL is stable:
smg's Kubernetes discovery (`--service-discovery`, smg 1.13.0) watches the namespace's pods and
registers each Ready pod matching `--prefill-selector` / `--decode-selector` at
`--service-discovery-port`, a prefill with the bootstrap port of its `sglang.ai/bootstrap-port`
annotation (smg router_args.py bootstrap_port_annotation). It needs list/watch on pods (the
router's Role in manifests.py).

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
Policies come from the plan (pdkit/model/plan.py `_router`): cache_aware on prefill when there are two or
more prefill replicas to choose between, a load-aware decode policy, and --dp-aware when decode runs
attention DP, so the router picks one of decode's ranks (routed_dp_rank) instead of leaving the rank
to the decode server's own balancer. smg then also sends the prefill's rank to decode as
disagg_prefill_dp_rank (its PD router injects both), so the KV is still found where prefill put it.
"""

from __future__ import annotations

from pdkit.model.images import component
from pdkit.model.plan import Plan
from pdkit.render.serving import names
from pdkit.render.serving.ports import ROUTER_METRICS_PORT, ROUTER_PORT
from pdkit.render.serving.sglang_args import SGLANG_PORT

# The pin lives in containers/versions.yaml (what the image installs); conformance checks this package.
_ROUTER = component("router")
ROUTER_PACKAGE: str = _ROUTER["package"]
ROUTER_VERSION = str(_ROUTER["version"])
ROUTER_MODULE: str = _ROUTER["module"]
# Minutes the router keeps waiting for workers beyond the server start-up budget (staging the weights
# happens before the SGLang container and its probes start).
STAGING_GRACE_MINUTES = 15


def selector_args(plan: Plan, role: str) -> list[str]:
    """smg's selector format: one key=value per argument, a pod must carry all of them."""
    return [f"{k}={v}" for k, v in names.leader_selector(plan, role).items()]


def worker_startup_timeout_secs(plan: Plan) -> int:
    return int((plan.estimates.startup_budget_minutes + max(plan.estimates.staging_minutes, STAGING_GRACE_MINUTES)) * 60)


def policy_argv(plan: Plan) -> list[str]:
    """Per-role policies (so smg's main --policy is not rendered: PD mode ignores it when both are set)."""
    r = plan.router
    argv = ["--prefill-policy", r.prefill_policy, "--decode-policy", r.decode_policy]
    argv += [
        "--cache-threshold",
        str(r.cache_threshold),
        "--balance-abs-threshold",
        str(r.balance_abs_threshold),
        "--balance-rel-threshold",
        str(r.balance_rel_threshold),
    ]
    return argv + (["--dp-aware"] if r.dp_aware else [])


def router_argv(plan: Plan) -> list[str]:
    argv = ["python3", "-m", ROUTER_MODULE, "--pd-disaggregation"]
    argv += ["--service-discovery", "--service-discovery-namespace", names.namespace(plan)]
    argv += ["--service-discovery-port", str(SGLANG_PORT)]
    argv += ["--prefill-selector", *selector_args(plan, "prefill")]
    argv += ["--decode-selector", *selector_args(plan, "decode")]
    argv += policy_argv(plan)
    argv += [
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
