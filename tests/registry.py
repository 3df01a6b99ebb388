"""A stand-in image registry on 127.0.0.1 for the real node (tests/realnode.py): the registry v2 API's
read side (`/v2/`, manifests and blobs, GET and HEAD) serving the one image of a docker-archive tarball,
refusing every pull (503) until a given moment. So the kubelet reports `ErrImagePull` and then
`ImagePullBackOff` for a while and then pulls: the slow image pull no real registry shows on demand.

containerd reaches it over plain HTTP through a hosts.toml (realnode.Node.plain_http_registry)."""

from __future__ import annotations

import hashlib
import http.server
import json
import tarfile
import threading
import time
from pathlib import Path

MANIFEST = "application/vnd.oci.image.manifest.v1+json"
CONFIG = "application/vnd.oci.image.config.v1+json"
LAYER = "application/vnd.oci.image.layer.v1.tar"  # the archive's layers are plain tars


def digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


class Registry:
    """Serves `tarball`'s image as REPOSITORY:TAG; a manifest asked for before `refuse_until` (monotonic; 0:
    never refused) is answered 503. `refused` counts the refusals, `served` the manifests served."""

    def __init__(self, tarball: Path, repository: str, tag: str) -> None:
        with tarfile.open(tarball) as tar:

            def read(name: str) -> bytes:
                member = tar.extractfile(name)
                assert member is not None, name
                return member.read()

            (entry,) = json.loads(read("manifest.json"))
            config = read(entry["Config"])
            layers = [read(name) for name in entry["Layers"]]
        self.blobs = {digest(blob): blob for blob in (config, *layers)}
        manifest = {
            "schemaVersion": 2,
            "mediaType": MANIFEST,
            "config": {"mediaType": CONFIG, "digest": digest(config), "size": len(config)},
            "layers": [{"mediaType": LAYER, "digest": digest(layer), "size": len(layer)} for layer in layers],
        }
        self.manifest = json.dumps(manifest).encode()
        self.repository, self.tag = repository, tag
        self.refuse_until = 0.0
        self.refused = self.served = 0
        self._lock = threading.Lock()
        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.host = f"127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)

    @property
    def image(self) -> str:
        return f"{self.host}/{self.repository}:{self.tag}"

    def _handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        registry = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_HEAD(self) -> None:
                self.answer(body=False)

            def do_GET(self) -> None:
                self.answer(body=True)

            def answer(self, body: bool) -> None:
                found = registry.find(self.path)
                if found is None:
                    self.send(404, "application/json", b'{"errors":[{"code":"NOT_FOUND"}]}', body)
                elif isinstance(found, str):  # "refused"
                    self.send(503, "application/json", b'{"errors":[{"code":"UNAVAILABLE"}]}', body)
                else:
                    kind, data = found
                    self.send(200, kind, data, body, digest(data))

            def send(self, code: int, kind: str, data: bytes, body: bool, sha: str = "") -> None:
                self.send_response(code)
                self.send_header("Content-Type", kind)
                self.send_header("Content-Length", str(len(data)))
                self.send_header("Docker-Distribution-API-Version", "registry/2.0")
                if sha:
                    self.send_header("Docker-Content-Digest", sha)
                self.end_headers()
                if body:
                    self.wfile.write(data)

        return Handler

    def find(self, path: str) -> tuple[str, bytes] | str | None:
        """What a path names: (media type, bytes), "refused", or None (not here)."""
        if path == "/v2/":
            return "application/json", b"{}"
        prefix = f"/v2/{self.repository}/"
        if not path.startswith(prefix):
            return None
        kind, _, reference = path[len(prefix) :].partition("/")
        if kind == "manifests" and reference in (self.tag, digest(self.manifest)):
            with self._lock:
                if time.monotonic() < self.refuse_until:
                    self.refused += 1
                    return "refused"
                self.served += 1
            return MANIFEST, self.manifest
        if kind == "blobs" and reference in self.blobs:
            return "application/octet-stream", self.blobs[reference]
        return None

    def __enter__(self) -> Registry:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.shutdown()
        self.server.server_close()
        self.thread.join(timeout=10)
