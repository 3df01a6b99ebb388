"""A cluster that cannot be reached, as the commands meet it: a closed port, a name that does not resolve,
a server whose certificate is not trusted (exit 68 at the first contact, one line, `wait`'s result on
stdout), and a server that answered and then went away (retried, said once; `wait` and `get` give up
within their bounds). How fast they fail is bench/reach.py's, never these tests'."""

from __future__ import annotations

import base64
import json
import socket
import ssl
from pathlib import Path

import pytest
import yaml
from cli import run
from fakeapi import Fault, ServedFake
from operators import webhook_certs
from watcher import Watcher

UNREACHABLE = 68


def kubeconfig(folder: Path, server: str, ca: bytes | None = None) -> Path:
    """A kubeconfig whose one context points at `server`, namespace ns."""
    cluster: dict[str, str] = {"server": server}
    if ca is not None:
        cluster["certificate-authority-data"] = base64.b64encode(ca).decode()
    path = folder / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "c",
                "clusters": [{"name": "c", "cluster": cluster}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u", "namespace": "ns"}}],
            }
        )
    )
    return path


def closed_port() -> int:
    """A loopback port nothing listens on: taken from the system, then let go."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


COMMANDS = [
    ["get", "-A"],
    ["wait", "dgd/llm", "--timeout", "10m"],
    ["wait", "dgd/llm", "--timeout", "0"],
    ["tail"],
    ["record", "-o", "session.jsonl"],
    ["run"],
]


@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: " ".join(c[:4]))
def test_a_closed_port_is_unreachable_at_the_first_contact(tmp_path: Path, command: list[str]) -> None:
    server = f"https://127.0.0.1:{closed_port()}"
    result = run(*command, "--kubeconfig", str(kubeconfig(tmp_path, server)), cwd=tmp_path)
    assert result.returncode == UNREACHABLE, result.stderr
    assert result.stderr.decode() == (
        f"crashwatch: cannot reach the API server at {server}: connection refused - is the context right?\n"
    )
    # wait says its result on stdout too: where the graph stands is unknown
    assert result.stdout.decode() == ("ns/llm  UNREACHABLE\n" if command[0] == "wait" else "")


def test_wait_says_unreachable_in_its_json_result(tmp_path: Path) -> None:
    server = f"https://127.0.0.1:{closed_port()}"
    config = str(kubeconfig(tmp_path, server))
    result = run("wait", "dgd/llm", "--timeout", "10s", "-o", "json", "--kubeconfig", config)
    assert result.returncode == UNREACHABLE
    document = json.loads(result.stdout)
    assert document["result"] == "unreachable" and document["graphs"] == [] and document["missing"] == []
    assert document["error"] == f"cannot reach the API server at {server}: connection refused"


def test_a_name_that_does_not_resolve_is_unreachable(tmp_path: Path) -> None:
    server = "https://name.invalid:6443"  # .invalid never resolves (RFC 6761)
    config = str(kubeconfig(tmp_path, server))
    result = run("get", "--kubeconfig", config)
    assert result.returncode == UNREACHABLE
    assert result.stderr.decode() == (
        f"crashwatch: cannot reach the API server at {server}: the name name.invalid does not resolve - "
        "is the context right?\n"
    )
    result = run("wait", "--all", "--timeout", "1m", "-o", "json", "--kubeconfig", config)
    assert result.returncode == UNREACHABLE and json.loads(result.stdout)["result"] == "unreachable"


def test_a_certificate_that_is_not_trusted_is_unreachable_and_trusted_it_answers(tmp_path: Path) -> None:
    certs = webhook_certs(())
    folder = certs.write(tmp_path / "certs")
    tls = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    tls.load_cert_chain(folder / "tls.crt", folder / "tls.key")
    served = ServedFake(tls=tls)
    try:
        server = served.api.url
        result = run("get", "--kubeconfig", str(kubeconfig(tmp_path, server)))  # the system's CAs: not its own
        assert result.returncode == UNREACHABLE
        (line,) = result.stderr.decode().splitlines()
        assert line.startswith(f"crashwatch: cannot reach the API server at {server}: its certificate is not trusted (")
        assert line.endswith("- does the kubeconfig's certificate-authority belong to this cluster?")
        assert "_ssl.c" not in line and "SSL:" not in line  # the user's words, not OpenSSL's
        # the same server, its CA given: it answers (what failed was the trust alone)
        result = run("get", "--kubeconfig", str(kubeconfig(tmp_path, server, certs.ca)))
        assert result.returncode == 0, result.stderr
        assert b"no DynamoGraphDeployment found" in result.stderr
    finally:
        served.stop()


def put_graph(served: ServedFake, state: str) -> None:
    served.do(
        served.api.put,
        "dynamographdeployments",
        {
            "kind": "DynamoGraphDeployment",
            "apiVersion": "nvidia.com/v1beta1",
            "metadata": {"name": "g", "namespace": "ns"},
            "status": {"state": state},
        },
    )


def test_a_blip_once_it_answered_is_retried_within_waits_timeout_and_said_once(tmp_path: Path) -> None:
    served = ServedFake()
    port = served.port
    put_graph(served, "pending")
    config = str(served.api.kubeconfig(tmp_path))
    back: ServedFake | None = None
    try:
        with Watcher("wait", "dgd/g", "--timeout", "10m", "--kubeconfig", config) as w:
            w.wait_synced()
            served.stop()  # the API server goes away (a restart) while the graph is still pending
            w.wait_for(lambda: "retrying until it answers" in w.stderr(), 60, "the outage said")
            back = ServedFake(port=port)  # ... and comes back (its resourceVersions go on, as etcd's do) ...
            back.do(setattr, back.api, "version", served.api.version)
            put_graph(back, "successful")  # ... with the graph ready meanwhile
            assert w.process.wait(timeout=120) == 0
        assert w.stdout() == "ns/g  READY  successful at generation 0"
        assert w.stderr().count("cannot reach the API server") == 1, w.stderr()
        assert f"the API server at http://127.0.0.1:{port} answers again (after " in w.stderr()
    finally:
        if back is not None:
            back.stop()


def test_wait_ends_unreachable_when_its_timeout_passes_with_the_server_gone(tmp_path: Path) -> None:
    served = ServedFake()
    put_graph(served, "pending")
    config = str(served.api.kubeconfig(tmp_path))
    with Watcher("wait", "dgd/g", "--timeout", "20s", "-o", "json", "--kubeconfig", config) as w:
        w.wait_synced()
        served.stop()
        assert w.process.wait(timeout=120) == UNREACHABLE
    document = json.loads(w.stdout())
    assert document["result"] == "unreachable", document
    assert document["error"].startswith(f"cannot reach the API server at {served.api.url}: ")
    assert [g["name"] for g in document["graphs"]] == ["g"]  # as last seen: pending
    assert document["graphs"][0]["state"] == "pending"


def test_get_gives_up_one_request_timeout_after_the_server_went_away(tmp_path: Path) -> None:
    """`get` looks once: a server that answered and then stops answering on the way is waited for one
    request timeout, not for ever."""
    served = ServedFake()
    served.do(served.api.fault, "list pods", Fault("delay", seconds=600))  # the list of Pods never answers...
    config = str(served.api.kubeconfig(tmp_path))
    with Watcher("get", "--request-timeout", "5s", "--kubeconfig", config) as w:
        w.wait_for(lambda: bool(served.api.requests_of("GET", "pods", watch=False)), 60, "the list of Pods")
        served.stop()  # ... and the server goes away
        assert w.process.wait(timeout=120) == UNREACHABLE
    assert w.stdout() == ""
    assert f"cannot reach the API server at {served.api.url}: connection refused, for 5.0s: giving up" in w.stderr()
