"""The status admission webhook's server (sinks.admission): what the API server gets back for a review, a
late pipeline, and input that is no review. The decision itself is the pure core's (tests/unit/test_rollouts)."""

from __future__ import annotations

import base64
import io
import json
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import pytest
from builders import dgd
from operators import webhook_certs

from pipeline.outputs import StatusWanted
from pipeline.views import StatusView
from sinks.admission import AdmissionServer, AdmissionSettings
from stream.model.objects import Condition

pytestmark = pytest.mark.anyio

WITHDRAWN = Condition("Stalled", "False", "SpecReplaced", "withdrawn", 2, "2026-12-05T10:00:00Z")


class Served:
    def __init__(self, server: AdmissionServer, url: str, tls: ssl.SSLContext, said: list[str]) -> None:
        self.server, self.url, self.tls, self.said = server, url, tls, said

    async def post(self, body: bytes) -> tuple[int, Any]:
        data = io.BytesIO(body)
        async with aiohttp.ClientSession() as session, session.post(self.url, data=data, ssl=self.tls) as response:
            text = await response.text()
            return response.status, (json.loads(text) if response.content_type == "application/json" else text)


@pytest.fixture
async def served(tmp_path: Path) -> AsyncIterator[Served]:
    certs = webhook_certs(()).write(tmp_path / "certs")
    said: list[str] = []
    settings = AdmissionSettings("127.0.0.1", 0, str(certs / "tls.crt"), str(certs / "tls.key"), wait=0.3)
    server = AdmissionServer(settings, lambda message, level="info", about=None: said.append(message), lambda: "t")
    url = await server.start()
    tls = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    try:
        yield Served(server, url, tls, said)
    finally:
        await server.stop()


def review(obj: dict[str, Any], sub: str = "status", operation: str = "UPDATE") -> bytes:
    request = {"uid": "u-1", "operation": operation, "subResource": sub, "object": obj}
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": request}).encode()


def patch_of(answer: dict[str, Any]) -> list[dict[str, Any]] | None:
    response = answer["response"]
    assert (response["uid"], response["allowed"]) == ("u-1", True)
    if "patch" not in response:
        return None
    assert response["patchType"] == "JSONPatch"
    decoded: list[dict[str, Any]] = json.loads(base64.b64decode(response["patch"]))
    return decoded


def withdrawing(view: StatusView, now: str) -> tuple[bool, StatusWanted | None]:
    who = (view.api_version, view.kind, view.namespace, view.name, view.uid)
    return True, StatusWanted(now, *who, "", (WITHDRAWN,), (), None)


def operators_write() -> dict[str, Any]:
    obj = dgd(generation=2, extra_conditions=[{"type": "Stalled", "status": "True", "reason": "X", "message": "m"}])
    obj["metadata"]["resourceVersion"] = "7"
    return obj


async def test_the_answer_replaces_stalled_where_it_is_and_adds_it_where_it_is_not(served: Served) -> None:
    served.server.attach(withdrawing)
    status, answer = await served.post(review(operators_write()))
    assert status == 200 and answer["kind"] == "AdmissionReview"
    (op,) = patch_of(answer) or []
    assert (op["op"], op["path"], op["value"]["status"], op["value"]["reason"]) == (
        "replace",
        "/status/conditions/1",  # Ready stays first, untouched
        "False",
        "SpecReplaced",
    )
    assert op["value"]["observedGeneration"] == 2
    without = dgd(generation=2)
    status, answer = await served.post(review(without))
    assert [(o["op"], o["path"]) for o in patch_of(answer) or []] == [("add", "/status/conditions/-")]


async def test_a_failure_answer_sets_state_and_each_decided_condition_in_its_place(served: Served) -> None:
    failing = Condition("Ready", "False", "component_crash_looping", "w", 2, "2026-12-05T10:00:00Z")
    stalled = Condition("Stalled", "True", "ComponentCrashLooping", "w", 2, "2026-12-05T10:00:00Z")

    def failed(view: StatusView, now: str) -> tuple[bool, StatusWanted | None]:
        who = (view.api_version, view.kind, view.namespace, view.name, view.uid)
        return True, StatusWanted(now, *who, "", (failing, stalled), (), "failed")

    served.server.attach(failed)
    write = dgd(generation=2, state="successful")  # Ready only: Stalled is added after it
    _, answer = await served.post(review(write))
    assert [
        (o["op"], o["path"], o["value"] if o["path"] == "/status/state" else o["value"]["type"])
        for o in patch_of(answer) or []
    ] == [
        ("add", "/status/state", "failed"),
        ("replace", "/status/conditions/0", "Ready"),
        ("add", "/status/conditions/-", "Stalled"),
    ]
    del write["status"]["conditions"]
    _, answer = await served.post(review(write))
    ops = patch_of(answer) or []
    assert ops[-1]["path"] == "/status/conditions" and [c["type"] for c in ops[-1]["value"]] == ["Ready", "Stalled"]


async def test_an_answer_waits_for_the_pipeline_then_lets_the_write_through_as_it_is(served: Served) -> None:
    looks: list[int] = []

    def late(view: StatusView, now: str) -> tuple[bool, StatusWanted | None]:
        looks.append(view.generation)
        return len(looks) > 3, None

    served.server.attach(late)
    status, answer = await served.post(review(operators_write()))
    assert status == 200 and patch_of(answer) is None and len(looks) == 4  # asked until it knew

    served.server.attach(lambda view, now: (False, None))  # never catches up
    with anyio.fail_after(5):
        status, answer = await served.post(review(operators_write()))
    assert status == 200 and patch_of(answer) is None
    assert served.said[-1] == (
        "DynamoGraphDeployment ns/g: a status write let through as it is: generation 2 not seen within 0.3s"
    )


async def test_what_is_no_dcd_or_dgd_status_update_is_let_through_without_asking(served: Served) -> None:
    asked: list[StatusView] = []
    served.server.attach(lambda view, now: (asked.append(view), withdrawing(view, now))[1])
    pod = {"kind": "Pod", "apiVersion": "v1", "metadata": {"name": "p"}, "status": {}}
    for body in (review(operators_write(), sub=""), review(operators_write(), operation="CREATE"), review(pod)):
        status, answer = await served.post(body)
        assert status == 200 and patch_of(answer) is None
    assert asked == []


@pytest.mark.parametrize(
    "body,says",
    [
        (b"{", "not an AdmissionReview"),
        (b"[]", "not an AdmissionReview"),
        (b'{"request": {"uid": 7}}', "request.uid is not a string"),
    ],
)
async def test_a_body_that_is_no_review_gets_a_400_that_says_so(served: Served, body: bytes, says: str) -> None:
    status, text = await served.post(body)
    assert status == 400 and says in text


async def test_a_body_past_the_bound_is_refused_unread(served: Served) -> None:
    status, _ = await served.post(b"x" * (9 << 20))
    assert status == 413


async def test_certificate_files_that_cannot_be_read_are_an_error_at_start(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope.crt")
    with pytest.raises(OSError):
        AdmissionServer(AdmissionSettings(None, 0, missing, missing), lambda *a, **k: None, lambda: "t")
