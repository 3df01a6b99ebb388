"""The one rule for a log's time that goes back (stream/sources/timeline.py), record by record."""

from __future__ import annotations

import msgspec
from builders import event, pod
from hypothesis import given, settings
from hypothesis import strategies as st

from stream.model.events import BadRecord, CrashOutput, ReducedPod, WatchEvent
from stream.sources.timeline import Timeline


def _times(batch: list[object]) -> list[str | None]:
    out: list[str | None] = []
    for item in batch:
        if isinstance(item, (WatchEvent, ReducedPod, CrashOutput)):
            out.append(item.time)
    return out


def test_times_in_order_are_left_as_they_are_and_a_log_without_times_stays_without() -> None:
    timeline = Timeline()
    batch: list[object] = [event("ADDED", pod()), event("MODIFIED", pod())]
    assert timeline.forward("a", batch) is None  # type: ignore[arg-type]
    assert _times(batch) == [None, None]
    times = ["2026-11-20T10:00:00Z", "2026-11-20T10:00:00.5Z", "2026-11-20T11:00:01+01:00", "2026-11-20T10:00:02Z"]
    batch = [event("MODIFIED", pod(), time) for time in times]
    assert timeline.forward("a", batch) is None  # type: ignore[arg-type]
    assert _times(batch) == times  # 11:00:01+01:00 is 10:00:01Z: in order
    assert timeline.moved == 0


def test_a_record_older_than_the_latest_or_without_a_time_is_taken_at_the_latest() -> None:
    timeline = Timeline()
    first: list[object] = [event("ADDED", pod(), "2026-11-20T10:05:00Z"), BadRecord("a:2", "bad")]
    assert timeline.forward("a", first) is None  # type: ignore[arg-type]
    second: list[object] = [
        event("MODIFIED", pod(), None),
        event("MODIFIED", pod(), "not a time"),
        event("MODIFIED", pod(), "2026-11-20T10:00:00Z"),
        ReducedPod(1, "2:nsp", "MODIFIED", msgspec.Raw(b"\xc0"), "2026-11-20T10:01Z"),
        CrashOutput("ns", "p", "u", "main", "2026-11-20T09:59:00Z", "boom", time="2026-11-20T10:02:00Z"),
        event("MODIFIED", pod(), "2026-11-20T10:06:00Z"),
    ]
    back = timeline.forward("b.jsonl", second)  # type: ignore[arg-type]
    assert back is not None and back.index == 2
    assert str(back) == (
        "b.jsonl: time goes back from 2026-11-20T10:05:00Z to 2026-11-20T10:00:00Z (recordings one after the "
        "other?): a record older than the latest time read is taken at that time (said once)"
    )
    assert _times(second) == ["2026-11-20T10:05:00Z"] * 5 + ["2026-11-20T10:06:00Z"]
    assert timeline.moved == 3  # the records without a readable time are not counted as gone back
    again: list[object] = [event("MODIFIED", pod(), "2026-11-20T10:00:00Z")]
    assert timeline.forward("c", again) is None  # type: ignore[arg-type]  # said once in a replay
    assert _times(again) == ["2026-11-20T10:06:00Z"] and timeline.moved == 4


def test_within_a_batch_time_that_goes_back_is_found_whatever_its_form() -> None:
    """Repeats, a time going back inside one batch or after a repeat, a date that is not one, a missing
    time, fractions of different lengths, another separator: each batch comes out as the rule says, and
    the latest afterwards is the latest read (what a faster check of whole batches must keep)."""
    base: list[str | None] = [
        "2026-11-20T10:00:00Z",
        "2026-11-20T10:00:01Z",
        "2026-11-20T10:00:01Z",
        "2026-11-20T10:00:02Z",
    ]
    cases: list[tuple[list[str | None], list[str | None], int]] = [
        (base, base, 0),  # in order, repeats included
        (["2026-11-20T10:00:02Z", "2026-11-20T10:00:01Z"], ["2026-11-20T10:00:02Z"] * 2, 1),  # back in the batch
        (
            ["2026-11-20T10:00:01Z", "2026-11-20T10:00:02Z", "2026-11-20T10:00:01Z"],  # back after a repeat
            ["2026-11-20T10:00:01Z", "2026-11-20T10:00:02Z", "2026-11-20T10:00:02Z"],
            1,
        ),
        (["2026-13-20T10:00:00Z", "2026-11-20T10:00:03Z"], ["2026-11-20T10:00:00Z", "2026-11-20T10:00:03Z"], 0),
        (["2026-11-20T10:00:00Z", None], ["2026-11-20T10:00:00Z"] * 2, 0),  # none: taken at the latest
        (["2026-11-20T10:00:00.5Z", "2026-11-20T10:00:00.25Z"], ["2026-11-20T10:00:00.5Z"] * 2, 1),
        (["2026-11-20 10:00:01Z", "2026-11-20T10:00:00Z"], ["2026-11-20 10:00:01Z"] * 2, 1),  # another form
    ]
    for times, expected, moved in cases:
        timeline = Timeline()
        timeline.forward("a", [event("ADDED", pod(), "2026-11-20T10:00:00Z")])
        batch: list[object] = [event("MODIFIED", pod(), time) for time in times]
        timeline.forward("a", batch)  # type: ignore[arg-type]
        assert (_times(batch), timeline.moved) == (expected, moved), times
        later: list[object] = [event("MODIFIED", pod(), "2026-11-20T10:00:00Z")]  # earlier than any latest
        timeline.forward("a", later)  # type: ignore[arg-type]
        assert _times(later) == [timeline.latest] and timeline.latest == max(
            (t for t in expected if t is not None), key=lambda t: t.replace(" ", "T")
        )


_FORMS = st.sampled_from(["Z", "+00:00", "+01:00", ""])  # "": no offset, a local time
_TIMES = st.one_of(
    st.none(),
    st.sampled_from(["not a time", "2026-13-20T10:00:00Z"]),
    st.builds(
        lambda second, fraction, form, separator: (
            f"2026-11-20{separator}{10 + (form == '+01:00'):02d}:0{second // 60}:{second % 60:02d}{fraction}{form}"
        ),
        st.integers(0, 239),
        st.sampled_from(["", ".5", ".000", ".123456"]),
        _FORMS,
        st.sampled_from(["T", " "]),
    ),
)


def _record(kind: int, time: str | None) -> object:
    if kind == 0:
        return BadRecord("a:1", "bad")
    if kind == 1:
        return ReducedPod(1, "2:nsp", "MODIFIED", msgspec.Raw(b"\xc0"), time)
    if kind == 2:
        return CrashOutput("ns", "p", "u", "main", "2026-11-20T09:59:00Z", "boom", time=time)
    return event("MODIFIED", pod(), time)


@settings(max_examples=300, deadline=None)
@given(_TIMES, st.lists(st.tuples(st.integers(0, 5), _TIMES), max_size=12), st.booleans())
def test_a_batch_read_whole_comes_out_as_its_records_read_one_by_one(
    start: str | None, records: list[tuple[int, str | None]], in_order: bool
) -> None:
    """The usual batch (every time read, none going back) is checked whole and left as it is; any other
    is walked record by record: either way each record comes out as the rule says for it alone."""
    if in_order:  # the usual batch: times with an offset, in order, read once each
        records = [(3, f"2026-11-20T10:0{i // 60}:{i % 60:02d}Z") for i in range(len(records))]
    whole, single = Timeline(), Timeline()
    for timeline in (whole, single):  # the latest read before: none, or any time
        timeline.forward("a", [event("ADDED", pod(), start)])
    batch = [_record(kind, time) for kind, time in records]
    alone = [[_record(kind, time)] for kind, time in records]
    whole.forward("a", batch)  # type: ignore[arg-type]
    for one in alone:
        single.forward("a", one)  # type: ignore[arg-type]
    assert _times(batch) == _times([one[0] for one in alone])
    assert (whole.latest, whole.moved) == (single.latest, single.moved)
