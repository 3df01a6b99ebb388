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

The answer waits (at most `wait`) until the pipeline has seen the object at the generation of the write,
since the spec change that withdraws the failure may still be on its way. Anything else, or no answer in
time, lets the write through as it is: the webhook is registered with `failurePolicy: Ignore`, and never
stands between the operator and the API server for longer than that.
"""

from __future__ import annotations

import base64
import json
import ssl
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio
import msgspec
from aiohttp import web

from pipeline.outputs import StatusWanted, condition_dict
from pipeline.views import StatusView, status_view
from sinks.http_server import listen
from stream.model.decode import typed_event
from stream.model.messages import About, Logger
from stream.model.objects import DynamoComponentDeployment, DynamoGraphDeployment


@dataclass(frozen=True)
class AdmissionSettings:
    """`run --admission-address`: where to serve, with which certificate, and how long an answer may wait."""

    host: str | None
    port: int
    certificate: str
    key: str
    wait: float = 1.0


Admit = Callable[[StatusView, str], tuple[bool, StatusWanted | None]]  # pipeline.aggregate.Aggregator.admit
PATH = "/admit-status"
MAX_REVIEW = 8 << 20  # an AdmissionReview holds the object twice; the API server stores objects up to 1.5 MiB
STEP = 0.005  # seconds between two looks at the pipeline while it catches up
_KINDS = ("DynamoGraphDeployment", "DynamoComponentDeployment")


class AdmissionServer:
    def __init__(self, settings: AdmissionSettings, log: Logger, clock: Callable[[], str]) -> None:
        """Serves `PATH` over TLS with the certificate and key files (PEM; OSError or ssl.SSLError when
        they cannot be read). Nothing is admitted with a change until `attach` gives it the pipeline."""
        self.host, self.port, self.wait = settings.host, settings.port, settings.wait
        self.log, self.clock = log, clock
        self._tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        self._tls.load_cert_chain(settings.certificate, settings.key)
        self._admit: Admit | None = None
        app = web.Application(client_max_size=MAX_REVIEW)
        app.router.add_post(PATH, self._review)
        self._runner = web.AppRunner(app, access_log=None, shutdown_timeout=1)

    def attach(self, admit: Admit | None) -> None:
        self._admit = admit

    async def start(self) -> str:
        """Listen; the URL of the webhook (the port chosen, when asked for port 0). OSError if it cannot."""
        return await listen(self._runner, self.host, self.port, self._tls) + PATH

    async def stop(self) -> None:
        await self._runner.cleanup()

    async def _review(self, request: web.Request) -> web.Response:
        try:
            review = json.loads(await request.read())
            asked = review["request"]
            uid = asked["uid"]
            if type(uid) is not str:
                raise TypeError("request.uid is not a string")
        except web.HTTPRequestEntityTooLarge:
            raise
        except (ValueError, TypeError, KeyError) as exc:
            return web.Response(status=400, text=f"not an AdmissionReview: {exc}\n")
        answer: dict[str, Any] = {"uid": uid, "allowed": True}
        patch = await self.answer(asked)
        if patch:
            answer["patchType"] = "JSONPatch"
            answer["patch"] = base64.b64encode(json.dumps(patch).encode()).decode()
        version = review.get("apiVersion", "admission.k8s.io/v1")
        return web.json_response({"apiVersion": version, "kind": "AdmissionReview", "response": answer})

    async def answer(self, asked: dict[str, Any]) -> list[dict[str, Any]]:
        """The JSON patch that gives the written object crashwatch's decision; empty to let it be."""
        view = _view(asked)
        if view is None:
            return []
        about = About(view.kind, view.namespace, view.name)
        who = f"{view.kind} {view.namespace}/{view.name}"
        deadline = time.monotonic() + self.wait
        while True:
            admit = self._admit
            known, wanted = admit(view, self.clock()) if admit is not None else (False, None)
            if known:
                break
            if time.monotonic() >= deadline:
                self.log(
                    f"{who}: a status write let through as it is: "
                    f"generation {view.generation} not seen within {self.wait:g}s",
                    "warning",
                    about,
                )
                return []
            await anyio.sleep(STEP)
        if wanted is None:
            return []
        said = ", ".join(f"{c.type}={c.status} ({c.reason})" for c in wanted.decided)
        state = f"state {wanted.state}, " if wanted.state is not None and wanted.state != view.state else ""
        self.log(f"{who}: another writer's status write made to say {state}{said}", about=about)
        return _patch(asked["object"]["status"], wanted)


def _patch(status: dict[str, Any], wanted: StatusWanted) -> list[dict[str, Any]]:
    """The JSON patch that puts crashwatch's decided conditions (each in its place, or added) and state in."""
    patch: list[dict[str, Any]] = []
    if wanted.state is not None and status.get("state") != wanted.state:
        patch.append({"op": "add", "path": "/status/state", "value": wanted.state})
    conditions = status.get("conditions")
    if type(conditions) is not list:
        value = [condition_dict(c) for c in wanted.decided]
        return [*patch, {"op": "add", "path": "/status/conditions", "value": value}]
    for condition in wanted.decided:
        at = next((i for i, c in enumerate(conditions) if type(c) is dict and c.get("type") == condition.type), None)
        path = f"/status/conditions/{at if at is not None else '-'}"
        patch.append({"op": "replace" if at is not None else "add", "path": path, "value": condition_dict(condition)})
    return patch


def _view(asked: dict[str, Any]) -> StatusView | None:
    """The status view of the object a DCD or DGD status update would store; None for anything else."""
    obj = asked.get("object")
    if asked.get("operation") != "UPDATE" or asked.get("subResource") != "status" or type(obj) is not dict:
        return None
    if obj.get("kind") not in _KINDS or type(obj.get("status")) is not dict:
        return None
    try:
        typed = typed_event({"type": "MODIFIED", "object": dict(obj)}).object  # a copy: its spec becomes text
    except (msgspec.ValidationError, TypeError, ValueError):
        return None
    if not isinstance(typed, DynamoGraphDeployment | DynamoComponentDeployment):
        return None
    return status_view(typed)
