"""The check that the API server can call the admission webhook (sinks.admission_trust), against the fake
API server's MutatingWebhookConfiguration, with the real client and the webhook's real server: a
registration that trusts the certificate served, a new render's caBundle that does not sign it, none at
all, then fixed; a 403; the certificate files rotated; the API server's calls that say otherwise than the
last verdict; the lines said and `crashwatch_admission_trusted` on /metrics. The API server's own TLS
check of a real registration: tests/e2e/test_admission_trust.py."""

from __future__ import annotations

import base64
import json
import ssl
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import anyio
import pytest
from fakeapi import FakeApi, Fault
from operators import WebhookCerts, webhook_certs
from scrapes import samples

from sinks.admission import PATH, AdmissionServer, AdmissionSettings
from sinks.admission_trust import Said, TrustCheck, Verdict, judge
from sinks.metrics import Metrics
from sinks.tls_files import TlsFiles
from stream.model.messages import logger
from stream.sources.client import KubeClient

pytestmark = pytest.mark.anyio

NAME = "crashwatch-ops"
SERVICE = "crashwatch.ops.svc"  # the name the API server checks, calling the Service crashwatch in ops
PLURAL = "mutatingwebhookconfigurations"
GAUGE = ("crashwatch_admission_trusted", (("configuration", NAME),))


def registration(ca: bytes, *, url: str | None = None, service: str = "crashwatch", path: str = PATH) -> dict[str, Any]:
    """The chart's registration (templates/admission.yaml), trimmed to what the check reads."""
    config: dict[str, Any] = {"caBundle": base64.b64encode(ca).decode()}
    if url is not None:
        config["url"] = url
    else:
        config["service"] = {"name": service, "namespace": "ops", "path": path, "port": 443}
    return {
        "apiVersion": "admissionregistration.k8s.io/v1",
        "kind": "MutatingWebhookConfiguration",
        "metadata": {"name": NAME},
        "webhooks": [{"name": "status.crashwatch.dev", "clientConfig": config, "failurePolicy": "Ignore"}],
    }


@dataclass
class Checked:
    api: FakeApi
    server: AdmissionServer
    check: TrustCheck
    metrics: Metrics
    said: list[str]
    url: str

    def gauge(self) -> float | None:
        return samples(self.metrics.exposition().decode()).get(GAUGE)

    def gets(self) -> int:
        return len([r for r in self.api.requests if r.method == "GET" and r.path.endswith(f"/{PLURAL}/{NAME}")])

    async def until(self, predicate: Callable[[], bool], what: str, timeout: float = 10) -> None:
        with anyio.fail_after(timeout):
            while not predicate():
                await anyio.sleep(0.01)

    async def said_line(self, part: str) -> str:
        await self.until(lambda: any(part in line for line in self.said), f"a line with {part!r}")
        return next(line for line in self.said if part in line)

    async def checks_after(self, count: int) -> None:
        """Wait until `count` more checks are done."""
        target = self.check.checks + count
        await self.until(lambda: self.check.checks >= target, f"{count} more checks")


@pytest.fixture
def certs(tmp_path: Path) -> WebhookCerts:
    served = webhook_certs((SERVICE,))
    served.write(tmp_path / "certs")
    return served


@pytest.fixture
def checking(client: KubeClient, api: FakeApi, tmp_path: Path) -> Callable[..., AbstractAsyncContextManager[Checked]]:
    """A webhook serving the pair in tmp_path/certs, and its registration's check running, with quick
    periods (a minute, ten minutes and 15 s in the product) unless given."""

    @asynccontextmanager
    async def running(leader: Callable[[], bool] = lambda: True, **periods: float) -> AsyncIterator[Checked]:
        said: list[str] = []
        log = logger(said.append)
        folder = tmp_path / "certs"
        settings = AdmissionSettings("127.0.0.1", 0, str(folder / "tls.crt"), str(folder / "tls.key"))
        server = AdmissionServer(settings, log)
        quick = {"period": 0.2, "repeat": 3600.0, "nudge": 3600.0, "look": 0.02, **periods}
        check = TrustCheck(client, NAME, server.tls, PATH, server.calls, log, leader, **quick)
        metrics = Metrics()
        metrics.registry.register(check.collector())
        async with server.serving() as url, anyio.create_task_group() as tg:
            tg.start_soon(check.run)
            yield Checked(api, server, check, metrics, said, url)
            tg.cancel_scope.cancel()

    return running


async def test_a_new_renders_ca_bundle_a_missing_registration_and_the_fix_are_each_said_once(
    api: FakeApi, certs: WebhookCerts, checking: Callable[..., AbstractAsyncContextManager[Checked]]
) -> None:
    api.put(PLURAL, registration(certs.ca))
    async with checking() as checked:
        line = await checked.said_line("signs the certificate served")
        assert line == (
            f"the admission webhook: the caBundle of MutatingWebhookConfiguration {NAME} signs the certificate "
            f"served, for {SERVICE}"
        )
        assert checked.gauge() == 1.0
        # a new render: another CA in the caBundle, the Pods still serving the pair of the last
        api.put(PLURAL, registration(webhook_certs((SERVICE,)).ca))
        line = await checked.said_line("cannot verify")
        assert line == (
            "the admission webhook: the API server cannot verify this webhook's certificate: the caBundle of "
            f"MutatingWebhookConfiguration {NAME} (webhook status.crashwatch.dev) does not sign the certificate "
            "served (a new render changed one of them?); until they match, the API server skips the webhook "
            "(failurePolicy Ignore) and stores the operator's status writes unanswered"
        )
        assert checked.gauge() == 0.0
        await checked.checks_after(5)  # checked again and again: said once while it lasts
        assert sum("cannot verify" in line for line in checked.said) == 1
        # the registration gone: another problem, said at once
        api.delete(PLURAL, "", NAME)
        line = await checked.said_line("does not exist")
        assert line.startswith(f"the admission webhook: MutatingWebhookConfiguration {NAME} does not exist: ")
        assert checked.gauge() == 0.0
        await checked.checks_after(3)
        # fixed: one line, the gauge back to 1
        api.put(PLURAL, registration(certs.ca))
        line = await checked.said_line("again")
        assert line == (
            "the admission webhook: the API server can verify this webhook's certificate again: the caBundle of "
            f"MutatingWebhookConfiguration {NAME} signs the certificate served, for {SERVICE}"
        )
        assert checked.gauge() == 1.0
        await checked.checks_after(3)
        assert len(checked.said) == 4, checked.said


async def test_a_403_is_said_once_and_ends_the_check_with_no_gauge(
    api: FakeApi, certs: WebhookCerts, checking: Callable[..., AbstractAsyncContextManager[Checked]]
) -> None:
    api.put(PLURAL, registration(certs.ca))
    async with checking() as checked:
        await checked.said_line("signs the certificate served")
        api.fault("get", Fault("status", 403))
        line = await checked.said_line("not allowed")
        assert line == (
            f"not allowed to read MutatingWebhookConfiguration {NAME} (403 Fault): whether the API server can call "
            f"this webhook is not checked; grant get on mutatingwebhookconfigurations named {NAME} "
            "(admissionregistration.k8s.io; the chart does)"
        )
        gets = checked.gets()
        await anyio.sleep(1)  # five periods: no GET, no line more
        assert checked.gets() == gets and len(checked.said) == 2
        assert checked.gauge() is None


async def test_an_answer_that_is_no_answer_keeps_the_verdict_and_is_said(
    api: FakeApi, certs: WebhookCerts, checking: Callable[..., AbstractAsyncContextManager[Checked]]
) -> None:
    api.put(PLURAL, registration(certs.ca))
    async with checking() as checked:
        await checked.said_line("signs the certificate served")
        api.fault("get", *(Fault("status", 500) for _ in range(3)))
        line = await checked.said_line("cannot read")
        assert line.startswith(f"the admission webhook: cannot read MutatingWebhookConfiguration {NAME} to check ")
        assert "500" in line
        await checked.checks_after(4)  # the three failures and a success
        assert checked.gauge() == 1.0 and sum("cannot read" in s for s in checked.said) == 1


async def test_rotated_files_are_checked_at_once_and_the_api_servers_calls_set_a_check_off(
    api: FakeApi, certs: WebhookCerts, checking: Callable[..., AbstractAsyncContextManager[Checked]], tmp_path: Path
) -> None:
    api.put(PLURAL, registration(certs.ca))
    async with checking(period=3600.0, nudge=0.1) as checked:  # no check of its own after the first
        await checked.said_line("signs the certificate served")
        checks = checked.check.checks
        # the Secret renewed with a new CA the registration does not have yet: checked when the files change
        renewed = webhook_certs((SERVICE,))
        folder = tmp_path / "certs"
        renewed.write(tmp_path / "next")
        for name in ("tls.crt", "tls.key"):  # as the kubelet swaps a Secret's files: each one replaced whole
            (tmp_path / "next" / name).replace(folder / name)
        await checked.said_line("does not sign")
        assert checked.check.checks == checks + 1 and checked.gauge() == 0.0
        # the caBundle follows (cert-manager's CA injector): the API server's next call is a review, which
        # says it trusts the certificate now, and sets a check off
        api.put(PLURAL, registration(renewed.ca))
        await anyio.sleep(0.3)
        assert checked.check.checks == checks + 1  # nothing said it yet
        assert await post_review(checked.url, renewed.ca) == 200
        await checked.said_line("again")
        assert checked.gauge() == 1.0
        # a render that changes the caBundle alone: the API server's next call fails its handshake
        api.put(PLURAL, registration(certs.ca))
        with pytest.raises(aiohttp.ClientConnectorCertificateError):
            await post_review(checked.url, certs.ca)
        await checked.until(lambda: sum("does not sign" in s for s in checked.said) == 2, "said again")
        assert checked.check.checks == checks + 3 and checked.gauge() == 0.0


async def post_review(url: str, ca: bytes) -> int:
    """A call as the API server makes it, trusting `ca`: an AdmissionReview of something not asked about."""
    review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {"uid": "u"}}
    trusting = ssl.create_default_context(cadata=ca.decode())
    async with aiohttp.ClientSession() as session, session.post(url, json=review, ssl=trusting) as response:
        return response.status


async def test_only_the_replica_that_answers_checks_and_one_that_gains_the_lease_checks_at_once(
    api: FakeApi, certs: WebhookCerts, checking: Callable[..., AbstractAsyncContextManager[Checked]]
) -> None:
    api.put(PLURAL, registration(certs.ca))
    leading = [False]
    async with checking(leader=lambda: leading[0], period=3600.0) as checked:
        await anyio.sleep(0.3)
        assert checked.gets() == 0 and checked.gauge() is None and checked.said == []
        leading[0] = True
        await checked.said_line("signs the certificate served")
        assert checked.gets() == 1 and checked.gauge() == 1.0
        leading[0] = False  # the lease lost: a follower says nothing of it
        await checked.until(lambda: checked.gauge() is None, "the gauge gone")
        leading[0] = True
        await checked.until(lambda: checked.gets() == 2, "checked again at once")
        assert len(checked.said) == 1  # still trusted: nothing new to say


# --- the verdict, on plain registrations -----------------------------------------------------------------


@pytest.fixture
def served(certs: WebhookCerts, tmp_path: Path) -> ssl.SSLContext:
    folder = tmp_path / "certs"
    return TlsFiles(str(folder / "tls.crt"), str(folder / "tls.key"), None, logger(None), "the webhook").served()


def verdict(registered: dict[str, Any] | None, served: ssl.SSLContext) -> Verdict:
    return judge(NAME, json.dumps(registered).encode() if registered is not None else None, served, PATH)


async def test_the_url_form_is_checked_against_the_urls_host(certs: WebhookCerts, served: ssl.SSLContext) -> None:
    assert verdict(registration(certs.ca, url=f"https://127.0.0.1:9443{PATH}"), served).trusted
    wrong = verdict(registration(certs.ca, url=f"https://127.0.0.2:9443{PATH}"), served)
    assert not wrong.trusted and "does not name 127.0.0.2, which MutatingWebhookConfiguration" in wrong.words


async def test_a_service_the_certificate_does_not_name_is_said_with_the_name_called(
    certs: WebhookCerts, served: ssl.SSLContext
) -> None:
    found = verdict(registration(certs.ca, service="watcher"), served)
    assert not found.trusted
    assert found.words.startswith(
        "the API server cannot verify this webhook's certificate: the certificate served does not name "
        f"watcher.ops.svc, which MutatingWebhookConfiguration {NAME} (webhook status.crashwatch.dev) calls"
    )


async def test_a_registration_that_calls_no_webhook_of_this_path_is_not_trusted(
    certs: WebhookCerts, served: ssl.SSLContext
) -> None:
    found = verdict(registration(certs.ca, path="/mutate"), served)
    assert not found.trusted
    assert found.words.startswith(f"MutatingWebhookConfiguration {NAME} has no webhook that calls /admit-status: ")


@pytest.mark.parametrize(
    "bundle,says",
    [
        (b"", "has no caBundle (cert-manager's CA injector has not filled it yet?)"),
        (b"not a certificate", "is no PEM certificate"),
    ],
)
async def test_an_empty_or_broken_ca_bundle_is_said(served: ssl.SSLContext, bundle: bytes, says: str) -> None:
    found = verdict(registration(bundle), served)
    assert not found.trusted and says in found.words


async def test_a_ca_bundle_not_base64_is_said(certs: WebhookCerts, served: ssl.SSLContext) -> None:
    registered = registration(certs.ca)
    registered["webhooks"][0]["clientConfig"]["caBundle"] = "@@@"
    found = verdict(registered, served)
    assert not found.trusted and "is no PEM certificate" in found.words


async def test_an_expired_certificate_is_said_as_expired(tmp_path: Path) -> None:
    old = webhook_certs((SERVICE,), expired=True).write(tmp_path / "old")
    context = TlsFiles(str(old / "tls.crt"), str(old / "tls.key"), None, logger(None), "the webhook").served()
    found = verdict(registration((old / "ca.crt").read_bytes()), context)
    assert not found.trusted and "the certificate served, or a CA of its chain, has expired" in found.words


async def test_a_body_that_is_no_registration_is_said(served: ssl.SSLContext) -> None:
    found = judge(NAME, b'{"webhooks": 7}', served, PATH)
    assert not found.trusted and found.words.startswith(f"MutatingWebhookConfiguration {NAME} cannot be read: ")


async def test_a_problem_that_lasts_is_said_again_after_the_repeat_and_a_new_one_at_once() -> None:
    said: list[str] = []
    now = [0.0]
    lines = Said(logger(said.append), NAME, repeat=600.0, clock=lambda: now[0])
    bad, worse = Verdict(False, "bad"), Verdict(False, "worse")
    for at in (0.0, 1.0, 599.0, 600.0, 601.0, 1199.0, 1200.0):
        now[0] = at
        lines.verdict(bad)
    assert said == ["the admission webhook: bad"] * 3  # at 0, 600 and 1200
    now[0] = 1201.0
    lines.verdict(worse)
    lines.verdict(Verdict(True, "fine"))
    lines.verdict(Verdict(True, "fine"))
    lines.verdict(worse)  # a new episode: said at once
    assert said[3:] == [
        "the admission webhook: worse",
        "the admission webhook: the API server can verify this webhook's certificate again: fine",
        "the admission webhook: worse",
    ]
