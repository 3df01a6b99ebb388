"""Why a container crashed, as the classifier found it: the class, the line it used, and status's words."""

from __future__ import annotations

import msgspec

from pipeline.causes.unknown import UNKNOWN_HINT, UNKNOWN_KIND


class Cause(msgspec.Struct, frozen=True, gc=False):
    """A crash's cause. `line` is the input line the class was read from, exactly as given (without its line
    ending, cut to `scan.MAX_LINE` characters), and `line_number` its 1-based number; both are None for
    `unknown`. `fields` were extracted from the output and fit their types (catalog.FIELD_TYPES), so they
    may go into status; `line` may hold anything the program printed and never does."""

    kind: str = msgspec.field(name="class")
    certain: bool = False
    line: str | None = None
    line_number: int | None = None
    hint: str = UNKNOWN_HINT
    fields: tuple[tuple[str, str], ...] = ()

    def words(self) -> str:
        """A short sentence for status, built from the class and the fields alone."""
        from pipeline.causes import catalog  # its patterns compile on first use (see pipeline.causes)

        return catalog.words(self.kind, dict(self.fields), self.certain)


UNKNOWN = Cause(UNKNOWN_KIND)
