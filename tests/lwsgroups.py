"""A LeaderWorkerSet group's lives as event sequences, and feeding them, for the tests of the group rule."""

from __future__ import annotations

from builders import event, lws_pod

from pipeline.outputs import ComponentChange, Output
from pipeline.pipeline import Pipeline
from stream.model.events import WatchEvent


def at(second: int) -> str:
    return f"2026-11-20T10:{second // 60:02d}:{second % 60:02d}Z"


def incarnation(n: int, start: int, fail: bool = True, exit_code: int = 1) -> list[WatchEvent]:
    """One life of group 0: created, then (fail) a worker container restarts after exiting non-zero,
    and LWS deletes the group (the leader first, the worker goes with it)."""
    leader, worker = lws_pod(incarnation=n), lws_pod(worker=1, incarnation=n)
    events = [event("ADDED", leader, time=at(start)), event("ADDED", worker, time=at(start))]
    if fail:
        failed = lws_pod(worker=1, incarnation=n, restarts=1, exit_code=exit_code)
        events.append(event("MODIFIED", failed, time=at(start + 5)))
    else:
        events.append(event("MODIFIED", lws_pod(worker=1, incarnation=n, ready=True), time=at(start + 5)))
    events += [event("DELETED", leader, time=at(start + 6)), event("DELETED", worker, time=at(start + 6))]
    return events


def feed(pipeline: Pipeline, *batches: list[WatchEvent]) -> list[Output]:
    out: list[Output] = []
    for batch in batches:
        out += pipeline.feed(batch)
    return out


def components(out: list[Output]) -> list[ComponentChange]:
    return [o for o in out if isinstance(o, ComponentChange)]


