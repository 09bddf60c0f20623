"""The kit's pod conventions (pdkit/render/pod.py), across every renderer that builds pods from them.
Each renderer's own tests assert the rest of the security context, /dev/shm, devices and placement of its pods."""

from __future__ import annotations

import pytest
import yaml

from pdkit.model import profile_files
from pdkit.model.thresholds import derive
from pdkit.render import bench, fabric, pod
from pdkit.render.observability import scrape
from pdkit.render.serving import inputs, manifests, weights_job
from tests.conftest import plan_of
from tests.fixtures.serving import pod_templates


def _rendered(plan):
    return {
        "serving": manifests.render(plan, inputs.from_plan(plan)),
        "validation": fabric.render(plan, derive(plan), image="validation:v1", run_id="r1").objects(),
        "bench": bench.render(plan, image="sglang-efa:v1", run_id="r1", levels=(1, 4), deadline_s=600),
        "weights import": [weights_job.render(plan, image="sglang-efa:v1", bucket="b", prefix=plan.weights.prefix)],
    }


@pytest.fixture(scope="module")
def rendered(plan):
    return _rendered(plan)


@pytest.mark.parametrize("name", profile_files.available_profiles())
def test_no_pod_of_any_renderer_is_privileged_or_reaches_the_host(name):
    """Every pod of every profile (serving, validation, bench, weights import) meets Pod Security "restricted"
    (https://kubernetes.io/docs/concepts/security/pod-security-standards/) in what it shares with the host: no
    privilege or escalation, every capability dropped and none added (not even "baseline"'s: the kit adds none;
    a role that needs one says so in roles.ROLE.security, tests/test_role_pod.py), none of the host's namespaces
    or ports. Devices come from the device plugins, the node's NVMe as a PersistentVolume claim and /dev/shm from
    the pod's memory (an emptyDir of medium Memory, for NCCL and torch IPC), so no hostPath and no other /dev mount;
    the one exception is the node-image check's read-only /etc/pdkit with a custom AMI (tests/test_fabric_node_image.py).
    Each renderer's own tests assert the rest of its pods' security context and which of them mount /dev/shm."""
    the_plan = plan_of(name)
    for renderer, objs in _rendered(the_plan).items():
        for owner, template in pod_templates(objs):
            spec = template["spec"]
            where, volumes = f"{renderer}: {owner}", {v["name"]: v for v in spec.get("volumes", [])}
            assert not any(spec.get(k) for k in ("hostNetwork", "hostPID", "hostIPC")), where
            for volume in spec.get("volumes", []):
                exception = owner.startswith("node-image") and volume.get("hostPath", {}).get("path") == fabric.NODE_IMAGE_DIR
                assert "hostPath" not in volume or exception, where
            for c in [*spec.get("initContainers", []), *spec["containers"]]:
                ctx = c["securityContext"]
                assert (ctx["privileged"], ctx["allowPrivilegeEscalation"]) == (False, False), (where, c["name"])
                assert ctx["capabilities"] == {"drop": ["ALL"]}, (where, c["name"])
                assert not any("hostPort" in port for port in c.get("ports", [])), (where, c["name"])
                for mount in c.get("volumeMounts", []):
                    if mount["mountPath"] == pod.SHM_PATH:
                        assert volumes[mount["name"]]["emptyDir"]["medium"] == "Memory", (where, "/dev/shm is the pod's memory")
                    assert not mount["mountPath"].startswith("/dev/") or mount["mountPath"] == pod.SHM_PATH, (where, mount)


def test_one_yaml_form_round_trips_every_renderers_objects(rendered):
    """`pdkit render` and every `--render` print through to_yaml: the YAML loads back to exactly the
    objects the CDK applies."""
    for name, objs in rendered.items():
        assert list(yaml.safe_load_all(pod.to_yaml(objs))) == objs, name


def test_yaml_output_has_no_anchors(plan, rendered):
    """A block two places share (the bench Job's labels, a convention's dict) prints in full in each:
    no `&id001`/`*id001` for a reader to chase. The collector's scrape config uses the same dumper."""
    for name, objs in rendered.items():
        assert "&id" not in pod.to_yaml(objs), name
    assert "&id" not in scrape.render(plan)
    shared = pod.shm_mount()
    assert "&id" in yaml.safe_dump({"a": shared, "b": shared}), "the check can fail: PyYAML's default dumper anchors a shared dict"
    assert "&id" not in pod.to_yaml([{"a": shared, "b": shared}])
