"""The pipeline as a task between memory object streams: the one stage every command runs.

Items travel in batches, so a stream hop costs per batch, not per event; bounded buffers make a slow
sink hold back the pipeline instead of growing memory. Closing the input ends the stage and closes
every sink's stream, which is how a replay drains. Every sink gets a stream of its own: anyio hands an
item to one receiver only.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
from anyio.abc import ObjectReceiveStream, ObjectSendStream

from pipeline.outputs import Output
from pipeline.pipeline import Pipeline
from stream.events import ReducedPod, WatchEvent


class Synced(msgspec.Struct, frozen=True, gc=False):
    """Sent by a live source, alone in its batch, once every resource has been listed: from here on
    the pipeline has seen every object and may decide statuses and readiness (`Pipeline.sync`)."""

    time: str | None


Events = list[WatchEvent | ReducedPod] | list[Synced]


async def pipeline_stage(
    receive: ObjectReceiveStream[Events],
    sends: Sequence[ObjectSendStream[list[Output]]],
    pipeline: Pipeline,
) -> None:
    feed = pipeline.feed
    try:
        async with receive:
            async for batch in receive:
                synced = batch and type(batch[0]) is Synced
                outputs = pipeline.sync(batch[0].time) if synced else feed(batch)  # type: ignore[arg-type]
                if outputs:
                    for send in sends:
                        await send.send(outputs)
    finally:
        for send in sends:
            await send.aclose()
