"""Grove-backed components: PodCliques (and scaling groups of them) that have no DCD.

Grove's Pods carry the graph and component labels like any, so the Pod rules find them with no help; what
only Grove knows is whether a component is ready, which the operator copies onto the DGD as the
component's replicas (`status.components`). That report is this backend's one rule (`not_ready`), asked
when a DGD's readiness is decided (pipeline.status); it holds no state of its own.
"""

from __future__ import annotations

from collections.abc import Collection

from pipeline.backends.base import Backend
from pipeline.views import DgdView, StatusView

GROVE_KINDS = ("PodClique", "PodCliqueScalingGroup")


class Grove(Backend):
    name = "grove"

    def not_ready(self, dgd: StatusView, covered: Collection[str | None]) -> tuple[int, list[tuple[str, str, str]]]:
        """Ready when replicas = updated = ready (a PodCliqueScalingGroup: available) = desired. A
        component `covered` by a DCD, or of a kind Grove does not run, is not Grove's to judge."""
        count = 0
        found: list[tuple[str, str, str]] = []
        for name, replicas in dgd.components if isinstance(dgd, DgdView) else ():
            if name in covered or (replicas.component_kind and replicas.component_kind not in GROVE_KINDS):
                continue  # a DCD speaks for it
            count += 1
            desired = replicas.replicas
            ready = replicas.ready_replicas
            if replicas.component_kind == "PodCliqueScalingGroup" and replicas.available_replicas is not None:
                ready = replicas.available_replicas
            if ready < desired:
                found.append((name, f"scheduled but ready={ready}/{desired}", "pods_not_ready"))
            elif replicas.updated_replicas < desired:
                found.append((name, f"updated={replicas.updated_replicas}/{desired}", "updating"))
        return count, found
