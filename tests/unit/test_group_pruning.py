"""What the group rule leaves out never changes what it says: for random lives of LeaderWorkerSet groups,
the pipeline as it runs (readiness flips a group cannot act on kept out of the aggregator, a group Pod's
coming and going recomputing its component only when the group's verdict can change) says exactly what
a pipeline says that looks again at every change."""

from __future__ import annotations

from typing import Any

from builders import dcd, dgd, event, lws, lws_pod
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pipeline.backends.lws import LwsGroups
from pipeline.outputs import Output
from pipeline.pipeline import Pipeline
from pipeline.views import PodView
from stream.model.events import WatchEvent

# "recreate": what LWS does after a failure, a worker failing and the group's Pods deleted and created anew
# in one step, so that groups often reach a loop's streak; "move": the group's Pods relabelled to the
# other component
ACTIONS = ["add", "add", "ready", "ready", "unready", "fail", "fail0", "crash", "delete"]
ACTIONS += ["recreate", "recreate", "lws", "move"]
steps = st.lists(
    st.tuples(
        st.sampled_from(ACTIONS),
        st.integers(0, 2),  # the group
        st.integers(0, 1),  # leader or worker
        st.sampled_from([1, 5, 30, 700]),  # seconds since the step before (the window is 600)
    ),
    max_size=60,
)


def at(second: int) -> str:
    return f"2026-11-20T{10 + second // 3600:02d}:{second // 60 % 60:02d}:{second % 60:02d}Z"


def lives(script: list[tuple[str, int, int, int]]) -> list[WatchEvent]:
    """The events of a script: Pods added, flipping readiness, failing (exit 1 or 0) or crash-looping,
    deleted and added again as new incarnations, moved to another component; the LWS saying its restart
    budget ran out, or not."""
    now = 0
    incarnation: dict[tuple[int, int], int] = {}
    present: dict[tuple[int, int], dict[str, Any]] = {}
    component = {0: "worker", 1: "worker", 2: "worker"}
    failed = False
    events = [event("ADDED", dgd("g"), time=at(0)), event("ADDED", dcd("g-worker-0", "g", "worker"), time=at(0))]
    events.append(event("ADDED", lws(replicas=3), time=at(0)))

    def make(group: int, member: int, **kw: Any) -> dict[str, Any]:
        n = incarnation.setdefault((group, member), 1)
        return lws_pod(group=group, worker=member, incarnation=n, component=component[group], **kw)

    for action, group, worker, gap in script:
        now += gap
        key = (group, worker)
        if action == "recreate":
            if (group, 1) in present:  # the worker's container exits 1 and restarts: LWS recreates the group
                events.append(event("MODIFIED", make(group, 1, restarts=1), time=at(now)))
            for member in (0, 1):
                if (group, member) in present:
                    events.append(event("DELETED", present.pop((group, member)), time=at(now)))
                    incarnation[(group, member)] += 1
            for member in (0, 1):
                present[(group, member)] = make(group, member)
                events.append(event("ADDED", present[(group, member)], time=at(now)))
            continue
        if action == "lws":
            failed = not failed
            events.append(event("MODIFIED", lws(replicas=3, failed="budget spent" if failed else None), time=at(now)))
            continue
        if action == "move":
            component[group] = "prefill" if component[group] == "worker" else "worker"
            for member in (0, 1):
                if (group, member) in present:
                    present[(group, member)] = make(group, member)
                    events.append(event("MODIFIED", present[(group, member)], time=at(now)))
            continue
        if action == "add":
            if key in present:
                continue
            obj = make(group, worker, ready=None)
        elif action == "delete":
            if key not in present:
                continue
            events.append(event("DELETED", present.pop(key), time=at(now)))
            incarnation[key] += 1
            continue
        elif key not in present:
            continue
        elif action in ("ready", "unready"):
            obj = make(group, worker, ready=action == "ready")
        else:
            restarts, exit_code = {"fail": (1, 1), "fail0": (1, 0), "crash": (2, 1)}[action]
            obj = make(group, worker, restarts=restarts, exit_code=exit_code)
        events.append(event("MODIFIED" if key in present else "ADDED", obj, time=at(now)))
        present[key] = obj
    return events


class _AllGroups:
    """In place of the LeaderWorkerSet backend's index of the groups on a loop's streak: every group of a component."""

    def __init__(self, groups: Any) -> None:
        self.get = groups.get

    def add(self, key: Any, group: Any) -> None:
        pass

    def remove(self, key: Any, group: Any) -> None:
        pass


def looking_at_everything() -> Pipeline:
    """A pipeline that passes every readiness flip on, recomputes a group Pod's component on every change
    of the Pod whatever the group's state, and looks at every group of a component for a loop."""
    pipeline = Pipeline()
    pipeline.filter._quiet = {}
    groups = pipeline.aggregator.backend(LwsGroups)
    groups.streaking = _AllGroups(groups.groups_of)  # type: ignore[assignment]
    groups._failed_lws = {("", "")}  # never a real LWS, but not empty: every group is scanned
    observe_pod = groups.observe_pod

    def every_time(key: Any, old: PodView | None, new: PodView | None, time: str | None) -> list[Any]:
        touched = observe_pod(key, old, new, time)
        return touched + [v.component for v in (old, new) if v and v.component]

    groups.observe_pod = every_time  # type: ignore[method-assign]
    return pipeline


def said(pipeline: Pipeline, events: list[WatchEvent]) -> list[Output]:
    return [output for item in events for output in pipeline.feed([item])]


# a looping group whose one Pod that is not Ready goes away: the group is Ready, the loop is over
LEAVES_READY = [("recreate", 0, 0, 1), ("recreate", 0, 0, 5), ("recreate", 0, 0, 5)]
LEAVES_READY += [("ready", 0, 0, 5), ("delete", 0, 1, 5)]
# a looping group whose Pods move to another component: the loop goes with them
MOVES_LOOPING = [("recreate", 0, 0, 1), ("recreate", 0, 0, 5), ("recreate", 0, 0, 5), ("move", 0, 0, 5)]


@settings(max_examples=300, deadline=None)
@example(LEAVES_READY)
@example(MOVES_LOOPING)
@given(steps)
def test_what_is_left_out_never_changes_what_is_said(script: list[tuple[str, int, int, int]]) -> None:
    events = lives(script)
    assert said(Pipeline(), events) == said(looking_at_everything(), events)


def test_the_reference_does_look_at_more() -> None:
    """The comparison has teeth: on a group's plain life the reference recomputes where the pipeline does not."""
    script = [("add", 0, 0, 1), ("add", 0, 1, 1), ("ready", 0, 0, 1), ("unready", 0, 0, 1), ("ready", 0, 1, 1)]
    events = lives(script)
    pipeline, reference = Pipeline(), looking_at_everything()
    calls = {"pipeline": 0, "reference": 0}
    for name, p in (("pipeline", pipeline), ("reference", reference)):
        recompute = p.aggregator._recompute_component

        def counted(*args: Any, _name: str = name, _recompute: Any = recompute) -> Any:
            calls[_name] += 1
            return _recompute(*args)

        p.aggregator._recompute_component = counted  # type: ignore[method-assign,assignment]
        said(p, events)
    assert calls["pipeline"] < calls["reference"]
