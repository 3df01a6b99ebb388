"""List then watch one resource in one scope, as client-go's reflector does, into `WatchEvent`s.

A LIST in pages gives the state and a resourceVersion; a WATCH from there (with bookmarks) gives every
change after it, each line decoded by the same msgspec decoder as a replayed log. A watch the server ends
(its timeout) or that drops is resumed from the last resourceVersion seen, bookmarks included. When that
history is gone (410 Gone, as an HTTP status or an ERROR event), the resource is listed again and the
difference to what was known is handed on as events: DELETED for objects that went away meanwhile,
MODIFIED for those that changed, ADDED for new ones, so the stages downstream converge without a gap and
without a repeat. Errors are retried with jittered exponential backoff, honouring Retry-After, each said
on stderr but a server that does not answer at all, which the client's Reachability says once an outage
(a reflector per resource would repeat it every retry); a watch that stays silent longer than
`idle_timeout` (bookmarks arrive about once a minute) is taken for stuck and resumed. Refused
credentials (401), forbidden (403) and not-found end the reflector: retrying cannot fix them.

A reflector is in sync (`in_sync`) once it has listed, until two of its requests in a row have failed: a
first failure is routine (the API server ends watches, a connection drops) and is retried at once, with
backoff; a second one (the first retry failed too: a relist after 410 Gone that keeps failing, a watch
that cannot be resumed) means its view is going stale. It is in sync again once a LIST of it completes or
a WATCH of it is answered.

A sharded watcher (`stream.model.shards`) passes `keep`, asked of each object's namespace right after decoding:
an object of a namespace not kept is neither held nor handed on (its resourceVersion still counts). When
the namespaces kept change, `forget` hands on DELETED for what is held of one that is no longer kept, and
`relist` lists again (between two reads of the watch, never in the middle of handing events on) to pick
up the objects of one that now is.
"""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, NoReturn

import anyio
import msgspec

from stream.model.crash_record import CRASH_OUTPUT
from stream.model.decode import RecordProblem, decode_json, read_event
from stream.model.events import EventType, WatchEvent
from stream.model.messages import logger
from stream.model.objects import KubeObject, Pod, Status, own_labels
from stream.model.times import now_rfc3339
from stream.sources.client import ApiError, Backoff, KubeClient, Response, Unreachable
from stream.sources.resources import Resource

Emit = Callable[[list[WatchEvent]], Awaitable[None]]
# a record line for the recorder: the event as received (or synthesized), with its arrival time
Tap = Callable[[bytes], None]
Log = Callable[[str], None]
# whether an object of this namespace is this watcher's (a shard, a namespace selector); None: every one
Keep = Callable[[str], bool]
# failed requests in a row after which a reflector is out of sync: its first retry failed too
OUT_OF_SYNC_FAILURES = 2


@dataclass
class WatchSettings:
    page_size: int = 500
    request_timeout: float = 30.0
    idle_timeout: float = 90.0  # no byte for this long: the watch is stuck
    min_watch_seconds: int = 240  # the server ends each watch after a random time in this range
    max_watch_seconds: int = 360
    initial_backoff: float = 0.5
    max_backoff: float = 30.0
    # a watch event longer than this ends the watch (retried with backoff) instead of being held: a few
    # MB above the API server's largest object (its request limit is 3 MiB, etcd's 1.5 MiB)
    max_event_bytes: int = 16 << 20


def _is_json(line: bytes) -> bool:
    try:
        msgspec.json.decode(line)
    except (msgspec.DecodeError, RecursionError):
        return False
    return True


class Gone(Exception):
    """The resourceVersion to resume from is older than the server keeps: list again."""


class Fatal(Exception):
    """An error that retrying cannot fix (forbidden, not served); the message names the resource."""

    def __init__(self, message: str, forbidden: bool = False) -> None:
        super().__init__(message)
        self.forbidden = forbidden


class _RelistWanted(Exception):
    """The namespaces kept grew: the watch stops between two reads so the resource is listed again."""


class _Retry(Exception):
    def __init__(self, message: str, retry_after: float | None = None, quiet: bool = False) -> None:
        super().__init__(message)
        self.retry_after = retry_after
        self.quiet = quiet  # the server cannot be reached: the client's Reachability says so, once an outage


_encode = msgspec.json.Encoder().encode
_Held = tuple[WatchEvent, bytes | None]  # a relist's new or changed object and its record, after the deletions
_Known = dict[tuple[str, str], tuple[str, str]]  # (namespace, name) -> (uid, resourceVersion)
_Items = list[tuple[KubeObject, bytes | None]]  # a List page's objects, with their text for the recorder


def _after_deletions(held: list[_Held] | None, events: list[WatchEvent], records: list[bytes]) -> None:
    """A relist's held events go after the deletions of what went away: the deletions of objects replaced
    under their name first, then what is new or changed, as the watch would have told them."""
    for first in (True, False):
        for event, record in held or ():
            if (event.type == "DELETED") == first:
                events.append(event)
                if record is not None:
                    records.append(record)


def _server_error(obj: object) -> NoReturn:
    """An ERROR event (or a Status in its place): 410 Gone means list again, anything else is retried."""
    status = obj if isinstance(obj, Status) else Status()
    if status.code == 410:
        raise Gone()
    raise _Retry(f"the server sent an error: {status.code} {status.reason}: {status.message}")


class Reflector:
    """One resource in one namespace (or all): runs until cancelled, or raises Fatal."""

    def __init__(
        self,
        client: KubeClient,
        resource: Resource,
        namespace: str | None,
        emit: Emit,
        settings: WatchSettings | None = None,
        log: Log | None = None,
        tap: Tap | None = None,
        clock: Callable[[], str] = now_rfc3339,
        keep: Keep | None = None,
        read: Callable[[bytes], WatchEvent] = read_event,
    ) -> None:
        self.client = client
        self.keep = keep
        self.read = read  # the typed decode of a watch line (another for a kind the pipeline does not take)
        self.resource = resource
        self.namespace = namespace
        self.emit = emit
        self.settings = settings or WatchSettings()
        self.log = logger(log)
        self.tap = tap
        self.clock = clock
        self.resource_version = ""
        # what is known of each object: enough to tell, after a relist, what went away or changed
        self.known: dict[tuple[str, str], tuple[str, str]] = {}
        # a first list under way: what it handed on, so that one started over repeats none of it
        self._handed: dict[tuple[str, str], tuple[str, str]] | None = None
        self.lists = 0  # how many LISTs completed (the first, then one per 410)
        self.watches = 0  # how many WATCH requests were opened
        self.events = 0  # how many events were handed on (a relist's derived ones included)
        self.errors = 0  # how many failed requests were retried
        self.failures = 0  # failed requests in a row, since a LIST completed or a WATCH was answered
        self._listed = False  # the first LIST completed (or the resource, optional, was left alone)
        self.where = resource.describe(namespace)
        self._relist_wanted = False
        self._reading: anyio.CancelScope | None = None  # a read of the watch, which a relist may cut short

    async def run(self, listed: Callable[[], Awaitable[None]] | None = None) -> None:
        """List, tell `listed` (once, after the listed objects were emitted), then watch for ever.

        A resource that is only nice to have (`Resource.optional`) and may not be listed, or is not
        served, is said once and left alone: the others go on."""
        try:
            await self._retrying(self._relist)
        except Fatal as exc:
            if not self.resource.optional:
                raise
            self.log(f"{exc}; going on without {self.resource.plural}", "warning")
            self._listed, self.failures = True, 0  # left alone on purpose: nothing of it goes stale
            if listed is not None:
                await listed()
            return
        if listed is not None:
            await listed()
        backoff = self._backoff()
        while True:
            try:
                if self._relist_wanted:
                    raise _RelistWanted()
                received = await self._watch()
            except _RelistWanted:
                self._relist_wanted = False
                self.log(f"{self.where}: the namespaces kept changed, listing again")
                await self._retrying(self._relist)
                backoff.reset()
                continue
            except Gone:
                self.log(f"{self.where}: resourceVersion {self.resource_version} is gone, listing again")
                await self._retrying(self._relist)
                backoff.reset()
                continue
            except _Retry as exc:
                await self._back_off(backoff, exc, f"watch {self.where}", "resuming")
                continue
            if received:
                backoff.reset()

    @property
    def in_sync(self) -> bool:
        """Listed, and fewer than OUT_OF_SYNC_FAILURES requests in a row failed since (see the module)."""
        return self._listed and self.failures < OUT_OF_SYNC_FAILURES

    def _succeeded(self) -> None:
        if self.failures >= OUT_OF_SYNC_FAILURES and self._listed:
            self.log(f"{self.where}: in sync again")
        self.failures = 0

    def relist(self) -> None:
        """List again soon (a namespace is now kept): the watch stops at its next read, not in the middle of
        handing events on, so nothing it received is lost."""
        self._relist_wanted = True
        if self._reading is not None:
            self._reading.cancel()

    async def forget(self, namespace: str) -> None:
        """A namespace is no longer kept: what is held of it goes, handed on as DELETED events."""
        # what a first list still under way has handed on counts too (it becomes `known` at its end)
        held = self._handed if self._handed is not None and not self.known else {}
        gone = [(key, uid) for key, (uid, _) in {**self.known, **held}.items() if key[0] == namespace]
        if not gone:
            return
        time = self.clock()
        events = []
        for key, uid in gone:
            self.known.pop(key, None)
            held.pop(key, None)
            events.append(WatchEvent("DELETED", self.resource.tombstone(key[0], key[1], uid), time))
            if self.tap is not None:
                self.tap(_encode(events[-1]))
        await self._hand_on(events)

    async def _hand_on(self, events: list[WatchEvent]) -> None:
        self.events += len(events)
        await self.emit(events)

    def _backoff(self) -> Backoff:
        return Backoff(self.settings.initial_backoff, self.settings.max_backoff)

    async def _back_off(self, backoff: Backoff, exc: _Retry, what: str, then: str) -> None:
        """Say what failed, and wait as the backoff says (at least Retry-After)."""
        self.errors += 1
        self.failures += 1
        delay = backoff.next(exc.retry_after)
        if not exc.quiet:
            self.log(f"{what}: {exc}; {then} in {delay:.1f}s", "warning")
        if self.failures == OUT_OF_SYNC_FAILURES and self._listed:
            self.log(f"{self.where}: out of sync until a LIST completes or a WATCH is answered", "warning")
        await anyio.sleep(delay)

    async def _retrying(self, action: Callable[[], Awaitable[None]]) -> None:
        backoff = self._backoff()
        while True:
            try:
                await action()
                return
            except _Retry as exc:
                await self._back_off(backoff, exc, f"list {self.where}", "retrying")

    def _check(self, exc: ApiError) -> NoReturn:
        """Map an API error to what the reflector does about it."""
        if exc.status == 410:
            raise Gone() from None
        if exc.retryable:
            raise _Retry(str(exc), exc.retry_after, quiet=isinstance(exc, Unreachable)) from None
        if exc.status == 401:
            raise Fatal(f"cannot list and watch {self.where}: {exc.refusal}", True) from None
        if exc.status == 403:
            raise Fatal(f"not allowed to list and watch {self.where}: {exc.message or exc.reason}", True) from None
        if exc.status == 404:
            raise Fatal(f"{self.where}: not served by this cluster ({exc.message or exc.reason})") from None
        raise _Retry(str(exc)) from None

    def _query(self) -> dict[str, str]:
        query = {}
        if self.resource.label_selector:
            query["labelSelector"] = self.resource.label_selector
        return query

    # --- LIST ---------------------------------------------------------------------------------------

    async def _relist(self) -> None:
        """List page by page, and hand on each page's difference to what was known as events as it
        comes: streaming keeps only a page of decoded objects alive at once (150,000 Pods held until the
        last page cost some 400 MB). A relist (after a 410) hands on what went away before anything that
        changed, as the watch would have: its new and changed objects (few: what changed while the watch
        was gone; the unchanged ones are dropped page by page) wait for the last page. A first list that
        starts over (an expired continue token, a failed page) compares with what it already handed on."""
        previous = self.known
        if self._handed is None or previous:
            self._handed = {}  # a relist hands nothing on before its end: it may simply start over
        handed = self._handed
        held: list[_Held] | None = [] if previous else None
        time = self.clock()
        current, version = await self._list_pages(previous, handed, time, held)
        if self.keep is not None:
            current, held = self._still_kept(current, held)
        events, records = self._deleted_since(previous, handed, current, time)
        _after_deletions(held, events, records)
        self.known = current
        self._handed = None
        self.resource_version = version
        self.lists += 1
        self._succeeded()
        self._listed = True
        for record in records:
            self.tap(record)  # type: ignore[misc]
        if events:
            await self._hand_on(events)

    async def _list_pages(
        self, previous: _Known, handed: _Known, time: str, held: list[_Held] | None
    ) -> tuple[_Known, str]:
        """Every page of the List, each handed on (or held) as it comes; what is listed, and the List's
        resourceVersion. An expired continue token starts the List over: what it had found is dropped."""
        decoder = self.resource.page_decoder(raw=self.tap is not None)
        object_decoder = self.resource.object_decoder() if self.tap is not None else None
        path = self.resource.path(self.namespace)
        current: _Known = {}
        version = ""
        query = {**self._query(), "limit": str(self.settings.page_size)}
        while True:
            response = await self._list_page(path, query)
            if response is None:  # the continue token expired: from the start
                query.pop("continue", None)
                version = ""
                current = {}
                if held is not None:
                    held.clear()
                continue
            page, items = self._page_items(response.body, decoder, object_decoder)
            del response  # the page's buffer goes once its events are handed on (see PodMeta)
            version = version or page.metadata.resource_version
            await self._hand_on_page(items, previous, handed, current, time, held)
            if not page.metadata.continue_:
                return current, version
            query["continue"] = page.metadata.continue_

    async def _list_page(self, path: str, query: dict[str, str]) -> Response | None:
        """One LIST request; None when its continue token has expired (410 Gone), so the List starts over.
        Any other error is what `_check` makes of it."""
        try:
            return await self.client.request("GET", path, query, timeout=self.settings.request_timeout)
        except ApiError as exc:
            try:
                self._check(exc)
            except Gone:
                return None

    def _page_items(self, body: bytes, decoder: Any, object_decoder: Any) -> tuple[Any, _Items]:
        """A List page decoded, and its objects (with their text, for the recorder) that this watcher keeps.
        Pods get copies of what they hold past the page's buffer; an unreadable page is retried."""
        items: _Items
        try:
            page = decoder.decode(body)
            if object_decoder is not None:
                items = [(object_decoder.decode(raw), bytes(raw)) for raw in page.items]
            else:
                items = [(obj, None) for obj in page.items]
        except (msgspec.DecodeError, msgspec.ValidationError) as exc:
            raise _Retry(f"unreadable List page: {exc}") from None
        for obj, _ in items:
            if type(obj) is Pod:
                own_labels(obj)
        if self.keep is not None:  # another shard's objects are dropped page by page, never held
            items = self._kept(items)
        return page, items

    def _still_kept(self, current: _Known, held: list[_Held] | None) -> tuple[_Known, list[_Held] | None]:
        """The namespaces kept may have changed while the pages came: what is no longer kept is not current
        (so what of it was handed on goes as DELETED), and a relist's held events of it go."""
        keep = self.keep
        assert keep is not None
        current = {key: value for key, value in current.items() if keep(key[0])}
        if held is not None:
            held = [item for item in held if keep(item[0].object.metadata.namespace)]  # type: ignore[union-attr]
        return current, held

    def _deleted_since(
        self, previous: _Known, handed: _Known, current: _Known, time: str
    ) -> tuple[list[WatchEvent], list[bytes]]:
        """DELETED events (and their records) for what was known or handed on and is listed no more."""
        events: list[WatchEvent] = []
        records: list[bytes] = []
        for key, (uid, _) in {**previous, **handed}.items():
            if key not in current:
                events.append(WatchEvent("DELETED", self.resource.tombstone(key[0], key[1], uid), time))
                if self.tap is not None:
                    records.append(_encode(events[-1]))
        return events, records

    def _kept(self, items: list[tuple[KubeObject, bytes | None]]) -> list[tuple[KubeObject, bytes | None]]:
        keep = self.keep
        assert keep is not None
        return [item for item in items if keep(item[0].metadata.namespace)]  # type: ignore[union-attr]

    async def _hand_on_page(
        self,
        items: list[tuple[KubeObject, bytes | None]],
        previous: dict[tuple[str, str], tuple[str, str]],
        handed: dict[tuple[str, str], tuple[str, str]],
        current: dict[tuple[str, str], tuple[str, str]],
        time: str,
        held: list[_Held] | None,
    ) -> None:
        """One List page as events: an object replaced under its name (another uid) is DELETED first.
        A relist's go to `held`; a first list's are handed on now, and remembered in `handed`."""
        events: list[WatchEvent] = []
        records: list[bytes] = []
        for obj, raw in items:
            meta = obj.metadata  # type: ignore[union-attr]
            key = (meta.namespace, meta.name)
            before = handed.get(key) or previous.get(key)
            current[key] = (meta.uid, meta.resource_version)
            kind: EventType
            if before is None:
                kind = "ADDED"
            elif before[0] != meta.uid:
                events.append(WatchEvent("DELETED", self.resource.tombstone(key[0], key[1], before[0]), time))
                if self.tap is not None:
                    records.append(_encode(events[-1]))
                kind = "ADDED"
            elif before[1] != meta.resource_version:
                kind = "MODIFIED"
            else:
                continue
            events.append(WatchEvent(kind, obj, time))
            if self.tap is not None and raw is not None:
                records.append(self._record_item(kind, raw, time))
            if held is None:
                handed[key] = current[key]
        if held is not None:
            held += zip(events, records if self.tap is not None else [None] * len(events), strict=True)
            return
        for record in records:
            self.tap(record)  # type: ignore[misc]
        if events:
            await self._hand_on(events)

    def _record_item(self, kind: str, raw: bytes, time: str) -> bytes:
        """A List item as a watch event line: the item lacks `kind` and `apiVersion`, so they go first."""
        head = _encode({"kind": self.resource.kind, "apiVersion": self.resource.api_version})
        body = raw.strip()
        obj = head[:-1] + b"," + body[1:] if body not in (b"{}", b"") else head
        return b'{"type":"' + kind.encode() + b'","object":' + obj + b',"time":"' + time.encode() + b'"}'

    # --- WATCH --------------------------------------------------------------------------------------

    async def _watch(self) -> bool:
        """One WATCH request until the server ends it; True if any event came."""
        settings = self.settings
        query = {
            **self._query(),
            "watch": "1",
            "allowWatchBookmarks": "true",
            "resourceVersion": self.resource_version,
            "timeoutSeconds": str(random.randint(settings.min_watch_seconds, settings.max_watch_seconds)),
        }
        received = False
        self.watches += 1
        try:
            async with self.client.stream(self.resource.path(self.namespace), query) as content:
                self._succeeded()  # answered: what it missed since comes from its resourceVersion on
                # the start of a line still coming, in the pieces it came in: joined once, when its
                # newline arrives, so a long line costs its length and not its length squared
                pieces: list[bytes] = []
                pending = 0
                while True:
                    chunk = b""
                    with anyio.CancelScope() as self._reading, anyio.move_on_after(settings.idle_timeout) as idle:
                        if not self._relist_wanted:
                            chunk = await content.readany()
                    self._reading = None
                    if self._relist_wanted:
                        raise _RelistWanted()
                    if idle.cancelled_caught:
                        raise _Retry(f"nothing received for {settings.idle_timeout:g}s, the watch looks stuck")
                    if not chunk:
                        return received  # the server ended the watch
                    end = chunk.rfind(b"\n")
                    if end < 0:
                        pieces.append(chunk)
                        pending += len(chunk)
                        if pending > settings.max_event_bytes:
                            raise _Retry(self._too_long(pending))
                        continue
                    data = b"".join((*pieces, chunk[:end])) if pieces else chunk[:end]
                    pieces = [chunk[end + 1 :]] if end + 1 < len(chunk) else []
                    pending = len(chunk) - end - 1
                    lines = data.split(b"\n")
                    longest = max(map(len, lines))
                    if longest > settings.max_event_bytes:
                        raise _Retry(self._too_long(longest))
                    received = await self._hand_on_lines(lines) or received
        except ApiError as exc:
            self._check(exc)
        except (OSError, TimeoutError) as exc:
            raise _Retry(f"connection lost: {exc or type(exc).__name__}") from None
        except Exception as exc:  # aiohttp's payload errors, a reset mid-chunk
            if type(exc).__module__.startswith("aiohttp"):
                raise _Retry(f"connection lost: {exc or type(exc).__name__}") from None
            raise
        return received

    def _too_long(self, size: int) -> str:
        return (
            f"a watch event longer than {self.settings.max_event_bytes:,} bytes ({size:,} so far): "
            "the server sends something that is no Kubernetes object"
        )

    def _read_other_shape(self, line: bytes) -> WatchEvent | None:
        """A watch line the typed decode refused, read as a log record is read (null as absent, a kind we
        do not read skipped, a nameless object refused), so that one bad event costs that event only;
        None when there is nothing to hand on. A line that is no JSON at all means the stream is broken."""
        try:
            readable, _ = decode_json(line)
            event = readable[0] if readable else None
            if event is not None and not isinstance(event, WatchEvent):  # a crash's output: a log's record
                raise RecordProblem(f"a {CRASH_OUTPUT} record, which only a log holds")
            return event
        except RecordProblem as problem:
            if not _is_json(line):  # not JSON: the stream itself is broken
                raise _Retry(f"unreadable watch event ({problem}): {line[:120]!r}") from None
            self.errors += 1
            self.log(f"{self.where}: a watch event skipped: {problem}", "warning")
            return None

    async def _hand_on_lines(self, lines: list[bytes]) -> bool:
        time = self.clock()
        events: list[WatchEvent] = []
        known = self.known
        try:
            for line in lines:
                if not line.strip():
                    continue
                try:
                    event = self.read(line)
                except msgspec.ValidationError:
                    odd = self._read_other_shape(line)
                    if odd is None:
                        continue
                    event = odd
                except msgspec.DecodeError as exc:  # not JSON: the stream itself is broken
                    raise _Retry(f"unreadable watch event ({exc}): {line[:120]!r}") from None
                obj = event.object
                if event.type == "ERROR" or isinstance(obj, Status):
                    _server_error(obj)
                meta = obj.metadata
                if event.type == "BOOKMARK":
                    self.resource_version = meta.resource_version or self.resource_version
                    continue
                if self.keep is not None and not self.keep(meta.namespace):  # another shard's: dropped here
                    self.resource_version = meta.resource_version or self.resource_version
                    continue
                key = (meta.namespace, meta.name)
                if event.type == "DELETED":
                    known.pop(key, None)
                else:
                    known[key] = (meta.uid, meta.resource_version)
                self.resource_version = meta.resource_version or self.resource_version
                event.time = time
                events.append(event)
                if self.tap is not None:
                    self.tap(line.rstrip()[:-1] + b',"time":"' + time.encode() + b'"}')
        except (Gone, _Retry):
            if events:  # what came before the trouble is good: hand it on first
                await self._hand_on(events)
            raise
        if events:
            await self._hand_on(events)
        return bool(events)
