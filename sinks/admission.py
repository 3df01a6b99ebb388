"""The mutating admission webhook on other writers' DCD and DGD status writes (`run --admission-address`).

The Dynamo operator writes a DGD's whole status from what it computes, keeping the condition types it does
not own as it read them. Two of its writes undo crashwatch's: on a crash-looping worker's Ready flip it
writes `successful`, which crashwatch must answer with a write of its own; and when a spec change (a
`helm upgrade` with the fix) replaces the crash-looping Pods, its first status of the new generation moves
`status.observedGeneration` to it while still carrying the old `Stalled=True`, which kstatus reads as
Failed: a `--wait` on the upgrade fails if that write lands before crashwatch's withdrawal. Both writers
learn of the change from the same watch, so crashwatch cannot always be first. Asked by the API server
before such a write is stored, crashwatch answers with what it decides of the object put in it (what its
own next write would say: `Stalled`, and `state`, `Ready` or `Available` while it reports or clears a
failure there): the write then never undoes crashwatch's verdict, and needs no answer after it.

The webhook asks the pipeline's read side (`Ask`: crashwatch.stages.PipelineReads), which waits, at most
`wait`, for the pipeline to see the object at the generation of the write (the spec change that withdraws
the failure may still be on its way), and which answers with a change only where this replica writes
status: the Lease holder, its watches in sync. Anything else, or no answer in time, lets the write through
as it is (`LetThrough`): the webhook is registered with `failurePolicy: Ignore`, and never stands between
the operator and the API server for longer than that.

The review is read by a typed decoder that keeps only the request's few fields and skips the rest
(`oldObject`, the spec), on a server whose every read is bounded (sinks.bounded_http).
"""

from __future__ import annotations

import base64
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from http import HTTPStatus
from typing import Any, NamedTuple

import msgspec

from pipeline.outputs import StatusWanted, condition_dict
from pipeline.views import StatusView, status_view
from sinks.bounded_http import BoundedServer, Limits, Request, Response
from sinks.tls_files import TlsFiles
from stream.model.decode import FAST_ERRORS, read_event
from stream.model.messages import About, Level, Logger
from stream.model.objects import DynamoComponentDeployment, DynamoGraphDeployment

PATH = "/admit-status"
# An AdmissionReview holds the object twice (object, oldObject); the API server stores objects up to 1.5 MiB
MAX_REVIEW = 8 << 20
LIMITS = Limits(max_connections=64, max_body=MAX_REVIEW, max_buffered=4 * MAX_REVIEW)
_KINDS = ("DynamoGraphDeployment", "DynamoComponentDeployment")
HANDSHAKE_FAILED = "TLS handshake failed"  # the server's refusal of a caller that did not trust the certificate


@dataclass(frozen=True)
class AdmissionSettings:
    """`run --admission-address`: where to serve, with which certificate (and, with `client_ca`, which
    callers: those with a certificate that CA signed), how long an answer may wait, and the
    MutatingWebhookConfiguration to check against what is served (`--admission-configuration`:
    sinks.admission_trust)."""

    host: str | None
    port: int
    certificate: str
    key: str
    wait: float = 1.0
    client_ca: str | None = None
    configuration: str | None = None
    limits: Limits = field(default=LIMITS)


class LetThrough(NamedTuple):
    """Why a write is let through as it is: said as a warning, or at debug level when it is `routine`
    (a follower's every answer)."""

    reason: str
    routine: bool = False


# The read side of the pipeline (crashwatch.stages.PipelineReads.admit): given the view of the object
# being written and how long it may wait, the write with crashwatch's decision merged in, None to let it
# be, or why it says nothing
Ask = Callable[[StatusView, float], Awaitable[StatusWanted | LetThrough | None]]


class _Request(msgspec.Struct):
    uid: str
    operation: str = ""
    subResource: str = ""  # the API's names
    object: msgspec.Raw = msgspec.Raw(b"null")


class _Review(msgspec.Struct):
    request: _Request
    apiVersion: str = "admission.k8s.io/v1"


class _Named(msgspec.Struct):
    type: Any = None


class _Status(msgspec.Struct):
    state: Any = None
    conditions: list[_Named] | None = None


class _Written(msgspec.Struct):
    """What the patch needs of the object written: its kind, and where each condition is."""

    kind: Any = None
    status: _Status | None = None


_review = msgspec.json.Decoder(_Review).decode
_written = msgspec.json.Decoder(_Written).decode
_encode = msgspec.json.encode


@dataclass
class Answers:
    """What the webhook answered, for /metrics: reviews by answer, and when the last one came."""

    counts: dict[str, int] = field(default_factory=dict)  # patched, unchanged, let through
    last: float | None = None  # the Unix time of the last review

    def count(self, answer: str) -> None:
        self.counts[answer] = self.counts.get(answer, 0) + 1
        self.last = time.time()


class AdmissionServer:
    def __init__(self, settings: AdmissionSettings, log: Logger) -> None:
        """Serves `PATH` over TLS with the certificate and key files (PEM; OSError or ssl.SSLError when
        they cannot be read), read again when they change. Nothing is admitted with a change until
        `attach` gives it the pipeline's read side."""
        self.wait, self.log = settings.wait, log
        self.tls = TlsFiles(settings.certificate, settings.key, settings.client_ca, log, "the admission webhook")
        self.server = BoundedServer(
            "the admission webhook", settings.host, settings.port, self._handle, log, settings.limits, self.tls.context
        )
        self.answers = Answers()
        self._ask: Ask | None = None

    def attach(self, ask: Ask | None) -> None:
        self._ask = ask

    def calls(self) -> tuple[int, int]:
        """How many TLS handshakes failed, and how many reviews came: what the API server's calls say of
        whether it trusts the certificate (sinks.admission_trust)."""
        return self.server.refused.counts.get(HANDSHAKE_FAILED, 0), sum(self.answers.counts.values())

    @contextlib.asynccontextmanager
    async def serving(self) -> AsyncIterator[str]:
        """Listen while inside; the URL of the webhook (the port chosen, when asked for port 0). OSError
        if it cannot."""
        async with self.server.serving() as url:
            yield url + PATH

    async def _handle(self, request: Request) -> Response:
        if request.path != PATH:
            self.server.refused("no such path", request.path[:80])
            return Response(HTTPStatus.NOT_FOUND, b"not found\n")
        if request.method != "POST":
            self.server.refused("not a POST", request.method[:20])
            return Response(HTTPStatus.METHOD_NOT_ALLOWED, b"POST an AdmissionReview\n")
        try:
            review = _review(request.body)
        except RecursionError:
            return self._bad("nested too deeply to read")
        except (msgspec.ValidationError, msgspec.DecodeError) as exc:
            return self._bad(str(exc))
        patch = await self.answer(review.request)
        answer: dict[str, Any] = {"uid": review.request.uid, "allowed": True}
        if patch:
            answer["patchType"] = "JSONPatch"
            answer["patch"] = base64.b64encode(_encode(patch)).decode()
        body = _encode({"apiVersion": review.apiVersion, "kind": "AdmissionReview", "response": answer})
        return Response(HTTPStatus.OK, body, "application/json")

    def _bad(self, problem: str) -> Response:
        self.server.refused("not an AdmissionReview", problem)
        return Response(HTTPStatus.BAD_REQUEST, f"not an AdmissionReview: {problem}\n".encode())

    async def answer(self, asked: _Request) -> list[dict[str, Any]]:
        """The JSON patch that gives the written object crashwatch's decision; empty to let it be."""
        found = _view(asked)
        if found is None:
            self.answers.count("not asked")
            return []
        view, status = found
        about = About(view.kind, view.namespace, view.name)
        who = f"{view.kind} {view.namespace}/{view.name}"
        ask = self._ask
        said = await ask(view, self.wait) if ask is not None else LetThrough("the watches have not started")
        if isinstance(said, LetThrough):
            self.answers.count("let through")
            level: Level = "debug" if said.routine else "warning"
            self.log(f"{who}: a status write let through as it is: {said.reason}", level, about)
            return []
        if said is None:
            self.answers.count("unchanged")
            return []
        self.answers.count("patched")
        decided = ", ".join(f"{c.type}={c.status} ({c.reason})" for c in said.decided)
        state = f"state {said.state}, " if said.state is not None and said.state != view.state else ""
        self.log(f"{who}: another writer's status write made to say {state}{decided}", about=about)
        return _patch(status, said)


def _patch(status: _Status, wanted: StatusWanted) -> list[dict[str, Any]]:
    """The JSON patch that puts crashwatch's decided conditions (each in its place, or added) and state in."""
    patch: list[dict[str, Any]] = []
    if wanted.state is not None and status.state != wanted.state:
        patch.append({"op": "add", "path": "/status/state", "value": wanted.state})
    conditions = status.conditions
    if conditions is None:
        value = [condition_dict(c) for c in wanted.decided]
        return [*patch, {"op": "add", "path": "/status/conditions", "value": value}]
    for condition in wanted.decided:
        at = next((i for i, c in enumerate(conditions) if c.type == condition.type), None)
        path = f"/status/conditions/{at if at is not None else '-'}"
        patch.append({"op": "replace" if at is not None else "add", "path": path, "value": condition_dict(condition)})
    return patch


def _view(asked: _Request) -> tuple[StatusView, _Status] | None:
    """The status view of the object a DCD or DGD status update would store, and where its conditions
    are; None for anything else."""
    if asked.operation != "UPDATE" or asked.subResource != "status":
        return None
    try:
        written = _written(asked.object)
        if written.kind not in _KINDS or written.status is None:
            return None
        typed = read_event(b'{"type":"MODIFIED","object":' + bytes(asked.object) + b"}").object
    except FAST_ERRORS:
        return None
    if not isinstance(typed, DynamoGraphDeployment | DynamoComponentDeployment):
        return None
    return status_view(typed), written.status
