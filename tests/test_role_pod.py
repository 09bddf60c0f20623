"""Issue 14 item 8: a validation check that stands for a role runs as that role's serving pods run
(pdkit/render/serving/role_pod.py), and a role's security escape hatch reaches both, refused by the namespace's
Pod Security level unless the profile lowers it explicitly."""

from __future__ import annotations

import kubernetes_validate
import pytest
import yaml

from pdkit.errors import ProfileError
from pdkit.model import plan as plan_mod
from pdkit.model import profile_files
from pdkit.model.profile import Profile
from pdkit.model.thresholds import derive
from pdkit.render import fabric as fabric
from tests.fixtures.serving import BASELINE_CAPABILITIES, of_kind, process_env, rendered, role_pods

VALIDATION_IMAGE = "registry.example/validation:v1"
SERVING_IMAGE = "registry.example/sglang-efa:v1"
ENFORCE = "pod-security.kubernetes.io/enforce"


def _plan(raw):
    return plan_mod.build(Profile.model_validate(raw), profile_path="test.yaml")


def _serving(plan):
    objs = rendered(plan, image=SERVING_IMAGE)
    return of_kind(objs, "Namespace")[0], role_pods(objs), objs


def _validation(plan):
    bundle = fabric.render(plan, derive(plan), image=VALIDATION_IMAGE, run_id="abc", role_images=dict.fromkeys(plan.roles, SERVING_IMAGE))
    return bundle, {spec.key: spec.job["spec"]["template"]["spec"] for spec in bundle.jobs}


@pytest.mark.parametrize(
    ("check", "role", "extra_env"),
    [("uccl-decode-0", "decode", True), ("mooncake-prefill", "prefill", False), ("mooncake-decode", "decode", False)],
)
def test_a_roles_check_runs_with_its_image_resources_security_and_environment(plan, check, role, extra_env):
    """A pass must predict serving, so a check that stands for a role runs in that role's serving pod spec:
    image, requests and limits, container and pod security context, and every plain variable the role's SGLang
    process sees (the ConfigMap plus the role's own; the admin key, a Secret reference, is for SGLang's HTTP
    server only).
    - UCCL-EP's low-latency benchmark exercises deep_ep, libfabric and the EFA devices exactly as decode's SGLang
      does; before, it ran in the validation image with the fabric variables only (it adds its own on top).
    - Mooncake: SGLang's prefill writes KV into decode's GPU memory through Mooncake
      (sglang/srt/disaggregation/mooncake/conn.py), so the initiator runs as prefill and the target as decode,
      with exactly their variables (FI_HMEM, MOONCAKE_PROTOCOL and the rest)."""
    objs = rendered(plan, image=SERVING_IMAGE)
    serving = role_pods(objs)[role]
    (sglang,) = serving["containers"]
    pod = _validation(plan)[1][check]
    (probe,) = pod["containers"]
    assert probe["image"] == sglang["image"] == SERVING_IMAGE
    assert probe["resources"] == sglang["resources"]
    assert probe["securityContext"] == sglang["securityContext"]
    assert pod["securityContext"] == serving["securityContext"]
    serving_env = process_env(plan, objs, sglang)
    check_env = {e["name"]: e["value"] for e in probe["env"] if "value" in e}
    assert ({k: check_env.get(k) for k in serving_env} if extra_env else check_env) == serving_env


def test_serving_and_validation_run_the_same_seccomp_profile(plan):
    """Before, serving pods set no seccompProfile (kubelet's default: Unconfined unless --seccomp-default,
    https://kubernetes.io/docs/tutorials/security/seccomp/) and the validation pods RuntimeDefault, under
    which get_mempolicy/mbind/set_mempolicy need CAP_SYS_NICE (moby profiles/seccomp/default.json): a
    NUMA call could fail in validation and pass in serving. Now both follow the role's setting."""
    _, pods, _ = _serving(plan)
    _, jobs = _validation(plan)
    for role in plan.roles:
        assert "seccompProfile" not in pods[role]["securityContext"]
        assert "seccompProfile" not in jobs[f"efa-{role}"]["securityContext"]
    assert "seccompProfile" not in jobs["uccl-decode-0"]["securityContext"]


def _with_hatch(security, pod_security=None):
    raw = yaml.safe_load(profile_files.resolve(None).read_text())
    raw["roles"]["decode"]["security"] = security
    if pod_security:
        raw.setdefault("serving", {})["pod_security"] = pod_security
    return raw


def test_a_roles_escape_hatch_is_refused_unless_pod_security_is_lowered_explicitly():
    """Pod Security "baseline" refuses IPC_LOCK and SYS_NICE (not in its capability list), privileged
    containers and an Unconfined seccomp profile (pod-security-standards); the API server would refuse
    the pods at admission, far from the cause. The profile says so at load, naming the fix."""
    for security in ({"capabilities": ["SYS_NICE"]}, {"privileged": True}, {"seccomp": "Unconfined"}):
        with pytest.raises(ProfileError) as err:
            _plan(_with_hatch(security))
        assert err.value.field == "roles.decode.security"
        assert "serving.pod_security: privileged" in err.value.fix
    assert not {"IPC_LOCK", "SYS_NICE"} & BASELINE_CAPABILITIES


def test_the_escape_hatch_reaches_serving_and_validation_alike():
    """One setting, both places: the decode pods and decode's validation checks add the same
    capability, and both namespaces lower enforcement to "privileged" (there is no level between
    baseline and privileged that admits an added capability). Prefill keeps the unprivileged default."""
    plan = _plan(_with_hatch({"capabilities": ["SYS_NICE", "IPC_LOCK"]}, "privileged"))
    ns, pods, objs = _serving(plan)
    assert ns["metadata"]["labels"][ENFORCE] == "privileged"
    (decode,) = pods["decode"]["containers"]
    assert decode["securityContext"]["capabilities"] == {"drop": ["ALL"], "add": ["SYS_NICE", "IPC_LOCK"]}
    (prefill,) = pods["prefill"]["containers"]
    assert prefill["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    bundle, jobs = _validation(plan)
    assert bundle.namespace["metadata"]["labels"][ENFORCE] == "privileged"
    for key in ("uccl-decode-0", "efa-decode"):
        assert jobs[key]["containers"][0]["securityContext"] == decode["securityContext"], key
    assert jobs["efa-prefill"]["containers"][0]["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    version = f"{plan.kubernetes_version}.0"
    for obj in [*bundle.objects(), *(o for o in objs if o["kind"] != "DisaggregatedSet")]:
        kubernetes_validate.validate(obj, version, strict=True)


def test_privileged_escape_hatch_allows_escalation_as_the_api_requires():
    """The API server rejects a container with privileged: true and allowPrivilegeEscalation: false
    (k8s.io/kubernetes pkg/apis/core/validation: "cannot set `allowPrivilegeEscalation` to false and
    `privileged` to true")."""
    plan = _plan(_with_hatch({"privileged": True}, "privileged"))
    _, pods, _ = _serving(plan)
    ctx = pods["decode"]["containers"][0]["securityContext"]
    assert ctx["privileged"] is True
    assert ctx["allowPrivilegeEscalation"] is True


def test_runtime_default_applies_to_both_and_lets_validation_enforce_restricted():
    """`seccomp: RuntimeDefault` on every role: both run it; Pod Security "restricted" requires
    RuntimeDefault or Localhost (pod-security-standards, "Seccomp"), so validation enforces it again,
    and serving stays "baseline" without `serving.pod_security`."""
    raw = _with_hatch({"seccomp": "RuntimeDefault"})
    raw["roles"]["prefill"]["security"] = {"seccomp": "RuntimeDefault"}
    plan = _plan(raw)
    ns, pods, _ = _serving(plan)
    assert ns["metadata"]["labels"][ENFORCE] == "baseline"
    bundle, jobs = _validation(plan)
    assert bundle.namespace["metadata"]["labels"][ENFORCE] == "restricted"
    for role in plan.roles:
        assert pods[role]["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        assert jobs[f"efa-{role}"]["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    assert jobs["uccl-decode-0"]["securityContext"] == pods["decode"]["securityContext"]
