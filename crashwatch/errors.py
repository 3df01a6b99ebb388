"""Exceptions as task groups raise them: nested groups flattened to what actually went wrong."""

from __future__ import annotations

from collections.abc import Iterator


def leaves(exc: BaseException) -> Iterator[BaseException]:
    """The exceptions inside (nested) exception groups, or the exception itself."""
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            yield from leaves(inner)
    else:
        yield exc
