"""The pipeline as a task between memory object streams: the one stage every command runs.

Items travel in batches, so a stream hop costs per batch, not per event; bounded buffers make a slow
sink hold back the pipeline instead of growing memory. Closing the input ends the stage and closes
every sink's stream, which is how a replay drains. Every sink gets a stream of its own: anyio hands an
item to one receiver only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import msgspec
from anyio.abc import ObjectReceiveStream, ObjectSendStream

from pipeline.filter import Rejected
from pipeline.outputs import Output
from pipeline.pipeline import Pipeline
from stream.model.events import BadRecord, ReducedPod, WatchEvent


class Synced(msgspec.Struct, frozen=True, gc=False):
    """Sent by a live source, alone in its batch, once every resource has been listed: from here on
    the pipeline has seen every object and may decide statuses and readiness (`Pipeline.sync`)."""

    time: str | None


class Tick(msgspec.Struct, frozen=True, gc=False):
    """Sent by a live source, alone in its batch, every `TICK` seconds: time passes in the pipeline even
    when no event comes (a crash-looping Pod's recovery window ends; `Pipeline.tick`)."""

    time: str


TICK = 1.0  # seconds: how late a recovery window's end may be seen live, at most

Events = list[WatchEvent | ReducedPod | BadRecord] | list[Synced] | list[Tick]
# Told of each record a source could not read and each event the pipeline could not, in the order of the
# input; False: look at nothing more (--strict)
Report = Callable[[BadRecord | Rejected], bool]


async def pipeline_stage(
    receive: ObjectReceiveStream[Events],
    sends: Sequence[ObjectSendStream[list[Output]]],
    pipeline: Pipeline,
    report: Report,
) -> None:
    """A source's bad records travel in its batches, where they were, so that they are reported in
    order with what the pipeline itself cannot read. After `report` says stop, batches are received
    and dropped until the source closes the stream."""
    stopped = False
    try:
        async with receive:
            async for batch in receive:
                if stopped or not batch:
                    continue
                first = batch[0]
                if type(first) is Tick:
                    outputs = pipeline.tick(first.time)
                elif type(first) is Synced:
                    outputs = pipeline.sync(first.time)
                else:
                    outputs, stopped = _feed(pipeline, batch, report)  # type: ignore[arg-type]
                if outputs:
                    for send in sends:
                        await send.send(outputs)
    finally:
        for send in sends:
            await send.aclose()


def _feed(
    pipeline: Pipeline, batch: list[WatchEvent | ReducedPod | BadRecord], report: Report
) -> tuple[list[Output], bool]:
    """The batch's outputs, and whether to stop."""
    if BadRecord not in map(type, batch):  # the usual batch, checked without a Python-level loop
        return pipeline.feed(batch), _reported(pipeline, report)  # type: ignore[arg-type]
    outputs: list[Output] = []
    start = 0
    for index, item in enumerate(batch):
        if type(item) is BadRecord:
            outputs += pipeline.feed(batch[start:index])  # type: ignore[arg-type]
            start = index + 1
            if _reported(pipeline, report) or not report(item):
                return outputs, True
    outputs += pipeline.feed(batch[start:])  # type: ignore[arg-type]
    return outputs, _reported(pipeline, report)


def _reported(pipeline: Pipeline, report: Report) -> bool:
    """Report what the pipeline rejected; whether to stop."""
    stop = False
    for rejected in pipeline.rejected:
        stop = stop or not report(rejected)
    pipeline.rejected.clear()
    return stop
