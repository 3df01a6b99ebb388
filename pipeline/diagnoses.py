"""The diagnoses beside the crash loop: why a Pod will never be Ready, one Pod in, a finding or None out.

The crash-loop rule (pipeline.crashloop) covers a container that keeps failing with a non-zero exit. A
graph stays pending forever for other reasons too, and each is a rule here, read on one observation of
a Pod that is not Ready, neither finished nor being deleted:

- **image pull failing**: a container waits with `ErrImagePull` or `ImagePullBackOff` (kubelet retries
  with backoff: it may still succeed, so this waits for a grace), or with `InvalidImageName` or
  `ErrImageNeverPull` (no retry can help: at once);
- **config error**: a container waits with `CreateContainerConfigError` (a Secret or ConfigMap key that
  is not there) or `CreateContainerError`, after a grace (the Secret may be on its way);
- **unschedulable**: the Pod's `PodScheduled` condition is False with reason `Unschedulable`, after a
  grace long enough for a cluster autoscaler to bring a node, counted from the condition's
  `lastTransitionTime`; the scheduler's message (which resource is short) is kept;
- **restart loop**: a regular container restarted at least twice and is down after exit 0 under
  `restartPolicy: Always` (a server that exits 0 is restarted with backoff forever);
- **OOM killed**: a container restarted at least twice and is down after an OOM kill whose exit code
  is 0 (a child's OOM kill can leave that), which the crash-loop rule ignores; named as such, with the
  container's memory limit. (An OOM kill with a non-zero exit, 137 as a rule, is a crash loop by the
  rule: its finding stays the rule's, the memory limit added to it, so its words read `(OOMKilled,
  memory limit 16Mi)`.)

A crash loop found by the rule comes first, so its finding is the rule's, unchanged. Which grace applies
is not this module's rule but the aggregator's settings (`Graces`): a finding only says when its grace
counts from (`since`: an object's own time, so a restarted watcher counts from the same moment). The
restart-based findings are held between restarts like crash loops (pipeline.holds); the waiting ones
are steady while they last, and end when the container or the Pod moves on.
"""

from __future__ import annotations

import msgspec

from pipeline.crashloop import MIN_RESTARTS, crash_loop, pod_ready
from pipeline.findings import (
    CERTAIN_CRASH,
    CONFIG_ERROR,
    CRASH_LOOP,
    IMAGE_PULL,
    OOM_KILLED,
    RESTART_LOOP,
    UNSCHEDULABLE,
    Finding,
)
from stream.model.objects import ContainerSpec, ContainerStatus, Pod, read_spec

PULL_RETRIED = frozenset(("ErrImagePull", "ImagePullBackOff"))
PULL_PERMANENT = frozenset(("InvalidImageName", "ErrImageNeverPull"))
CONFIG_REASONS = frozenset(("CreateContainerConfigError", "CreateContainerError"))
# the diagnoses of a steady condition, weighed after a grace and never held between restarts
GRACED = frozenset((IMAGE_PULL, CONFIG_ERROR, UNSCHEDULABLE))
# which of several diagnoses of one component is reported: a crash loop first (the upstream verdict)
RANK = {
    kind: order
    for order, kind in enumerate(
        (CRASH_LOOP, CERTAIN_CRASH, OOM_KILLED, RESTART_LOOP, CONFIG_ERROR, IMAGE_PULL, UNSCHEDULABLE)
    )
}
DETAIL_LIMIT = 300  # characters of kubelet's or the scheduler's message kept in a finding

DEFAULT_IMAGE_PULL_GRACE = 180.0  # seconds: --image-pull-grace
DEFAULT_CONFIG_ERROR_GRACE = 120.0  # --config-error-grace
DEFAULT_UNSCHEDULABLE_GRACE = 900.0  # --unschedulable-grace


def diagnose(pod: Pod, ready: bool | None = None) -> Finding | None:
    """The Pod's finding: a crash loop (the rule's, first), else the first container (init containers
    first, in status order) that shows another diagnosis, else an unschedulable Pod."""
    if ready is None:
        ready = pod_ready(pod)
    finding = crash_loop(pod, ready)
    if finding is not None:
        if finding.reason == "OOMKilled":  # rare: the spec is read only then
            limit = memory_limit(pod, finding.container) or memory_limit(pod, finding.container, regular=False)
            return msgspec.structs.replace(finding, memory_limit=limit)
        return finding
    status = pod.status
    if ready or pod.metadata.deletion_timestamp is not None or status.phase in ("Succeeded", "Failed"):
        return None
    name = pod.metadata.name
    for statuses, regular in ((status.init_container_statuses, False), (status.container_statuses, True)):
        for container in statuses:
            if container.state.running is None:
                finding = _container_diagnosis(pod, name, container, regular)
                if finding is not None:
                    return finding
    if status.phase == "Pending" and not status.container_statuses:
        return _unschedulable(pod)
    return None


def _container_diagnosis(pod: Pod, name: str, container: ContainerStatus, regular: bool) -> Finding | None:
    waiting = container.state.waiting
    if waiting is not None and waiting.reason:
        reason = waiting.reason
        if reason in PULL_RETRIED or reason in PULL_PERMANENT or reason in CONFIG_REASONS:
            kind = CONFIG_ERROR if reason in CONFIG_REASONS else IMAGE_PULL
            last = container.last_state.terminated
            if container.restart_count and last is not None and last.finished_at:
                since = last.finished_at  # a container that ran before: since it last stopped
            else:
                since = _scheduled_at(pod)  # a first start: since the Pod was bound to its node
            return Finding(
                name,
                container.name,
                container.restart_count,
                0,
                reason,
                diagnosis=kind,
                detail=_bounded(waiting.message),
                since=since,
            )
    if container.restart_count < MIN_RESTARTS:
        return None
    terminated = container.state.terminated or container.last_state.terminated
    if terminated is None or terminated.exit_code != 0:
        return None  # a non-zero exit is the crash-loop rule's, which found none here
    if terminated.reason == "OOMKilled":
        return Finding(
            name,
            container.name,
            container.restart_count,
            0,
            "OOMKilled",
            diagnosis=OOM_KILLED,
            memory_limit=memory_limit(pod, container.name, regular),
        )
    if regular and (read_spec(pod).restart_policy or "Always") == "Always":
        return Finding(name, container.name, container.restart_count, 0, terminated.reason, diagnosis=RESTART_LOOP)
    return None


def _unschedulable(pod: Pod) -> Finding | None:
    for condition in pod.status.conditions:
        if condition.type == "PodScheduled":
            if condition.status == "False" and condition.reason == "Unschedulable":
                return Finding(
                    pod.metadata.name,
                    "",
                    0,
                    0,
                    "Unschedulable",
                    diagnosis=UNSCHEDULABLE,
                    detail=_bounded(condition.message),
                    since=condition.last_transition_time or "",
                )
            return None
    return None


def _scheduled_at(pod: Pod) -> str:
    """When the Pod was bound to a node (its PodScheduled condition turned True): where kubelet's first
    image pull and container creation begin. "" when unsaid."""
    for condition in pod.status.conditions:
        if condition.type == "PodScheduled":
            return (condition.last_transition_time or "") if condition.status == "True" else ""
    return ""


def memory_limit(pod: Pod, container: str, regular: bool = True) -> str:
    """The container's memory limit as its spec writes it ("" when it has none)."""
    spec = read_spec(pod)
    specs: tuple[ContainerSpec, ...] = spec.containers if regular else spec.init_containers
    for each in specs:
        if each.name == container:
            limits = each.resources.limits if each.resources is not None else None
            return (limits.memory or "") if limits is not None else ""
    return ""


def _bounded(text: str | None) -> str:
    if not text:
        return ""
    text = " ".join(text.split())
    return text if len(text) <= DETAIL_LIMIT else text[: DETAIL_LIMIT - 3] + "..."


def rank(finding: Finding) -> int:
    return RANK.get(finding.diagnosis, len(RANK))


class Settings(msgspec.Struct, frozen=True):
    """The graces of the diagnoses that may resolve by themselves (seconds), and whether the DGD's
    `state: failed` (and the DCD's `Available=False`) is written for crash loops alone, as upstream, or
    for every diagnosis (`--failed-state`)."""

    image_pull_grace: float = DEFAULT_IMAGE_PULL_GRACE
    config_error_grace: float = DEFAULT_CONFIG_ERROR_GRACE
    unschedulable_grace: float = DEFAULT_UNSCHEDULABLE_GRACE
    failed_state: str = "crash-loop"  # or "all"
    # a Pod failed at its first crash when its output's cause is certain to come back (pipeline.crash_causes)
    fail_fast: bool = True

    def grace(self, finding: Finding) -> float:
        kind = finding.diagnosis
        if kind == IMAGE_PULL:
            return 0.0 if finding.reason in PULL_PERMANENT else self.image_pull_grace
        if kind == CONFIG_ERROR:
            return self.config_error_grace
        if kind == UNSCHEDULABLE:
            return self.unschedulable_grace
        return 0.0
