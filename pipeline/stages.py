"""The filter and aggregation stages as tasks between memory object streams.

Items travel in batches, so a stream hop costs per batch, not per event; bounded buffers make a slow
sink hold back the stages instead of growing memory. Closing a stage's input ends it and closes its
outputs, which is how a replay drains. Every sink gets a stream of its own: anyio hands an item to one
receiver only.
"""

from __future__ import annotations

from collections.abc import Sequence

from anyio.abc import ObjectReceiveStream, ObjectSendStream

from pipeline.aggregate import Aggregator
from pipeline.changes import Output
from pipeline.filter import EventFilter, ObjectChange, PodObservation
from stream.events import WatchEvent


async def filter_stage(
    receive: ObjectReceiveStream[list[WatchEvent | PodObservation]],
    send: ObjectSendStream[list[ObjectChange]],
    event_filter: EventFilter,
) -> None:
    observe = event_filter.observe
    async with receive, send:
        async for batch in receive:
            changes = [change for change in map(observe, batch) if change is not None]
            if changes:
                await send.send(changes)


async def aggregate_stage(
    receive: ObjectReceiveStream[list[ObjectChange]],
    sends: Sequence[ObjectSendStream[list[Output]]],
    aggregator: Aggregator,
) -> None:
    apply = aggregator.apply
    try:
        async with receive:
            async for batch in receive:
                outputs: list[Output] = []
                for change in batch:
                    outputs += apply(change)
                if outputs:
                    for send in sends:
                        await send.send(outputs)
    finally:
        for send in sends:
            await send.aclose()
