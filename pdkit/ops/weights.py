"""Follow the weights import Job (`pdkit weights import --wait`): the import's latest log line, failed attempts, stuck pods.

pdkit/render/serving/weights_job.py renders the Job; `Kube.replace` (pdkit/ops/kube.py) starts it.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass

from pdkit.errors import KitError
from pdkit.ops.kube import Kube, PodState
from pdkit.render.serving.weights_job import BACKOFF_LIMIT, CONTAINER, TTL_AFTER_FINISHED_SECONDS

POLL_SECONDS = 15.0
_PHASE_ORDER = {"Running": 0, "Succeeded": 1, "Failed": 2, "Pending": 3}


@dataclass(frozen=True)
class Outcome:
    succeeded: bool
    failure: str | None
    log_tail: str


def watch(
    cluster: Kube,
    namespace: str,
    name: str,
    *,
    say: Callable[[str], None],
    timeout_s: float,
    sleep: Callable[[float], None] = time.sleep,
    clock: Callable[[], float] = time.monotonic,
) -> Outcome:
    """Follow the Job until it finishes: the import's latest log line whenever it changes, failed attempts, stuck pods."""
    started = clock()
    last_line = last_stuck = None
    failed_seen = 0
    while True:
        state = cluster.job(namespace, name)
        if state is None:
            raise KitError(
                f"Job {namespace}/{name} is gone (deleted, or removed {TTL_AFTER_FINISHED_SECONDS // 86400} days after it finished)"
            )
        pod = min(cluster.pods(namespace, name), key=lambda p: (_PHASE_ORDER.get(p.phase, 4), p.name), default=None)
        if state.failed > failed_seen:
            failed_seen = state.failed
            if not state.finished:
                say(f"attempt {failed_seen} failed; the Job retries (up to {BACKOFF_LIMIT} times) and keeps the files already imported")
        stuck = _stuck(pod)
        if stuck and stuck != last_stuck:
            say(stuck)
        last_stuck = stuck
        if state.finished:
            tail = cluster.logs(namespace, pod.name, container=CONTAINER, tail_lines=20) if pod else ""
            return Outcome(succeeded=state.failure is None, failure=state.failure, log_tail=tail)
        if pod is not None and pod.phase == "Running":
            text = cluster.logs(namespace, pod.name, container=CONTAINER, tail_lines=1)
            lines = [line for line in text.splitlines() if line.strip()]
            if lines and lines[-1] != last_line:
                last_line = lines[-1]
                say(last_line)
        if clock() - started > timeout_s:
            return Outcome(succeeded=False, failure=f"still running after {timeout_s / 3600:.1f} h of watching", log_tail="")
        sleep(POLL_SECONDS)


def _stuck(pod: PodState | None) -> str | None:
    if pod is None:
        return None
    if pod.unschedulable:
        return f"pod {pod.name} cannot be scheduled on a system node: {pod.unschedulable}"
    if pod.waiting:
        return f"pod {pod.name} is waiting: {pod.waiting}"
    return None
