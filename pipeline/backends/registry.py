"""The registered backends: one line each (a new backend adds its class here), and what the rest of the
program reads of them: the kinds to watch, the Pods they claim, their tunables.

A backend can also be registered at run time (`register`): a test's own, or a plugin's. Registration is
for the whole process, as the kinds a log or a watch can hold are.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping

from pipeline.backends.base import Backend, Tunable, overrides
from pipeline.backends.deployments import Deployments
from pipeline.backends.grove import Grove
from pipeline.backends.lws import LwsGroups
from pipeline.views import Claimer, ViewStore
from stream.model import kinds
from stream.model.kinds import Watched

BACKENDS: list[type[Backend]] = [
    Deployments,
    LwsGroups,
    Grove,
]


def _watched_of(backend: type[Backend]) -> list[Watched]:
    return [kind.watched for kind in backend.kinds if kind.watched is not None]


def register(backend: type[Backend]) -> Callable[[], None]:
    """Register a backend for this process (after the built-in ones); the function that takes it back."""
    if any(b.name == backend.name for b in BACKENDS):
        raise ValueError(f"a backend named {backend.name!r} is registered already")
    BACKENDS.append(backend)
    for watched in _watched_of(backend):
        kinds.register(watched)

    def unregister() -> None:
        BACKENDS.remove(backend)
        for watched in _watched_of(backend):
            kinds.unregister(watched.kind)

    return unregister


def make_backends(store: ViewStore, settings: Mapping[str, float] | None = None) -> tuple[Backend, ...]:
    """One of each registered backend, over the pipeline's one store (`settings`: tunables by name)."""
    return tuple(make(store, settings or {}) for make in BACKENDS)


def claimers() -> tuple[Claimer, ...]:
    """The registered backends that claim Pods, with their claims: what a Pod's view is made with."""
    return tuple((b.name, b.claim) for b in BACKENDS if b.claim is not Backend.claim)


def watched() -> list[Watched]:
    """The backends' own kinds, to list and watch where the API server serves them."""
    return [w for backend in BACKENDS for w in _watched_of(backend)]


def tunables() -> list[Tunable]:
    return [t for backend in BACKENDS for t in backend.tunables]


for _backend in BACKENDS:
    for _watched in _watched_of(_backend):
        kinds.register(_watched)

__all__ = ["BACKENDS", "claimers", "make_backends", "overrides", "register", "tunables", "watched"]
