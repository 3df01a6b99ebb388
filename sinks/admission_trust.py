"""Whether the API server can call the admission webhook: its registration checked against what it serves.

The webhook is registered with `failurePolicy: Ignore`, so an API server that cannot verify the
certificate the webhook serves (its MutatingWebhookConfiguration's `caBundle` does not sign it, or it does
not name the host the API server calls) skips the webhook without a word: the writes are stored
unanswered. A render of the chart without a cluster (`helm template`, Argo CD at every sync) makes exactly
that, a new CA in the `caBundle` and another in the Secret the Pods serve. Counting failed handshakes
(sinks.bounded_http) shows it only where the API server gets that far, and only to someone who looks.

So the replica that answers (the Lease holder, or the only replica) reads the registration named by
`--admission-configuration` (one GET, cluster-scoped) at start, every `PERIOD`, whenever the certificate
files are read again, and sooner when the API server's calls disagree with the last verdict (a handshake
failed while it trusted, a review came while it did not); and checks each of its webhooks that calls this
webhook's path: a TLS handshake in memory, the API server's side played with the `caBundle` as its only
roots and the name it calls (the Service's DNS name, or the URL's host), against the pair being served.
What it finds is said in one warning line, again at most every `REPEAT` while it lasts (at once when the
reason changes), and in one line when it is fixed; `crashwatch_admission_trusted` is 1 or 0. A 403 on the
GET is said once and ends the check (the RBAC is missing); any other failure to read keeps the last verdict.
"""

from __future__ import annotations

import base64
import binascii
import math
import ssl
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from urllib.parse import urlsplit

import anyio
import msgspec
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from sinks.tls_files import TlsFiles
from stream.model.messages import About, Level, Logger
from stream.sources.client import ApiError, KubeClient

PERIOD = 60.0  # seconds between two checks
REPEAT = 600.0  # seconds between two lines of the same problem
NUDGE = 15.0  # seconds at least between two checks set off by the API server's calls
LOOK = 2.0  # seconds between two looks at the certificate files and the calls
TIMEOUT = 10.0  # seconds for the GET
KIND = "MutatingWebhookConfiguration"
WEBHOOKS = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations"
UNANSWERED = (
    "the API server skips the webhook (failurePolicy Ignore) and stores the operator's status writes unanswered"
)

# OpenSSL's verify codes (X509_V_ERR_*) for a chain no root of the caBundle signs
_UNSIGNED = {2, 7, 18, 19, 20, 21}
_EXPIRED, _NOT_YET, _HOSTNAME, _IP = 10, 9, 62, 64


class _Service(msgspec.Struct):
    namespace: str = ""
    name: str = ""
    path: str | None = None


class _ClientConfig(msgspec.Struct):
    url: str | None = None
    service: _Service | None = None
    caBundle: str = ""  # the API's name: base64 of PEM


class _Webhook(msgspec.Struct):
    name: str = ""
    clientConfig: _ClientConfig = msgspec.field(default_factory=_ClientConfig)


class _Configuration(msgspec.Struct):
    webhooks: list[_Webhook] | None = None


_configuration = msgspec.json.Decoder(_Configuration).decode


@dataclass(frozen=True)
class Verdict:
    """Whether the registration trusts what is served, and the words that say so, or say what is wrong."""

    trusted: bool
    words: str


def judge(name: str, body: bytes | None, served: ssl.SSLContext, path: str) -> Verdict:
    """The verdict on the registration `name` (its JSON; None: there is none) for a server of the pair in
    `served` at `path`: every webhook of it that calls `path` must verify it."""
    if body is None:
        return Verdict(
            False,
            f"{KIND} {name} does not exist: the API server does not call this webhook; until it is "
            f"registered (helm upgrade, kubectl apply), {UNANSWERED}",
        )
    try:
        webhooks = _configuration(body).webhooks or []
    except (msgspec.DecodeError, msgspec.ValidationError) as exc:
        return Verdict(False, f"{KIND} {name} cannot be read: {exc}")
    ours = [(hook, host) for hook in webhooks for host in [_host(hook, path)] if host is not None]
    if not ours:
        return Verdict(
            False,
            f"{KIND} {name} has no webhook that calls {path}: the API server does not call this webhook; "
            f"until one does, {UNANSWERED}",
        )
    for hook, host in ours:
        problem = _verify(served, f"{KIND} {name} (webhook {hook.name})", hook.clientConfig.caBundle, host)
        if problem is not None:
            return Verdict(False, f"the API server cannot verify this webhook's certificate: {problem}")
    hosts = ", ".join(sorted({host for _, host in ours}))
    return Verdict(True, f"the caBundle of {KIND} {name} signs the certificate served, for {hosts}")


def _host(hook: _Webhook, path: str) -> str | None:
    """The name the API server checks the certificate against when it calls `hook`, if it calls `path`."""
    config = hook.clientConfig
    if config.service is not None:
        service = config.service
        return f"{service.name}.{service.namespace}.svc" if service.path == path else None
    if config.url is not None:
        try:
            url = urlsplit(config.url)
            return url.hostname if url.path == path and url.hostname else None
        except ValueError:
            return None
    return None


def _verify(served: ssl.SSLContext, hook: str, bundle: str, host: str) -> str | None:
    """What keeps a client that trusts `bundle` (base64 of PEM; empty: the system's roots, as the API
    server's) and calls `host` from verifying the pair in `served`, in words naming `hook`; None when
    nothing does."""
    client = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)  # check_hostname, a certificate required
    client.hostname_checks_common_name = False  # as Go's crypto/x509: the names are the SANs alone
    client.verify_flags |= ssl.VERIFY_X509_PARTIAL_CHAIN  # any certificate of the bundle may be the anchor
    try:
        roots = base64.b64decode(bundle, validate=True).decode("ascii")
        if roots:
            client.load_verify_locations(cadata=roots)
        else:
            client.load_default_certs()
    except (binascii.Error, UnicodeDecodeError, ssl.SSLError, ValueError) as exc:
        return f"the caBundle of {hook} is no PEM certificate: {exc}"
    try:
        _handshake(served, client, host)
    except ssl.SSLCertVerificationError as exc:
        return _words(exc, hook, bool(roots), host)
    except ssl.SSLError as exc:
        return f"a TLS handshake as {hook} asks for it fails: {exc.reason or exc}"
    return None


def _words(exc: ssl.SSLCertVerificationError, hook: str, bundled: bool, host: str) -> str:
    code = exc.verify_code
    if code in _UNSIGNED and bundled:
        return (
            f"the caBundle of {hook} does not sign the certificate served (a new render changed one of them?); "
            f"until they match, {UNANSWERED}"
        )
    if code in _UNSIGNED:
        return (
            f"{hook} has no caBundle (cert-manager's CA injector has not filled it yet?), and no CA of the "
            f"system's signs the certificate served; until one does, {UNANSWERED}"
        )
    if code in (_HOSTNAME, _IP):
        return f"the certificate served does not name {host}, which {hook} calls; until it does, {UNANSWERED}"
    if code in (_EXPIRED, _NOT_YET):
        what = "has expired" if code == _EXPIRED else "is not valid yet"
        return f"the certificate served, or a CA of its chain, {what} ({hook}); until it is renewed, {UNANSWERED}"
    return f"the caBundle of {hook} does not verify the certificate served: {exc.verify_message}"


def _handshake(server: ssl.SSLContext, client: ssl.SSLContext, host: str) -> None:
    """A TLS handshake between the two, in memory; raises what the client raises."""
    to_server, to_client = ssl.MemoryBIO(), ssl.MemoryBIO()
    calling = client.wrap_bio(to_client, to_server, server_hostname=host)
    answering = server.wrap_bio(to_server, to_client, server_side=True)
    done = [False, False]
    for _ in range(8):  # a handshake is two or three flights each way
        for i, side in enumerate((calling, answering)):
            if not done[i]:
                done[i] = _step(side)
        if all(done):
            return
    raise ssl.SSLError("the handshake did not finish")


def _step(side: ssl.SSLObject) -> bool:
    try:
        side.do_handshake()
    except ssl.SSLWantReadError:
        return False
    return True


class TrustCheck:
    def __init__(
        self,
        client: KubeClient,
        name: str,
        tls: TlsFiles,
        path: str,
        calls: Callable[[], tuple[int, int]],
        log: Logger,
        is_leader: Callable[[], bool],
        period: float = PERIOD,
        repeat: float = REPEAT,
        nudge: float = NUDGE,
        look: float = LOOK,
    ) -> None:
        """Checks the registration `name` against the pair `tls` serves at `path`; `calls` says how many TLS
        handshakes have failed and how many reviews came, `is_leader` whether this replica answers."""
        self.client, self.name, self.tls, self.path, self.calls = client, name, tls, path, calls
        self.log, self.is_leader = log, is_leader
        self.period, self.nudge, self.look = period, nudge, look
        self.said = Said(log, name, repeat)
        self.trusted: bool | None = None  # None: not known (not checked yet, not the leader, not allowed)
        self.checks = 0

    def collector(self) -> Collector:
        """crashwatch_admission_trusted, for /metrics."""
        return TrustGauge(self.name, lambda: self.trusted)

    async def run(self) -> None:
        """Check until cancelled, or until a 403 says this replica may not read the registration."""
        checked, reloads, calls = -math.inf, self.tls.reloads, self.calls()
        while True:
            now = anyio.current_time()
            if not self.is_leader():
                self.trusted, checked = None, -math.inf  # a replica that gains the lease checks at once
            else:
                self.tls.context()  # reads the files again if they changed
                since = now - checked
                if reloads != self.tls.reloads or since >= self.period or self._contradicted(calls, since):
                    reloads, calls = self.tls.reloads, self.calls()
                    if not await self.check():
                        return
                    checked = anyio.current_time()
            await anyio.sleep(self.look)

    def _contradicted(self, then: tuple[int, int], since: float) -> bool:
        """Whether the API server's calls since the last check say otherwise than its verdict: a handshake
        failed while trusted, a review came while not."""
        if since < self.nudge or self.trusted is None:
            return False
        failed, reviews = self.calls()
        return failed > then[0] if self.trusted else reviews > then[1]

    async def check(self) -> bool:
        """Read the registration and judge it: False once a 403 ended the check."""
        self.checks += 1
        try:
            response = await self.client.request("GET", f"{WEBHOOKS}/{self.name}", timeout=TIMEOUT)
            body: bytes | None = response.body
        except ApiError as exc:
            if exc.status == 404:
                body = None
            elif exc.status == 403:
                self.trusted = None
                self.log(
                    f"not allowed to read {KIND} {self.name} (403 {exc.reason}): whether the API server "
                    f"can call this webhook is not checked; grant get on mutatingwebhookconfigurations named "
                    f"{self.name} (admissionregistration.k8s.io; the chart does)",
                    "warning",
                    self.said.about,
                )
                return False
            else:
                self.said.unreadable(f"cannot read {KIND} {self.name} to check the webhook's registration: {exc}")
                return True
        verdict = judge(self.name, body, self.tls.served(), self.path)
        self.trusted = verdict.trusted
        self.said.verdict(verdict)
        return True


class Said:
    """What was said of the registration, and when: a problem once, then at most every `repeat` while it
    lasts (at once when it changes); its end once."""

    def __init__(self, log: Logger, name: str, repeat: float, clock: Callable[[], float] = anyio.current_time) -> None:
        self.log, self.repeat, self.clock = log, repeat, clock
        self.about = About(KIND, "", name)
        self.problem: str | None = None  # the words last said of a problem, while it lasts
        self.trusted: bool | None = None
        self._at = -math.inf  # when the problem was last said
        self._unreadable = -math.inf  # when a failure to read was last said

    def verdict(self, verdict: Verdict) -> None:
        if verdict.trusted:
            if self.trusted is not True:
                again = "the API server can verify this webhook's certificate again: " if self.trusted is False else ""
                self._say(again + verdict.words, "info")
            self.trusted, self.problem = True, None
            return
        now = self.clock()
        if verdict.words != self.problem or now - self._at >= self.repeat:
            self._say(verdict.words, "warning")
            self.problem, self._at = verdict.words, now
        self.trusted = False

    def unreadable(self, words: str) -> None:
        now = self.clock()
        if now - self._unreadable >= self.repeat:
            self._say(words, "warning")
            self._unreadable = now

    def _say(self, words: str, level: Level) -> None:
        self.log(f"the admission webhook: {words}", level, self.about)


class TrustGauge(Collector):
    """crashwatch_admission_trusted of the registration `name`, read at each scrape from `trusted`."""

    def __init__(self, name: str, trusted: Callable[[], bool | None]) -> None:
        self.name, self.trusted = name, trusted

    def collect(self) -> Iterator[Metric]:
        trusted = self.trusted()
        if trusted is None:
            return
        gauge = GaugeMetricFamily(
            "crashwatch_admission_trusted",
            "1 while the webhook's registration (the MutatingWebhookConfiguration of --admission-configuration) "
            "trusts the certificate served, 0 while the API server cannot call the webhook: its caBundle does not "
            "sign the certificate, the certificate does not name the host called, or there is no registration. "
            "Absent on a follower, before the first check, and when the registration may not be read.",
            labels=["configuration"],
        )
        gauge.add_metric([self.name], float(trusted))
        yield gauge
