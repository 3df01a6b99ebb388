"""A small synchronous Kubernetes client for the tests, and helpers that play the kubelet.

The kubelet does not run here, so nothing moves a Pod's status: these helpers write it through the
status subresource, as a kubelet would, through a crash-loop sequence or to Ready.
"""

from __future__ import annotations

import http.client
import json
import ssl
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from builders import container, pod_status


class ApiError(Exception):
    def __init__(self, status: int, body: Any) -> None:
        super().__init__(f"HTTP {status}: {body}")
        self.status = status
        self.body = body


class Kube:
    def __init__(self, url: str, ca: Path, cert: Path, key: Path) -> None:
        parsed = urlparse(url)
        self.host, self.port = parsed.hostname or "127.0.0.1", parsed.port or 443
        self.context = ssl.create_default_context(cafile=str(ca))
        self.context.load_cert_chain(str(cert), str(key))

    def get_raw(self, path: str) -> tuple[int, bytes]:
        connection = http.client.HTTPSConnection(self.host, self.port, context=self.context, timeout=30)
        try:
            connection.request("GET", path)
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()

    def request(self, method: str, path: str, body: Any = None, content_type: str = "application/json") -> Any:
        connection = http.client.HTTPSConnection(self.host, self.port, context=self.context, timeout=30)
        try:
            data = json.dumps(body).encode() if body is not None else None
            headers = (
                {"Content-Type": content_type, "Accept": "application/json"} if data else {"Accept": "application/json"}
            )
            connection.request(method, path, body=data, headers=headers)
            response = connection.getresponse()
            raw = response.read()
            parsed = json.loads(raw) if raw else None
            if response.status >= 400:
                raise ApiError(response.status, parsed)
            return parsed
        finally:
            connection.close()

    def get(self, path: str) -> Any:
        return self.request("GET", path)

    def create(self, path: str, obj: dict[str, Any]) -> Any:
        return self.request("POST", path, obj)

    def merge_patch(self, path: str, patch: dict[str, Any]) -> Any:
        return self.request("PATCH", path, patch, "application/merge-patch+json")

    def delete(self, path: str, grace: int | None = None) -> Any:
        body = {"gracePeriodSeconds": grace} if grace is not None else None
        return self.request("DELETE", path, body)

    def wait_for(self, path: str, predicate: Callable[[Any], bool], timeout: float = 30) -> Any:
        deadline = time.monotonic() + timeout
        last: Any = None
        while time.monotonic() < deadline:
            try:
                last = self.get(path)
                if predicate(last):
                    return last
            except ApiError as exc:
                last = exc
            time.sleep(0.1)
        raise TimeoutError(f"{path}: condition not met in {timeout}s; last: {str(last)[:500]}")


# --- playing the kubelet ------------------------------------------------------------------------------

NODE = "test-node-0"  # no kubelet behind it: a deleted Pod stays terminating until forced


def pod_manifest(name: str, labels: dict[str, str], node: str | None = NODE) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "containers": [{"name": "main", "image": "registry.invalid/worker:1"}],
        "terminationGracePeriodSeconds": 30,
    }
    if node:
        spec["nodeName"] = node
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": labels}, "spec": spec}


def crash_status(restarts: int, exit_code: int = 1) -> dict[str, Any]:
    """Down in CrashLoopBackOff after `restarts` restarts, the last one exiting with `exit_code`: the
    tests' one set of builders (tests/builders.py), with the fields kubelet writes."""
    return pod_status(ready=False, containers=[container(restarts=restarts, exit_code=exit_code, realistic=True)])


def ready_status(restarts: int = 0) -> dict[str, Any]:
    return pod_status(ready=True, containers=[container(restarts=restarts, state="running", realistic=True)])


def set_pod_status(kube: Kube, namespace: str, name: str, status: dict[str, Any]) -> Any:
    return kube.merge_patch(f"/api/v1/namespaces/{namespace}/pods/{name}/status", {"status": status})


def crash_loop(kube: Kube, namespace: str, name: str, restarts: int = 2, exit_code: int = 1) -> Any:
    """Walk a Pod through a crash loop: one restart (not yet a loop), then `restarts`."""
    for count in range(1, restarts + 1):
        pod = set_pod_status(kube, namespace, name, crash_status(count, exit_code))
    return pod


def make_ready(kube: Kube, namespace: str, name: str) -> Any:
    return set_pod_status(kube, namespace, name, ready_status())


def eventually(
    predicate: Callable[[], object], timeout: float = 30, what: str = "a condition", step: float = 0.05
) -> float:
    """Poll until `predicate` holds (a KeyError, IndexError or StopIteration counts as not yet); the
    seconds it took. Fails naming `what` and the last such error."""
    start = time.monotonic()
    last: BaseException | None = None
    while time.monotonic() - start < timeout:
        try:
            if predicate():
                return time.monotonic() - start
        except (KeyError, IndexError, StopIteration) as exc:
            last = exc
        time.sleep(step)
    raise AssertionError(f"{what} not reached in {timeout}s (last: {last!r})")
