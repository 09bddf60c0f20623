"""Issue 14 item 9: a closed serving surface. NetworkPolicies that let only the router reach SGLang's
HTTP port and the role pods reach each other, enforced because the VPC CNI's network policy agent is
on; SGLang's admin endpoints behind a key from a Secret that is never in a template; budgets that
never let two groups go at once; and the locked-memory message naming the mechanism the kit uses."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import yaml

from pdkit.model import profile_files
from pdkit.render import node_config
from pdkit.render.serving import manifests, names
from pdkit.render.serving.ports import ROUTER_METRICS_PORT, ROUTER_PORT
from pdkit.render.serving.sglang_args import SGLANG_PORT
from tests.conftest import plan_of
from tests.fixtures.serving import of_kind, one, pod_templates, rendered

ROOT = Path(__file__).resolve().parent.parent
SGLANG_HELP = ROOT / "conformance" / "help" / "sglang-0.5.23-launch_server.txt"
PROFILES = profile_files.available_profiles()


@pytest.fixture(scope="module")
def objs(plan):
    return rendered(plan)


def _selects(selector, labels):
    return all(labels.get(k) == v for k, v in selector.get("matchLabels", {}).items()) and not selector.get("matchExpressions")


# --- NetworkPolicy --------------------------------------------------------------------------------


def test_every_serving_pod_is_behind_an_ingress_policy(plan, objs):
    """A pod no NetworkPolicy selects accepts everything (https://kubernetes.io/docs/concepts/services-networking/network-policies/#the-two-sorts-of-pod-isolation):
    every SGLang and router pod must be selected by an Ingress policy of its namespace."""
    policies = of_kind(objs, "NetworkPolicy")
    assert policies
    owners = []
    for owner, template in pod_templates(objs):
        labels = template["metadata"]["labels"]
        chosen = [p for p in policies if _selects(p["spec"]["podSelector"], labels) and "Ingress" in p["spec"]["policyTypes"]]
        assert chosen, (owner, labels)
        owners.append(owner)
    assert len(owners) == len(plan.roles) + 1, "every role's pods and the router's"
    # Valid for the cluster's version with every other object: tests/test_serving_manifests.py.
    assert {p["metadata"]["namespace"] for p in policies} == {names.namespace(plan)}


def test_only_the_router_and_the_role_pods_reach_sglang(plan, objs):
    """Ingress to SGLang: the router on SGLang's HTTP port, the deployment's own SGLang pods on every
    port (NCCL/UCCL/torch bootstrap, dist-init, the PD bootstrap server, Mooncake's handshake), and the
    managed Prometheus collector on the HTTP port by VPC address (its ENIs are not pods). Nothing else:
    no other pod selector, no namespace selector, no other port."""
    (policy,) = [p for p in of_kind(objs, "NetworkPolicy") if p["metadata"]["name"] == f"{plan.name}-sglang"]
    sglang_labels = {names.PART_OF_LABEL: plan.name, names.COMPONENT_LABEL: "sglang"}
    router_labels = {names.PART_OF_LABEL: plan.name, names.COMPONENT_LABEL: "router"}
    assert policy["spec"]["podSelector"] == {"matchLabels": sglang_labels}
    rules = policy["spec"]["ingress"]
    by_source = {json.dumps(r["from"], sort_keys=True): r.get("ports") for r in rules}
    http = [{"protocol": "TCP", "port": SGLANG_PORT}]
    assert by_source == {
        json.dumps([{"podSelector": {"matchLabels": router_labels}}], sort_keys=True): http,
        json.dumps([{"podSelector": {"matchLabels": sglang_labels}}], sort_keys=True): None,
        json.dumps([{"ipBlock": {"cidr": str(plan.network.vpc_cidr)}}], sort_keys=True): http,
    }
    # The router's worker URLs and the scrape configuration use exactly this port.
    from pdkit.render.observability import catalog

    assert catalog.SGLANG_PORT == SGLANG_PORT


def test_the_router_answers_only_on_its_ports(plan, objs):
    (policy,) = [p for p in of_kind(objs, "NetworkPolicy") if p["metadata"]["name"] == names.router_name(plan)]
    (rule,) = policy["spec"]["ingress"]
    assert {p["port"] for p in rule["ports"]} == {ROUTER_PORT, ROUTER_METRICS_PORT}
    assert policy["spec"]["policyTypes"] == ["Ingress"]


def test_the_vpc_cni_enforces_network_policies(kit):
    """EKS accepts NetworkPolicy objects but enforces them only when the VPC CNI add-on's configuration
    sets enableNetworkPolicy "true" (https://docs.aws.amazon.com/eks/latest/userguide/cni-network-policy-configure.html;
    a string in the add-on's configuration schema)."""
    from stacks.eks_addons import VPC_CNI_CONFIGURATION

    (props,) = [
        r["Properties"]
        for r in kit.template("cluster").find_resources("AWS::EKS::Addon").values()
        if r["Properties"]["AddonName"] == "vpc-cni"
    ]
    assert json.loads(props["ConfigurationValues"]) == {"enableNetworkPolicy": "true"} == VPC_CNI_CONFIGURATION


# --- the admin key ---------------------------------------------------------------------------------


def test_sglang_takes_the_admin_key_flag_as_0_5_23_spells_it():
    """SGLang 0.5.23's own --help (recorded by `make conformance`): `--admin-api-key ADMIN_API_KEY ...
    When set, admin endpoints require this key`."""
    text = SGLANG_HELP.read_text()
    assert re.search(rf"^\s+{re.escape(manifests.ADMIN_KEY_FLAG)} ADMIN_API_KEY\b", text, re.M)
    assert "admin endpoints require this key" in text


@pytest.mark.parametrize("role", ["prefill", "decode"])
def test_every_sglang_server_runs_with_an_admin_key_from_a_secret(plan, objs, role):
    """Kubernetes expands $(VAR) in args from the container's env
    (https://kubernetes.io/docs/tasks/inject-data-application/define-interdependent-environment-variables/);
    the variable comes from a Secret reference that is not optional: a missing Secret holds the
    container back instead of leaving the literal "$(...)" as a guessable key."""
    (ds,) = of_kind(objs, "DisaggregatedSet")
    (lws,) = [r for r in ds["spec"]["roles"] if r["name"] == role]
    (c,) = lws["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"]
    i = c["args"].index(manifests.ADMIN_KEY_FLAG)
    var = c["args"][i + 1]
    assert var == f"$({manifests.ADMIN_KEY_ENV})"
    (env,) = [e for e in c["env"] if e["name"] == manifests.ADMIN_KEY_ENV]
    assert env["valueFrom"]["secretKeyRef"] == {
        "name": manifests.admin_key_secret(plan),
        "key": manifests.ADMIN_KEY_SECRET_KEY,
        "optional": False,
    }
    # The serving stack applies these objects through CloudFormation: a Secret among them would put the
    # key in the template in plain text. The operator creates it (runbooks/02-serve.md, Prerequisites 5).
    assert not of_kind(objs, "Secret")


def test_the_runbook_creates_the_secret_the_pods_read(plan):
    text = (ROOT / "runbooks" / "02-serve.md").read_text()
    cmd = manifests.admin_key_command(plan)
    assert cmd[-2] == manifests.admin_key_secret(plan) == "glm51-2p2d-sglang-admin"
    assert "kubectl -n pd-serving create secret generic NAME-sglang-admin" in text
    assert f'--from-literal={manifests.ADMIN_KEY_SECRET_KEY}="$(openssl rand -hex 32)"' in text


# --- disruption budgets ----------------------------------------------------------------------------


@pytest.mark.parametrize("name", PROFILES)
def test_no_budget_lets_two_groups_go_at_once(name):
    """LWS recreates the whole group when one of its pods goes (RecreateGroupOnPodRestart,
    https://lws.sigs.k8s.io/docs/reference/leaderworkerset.v1/): a budget of N pods over groups of
    several nodes lets N groups down at once. Each role's budget allows one pod (glm51-fp8-4p4d: one group of
    two nodes may go, the other stays), none for a single group; an unhealthy pod may always be evicted."""
    the_plan = plan_of(name)
    objs = rendered(the_plan)
    for role in the_plan.roles.values():
        spec = one(objs, "PodDisruptionBudget", names.role_object(the_plan, role.name))["spec"]
        assert spec["maxUnavailable"] == (1 if role.replicas > 1 else 0), (name, role.name)
        assert spec["unhealthyPodEvictionPolicy"] == "AlwaysAllow"


# --- locked memory: the mechanism the kit uses ------------------------------------------------------


def test_the_memlock_message_names_the_drop_in_the_launch_template_writes():
    """pdkit/render/node_config.py's user data (the GPU launch template's) writes a systemd drop-in raising
    containerd's LimitMEMLOCK; the kit sets no containerd base runtime spec. The message names what the
    node actually carries and how to look at it."""
    data = node_config.user_data()
    assert f"> {node_config.CONTAINERD_MEMLOCK_DROPIN}" in data
    assert "LimitMEMLOCK=infinity" in data
    assert "baseRuntimeSpec" not in yaml.safe_dump(node_config.node_config())
    assert node_config.CONTAINERD_MEMLOCK_DROPIN in manifests.MEMLOCK_CHECK
    assert "systemctl show containerd -p LimitMEMLOCK" in manifests.MEMLOCK_CHECK
    assert "base runtime spec" not in manifests.MEMLOCK_CHECK


@pytest.mark.parametrize("runbook", ["02-serve.md", "03-validate.md"])
def test_runbooks_name_the_drop_in_not_a_base_runtime_spec(runbook):
    text = (ROOT / "runbooks" / runbook).read_text()
    assert node_config.CONTAINERD_MEMLOCK_DROPIN in text
    assert "base runtime spec" not in text
    assert "baseRuntimeSpec" not in text
