"""Issue 25 item 7: every Service the kit renders answers on its container's port, and everything that reaches the
router (its NLB, the access host, `pdkit smoke`, `pdkit bench`, the runbooks) uses that port.

EKS, "Limit Pod traffic with Kubernetes network policies", Considerations
(https://docs.aws.amazon.com/eks/latest/userguide/cni-network-policy.html): "For any of your Kubernetes services, the
service port must be the same as the container port. If you're using named ports, use the same name in the service
spec too." The kit turns the VPC CNI's network policy agent on (stacks/eks_addons.py), so a Service on port 80 in
front of the router's 8000 is outside what EKS supports.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest

from pdkit.cli.main import main
from pdkit.model import profile_files
from pdkit.model.thresholds import derive
from pdkit.render import bench, fabric
from pdkit.render.serving.ports import ROUTER_PORT
from tests.conftest import plan_of
from tests.fixtures.serving import pod_templates, rendered

ROOT = Path(__file__).resolve().parent.parent
PROFILES = profile_files.available_profiles()


def _objects(name: str) -> list[dict[str, Any]]:
    """Every Kubernetes object the kit renders for a profile: the serving objects and the validation bundle."""
    plan = plan_of(name)
    checks = fabric.render(plan, derive(plan), image="validation:test", run_id="r1").objects()
    return [*rendered(plan), *checks]


def _selected_container_ports(objs: list[dict[str, Any]], service: dict[str, Any]) -> dict[int | str, int]:
    """Name and number -> number of every container port the Service's selector reaches among `objs`."""
    selector = service["spec"].get("selector") or {}
    ports: dict[int | str, int] = {}
    for _owner, template in pod_templates(objs):
        labels = template["metadata"].get("labels", {})
        if not selector or any(labels.get(k) != v for k, v in selector.items()):
            continue
        for container in template["spec"]["containers"]:
            for port in container.get("ports", []):
                ports[port["containerPort"]] = port["containerPort"]
                if "name" in port:
                    ports[port["name"]] = port["containerPort"]
    return ports


@pytest.mark.parametrize("name", PROFILES)
def test_every_service_port_is_its_container_port(name):
    """Each port of each rendered Service (the router's NLB Service, the validation Jobs' headless Services) equals
    the port its traffic reaches in the pod: targetPort is that number, and where the selected pods declare their
    ports, they declare it (a named targetPort is resolved the way Kubernetes does, by the container port's name)."""
    objs = _objects(name)
    services = [o for o in objs if o["kind"] == "Service"]
    assert any(s["spec"].get("type") == "LoadBalancer" for s in services), "the router Service is among them"
    for service in services:
        declared = _selected_container_ports(objs, service)
        for port in service["spec"].get("ports", []):
            target = port.get("targetPort", port["port"])
            where = f"{service['metadata']['name']} port {port['port']}"
            assert target == port["port"], f"{where}: targetPort {target!r}, EKS network policies need the same port"
            if declared:
                assert declared.get(target) == port["port"], f"{where}: no selected container declares it ({declared})"


def test_the_router_service_is_the_routers_own_port(plan):
    """The router listens on --port ROUTER_PORT (router_args); its Service, hence its NLB listener, is on that port."""
    from pdkit.render.serving import manifests

    (port,) = manifests.router_service(plan)["spec"]["ports"]
    assert port["port"] == port["targetPort"] == ROUTER_PORT == 8000


def test_bench_reaches_the_router_on_its_service_port(plan):
    """bench_serving's --base-url is the Service's DNS name and port: the router's own port, not 80."""
    assert bench.router_url(plan).endswith(f".svc:{ROUTER_PORT}")


def test_the_access_host_may_reach_the_router_port(kit):
    """The SSM access host forwards to the router's internal NLB: its security group (no other egress than it needs)
    lets it out on the router's port."""
    groups = kit.template("cluster").find_resources("AWS::EC2::SecurityGroup")
    (host,) = [g for g in groups.values() if g["Properties"]["GroupDescription"].startswith("SSM access host")]
    ports = {(rule["FromPort"], rule["ToPort"]) for rule in host["Properties"]["SecurityGroupEgress"]}
    assert (ROUTER_PORT, ROUTER_PORT) in ports
    assert (80, 80) not in ports, "nothing listens on 80 any more"


def test_smoke_help_forwards_the_router_port(capsys):
    """`pdkit smoke --help` prints the port-forward commands an operator pastes: they must target the router's port."""
    with pytest.raises(SystemExit):
        main(["smoke", "--help"])
    out = capsys.readouterr().out
    assert f"portNumber={ROUTER_PORT},localPortNumber=8000" in out
    assert f"8000:{ROUTER_PORT}" in out
    assert "portNumber=80," not in out


@pytest.mark.parametrize(
    ("runbook", "line"),
    [
        ("02-serve.md", f"port-forward svc/NAME-router 8000:{ROUTER_PORT}"),
        ("02-serve.md", f"forward the NLB's DNS name, port {ROUTER_PORT}"),
        ("04-benchmark.md", f"--base-url http://NAME-router.pd-serving.svc:{ROUTER_PORT} "),
        ("01-cluster.md", f"port {ROUTER_PORT} instead of the API endpoint"),
    ],
)
def test_runbooks_reach_the_router_on_its_service_port(runbook, line):
    """The runbooks' commands to the router use the Service's port (a stale :80 would hang until it times out)."""
    text = (ROOT / "runbooks" / runbook).read_text()
    assert line in " ".join(text.split())
    assert not re.search(r"svc:80\b|NAME-router 8000:80\b|portNumber=80\b", text)
