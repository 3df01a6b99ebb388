"""The pipeline as a task between memory object streams: the one stage every command runs.

Items travel in batches, so a stream hop costs per batch, not per event; bounded buffers make a slow
sink hold back the pipeline instead of growing memory. Closing the input ends the stage and closes
every sink's stream, which is how a replay drains. Every sink gets a stream of its own: anyio hands an
item to one receiver only.

What answers outside the stream, the admission webhook, reads the pipeline through `PipelineReads`: a
question waits for the batch it needs, woken by the stage after each batch, never polling.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import anyio
import msgspec
from anyio.abc import ObjectReceiveStream, ObjectSendStream

from pipeline.filter import Rejected
from pipeline.outputs import Output, StatusWanted
from pipeline.pipeline import Pipeline
from pipeline.views import StatusView
from sinks.admission import LetThrough
from stream.model.events import BadRecord, CrashOutput, ReducedPod, WatchEvent


class Synced(msgspec.Struct, frozen=True, gc=False):
    """Sent by a live source, alone in its batch, once every resource has been listed: from here on
    the pipeline has seen every object and may decide statuses and readiness (`Pipeline.sync`)."""

    time: str | None


class Tick(msgspec.Struct, frozen=True, gc=False):
    """Sent by a live source, alone in its batch, every `TICK` seconds: time passes in the pipeline even
    when no event comes (a crash-looping Pod's recovery window ends; `Pipeline.tick`)."""

    time: str


TICK = 1.0  # seconds: how late a recovery window's end may be seen live, at most

Events = list[WatchEvent | ReducedPod | CrashOutput | BadRecord] | list[Synced] | list[Tick]
# Told of each record a source could not read and each event the pipeline could not, in the order of the
# input; False: look at nothing more (--strict)
Report = Callable[[BadRecord | Rejected], bool]


class PipelineReads:
    """The pipeline's read side for whom asks between batches (the admission webhook, sinks.admission).

    A question about another writer's status write needs the pipeline to have seen the object at the
    write's generation (`Pipeline.admit` says whether it has): it is asked again after each batch the
    stage feeds (`fed`), until it has or its wait runs out. `blocked` says why this replica must not
    answer with a change at all (a follower, watches out of sync), or None."""

    def __init__(self, pipeline: Pipeline, clock: Callable[[], str], blocked: Callable[[], LetThrough | None]) -> None:
        self.pipeline, self.clock, self.blocked = pipeline, clock, blocked
        self._fed = anyio.Event()

    def fed(self) -> None:
        """A batch went through the pipeline: wake every question waiting for one."""
        self._fed.set()
        self._fed = anyio.Event()

    async def admit(self, view: StatusView, wait: float) -> StatusWanted | LetThrough | None:
        """The write with crashwatch's decision merged in, None to let it be, or why nothing is said."""
        with anyio.move_on_after(wait):
            while True:
                blocked = self.blocked()
                if blocked is not None:
                    return blocked
                known, wanted = self.pipeline.admit(view, self.clock())
                if known:
                    return wanted
                await self._fed.wait()
        return LetThrough(f"generation {view.generation} not seen within {wait:g}s")


async def pipeline_stage(
    receive: ObjectReceiveStream[Events],
    sends: Sequence[ObjectSendStream[list[Output]]],
    pipeline: Pipeline,
    report: Report,
    reads: PipelineReads | None = None,
) -> None:
    """A source's bad records travel in its batches, where they were, so that they are reported in
    order with what the pipeline itself cannot read. After `report` says stop, batches are received
    and dropped until the source closes the stream. `reads` is told of each batch fed."""
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
                if reads is not None:  # before the sinks take the outputs: a question needs no sink
                    reads.fed()
                if outputs:
                    for send in sends:
                        await send.send(outputs)
    finally:
        for send in sends:
            await send.aclose()


def _feed(
    pipeline: Pipeline, batch: list[WatchEvent | ReducedPod | CrashOutput | BadRecord], report: Report
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
