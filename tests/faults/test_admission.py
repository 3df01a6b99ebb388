"""The status admission webhook's server (sinks.admission) and the pipeline's read side it asks
(crashwatch.stages.PipelineReads): what the API server gets back for a review, a late pipeline, a follower,
input that is no review, and a certificate rotated under it. The decision itself is the pure core's
(tests/unit/test_rollouts); the limits of the server under it, tests/faults/test_bounded_http."""

from __future__ import annotations

import base64
import io
import json
import ssl
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import aiohttp
import anyio
import pytest
from builders import dgd
from operators import webhook_certs

from crashwatch.stages import PipelineReads
from pipeline.outputs import StatusWanted
from pipeline.views import StatusView
from sinks.admission import MAX_REVIEW, AdmissionServer, AdmissionSettings, Ask, LetThrough
from stream.model.messages import logger
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
    server = AdmissionServer(settings, logger(said.append))
    tls = ssl.create_default_context(cafile=str(certs / "ca.crt"))
    async with server.serving() as url:
        yield Served(server, url, tls, said)


def asking(admit: Callable[[StatusView, str], tuple[bool, StatusWanted | None]]) -> Ask:
    """A read side in front of a decision, as the wiring makes it (always the leader, in sync)."""
    reads = PipelineReads(SimpleNamespace(admit=admit), lambda: "t", lambda: None)  # type: ignore[arg-type]
    return reads.admit


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
    served.server.attach(asking(withdrawing))
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

    served.server.attach(asking(failed))
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


class Decisions:
    """A pipeline that knows the object at the written generation from its `known_after`-th batch on."""

    def __init__(self, known_after: int) -> None:
        self.known_after, self.batches, self.looks = known_after, 0, 0

    def admit(self, view: StatusView, now: str) -> tuple[bool, StatusWanted | None]:
        self.looks += 1
        return withdrawing(view, now) if self.batches >= self.known_after else (False, None)


async def test_an_answer_waits_for_the_batch_it_needs_woken_by_each_batch_not_polling(served: Served) -> None:
    pipeline = Decisions(known_after=3)
    reads = PipelineReads(pipeline, lambda: "t", lambda: None)  # type: ignore[arg-type]
    served.server.attach(reads.admit)
    async with anyio.create_task_group() as tg:
        answered: list[Any] = []

        async def ask() -> None:
            answered.append(await served.post(review(operators_write())))

        tg.start_soon(ask)
        for _ in range(3):
            with anyio.fail_after(5):
                while pipeline.looks <= pipeline.batches:  # the question waits on the read side
                    await anyio.sleep(0.01)
            await anyio.sleep(0.05)  # and is not asked again while no batch comes
            assert pipeline.looks == pipeline.batches + 1
            pipeline.batches += 1
            reads.fed()
    (status, answer), = answered
    assert status == 200 and patch_of(answer) is not None and pipeline.looks == 4


async def test_a_late_pipeline_lets_the_write_through_as_it_is_and_says_why(served: Served) -> None:
    served.server.attach(asking(lambda view, now: (False, None)))  # never catches up
    with anyio.fail_after(5):
        status, answer = await served.post(review(operators_write()))
    assert status == 200 and patch_of(answer) is None
    assert served.said[-1] == (
        "DynamoGraphDeployment ns/g: a status write let through as it is: generation 2 not seen within 0.3s"
    )
    assert served.server.answers.counts == {"let through": 1}


async def test_a_replica_that_must_not_write_answers_with_no_change(served: Served) -> None:
    why: list[LetThrough | None] = [LetThrough("this replica does not lead", routine=True)]
    reads = PipelineReads(Decisions(known_after=0), lambda: "t", lambda: why[0])  # type: ignore[arg-type]
    served.server.attach(reads.admit)
    for blocked in (why[0], LetThrough("a watch is out of sync (its last two requests failed)")):
        why[0] = blocked
        status, answer = await served.post(review(operators_write()))
        assert status == 200 and patch_of(answer) is None
    assert served.said == [  # a follower's answers are routine (debug), an out-of-sync leader's are not
        "DynamoGraphDeployment ns/g: a status write let through as it is: "
        "a watch is out of sync (its last two requests failed)"
    ]
    why[0] = None
    _, answer = await served.post(review(operators_write()))
    assert patch_of(answer) is not None
    assert served.server.answers.counts == {"let through": 2, "patched": 1}


async def test_what_is_no_dcd_or_dgd_status_update_is_let_through_without_asking(served: Served) -> None:
    asked: list[StatusView] = []
    served.server.attach(asking(lambda view, now: (asked.append(view), withdrawing(view, now))[1]))
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
        (b'{"request": {"uid": 7}}', "Expected `str`, got `int` - at `$.request.uid`"),
        (b'{"request": {"uid": "u", "object": ' + b"[" * 100_000 + b"]" * 100_000 + b"}}", "nested too deeply"),
    ],
)
async def test_a_body_that_is_no_review_gets_a_400_that_says_so(served: Served, body: bytes, says: str) -> None:
    for _ in range(2):
        status, text = await served.post(body)
        assert status == 400 and says in text
    (line,) = served.said  # one line for the two: the same refusal is said once a minute
    assert line.startswith("the admission webhook: refused a request: not an AdmissionReview") and says in line


async def test_a_body_past_the_bound_is_refused_unread(served: Served) -> None:
    status, _ = await served.post(b"x" * (MAX_REVIEW + 1))
    assert status == 413


async def test_a_review_at_the_bound_is_read(served: Served) -> None:
    served.server.attach(asking(withdrawing))
    obj = operators_write()
    obj["spec"] = {"padding": ""}
    obj["spec"]["padding"] = "x" * (MAX_REVIEW - len(review(obj)) - 64)
    body = review(obj)
    assert MAX_REVIEW - 128 < len(body) <= MAX_REVIEW
    status, answer = await served.post(body)
    assert status == 200 and patch_of(answer) is not None


async def test_certificate_files_that_cannot_be_read_are_an_error_at_start(tmp_path: Path) -> None:
    missing = str(tmp_path / "nope.crt")
    with pytest.raises(OSError):
        AdmissionServer(AdmissionSettings(None, 0, missing, missing), lambda *a, **k: None)


async def test_a_rotated_certificate_is_served_without_a_restart(served: Served, tmp_path: Path) -> None:
    folder = tmp_path / "certs"
    rotated = webhook_certs(())
    (folder / "next").mkdir()
    rotated.write(folder / "next")
    for name in ("tls.crt", "tls.key"):  # as the kubelet swaps a Secret's files: each one replaced whole
        (folder / "next" / name).replace(folder / name)
    trusting = ssl.create_default_context(cadata=rotated.ca.decode())
    with anyio.fail_after(10):
        while True:
            try:
                async with aiohttp.ClientSession() as session, session.get(served.url, ssl=trusting) as response:
                    assert response.status == 405  # served over TLS with the new pair
                    break
            except aiohttp.ClientConnectorCertificateError:
                await anyio.sleep(0.1)
    assert served.server.tls.reloads == 1
    assert sum("the admission webhook: serving the certificate in" in line for line in served.said) == 1
    with pytest.raises(aiohttp.ClientConnectorCertificateError):  # the old CA no longer names it
        await served.post(review(operators_write()))


async def test_with_a_client_ca_only_callers_it_signed_are_answered(tmp_path: Path) -> None:
    serving = webhook_certs(()).write(tmp_path / "serving")
    client = webhook_certs(()).write(tmp_path / "client")  # a certificate, and the CA that signed it
    said: list[str] = []
    settings = AdmissionSettings(
        "127.0.0.1", 0, str(serving / "tls.crt"), str(serving / "tls.key"), client_ca=str(client / "ca.crt")
    )
    server = AdmissionServer(settings, logger(said.append))
    async with server.serving() as url:
        anonymous = ssl.create_default_context(cafile=str(serving / "ca.crt"))
        with pytest.raises(aiohttp.ClientError):
            await Served(server, url, anonymous, said).post(review(operators_write()))
        known = ssl.create_default_context(cafile=str(serving / "ca.crt"))
        known.load_cert_chain(str(client / "tls.crt"), str(client / "tls.key"))
        status, answer = await Served(server, url, known, said).post(review(operators_write()))
        assert status == 200 and patch_of(answer) is None  # answered (nothing attached: let through)
    assert server.server.refused.counts["TLS handshake failed"] == 1
    assert any("refused a request: TLS handshake failed" in line for line in said)
