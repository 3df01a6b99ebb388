"""A fifth workload backend, the tests' own: gangs of Pods that must all be Ready together.

It shows that a backend plugs in from outside the product, touching no product file: its own kind (a
`GangSet` of group `gangs.test.crashwatch.io`, read from logs and watched live), the Pods it claims (by the
label `gangs.test.crashwatch.io/gang`), its own rule and deadlines (a gang short of Ready members for the
gang grace is failing), the words of its finding (`part` and `text`), and a tunable with its flag
(`--gang-grace`). `register()` adds it to the process; run as a script, it registers it and runs the
crashwatch command line with the arguments given, as a plugin would.
"""

from __future__ import annotations

import heapq
import sys
from collections.abc import Callable, Collection, Iterable, Mapping
from typing import Any

import msgspec

from pipeline.backends.base import NO_EFFECTS, Backend, Effects, Kind, Place, Tunable
from pipeline.backends.registry import register as register_backend
from pipeline.findings import Finding
from pipeline.index import Index
from pipeline.timing import Due
from pipeline.views import ComponentKey, ObjectKey, PodView, ViewStore
from stream.model.kinds import Watched
from stream.model.objects import ObjectMeta
from stream.model.times import seconds

GROUP = "gangs.test.crashwatch.io"
GANG_LABEL = f"{GROUP}/gang"
LEAD_LABEL = f"{GROUP}/lead"
DEFAULT_GRACE = 60.0


class GangSetSpec(msgspec.Struct, gc=False, omit_defaults=True):
    members: int = 1


class GangSet(msgspec.Struct, gc=False, tag_field="kind", tag="GangSet", omit_defaults=True):
    metadata: ObjectMeta = msgspec.field(default_factory=ObjectMeta)
    spec: GangSetSpec = msgspec.field(default_factory=GangSetSpec)


class GangView(msgspec.Struct, frozen=True, gc=False):
    uid: str
    namespace: str
    name: str
    members: int


def gang_view(gang: GangSet) -> GangView:
    meta = gang.metadata
    return GangView(meta.uid, meta.namespace, meta.name, gang.spec.members)


GANGSETS = Watched("GangSet", GROUP, "v1", "gangsets", GangSet)


class _Gang:
    __slots__ = ("component", "pods", "short_since")

    def __init__(self) -> None:
        self.pods: set[str] = set()
        self.component: ComponentKey | None = None
        self.short_since: float | None = None  # since when fewer members than wanted are Ready


class Gangs(Backend):
    name = "gangs"
    kinds = (Kind(GangSet, GangView, gang_view, GANGSETS),)
    tunables = (
        Tunable(
            "gang_grace",
            "--gang-grace",
            DEFAULT_GRACE,
            "a gang with fewer Ready members than its GangSet wants for this long is failing (default: 1m)",
        ),
    )

    @staticmethod
    def claim(labels: Mapping[str, str]) -> Place | None:
        gang = labels.get(GANG_LABEL)
        return ((gang,), labels.get(LEAD_LABEL) == "true") if gang else None

    def __init__(self, store: ViewStore, settings: Mapping[str, float]) -> None:
        super().__init__(store, settings)
        self.grace = self.setting(settings, "gang_grace")
        self.gangsets: dict[ObjectKey, GangView] = self.views[GangView]
        self.gangs: dict[ObjectKey, _Gang] = {}
        self.of_component: Index[ComponentKey, ObjectKey] = Index()
        self.tracked = self.of_component.sets
        self.now: float | None = None

    def observe_pod(
        self, key: ObjectKey, old: PodView | None, new: PodView | None, time: str | None
    ) -> list[ComponentKey]:
        self._saw(seconds(time))
        touched: list[ComponentKey] = []
        for view, present in ((old, False), (new, True)):
            claim = view.claim if view is not None else None
            if view is None or claim is None or claim.backend != self.name:
                continue
            gang_key = (key[0], claim.place[0])
            gang = self.gangs.setdefault(gang_key, _Gang())
            if present and view.component is not None:
                gang.pods.add(key[1])
                if gang.component is None:
                    gang.component = view.component
                    self.of_component.add(view.component, gang_key)
            else:
                gang.pods.discard(key[1])
            touched += self._weigh(gang_key)
        return list(dict.fromkeys(touched))

    def apply(self, key: ObjectKey, old: Any | None, new: Any | None, time: str | None) -> Effects:
        self._saw(seconds(time))
        return Effects(self._weigh(key), []) if key in self.gangs else NO_EFFECTS

    def finding(self, component: ComponentKey, dcds: Collection[ObjectKey]) -> Finding | None:
        for gang_key in sorted(self.of_component.get(component)):
            gang = self.gangs[gang_key]
            since, now = gang.short_since, self.now
            if since is not None and now is not None and now >= since + self.grace:
                missing = self._wanted(gang_key) - self._ready(gang_key, gang)
                text = f"GangSet {gang_key[1]} is short of {missing} Ready members for over {self.grace:g}s"
                lead = min(gang.pods) if gang.pods else ""
                return Finding(lead, "", 0, 0, "GangShort", part=(("gang", gang_key[1]), ("short", missing)), text=text)
        return None

    def components(self) -> Iterable[ComponentKey]:
        return self.of_component.keys()

    def due(self, now: float) -> list[Due]:
        self._saw(now)
        due: list[Due] = []
        while self.deadlines and self.deadlines[0][0] <= now:
            deadline, gang_key = heapq.heappop(self.deadlines)
            gang = self.gangs.get(gang_key)
            if gang is not None and gang.short_since is not None and gang.component is not None:
                due.append((deadline, [gang.component]))
        return due

    def _weigh(self, gang_key: ObjectKey) -> list[ComponentKey]:
        """Whether the gang is short now: its grace starts when it becomes so (at the latest time seen)."""
        gang = self.gangs[gang_key]
        short = self._ready(gang_key, gang) < self._wanted(gang_key)
        if short and gang.short_since is None and self.now is not None:
            gang.short_since = self.now
            heapq.heappush(self.deadlines, (self.now + self.grace, gang_key))
        elif not short:
            gang.short_since = None
        return [gang.component] if gang.component is not None else []

    def _wanted(self, gang_key: ObjectKey) -> int:
        gangset = self.gangsets.get(gang_key)
        return gangset.members if gangset is not None else 0

    def _ready(self, gang_key: ObjectKey, gang: _Gang) -> int:
        pods = self.store.pods
        views = [pods.get((gang_key[0], name)) for name in gang.pods]
        return sum(1 for view in views if view is not None and view.claim is not None and view.claim.ready)

    def _saw(self, when: float | None) -> None:
        if when is not None and (self.now is None or when > self.now):
            self.now = when


def register() -> Callable[[], None]:
    """Gangs, registered for this process; the function that takes it back."""
    return register_backend(Gangs)


if __name__ == "__main__":
    register()
    from crashwatch.cli import main

    sys.exit(main())
