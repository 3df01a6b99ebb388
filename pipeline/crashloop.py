"""The crash-loop rule of the upstream change: one Pod in, a finding or None out.

A Pod is crash-looping when it is not Ready, neither finished (Succeeded, Failed) nor being deleted, and a
container (init or regular) restarted at least twice and is down after a non-zero exit. The exit code is
that of the termination that left it down: `state.terminated` if it is terminated now, else
`lastState.terminated`. Which Pod of a component to report is the aggregator's business, not this rule's.
"""

from __future__ import annotations

import msgspec

from pipeline.findings import Finding
from stream.model.objects import ContainerStatus, Pod

MIN_RESTARTS = 2


def crash_loop(pod: Pod, ready: bool | None = None) -> Finding | None:
    """The first container (init containers first, in status order) that proves a crash loop. `ready`:
    whether the Pod is Ready, for a caller that read it already (`pod_ready`)."""
    if ready is None:
        ready = pod_ready(pod)
    status = pod.status
    if ready or pod.metadata.deletion_timestamp is not None or status.phase in ("Succeeded", "Failed"):
        return None
    for statuses in (status.init_container_statuses, status.container_statuses):
        for container in statuses:
            finding = _container_finding(pod.metadata.name, container)
            if finding is not None:
                return finding
    return None


def pod_ready(pod: Pod) -> bool:
    """Whether the Pod's Ready condition is True."""
    for condition in pod.status.conditions:  # a loop, not any(...): no generator on a per-event path
        if condition.type == "Ready":
            return condition.status == "True"
    return False


def _container_finding(pod: str, container: ContainerStatus) -> Finding | None:
    if container.restart_count < MIN_RESTARTS or container.state.running is not None:
        return None
    terminated = container.state.terminated
    if terminated is None:
        terminated = container.last_state.terminated
    if terminated is None or terminated.exit_code == 0:
        return None
    return Finding(
        pod=pod,
        container=container.name,
        restarts=container.restart_count,
        exit_code=terminated.exit_code,
        reason=terminated.reason,
    )


def pod_failure(pod: Pod) -> Finding | None:
    """The first container (init containers first) that exited non-zero, down now or restarted since;
    else, for a failed Pod, the Pod itself."""
    status = pod.status
    name = pod.metadata.name
    for statuses in (status.init_container_statuses, status.container_statuses):
        for container in statuses:
            terminated = container.state.terminated
            if terminated is None and container.restart_count > 0:
                terminated = container.last_state.terminated
            if terminated is not None and terminated.exit_code != 0:
                return Finding(name, container.name, container.restart_count, terminated.exit_code, terminated.reason)
    if status.phase == "Failed":
        return Finding(name, "", 0, 0, "PodFailed")
    return None


class Crash(msgspec.Struct, frozen=True, gc=False, array_like=True):
    """A container's run that ended with a non-zero exit, while the container is down after it (terminated,
    or waiting to be restarted): which container, its restart count then, how it exited, and when (the
    run's identity: it reads the same terminated and in the backoff that follows)."""

    container: str
    restarts: int
    exit_code: int
    reason: str
    finished_at: str


def last_crash(pod: Pod) -> Crash | None:
    """The first container (init containers first) that is down after a run that ended with a non-zero
    exit: terminated now, or waiting since. A container running again shows none: its readiness flips
    then change nothing here."""
    for statuses in (pod.status.init_container_statuses, pod.status.container_statuses):
        for container in statuses:
            if container.state.running is not None:
                continue
            terminated = container.state.terminated
            if terminated is None and container.restart_count > 0:
                terminated = container.last_state.terminated
            if terminated is not None and terminated.exit_code != 0:
                finished = terminated.finished_at or ""
                return Crash(container.name, container.restart_count, terminated.exit_code, terminated.reason, finished)
    return None
