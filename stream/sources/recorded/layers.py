"""The layers under a log's content: decompression (gzip, bzip2, xz) and transcoding (UTF-16, UTF-32).

They exist so that every reader above sees plain UTF-8 whatever the log was written as, and so that damaged
input ends a log's content instead of failing its read: each layer stops where its input is damaged and says
why (`damage`), keeping everything before. Telling a compression or an encoding from a log's first bytes is
here too, beside the layer that undoes it. Which layers a log gets is opening.py's choice; what the
text says is left to the readers above.
"""

from __future__ import annotations

import bz2
import codecs
import io
import lzma
import zlib
from typing import IO, Any


def _read_some(stream: IO[bytes], size: int) -> bytes:
    """What a stream has, up to `size` bytes, waiting only when it has nothing (a pipe being written)."""
    read1 = getattr(stream, "read1", None)
    return bytes(read1(size) if read1 is not None else stream.read(size))


def compression_of(head: bytes) -> str | None:
    if head[:2] == b"\x1f\x8b":
        return "gzip"
    if head[:3] == b"BZh" and head[3:4].isdigit():
        return "bzip2"
    if head[:6] == b"\xfd7zXZ\x00":
        return "xz"
    if head[:4] == b"\x28\xb5\x2f\xfd":
        return "zstd"
    return None


def encoding_of(head: bytes) -> str | None:
    """UTF-8 with a byte order mark, or UTF-16/32 (with one, or told by the zero bytes around ASCII)."""
    if head[:3] == b"\xef\xbb\xbf":
        return "utf-8-sig"
    if head[:4] in (b"\xff\xfe\x00\x00", b"\x00\x00\xfe\xff"):
        return "utf-32"
    if head[:2] in (b"\xff\xfe", b"\xfe\xff"):
        return "utf-16"
    if len(head) == 4 and 0 < head[0] < 0x80:
        if head[1:] == b"\x00\x00\x00":
            return "utf-32-le"
        if head[1] == 0 and head[3] == 0 and head[2]:
            return "utf-16-le"
    if len(head) == 4 and 0 < head[3] < 0x80:
        if head[:3] == b"\x00\x00\x00":
            return "utf-32-be"
        if head[0] == 0 and head[2] == 0 and head[1]:
            return "utf-16-be"
    return None


class Damageable(io.RawIOBase):
    """A stream that ends, instead of failing, where its input is damaged, and says why in `damage`:
    everything read before the damage is kept."""

    damage: str | None = None

    def readable(self) -> bool:
        return True


class _Decompressor:
    """zlib's, bz2's and lzma's decompressors behind one interface, one compressed member at a time."""

    def __init__(self, kind: str) -> None:
        self.kind = kind
        self.inner: Any = self._new()
        self.started = False
        self.full = False  # zlib filled the last output: it may hold more without further input

    def _new(self) -> Any:
        if self.kind == "gzip":
            return zlib.decompressobj(wbits=31)
        if self.kind == "bzip2":
            return bz2.BZ2Decompressor()
        return lzma.LZMADecompressor(format=lzma.FORMAT_XZ)

    def restart(self) -> None:
        self.inner = self._new()
        self.started = False
        self.full = False

    def magic(self, data: bytes) -> bool:
        return compression_of(data[:6]) == self.kind

    def decompress(self, data: bytes, size: int) -> tuple[bytes, bytes]:
        """Up to `size` bytes of output, and the input not consumed yet."""
        if data:
            self.started = True
        if self.kind == "gzip":
            out = self.inner.decompress(data, size)
            self.full = len(out) == size
            return out, self.inner.unconsumed_tail
        if data or not self.inner.needs_input:
            return self.inner.decompress(data, size), b""
        return b"", b""

    @property
    def eof(self) -> bool:
        return bool(self.inner.eof)

    @property
    def unused(self) -> bytes:
        return bytes(self.inner.unused_data)

    def pending(self) -> bool:
        """Whether output may still be held without more input."""
        if self.kind == "gzip":
            return self.full and not self.inner.eof
        return not self.inner.needs_input and not self.inner.eof


_DECOMPRESSION_ERRORS = (zlib.error, OSError, EOFError, lzma.LZMAError, ValueError)


class Decompressed(Damageable):
    """A compressed log's content, member after member (`cat a.gz b.gz` is one gzip log)."""

    def __init__(self, raw: IO[bytes], kind: str) -> None:
        self.raw = raw
        self.kind = kind
        self.decompressor = _Decompressor(kind)
        self.input = b""
        self.done = False

    def readinto(self, buffer: Any) -> int:
        size = len(buffer)
        decompressor = self.decompressor
        while not self.done and size:
            if decompressor.eof:
                rest = decompressor.unused + self.input
                self.input = b""
                if not self._next_member(rest):
                    return 0
                continue
            if not self.input and not decompressor.pending():
                self.input = _read_some(self.raw, 1 << 16)
                if not self.input:
                    if decompressor.started:
                        self._damaged(f"compressed data ends early (truncated {self.kind})")
                    else:
                        self.done = True  # a clean end between members
                    return 0
            try:
                out, self.input = decompressor.decompress(self.input, size)
            except _DECOMPRESSION_ERRORS as exc:
                self._damaged(f"compressed data is corrupt ({self.kind}: {exc})")
                return 0
            if out:
                buffer[: len(out)] = out
                return len(out)
        return 0

    def _next_member(self, rest: bytes) -> bool:
        """After a member's end: another member, zero padding, the end, or garbage (damage)."""
        while True:
            rest = rest.lstrip(b"\x00")
            if not rest:
                rest = _read_some(self.raw, 1 << 16)
                if not rest:
                    self.done = True
                    return False
                continue
            if len(rest) < 6:
                more = _read_some(self.raw, 6)
                if more:
                    rest += more
                    continue
            if self.decompressor.magic(rest):
                self.decompressor.restart()
                self.input = rest
                return True
            self._damaged(f"compressed data is followed by something that is not {self.kind} (trailing garbage)")
            return False

    def _damaged(self, why: str) -> None:
        self.damage = why
        self.done = True


class Transcoded(Damageable):
    """A UTF-16 or UTF-32 log, as UTF-8."""

    def __init__(self, raw: IO[bytes], encoding: str) -> None:
        self.raw = raw
        self.name = encoding.upper().replace("-LE", " LE").replace("-BE", " BE")
        self.decoder = codecs.getincrementaldecoder(encoding)()
        self.ready = b""
        self.done = False

    def readinto(self, buffer: Any) -> int:
        while not self.ready and not self.done:
            data = _read_some(self.raw, 1 << 16)
            try:
                self.ready = self.decoder.decode(data, final=not data).encode("utf-8", "surrogatepass")
            except UnicodeDecodeError as exc:
                self.damage = f"not valid {self.name} ({exc.reason})"
                self.done = True
            if not data:
                self.done = True
        count = min(len(buffer), len(self.ready))
        buffer[:count] = self.ready[:count]
        self.ready = self.ready[count:]
        return count


class Prefixed(io.RawIOBase):
    """What was read to tell the format, then the rest of the stream, as if nothing had been read."""

    def __init__(self, head: bytes, rest: IO[bytes]) -> None:
        self.head = head
        self.rest = rest

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        if self.head:
            count = min(len(buffer), len(self.head))
            buffer[:count] = self.head[:count]
            self.head = self.head[count:]
            return count
        data = self.rest.read1(len(buffer))  # type: ignore[attr-defined]
        buffer[: len(data)] = data
        return len(data)
