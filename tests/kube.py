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


# --- the real kubelet's crash-loop timeline -----------------------------------------------------------------
# A crash-looping container as a real kubelet reports it: running (and, without a readiness probe or once
# its server answers one, Ready) for a moment; then `state.terminated` (reason Error, the exit code) through
# the backoff; `state.waiting` CrashLoopBackOff only just before the restart; then running again with the
# restart count one higher and the crash in `lastState`. Real backoffs are 10 s, 20 s, 40 s ... 5 min; the
# tests keep the order and shorten the times.


def _kubelet(status: dict[str, Any]) -> dict[str, Any]:
    status.pop("qosClass", None)  # set by the API server at creation, immutable after
    return status


def kubelet_running(
    restarts: int, last_exit: int | None = None, ready: bool = True, name: str = "main"
) -> dict[str, Any]:
    c = container(name, restarts, state="running", exit_code=None, last_exit=last_exit, ready=ready, realistic=True)
    return _kubelet(pod_status(ready=ready, containers=[c], realistic=True))


def kubelet_crashed(restarts: int, exit_code: int = 1, name: str = "main") -> dict[str, Any]:
    last = exit_code if restarts else None
    c = container(name, restarts, state="terminated", exit_code=exit_code, last_exit=last, realistic=True)
    return _kubelet(pod_status(ready=False, containers=[c], realistic=True))


def kubelet_backing_off(restarts: int, exit_code: int = 1, name: str = "main") -> dict[str, Any]:
    c = container(name, restarts, state="waiting", exit_code=exit_code, realistic=True)
    return _kubelet(pod_status(ready=False, containers=[c], realistic=True))


class CrashLoopingKubelet:
    """Plays the kubelet for Pods whose container crashes every time it runs, on a thread: each Pod that
    `pods()` names goes running (Ready for `up` seconds), crashed (exit `exit_code`) for the backoff, in
    CrashLoopBackOff for a moment, and running again one restart later. A Pod it has not seen starts at
    restart 0; one that is being deleted is left alone (no kubelet confirms the deletion of an unbound Pod).
    `restarts` counts the restarts it has played; `cycles` the crashes."""

    def __init__(
        self,
        kube: Kube,
        namespace: str,
        pods: Callable[[], list[dict[str, Any]]],
        up: float = 1.0,
        backoffs: tuple[float, ...] = (2.0, 3.0, 4.0),
        exit_code: int = 1,
        max_restarts: int | None = None,
    ) -> None:
        import threading

        self.kube, self.namespace, self.pods = kube, namespace, pods
        self.up, self.backoffs, self.exit_code, self.max_restarts = up, backoffs, exit_code, max_restarts
        self.restarts: dict[str, int] = {}  # by Pod uid
        self.crashes = 0
        self.crashed_at: list[tuple[int, float]] = []  # (restart count, time.monotonic()) of each crash
        self.errors: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _set(self, pod: dict[str, Any], status: dict[str, Any]) -> bool:
        name = pod["metadata"]["name"]
        patch = {"metadata": {"uid": pod["metadata"]["uid"]}, "status": status}
        try:
            self.kube.merge_patch(f"/api/v1/namespaces/{self.namespace}/pods/{name}/status", patch)
            return True
        except ApiError as exc:
            if exc.status not in (404, 409):  # gone, or replaced by a new Pod of the same name
                self.errors.append(str(exc))
            return False

    def _run(self) -> None:
        step = 0
        while not self._stop.is_set():
            try:
                live = [p for p in self.pods() if not p["metadata"].get("deletionTimestamp")]
            except ApiError as exc:
                self.errors.append(str(exc))
                live = []
            if not live:
                self._stop.wait(0.1)
                continue
            restarts = [self.restarts.setdefault(p["metadata"]["uid"], 0) for p in live]
            names = [p["spec"]["containers"][0]["name"] for p in live]
            last = self.exit_code if restarts[0] else None
            for pod, count, name in zip(live, restarts, names, strict=True):
                self._set(pod, kubelet_running(count, last_exit=last if count else None, name=name))
            if self._stop.wait(self.up):
                return
            for pod, count, name in zip(live, restarts, names, strict=True):
                self._set(pod, kubelet_crashed(count, self.exit_code, name=name))
            self.crashed_at.append((restarts[0], time.monotonic()))
            self.crashes += 1
            if self.max_restarts is not None and restarts[0] >= self.max_restarts:
                return
            if self._stop.wait(self.backoffs[min(step, len(self.backoffs) - 1)]):
                return
            step += 1
            for pod, count, name in zip(live, restarts, names, strict=True):
                self._set(pod, kubelet_backing_off(count, self.exit_code, name=name))
            if self._stop.wait(0.2):
                return
            for pod in live:
                self.restarts[pod["metadata"]["uid"]] += 1

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=30)
