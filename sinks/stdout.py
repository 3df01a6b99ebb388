"""The stdout sink: verdict changes as text, JSON lines or YAML documents, and (dry run) the status patches
planned.

One write and one flush per batch, so `tail` shows a change as soon as it happens without paying a
system call per line on a replay of a million events.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import BinaryIO, Literal

from anyio.abc import ObjectReceiveStream

from pipeline.outputs import ComponentChange, GraphChange, Output, StatusWanted
from sinks.lines import json_line, patch_line, text_line, yaml_line

Format = Literal["text", "json", "yaml"]


def change_printer(fmt: Format) -> Callable[[Output], bytes | None]:
    encode = json_line if fmt == "json" else yaml_line if fmt == "yaml" else text_line

    def render(item: Output) -> bytes | None:
        if isinstance(item, ComponentChange | GraphChange):
            return encode(item)
        return None

    return render


def patch_printer(item: Output) -> bytes | None:
    return patch_line(item) if isinstance(item, StatusWanted) else None


async def print_lines(
    receive: ObjectReceiveStream[list[Output]], out: BinaryIO, render: Callable[[Output], bytes | None]
) -> None:
    async with receive:
        async for batch in receive:
            chunk = b"".join(line for line in map(render, batch) if line is not None)
            if chunk:
                out.write(chunk)
                out.flush()
