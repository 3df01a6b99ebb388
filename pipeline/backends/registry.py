"""The registered backends: one line each (a new backend adds its class here)."""

from __future__ import annotations

from pipeline.backends.base import Backend, Settings
from pipeline.backends.deployments import Deployments
from pipeline.backends.grove import Grove
from pipeline.backends.lws import LwsGroups
from pipeline.views import ViewStore

BACKENDS: tuple[type[Backend], ...] = (
    Deployments,
    LwsGroups,
    Grove,
)


def make_backends(store: ViewStore, settings: Settings) -> tuple[Backend, ...]:
    """One of each registered backend, over the pipeline's one store."""
    return tuple(make(store, settings) for make in BACKENDS)
