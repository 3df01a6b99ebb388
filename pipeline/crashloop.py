"""The crash-loop rule of the upstream change: one Pod in, a finding or None out.

A Pod is crash-looping when it is not Ready, neither finished (Succeeded, Failed) nor being deleted, and a
container (init or regular) restarted at least twice and is down after a non-zero exit. The exit code is
that of the termination that left it down: `state.terminated` if it is terminated now, else
`lastState.terminated`. Which Pod of a component to report is the aggregator's business, not this rule's.
"""

from __future__ import annotations

import msgspec

from stream.model.objects import ContainerStatus, Pod

MIN_RESTARTS = 2


class Finding(msgspec.Struct, frozen=True, gc=False):
    """What makes one Pod crash-loop: the container, how often it restarted, how it last exited."""

    pod: str
    container: str
    restarts: int
    exit_code: int
    reason: str = ""
    # a LeaderWorkerSet group's recreation loop (pipeline.groups): the group, how often it was recreated,
    # and the finding's own words (the fields above are then the last failure's)
    lws: str = ""
    group: str = ""
    recreations: int = 0
    text: str = ""
    # the diagnoses beside the crash loop (pipeline.diagnoses): which one ("" is the crash loop of this
    # rule), what kubelet or the scheduler said of it, the time its grace counts from (RFC 3339; "": from
    # when it was first seen), and the container's memory limit where an OOM kill is the cause (of this
    # rule's finding too, where the spec sets one)
    diagnosis: str = ""
    detail: str = ""
    since: str = ""
    memory_limit: str = ""

    def describe(self) -> str:
        if self.text:
            return self.text
        if self.diagnosis:
            from pipeline.diagnoses import describe

            return describe(self)
        why = f" ({self.reason})" if self.reason and self.reason != "Error" else ""
        if self.memory_limit:  # an OOM kill's (pipeline.diagnoses adds it)
            why = f" ({self.reason}, memory limit {self.memory_limit})"
        return (
            f"container {self.container} of Pod {self.pod} restarted {self.restarts} times "
            f"and is down after exit code {self.exit_code}{why}"
        )


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
