"""Text that reaches a terminal: every string that came from the input is made printable on one line.

A Pod name, a component label or a `time` field is whatever a log or a server says it is: a newline in
it could forge a whole output line (a false RECOVERED), and an escape sequence could drive the
terminal. So control and formatting characters are shown escaped (`\\n`, `\\x1b`, `\\u2028`), and a value
too long to be useful is cut, saying how much was left out. JSON output needs none of this: the encoder
escapes what JSON must.

A value inside a line (`pod=P`, a graph's path) that holds a space, a quote, an `=` or anything escaped
is quoted as logfmt quotes it (`pod="a b"`, with `\\` and `\"` inside), so the fields of a line never
hold an unquoted space and a value can never pass for a field of its own (a forged `  RECOVERED`).
"""

from __future__ import annotations

import re

# C0 and C1 controls, DEL, and the Unicode line and paragraph separators and bidi overrides
_UNPRINTABLE = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_NAMED = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(found: re.Match[str]) -> str:
    char = found.group()
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def printable(text: str, limit: int = 0) -> str:
    """`text` on one line with nothing a terminal acts on; cut to `limit` characters when `limit` > 0."""
    if limit and len(text) > limit:
        text = f"{text[:limit]}... ({len(text) - limit:,} more characters)"
    if _UNPRINTABLE.search(text) is None:  # the common case costs one scan
        return text
    return _UNPRINTABLE.sub(_escape, text)


# what makes logfmt quote a value: a space or control, `=`, `"`, and (as printable escapes) the rest above
_NEEDS_QUOTES = re.compile('[\x00-\x20"=\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]')


def value(text: str) -> str:
    """A value from the input as a text line shows it: as it is when it needs nothing, else in quotes,
    with backslashes and quotes escaped and the rest made printable (see the module)."""
    if _NEEDS_QUOTES.search(text) is None:  # every name Kubernetes accepts: one scan
        return text
    return '"' + printable(text.replace("\\", "\\\\").replace('"', '\\"')) + '"'
