"""`run --admission-configuration` on the test control plane: the webhook registered with a caBundle that does
not sign the certificate it serves (what a second render of the chart makes), which the real API server
then fails to verify at every call and skips (failurePolicy Ignore) without a word; crashwatch says so in
a line and `crashwatch_admission_trusted 0`. The right caBundle patched in, the API server's calls are
answered again, and crashwatch says that too. The cases the check tells apart, against a fake API server:
tests/faults/test_admission_trust.py."""

from __future__ import annotations

import base64
import re
import time
from pathlib import Path

import envtest
import pytest
from dynamo import dgds, make_graph
from kube import Kube
from operators import WEBHOOKS, status_webhook, webhook_certs
from watcher import Watcher, http_get, kubeconfig_args

pytestmark = pytest.mark.e2e


def metric(url: str, name: str, labels: str = "") -> float | None:
    """The sum of the samples of `name` whose labels begin with `labels`; None when there is none."""
    pattern = rf"^{name}\{{{re.escape(labels)}[^}}]*\}} (\S+)$"
    found = re.findall(pattern, http_get(f"{url}/metrics")[1], re.M)
    return sum(map(float, found)) if found else None


def test_a_ca_bundle_that_does_not_sign_the_served_certificate_is_said_and_its_fix_seen(
    control_plane: envtest.ControlPlane, kube: Kube, namespace: str, tmp_path: Path
) -> None:
    make_graph(kube, namespace, deployments=False)
    status = f"{dgds(namespace)}/llm/status"
    certs = webhook_certs(()).write(tmp_path / "certs")
    port = envtest.free_port()
    name = f"crashwatch-{namespace}"
    # the registration of another render: its CA is not the one that signed what the webhook serves
    kube.create(WEBHOOKS, status_webhook(name, namespace, port, webhook_certs(()).ca))
    tls = ("--tls-cert-file", str(certs / "tls.crt"), "--tls-private-key-file", str(certs / "tls.key"))
    admission = ("--admission-address", f"127.0.0.1:{port}", *tls, "--admission-configuration", name)
    trusted = ("crashwatch_admission_trusted", f'configuration="{name}"')
    handshakes = ("crashwatch_http_refused_total", 'port="admission",reason="TLS handshake failed"')
    reviews = ("crashwatch_admission_reviews_total",)  # whatever the answer
    try:
        args = ("run", "-n", namespace, *admission, "--http-address", "127.0.0.1:0")
        with Watcher(*args, *kubeconfig_args(control_plane.kubeconfig)) as watcher:
            url = watcher.served_at()
            watcher.wait_for(lambda: "cannot verify this webhook's certificate" in watcher.stderr(), what="the line")
            assert (
                f"the admission webhook: the API server cannot verify this webhook's certificate: the caBundle of "
                f"MutatingWebhookConfiguration {name} (webhook status.crashwatch.dev) does not sign the certificate "
                "served (a new render changed one of them?)"
            ) in watcher.stderr()
            assert metric(url, *trusted) == 0.0
            watcher.wait_synced()
            # and the real API server agrees: another writer's status write is stored, its call failed TLS
            kube.merge_patch(status, {"status": {"state": "pending"}})
            watcher.wait_for(lambda: (metric(url, *handshakes) or 0) >= 1, what="the API server's failed handshake")
            assert metric(url, *reviews) is None
            # the right caBundle patched in: the API server's calls are answered, and the check sees it
            fixed = {"caBundle": base64.b64encode(certs.joinpath("ca.crt").read_bytes()).decode()}
            hook = status_webhook(name, namespace, port, b"")["webhooks"][0]
            hook["clientConfig"].update(fixed)
            kube.merge_patch(f"{WEBHOOKS}/{name}", {"webhooks": [hook]})

            written = [0.0]

            def answered_and_said() -> bool:
                if time.monotonic() - written[0] >= 1:  # another call of the API server's, once a second
                    kube.merge_patch(status, {"status": {"state": "pending"}})
                    written[0] = time.monotonic()
                return "can verify this webhook's certificate again" in watcher.stderr()

            watcher.wait_for(answered_and_said, 90, "the fix seen")
            assert (metric(url, *reviews) or 0) >= 1 and metric(url, *trusted) == 1.0
            assert watcher.stderr().count("cannot verify this webhook's certificate") == 1  # said once while it lasted
            assert watcher.stop() == 0
    finally:
        kube.delete(f"{WEBHOOKS}/{name}")
