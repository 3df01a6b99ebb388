"""Deployment-backed components: a DCD runs its Pods through a Deployment it owns.

What only the Deployment knows: which DCD serves a Pod (the Deployment whose selector matches it, and its
owner), and whether the workload is available, which the operator writes on the DCD as `Available`. The
Deployments are indexed by a selector anchor (the first `In` term: a Pod's labels name the candidates, so no
lookup scans the Deployments) and by their owning DCD.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from typing import Any

import msgspec

from pipeline.backends.base import NO_EFFECTS, Backend, Effects, Kind
from pipeline.index import Index
from pipeline.status import DCD_CONDITION
from pipeline.views import ComponentKey, ObjectKey, PodView, Selector, ViewStore, parse_selector, selector_matches
from stream.model.objects import Condition, Deployment, read_labels


class DeploymentView(msgspec.Struct, frozen=True, gc=False):
    uid: str
    namespace: str
    name: str
    selector: Selector | None
    owner_dcd: str | None
    available: bool


def deployment_view(deployment: Deployment) -> DeploymentView:
    meta = deployment.metadata
    status = deployment.status
    available = status.observed_generation >= meta.generation and any(
        c.type == "Available" and c.status == "True" for c in status.conditions
    )
    return DeploymentView(
        uid=meta.uid,
        namespace=sys.intern(meta.namespace),
        name=meta.name,
        selector=parse_selector(deployment.spec.selector),
        owner_dcd=meta.controller_of_kind("DynamoComponentDeployment"),
        available=available,
    )



class Deployments(Backend):
    name = "deployments"
    kinds = (Kind(Deployment, DeploymentView, deployment_view),)

    def __init__(self, store: ViewStore, settings: Mapping[str, float]) -> None:
        super().__init__(store, settings)
        self.deployments: dict[ObjectKey, DeploymentView] = self.views[DeploymentView]
        self._anchor: Index[tuple[str, str, str], ObjectKey] = Index()
        self._unanchored: Index[str, ObjectKey] = Index()
        self._by_dcd: Index[ObjectKey, ObjectKey] = Index()

    def apply(self, key: ObjectKey, old: Any | None, new: Any | None, time: str | None) -> Effects:
        """A Deployment changed: its owning DCDs (before and after) are decided again."""
        owners: list[ObjectKey] = []
        if isinstance(old, DeploymentView):
            self._unindex(key, old)
            if old.owner_dcd is not None:
                owners.append((old.namespace, old.owner_dcd))
        if isinstance(new, DeploymentView):
            self._index(key, new)
            if new.owner_dcd is not None and (new.namespace, new.owner_dcd) not in owners:
                owners.append((new.namespace, new.owner_dcd))
        return Effects([], owners) if owners else NO_EFFECTS

    def selecting(self, pod: PodView) -> Iterator[DeploymentView]:
        """Deployments whose selector matches the Pod, through the anchor index: no scan of Deployments."""
        candidates = set(self._unanchored.get(pod.namespace))
        labels = read_labels(pod.labels)  # read when asked: a held Pod's labels were read once already
        for key, value in labels.items():
            candidates |= self._anchor.get((pod.namespace, key, value))
        for dkey in sorted(candidates):
            deployment = self.deployments[dkey]
            if deployment.selector is not None and selector_matches(deployment.selector, labels):
                yield deployment

    def owned(self, dcd: ObjectKey) -> DeploymentView | None:
        """The Deployment the DCD owns (the first by name, should there be several)."""
        owned = self._by_dcd.get(dcd)
        return self.deployments[min(owned)] if owned else None

    def workload(self, dcd: ObjectKey, component: ComponentKey | None, generation: int) -> Condition | None:
        deployment = self.owned(dcd)
        if deployment is None:
            return None
        if deployment.available:
            return Condition(
                DCD_CONDITION, "True", "DeploymentReady", "Deployment is ready", observed_generation=generation
            )
        return Condition(
            DCD_CONDITION, "False", "DeploymentNotReady", "Deployment is not ready", observed_generation=generation
        )

    def dcd_name(self, component: ComponentKey, pod: PodView) -> str | None:
        for deployment in self.selecting(pod):
            if deployment.owner_dcd is not None:
                return deployment.owner_dcd
        return None

    def _anchors(self, deployment: DeploymentView) -> list[tuple[str, str, str]]:
        for term in deployment.selector or ():
            if term.operator == "In":
                return [(deployment.namespace, term.key, value) for value in term.values]
        return []

    def _index(self, key: ObjectKey, deployment: DeploymentView) -> None:
        anchors = self._anchors(deployment)
        for anchor in anchors:
            self._anchor.add(anchor, key)
        if not anchors and deployment.selector is not None:
            self._unanchored.add(deployment.namespace, key)
        if deployment.owner_dcd is not None:
            self._by_dcd.add((deployment.namespace, deployment.owner_dcd), key)

    def _unindex(self, key: ObjectKey, deployment: DeploymentView) -> None:
        for anchor in self._anchors(deployment):
            self._anchor.remove(anchor, key)
        self._unanchored.remove(deployment.namespace, key)
        if deployment.owner_dcd is not None:
            self._by_dcd.remove((deployment.namespace, deployment.owner_dcd), key)
