"""The filter and aggregation stages as tasks between memory object streams.

Items travel in batches, so a stream hop costs per batch, not per event; bounded buffers make a slow
sink hold back the stages instead of growing memory. Closing a stage's input ends it and closes its
outputs, which is how a replay drains. Every sink gets a stream of its own: anyio hands an item to one
receiver only.
"""

from __future__ import annotations

from collections.abc import Sequence

import msgspec
from anyio.abc import ObjectReceiveStream, ObjectSendStream

from pipeline.aggregate import Aggregator
from pipeline.changes import Output
from pipeline.filter import EventFilter, ObjectChange, PodObservation
from stream.events import WatchEvent


class Synced(msgspec.Struct, frozen=True, gc=False):
    """Sent by a live source, alone in its batch, once every resource has been listed: from here on
    the aggregator has seen every object and may decide statuses (see `Aggregator.sync`)."""

    time: str | None


Events = list[WatchEvent | PodObservation] | list[Synced]
Changes = list[ObjectChange] | list[Synced]


async def filter_stage(
    receive: ObjectReceiveStream[Events],
    send: ObjectSendStream[Changes],
    event_filter: EventFilter,
) -> None:
    observe = event_filter.observe
    async with receive, send:
        async for batch in receive:
            if batch and type(batch[0]) is Synced:
                await send.send(batch)
                continue
            changes = [change for change in map(observe, batch) if change is not None]  # type: ignore[arg-type]
            if changes:
                await send.send(changes)


async def aggregate_stage(
    receive: ObjectReceiveStream[Changes],
    sends: Sequence[ObjectSendStream[list[Output]]],
    aggregator: Aggregator,
) -> None:
    apply = aggregator.apply
    try:
        async with receive:
            async for batch in receive:
                outputs: list[Output] = []
                for change in batch:
                    if type(change) is Synced:
                        outputs += aggregator.sync(change.time)
                    else:
                        outputs += apply(change)  # type: ignore[arg-type]
                if outputs:
                    for send in sends:
                        await send.send(outputs)
    finally:
        for send in sends:
            await send.aclose()
