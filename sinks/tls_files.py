"""A TLS server's certificate, key and (optionally) client CA files, read again when they change.

A serving certificate is rotated by whoever issued it (cert-manager, or the chart on an upgrade) by
replacing the files of the Secret mounted into the Pod: the kubelet swaps them in place, and the next
connection is served with the new pair, with no restart. The files are looked at (three `stat`s) at most
once every `CHECK` seconds; a pair that cannot be loaded (say, caught between the two writes) is said once
and the last good one kept. What is served is also kept without the client CA (`served`): a check of what
a caller verifies (sinks.admission_trust) plays the server with it, and presents no client certificate.
"""

from __future__ import annotations

import os
import ssl
import time

from stream.model.messages import Logger

CHECK = 1.0  # seconds between two looks at the files


class TlsFiles:
    def __init__(self, certificate: str, key: str, client_ca: str | None, log: Logger, what: str) -> None:
        """Loads them now: OSError or ssl.SSLError when they cannot be read. With `client_ca`, a caller
        must present a certificate that CA signed."""
        self.certificate, self.key, self.client_ca, self.log, self.what = certificate, key, client_ca, log, what
        self._stamp = self._files()
        self._context, self._served = self._load()
        self._looked = time.monotonic()
        self._failed: tuple[tuple[int, int, int], ...] | None = None  # a stamp that did not load
        self.reloads = 0

    def context(self) -> ssl.SSLContext:
        """The context for the next connection: the files' current pair when they changed and load."""
        now = time.monotonic()
        if now - self._looked < CHECK:
            return self._context
        self._looked = now
        stamp = None
        try:
            stamp = self._files()
            if stamp in (self._stamp, self._failed):
                return self._context
            context, served = self._load()
        except (OSError, ssl.SSLError) as exc:
            if self._failed is None:
                problem = getattr(exc, "strerror", None) or str(exc)
                self.log(f"{self.what}: kept the certificate it had: {self.certificate}: {problem}", "warning")
            self._failed = stamp or ()
            return self._context
        self._context, self._served, self._stamp, self._failed = context, served, stamp, None
        self.reloads += 1
        self.log(f"{self.what}: serving the certificate in {self.certificate} as it changed")
        return context

    def served(self) -> ssl.SSLContext:
        """The pair being served (the last `context` handed out), with no client CA asked for."""
        return self._served

    def _files(self) -> tuple[tuple[int, int, int], ...]:
        paths = (self.certificate, self.key, *((self.client_ca,) if self.client_ca else ()))
        return tuple((s.st_ino, s.st_mtime_ns, s.st_size) for s in map(os.stat, paths))

    def _load(self) -> tuple[ssl.SSLContext, ssl.SSLContext]:
        """The context for connections, and the same pair without the client CA."""
        context, served = (ssl.create_default_context(ssl.Purpose.CLIENT_AUTH) for _ in range(2))
        for each in (context, served):
            each.load_cert_chain(self.certificate, self.key)
        if self.client_ca is not None:
            context.load_verify_locations(cafile=self.client_ca)
            context.verify_mode = ssl.CERT_REQUIRED
        return context, served
