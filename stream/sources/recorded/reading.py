"""Reading a log opened by opening.py: its events and bad records in batches, in the log's order, by the
reader of its format.

This is the one place that picks the reader (JSON or YAML, or none for binary data) and the size of the
batches (one record at a time from a live pipe), so that callers need not know the formats; reading each
format is json_records.py's and yaml_records.py's.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from stream.model.events import BadRecord
from stream.sources.recorded.bad_records import LogItem
from stream.sources.recorded.json_records import read_json
from stream.sources.recorded.limits import BATCH
from stream.sources.recorded.source import LogSource
from stream.sources.recorded.yaml_records import read_yaml


def read_log(source: LogSource, live: bool = False) -> Iterator[list[LogItem]]:
    """Yield batches of events and bad records, in the log's order.

    `live` (a pipe that someone is still writing) hands over every record as soon as its line is
    complete; otherwise the log is read in large chunks and its records handed over in batches.
    """
    if source.binary is not None:
        yield [BadRecord(f"{source.name}:1", source.binary)]
    elif source.yaml:
        yield from _batched(read_yaml(source, live), 1 if live else BATCH)
    else:
        yield from read_json(source, live)


def _batched(items: Iterable[LogItem], size: int) -> Iterator[list[LogItem]]:
    batch: list[LogItem] = []
    for item in items:
        batch.append(item)
        if len(batch) >= size:
            yield batch
            batch = []
    if batch:
        yield batch
