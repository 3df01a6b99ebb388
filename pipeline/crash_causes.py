"""Why a component's Pods crash: the crashed runs' output asked for, read into causes, and the first crash
failed at once when its cause is certain.

A crash is a container's run that ended non-zero (`PodView.crash`, identified by its container and when it
ended). For each new crash of the Pod that speaks for its component (of the Pods showing a crash, the first
by name: the one a crash loop would be reported on), the tracker asks once for the output of that run
(`ExplainWanted`): a live reader answers with a `CrashOutput` event, a replay finds it in its record. The
output's cause is read by the pure catalog (pipeline.causes) and kept per Pod, for the crash it explains.
It closes the words of the Pod's finding from then on (a crash loop says why), and where it is certain to
come back at every restart (a gated model, a rejected flag: `Cause.certain`), the Pod is failed at this first
crash (`CERTAIN_CRASH`), held between restarts as a crash loop is (pipeline.holds), unless told not to
(`Settings.fail_fast`). A cause that may pass on retry (a dependency not up yet, a port briefly held) is
named, never hurried. What is kept is bounded by the Pods held: a Pod that goes takes its entries along.
"""

from __future__ import annotations

from collections.abc import Callable, Collection

import msgspec

from pipeline.causes import Cause
from pipeline.causes.unknown import UNKNOWN_KIND
from pipeline.findings import CERTAIN_CRASH, Finding
from pipeline.outputs import ExplainWanted, Output
from pipeline.views import ComponentKey, ObjectKey, PodView
from stream.model.events import CrashOutput

# a crash of a Pod: the Pod's uid, the container, when its run ended
CrashKey = tuple[str, str, str]


class CrashCauses:
    __slots__ = ("asked", "asks", "awaited", "causes", "fail_fast", "pods", "pods_of")

    def __init__(
        self,
        pods: dict[ObjectKey, PodView],
        pods_of: Callable[[ComponentKey], Collection[ObjectKey]],
        fail_fast: bool,
        awaited: dict[ObjectKey, Finding],
        asks: bool = False,
    ) -> None:
        """`pods`: the store's Pods; `pods_of`: a component's Pods; `fail_fast`: fail a Pod at its first
        crash when the cause is certain; `awaited`: the store's Pods that were Ready when their crash's
        certain cause came, with the finding they fail with when they go down (the filter reads it); `asks`:
        ask for each new crash's output (a live reader answers; a replay's record holds them)."""
        self.pods, self.pods_of, self.fail_fast, self.awaited, self.asks = pods, pods_of, fail_fast, awaited, asks
        self.asked: dict[ObjectKey, CrashKey] = {}  # the last crash whose output was asked for, per Pod
        self.causes: dict[ObjectKey, tuple[CrashKey, Cause]] = {}  # the last crash explained, per Pod

    def explained(self, output: CrashOutput) -> tuple[ObjectKey, Finding | None] | None:
        """A crash's output came: its cause is read and kept. The Pod it is of (None: gone, or no longer
        that Pod), and the finding to hold it to at once when the cause is certain and the Pod is not Ready
        (None: none to hold): a certain cause comes back at every run, so whichever run the Pod is in now
        is failing for it."""
        key = (output.namespace, output.pod)
        view = self.pods.get(key)
        if view is None or view.uid != output.uid:
            return None
        from pipeline.causes.scan import classify  # the catalog loads on first use (see pipeline.causes)

        cause = classify(output.text.splitlines())
        crash_key = (output.uid, output.container, output.finished_at)
        self.causes[key] = (crash_key, cause)
        self.asked.setdefault(key, crash_key)  # a replay's record asked for it: the Pod's entries go with it
        self.awaited.pop(key, None)
        if not (self.fail_fast and cause.certain) or view.finished or view.claim is not None:
            return key, None  # a backend's Pod (a LeaderWorkerSet group's, recreated at once) is its rule's
        finding = Finding(
            view.name,
            output.container,
            output.restarts,
            output.exit_code,
            output.reason,
            diagnosis=CERTAIN_CRASH,
            cause=cause,
        )
        if view.ready:  # restarted and Ready already (no probe): failed when it goes down, not while Ready
            self.awaited[key] = finding
            return key, None
        return key, finding

    def down(self, key: ObjectKey, view: PodView) -> Finding | None:
        """A Pod awaited (Ready when its certain cause came) changed: the finding to hold it to if it is
        down now, the same Pod (None: still Ready; or replaced or finished, and no longer awaited)."""
        finding: Finding = self.awaited[key]
        entry = self.causes.get(key)
        if entry is None or entry[0][0] != view.uid or view.finished or view.claim is not None:
            del self.awaited[key]
            return None
        if view.ready:
            return None
        del self.awaited[key]
        crash = view.crash  # (where crashes are asked about) the run it is down after, if it shows one
        if crash is None or crash.container != finding.container:
            return finding
        return msgspec.structs.replace(finding, restarts=crash.restarts, exit_code=crash.exit_code, reason=crash.reason)

    def named(self, namespace: str, finding: Finding) -> Finding:
        """The finding, closed with the cause of the last crash explained of its container, in its Pod (of
        the same uid), where there is one."""
        key = (namespace, finding.pod)
        entry = self.causes.get(key) if finding.cause is None and finding.container else None
        if entry is None:
            return finding
        (uid, container, _), cause = entry
        view = self.pods.get(key)
        if view is None or view.uid != uid or container != finding.container or cause.kind == UNKNOWN_KIND:
            return finding  # an output that names no cause adds nothing to the finding's words
        return msgspec.structs.replace(finding, cause=cause)

    def observe(
        self, key: ObjectKey, old: PodView | None, new: PodView | None, time: str | None
    ) -> tuple[tuple[PodView, Finding] | None, list[Output]]:
        """A Pod changed, heard once: if it is gone, or replaced under its name, its crashes go with it; if
        it was awaited and is down now, it and the finding to hold it to (see `down`); and, where it `asks`, if
        it shows a crash it did not show before and speaks for its component, the output to ask for, once."""
        asked = self.asked.get(key)
        if asked is not None and (new is None or asked[0] != new.uid):
            del self.asked[key]
            self.causes.pop(key, None)
            self.awaited.pop(key, None)
        down = self.down(key, new) if new is not None and key in self.awaited else None
        held = (new, down) if new is not None and down is not None else None
        return held, self._ask(key, old, new, time) if self.asks else []

    def _ask(self, key: ObjectKey, old: PodView | None, view: PodView | None, time: str | None) -> list[Output]:
        """The output to ask for if the Pod shows a crash it did not show before, is the Pod that speaks
        for its component, and that crash was not asked for yet."""
        if view is None or view.crash is None or (old is not None and old.crash == view.crash):
            return []
        crash, component = view.crash, view.component
        if component is None:
            return []
        crash_key = (view.uid, crash.container, crash.finished_at)
        if self.asked.get(key) == crash_key or not self._speaks(key, component):
            return []
        self.asked[key] = crash_key
        return [
            ExplainWanted(
                time, *key, view.uid, crash.container, crash.finished_at, crash.restarts, crash.exit_code, crash.reason
            )
        ]

    def _speaks(self, key: ObjectKey, component: ComponentKey) -> bool:
        """Whether the Pod is, of its component's Pods that show a crash, the first by name."""
        pods, name = self.pods, key[1]
        for other in self.pods_of(component):
            if other[1] < name:
                view = pods.get(other)
                if view is not None and view.crash is not None:
                    return False
        return True

