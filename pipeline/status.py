"""Which status crashwatch wants on a DCD or DGD, following "How crashwatch shares status with the operator".

crashwatch owns exactly the failure it asserts: it writes to report a crash loop, and to clear a failure it
reported once no crash loop remains; then it speaks the operator's vocabulary. Beside that it owns the kstatus
condition `Stalled` outright (the operator never writes it): True while a crash loop holds, False once it
clears, so Helm 4, Flux and kpt, which read `Ready=False` as "in progress", fail fast instead of timing out.
Anything else is left alone, and a status that already says what is wanted yields no write. Sending,
retrying and backing off belong to the patcher sink; this module only decides.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import NamedTuple

from pipeline.backends.base import Backend
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
from pipeline.graph import FAILING, REASON_CRASH_LOOPING, REASON_MIXED, REASONS, GraphVerdict, crash_loops
from pipeline.outputs import StatusWanted, status_write
from pipeline.views import StatusView
from stream.model.objects import Condition

DCD_CONDITION = "Available"
DCD_REASON_CRASH_LOOPING = "ContainerCrashLooping"
DGD_CONDITION = "Ready"
STALLED = "Stalled"
DGD_STALLED_REASON = "ComponentCrashLooping"
STALLED_CLEARED_REASON = "NoCrashLoop"
STALLED_RECOVERED_REASON = "Recovered"  # a diagnosis other than a crash loop ended
# a failure whose Pods a spec change replaces: withdrawn, neither recovered nor proven fixed
STALLED_REPLACED_REASON = "SpecReplaced"
# a DCD's `Stalled` reason per diagnosis (and its `Available` reason with --failed-state all)
DCD_REASONS = {
    CRASH_LOOP: DCD_REASON_CRASH_LOOPING,
    CERTAIN_CRASH: "ContainerCrashedCertainCause",
    OOM_KILLED: "ContainerOOMKilled",
    RESTART_LOOP: "ContainerRestartLooping",
    IMAGE_PULL: "ImagePullFailing",
    CONFIG_ERROR: "ContainerConfigError",
    UNSCHEDULABLE: "PodUnschedulable",
}
# a DGD's `Stalled` reason per graph reason (pipeline.graph)
DGD_STALLED_REASONS = {
    REASON_CRASH_LOOPING: DGD_STALLED_REASON,
    REASONS[CERTAIN_CRASH]: "ComponentCrashedCertainCause",
    REASONS[OOM_KILLED]: "ComponentOOMKilled",
    REASONS[RESTART_LOOP]: "ComponentRestartLooping",
    REASONS[IMAGE_PULL]: "ComponentImagePullFailing",
    REASONS[CONFIG_ERROR]: "ComponentConfigError",
    REASONS[UNSCHEDULABLE]: "ComponentUnschedulable",
    REASON_MIXED: "ComponentsFailing",
}
OWNED_DCD_REASONS = frozenset(DCD_REASONS.values())  # an `Available` failure crashwatch may clear
OWNED_DGD_REASONS = frozenset((*REASONS.values(), REASON_MIXED))  # a `Ready` failure crashwatch may clear
CRASH_LOOP_STALLED = frozenset((DCD_REASON_CRASH_LOOPING, DGD_STALLED_REASON))


def stalled(
    view: StatusView, failing: bool, reason: str, message: str, cleared: str, replaced: bool = False
) -> Condition | None:
    """The kstatus `Stalled` condition crashwatch wants: True while a crash loop (or another diagnosis)
    holds; False once it clears where it said True (absent or False stays as it is, so a healthy object
    is never written). `cleared` is what a cleared crash loop says; another diagnosis's end is said in
    general words, its reason `Recovered`. A failure that ends because a spec change replaces its Pods
    (`replaced`) has not recovered, and says so: its reason `SpecReplaced`."""
    if failing:
        return Condition(STALLED, "True", reason, message, observed_generation=view.generation)
    current = view.condition(STALLED)
    if current is None or current.status != "True":
        return None
    other = current.reason not in CRASH_LOOP_STALLED and current.reason in _NOT_CRASH_LOOP_STALLED
    if replaced:
        words = f"the {'failing' if other else 'crash-looping'} Pods are of the spec before a change that replaces them"
        return Condition(STALLED, "False", STALLED_REPLACED_REASON, words, observed_generation=view.generation)
    if other:
        words = cleared.replace("crash-looping", "failing")
        return Condition(STALLED, "False", STALLED_RECOVERED_REASON, words, observed_generation=view.generation)
    return Condition(STALLED, "False", STALLED_CLEARED_REASON, cleared, observed_generation=view.generation)


_NOT_CRASH_LOOP_STALLED = frozenset((*DCD_REASONS.values(), *DGD_STALLED_REASONS.values())) - CRASH_LOOP_STALLED


def dcd_stalled(dcd: StatusView, finding: Finding | None, replaced: bool = False) -> Condition | None:
    return stalled(
        dcd,
        finding is not None,
        DCD_REASONS.get(finding.diagnosis, DCD_REASON_CRASH_LOOPING) if finding is not None else "",
        finding.describe() if finding is not None else "",
        "no container is crash-looping",
        replaced,
    )


def dgd_stalled(dgd: StatusView, verdict: GraphVerdict, replaced: bool = False) -> Condition | None:
    reason = DGD_STALLED_REASONS.get(verdict.reason or "", DGD_STALLED_REASON)
    return stalled(dgd, verdict.failed, reason, verdict.message, "no component is crash-looping", replaced)


def dcd_available(
    dcd: StatusView,
    finding: Finding | None,
    workload: Condition | None,
    all_failed: bool = False,
) -> Condition | None:
    """The `Available` condition crashwatch wants on a DCD, or None when it has nothing to say.
    `workload` is what the DCD's workload says in the operator's words (pipeline.backends: its
    Deployment, its LeaderWorkerSet), None while none is observed. A crash loop is written as upstream
    writes it, and so is a crash whose cause is certain (with its own reason); another diagnosis only with
    `all_failed` (--failed-state all), with its own reason."""
    if finding is not None and (finding.diagnosis in FAILING or all_failed):
        return Condition(
            type=DCD_CONDITION,
            status="False",
            reason=DCD_REASONS.get(finding.diagnosis, DCD_REASON_CRASH_LOOPING),
            message=finding.describe(),
            observed_generation=dcd.generation,
        )
    current = dcd.condition(DCD_CONDITION)
    if current is None or current.reason not in OWNED_DCD_REASONS:
        return None
    if workload is None:
        return Condition(
            DCD_CONDITION, "Unknown", "Reconciling", "no Deployment observed", observed_generation=dcd.generation
        )
    return workload


def dcd_is_available(dcd: StatusView) -> tuple[bool, str]:
    """Whether a DCD counts as available (its condition True at its generation), and why not."""
    condition = dcd.condition(DCD_CONDITION)
    if condition is None:
        return False, "no Available condition"
    if condition.status == "True" and condition.observed_generation in (0, dcd.generation):
        return True, ""
    return False, condition.message or condition.reason or f"Available is {condition.status}"


NOT_READY = "some_resources_are_not_ready"


class NotReady(NamedTuple):
    name: str  # the DCD, or a Grove-backed component (it has no DCD)
    why: str
    reason: str  # the operator's word for it


def components_readiness(
    dgd: StatusView, dcds: Iterable[StatusView], reporters: Sequence[Backend] = ()
) -> tuple[int, list[NotReady]]:
    """How many components the graph has, and those not ready, in the operator's words: a DCD by its
    `Available` condition; a component with no DCD by what its backend (one of the `reporters`, e.g.
    Grove's) reports on the DGD."""
    not_ready: list[NotReady] = []
    count = 0
    covered = set()
    for dcd in sorted(dcds, key=lambda view: view.name):
        count += 1
        covered.add(dcd.component)
        ok, why = dcd_is_available(dcd)
        if not ok:
            not_ready.append(NotReady(dcd.name, why, NOT_READY))
    for backend in reporters:
        more, theirs = backend.not_ready(dgd, covered)
        count += more
        not_ready += (NotReady(*item) for item in theirs)
    return count, sorted(not_ready)


def dgd_ready(
    dgd: StatusView,
    verdict: GraphVerdict,
    dcds: Iterable[StatusView],
    all_failed: bool = False,
    reporters: Sequence[Backend] = (),
) -> tuple[str, Condition] | None:
    """The state and `Ready` condition crashwatch wants on a DGD, or None when it has nothing to say.
    `failed` is written for crash-looping components, as upstream does (the message lists those alone),
    or with `all_failed` (--failed-state all) for every diagnosis, with the graph's reason."""
    failed = verdict if all_failed else crash_loops(verdict)
    if failed.failed:
        return "failed", Condition(
            DGD_CONDITION,
            "False",
            failed.reason or REASON_CRASH_LOOPING,
            failed.message,
            observed_generation=dgd.generation,
        )
    current = dgd.condition(DGD_CONDITION)
    if current is None or current.reason not in OWNED_DGD_REASONS:
        return None
    count, not_ready = components_readiness(dgd, dcds, reporters)
    if count and not not_ready:
        return "successful", Condition(
            DGD_CONDITION,
            "True",
            "all_resources_are_ready",
            "All resources are ready",
            observed_generation=dgd.generation,
        )
    details = "; ".join(f"{item.name}: {item.why}" for item in not_ready)
    message = "Resources not ready: " + (details or "no components observed")
    reasons = {item.reason for item in not_ready}
    reason = reasons.pop() if len(reasons) == 1 else "mixed_not_ready_reasons" if reasons else NOT_READY
    return "pending", Condition(DGD_CONDITION, "False", reason, message, observed_generation=dgd.generation)


def wanted_status(view: StatusView, decided: tuple[Condition, ...], state: str | None, now: str) -> StatusWanted | None:
    """A StatusWanted when the object does not already say this, else None (so restarts write nothing)."""
    return status_write(view, decided, state, now)
