"""Kube, the kit's Kubernetes client (pdkit/ops/kube.py), against fake client APIs (no cluster)."""

from __future__ import annotations

import pytest
from kubernetes.client import (
    V1ContainerState,
    V1ContainerStateWaiting,
    V1ContainerStatus,
    V1Job,
    V1JobCondition,
    V1JobStatus,
    V1ObjectMeta,
    V1Pod,
    V1PodCondition,
    V1PodList,
    V1PodSpec,
    V1PodStatus,
)
from kubernetes.client.exceptions import ApiException

from pdkit.errors import KitError
from pdkit.ops.kube import Kube, KubeUnreachable, stuck
from tests.fixtures.cmd_support import FakeApps, FakeCore, FakeCustom, k8s_node


class Core(FakeCore):
    def __init__(self, *, pods=None, log="", error=None):
        super().__init__([k8s_node("n1", "decode", efa=8)])
        self.pods = pods or []
        self.log = log
        self.error = error
        self.calls: list[tuple] = []

    def _maybe_fail(self):
        if self.error:
            raise self.error

    def create_namespace(self, body):
        self.calls.append(("create_namespace", body["metadata"]["name"]))
        self._maybe_fail()

    def create_namespaced_config_map(self, namespace, body):
        self.calls.append(("create_config_map", namespace, body["metadata"]["name"]))
        self._maybe_fail()

    def delete_namespaced_secret(self, name, namespace):
        self.calls.append(("delete_secret", namespace, name))
        self._maybe_fail()

    def list_namespaced_pod(self, namespace, *, label_selector, _request_timeout):
        self.calls.append(("list_pods", namespace, label_selector))
        self._maybe_fail()
        return V1PodList(items=self.pods)

    def read_namespaced_pod_log(self, name, namespace, *, _request_timeout):
        self.calls.append(("log", namespace, name))
        self._maybe_fail()
        return self.log


class Batch:
    def __init__(self, job=None):
        self.job = job
        self.calls: list[tuple] = []

    def create_namespaced_job(self, namespace, body):
        self.calls.append(("create_job", namespace, body["metadata"]["name"]))

    def delete_namespaced_job(self, name, namespace, *, propagation_policy):
        self.calls.append(("delete_job", namespace, name, propagation_policy))

    def read_namespaced_job_status(self, name, namespace, *, _request_timeout):
        return self.job


def _cluster(core=None, batch=None):
    core = core or Core()
    return Kube(core=core, apps=FakeApps([]), custom=FakeCustom([]), batch=batch or Batch())


def _pod(name, *, index=None, phase="Running", conditions=None, waiting=None, node="n1"):
    statuses = None
    if waiting:
        statuses = [
            V1ContainerStatus(
                name="c",
                image="i",
                image_id="",
                ready=False,
                restart_count=0,
                state=V1ContainerState(waiting=V1ContainerStateWaiting(reason=waiting[0], message=waiting[1])),
            )
        ]
    return V1Pod(
        metadata=V1ObjectMeta(name=name, annotations={"batch.kubernetes.io/job-completion-index": str(index)} if index is not None else {}),
        spec=V1PodSpec(containers=[], node_name=node),
        status=V1PodStatus(phase=phase, conditions=conditions, container_statuses=statuses),
    )


def test_gpu_nodes_come_from_pdkit_kube():
    assert _cluster().gpu_nodes()[0].efa == 8


def test_create_dispatches_by_kind():
    core, batch = Core(), Batch()
    c = _cluster(core, batch)
    c.create({"kind": "Namespace", "metadata": {"name": "ns"}})
    c.create({"kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "ns"}})
    c.create({"kind": "Job", "metadata": {"name": "j", "namespace": "ns"}})
    assert core.calls == [("create_namespace", "ns"), ("create_config_map", "ns", "cm")]
    assert batch.calls == [("create_job", "ns", "j")]


def test_an_existing_namespace_is_fine_anything_else_is_an_error():
    c = _cluster(Core(error=ApiException(status=409, reason="AlreadyExists")))
    c.create({"kind": "Namespace", "metadata": {"name": "ns"}})
    with pytest.raises(KitError, match="could not create ConfigMap cm"):
        c.create({"kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "ns"}})


def test_forbidden_says_which_principal_to_use():
    c = _cluster(Core(error=ApiException(status=403, reason="Forbidden")))
    with pytest.raises(KitError, match=r"cluster\.admin_principal_arns"):
        c.create({"kind": "ConfigMap", "metadata": {"name": "cm", "namespace": "ns"}})


def test_delete_ignores_gone_objects_and_takes_pods_with_jobs():
    core, batch = Core(error=ApiException(status=404, reason="NotFound")), Batch()
    c = _cluster(core, batch)
    c.delete({"kind": "Secret", "metadata": {"name": "s", "namespace": "ns"}})
    c.delete({"kind": "Job", "metadata": {"name": "j", "namespace": "ns"}})
    assert batch.calls == [("delete_job", "ns", "j", "Background")]


def test_job_state():
    failed = V1Job(
        status=V1JobStatus(
            failed=1, conditions=[V1JobCondition(type="Failed", status="True", reason="DeadlineExceeded", message="too long")]
        )
    )
    state = _cluster(batch=Batch(failed)).job("ns", "j")
    assert state.finished
    assert state.failure == "DeadlineExceeded: too long"
    done = _cluster(batch=Batch(V1Job(status=V1JobStatus(succeeded=2, conditions=[V1JobCondition(type="Complete", status="True")])))).job(
        "ns", "j"
    )
    assert done.finished
    assert done.failure is None
    assert done.succeeded == 2
    running = _cluster(batch=Batch(V1Job(status=V1JobStatus(active=2)))).job("ns", "j")
    assert not running.finished
    assert running.active == 2


def test_pods_index_node_and_why_they_are_stuck():
    unschedulable = V1PodCondition(
        type="PodScheduled", status="False", reason="Unschedulable", message="0/6 nodes: 4 Insufficient nvidia.com/gpu"
    )
    core = Core(
        pods=[
            _pod("j-0-a", index=0),
            _pod("j-1-b", index=1, phase="Pending", conditions=[unschedulable], node=None),
            _pod("j-2-c", index=2, phase="Pending", waiting=("ImagePullBackOff", "not found")),
        ]
    )
    pods = _cluster(core).pods("ns", "j")
    assert core.calls[-1] == ("list_pods", "ns", "batch.kubernetes.io/job-name=j")
    assert [(p.index, p.node, p.phase) for p in pods] == [(0, "n1", "Running"), (1, None, "Pending"), (2, "n1", "Pending")]
    assert pods[1].unschedulable == "0/6 nodes: 4 Insufficient nvidia.com/gpu"
    assert pods[2].waiting == "ImagePullBackOff: not found"
    assert "cannot be scheduled" in (stuck(pods) or "")
    assert "cannot start: ImagePullBackOff" in (stuck([pods[2]]) or "")
    assert stuck([pods[0]]) is None


def test_serving_pods_lists_live_sglang_pods():
    core = Core(pods=[_pod("a"), _pod("b", phase="Succeeded"), _pod("c", phase="Pending")])
    assert _cluster(core).serving_pods("pd-serving") == ["a", "c"]
    assert core.calls[-1] == ("list_pods", "pd-serving", "app.kubernetes.io/component=sglang")


def test_logs_of_a_pod_not_started_are_empty():
    assert _cluster(Core(log="hello")).logs("ns", "p") == "hello"
    assert _cluster(Core(error=ApiException(status=400, reason="BadRequest"))).logs("ns", "p") == ""


def test_unreachable_api_is_one_line_with_the_fix():
    c = _cluster(Core(error=ConnectionRefusedError("connection refused")))
    with pytest.raises(KubeUnreachable, match="open the SSM access path"):
        c.pods("ns", "j")


def test_a_failed_call_names_what_was_asked_and_the_status():
    """One translation for every call: an API error says which call failed and how, not that the API is unreachable."""
    c = _cluster(Core(error=ApiException(status=500, reason="Internal Server Error")))
    with pytest.raises(KubeUnreachable, match=r"could not list pods batch.kubernetes.io/job-name=j \(HTTP 500 Internal Server Error\)"):
        c.pods("ns", "j")


def test_a_job_deleted_while_run_jobs_waits_ends_its_wait_with_the_reason():
    """A Job deleted under run_jobs (kubectl delete, the TTL) is no such Job (None), and the wait ends with why, not a traceback."""
    from pdkit.ops.kube import Waiting, run_jobs

    class Gone(Batch):
        def read_namespaced_job_status(self, name, namespace, *, _request_timeout):
            raise ApiException(status=404, reason="NotFound")

    c = _cluster(batch=Gone())
    assert c.job("ns", "j") is None
    job = {"kind": "Job", "metadata": {"name": "j", "namespace": "ns"}}
    runs = run_jobs(c, [(job, [])], waiting=Waiting(timeout_s=60, sleep=lambda s: None, clock=lambda: 0.0))
    assert runs["j"].finished
    assert runs["j"].problem == "the Job was deleted before it finished"


def test_the_runs_service_account_role_and_binding_go_to_the_real_clients_methods(plan):
    """The nccl launcher's access objects (manifests.launcher_access) are created and deleted through the
    kubernetes client's CoreV1Api and RbacAuthorizationV1Api, checked against their real signatures (autospec)."""
    from unittest import mock

    from kubernetes import client

    from pdkit.render import fabric as manifests

    objs = manifests.launcher_access(plan, "abc123", "ns")
    core = mock.create_autospec(client.CoreV1Api, instance=True)
    rbac = mock.create_autospec(client.RbacAuthorizationV1Api, instance=True)
    c = Kube(core=core, apps=FakeApps([]), custom=FakeCustom([]), batch=Batch(), rbac=rbac)
    for obj in objs:
        c.create(obj)
    for obj in reversed(objs):
        c.delete(obj)
    account, role, binding = objs
    core.create_namespaced_service_account.assert_called_once_with("ns", account)
    rbac.create_namespaced_role.assert_called_once_with("ns", role)
    rbac.create_namespaced_role_binding.assert_called_once_with("ns", binding)
    name = "nccl-launcher-abc123"
    core.delete_namespaced_service_account.assert_called_once_with(name, "ns")
    rbac.delete_namespaced_role.assert_called_once_with(name, "ns")
    rbac.delete_namespaced_role_binding.assert_called_once_with(name, "ns")
