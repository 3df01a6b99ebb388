"""Why an inference worker crashed, read from its output: a catalog of known causes and a scanner that
finds the root one. Pure: it reads lines handed to it and nothing else.

The catalog compiles its patterns when it is first imported (a tenth of a second): every command imports
`Cause` (a finding may carry one), few read an output, so the scanner and the catalog load on first use.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pipeline.causes.cause import UNKNOWN, Cause

if TYPE_CHECKING:
    from pipeline.causes.scan import Scanner, classify

__all__ = ["UNKNOWN", "Cause", "Scanner", "classify"]


def __getattr__(name: str) -> Any:
    if name in ("Scanner", "classify"):
        from pipeline.causes import scan

        return getattr(scan, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
