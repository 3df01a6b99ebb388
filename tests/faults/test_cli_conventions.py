"""kubectl's habits, as a platform engineer brings them to crashwatch, against the fake API server: 401 told
from 403, --context without a current-context, a kubeconfig's problems in its user's words, -o yaml and
-o name, -l, --no-headers, durations for the timeouts, and no flag taken by a prefix of its name."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from cli import run
from fakeapi import Fault, ServedFake, crashing
from watcher import Watcher

NOPERM, CONFIG = 77, 78


def put_graph(fake: ServedFake, name: str, state: str, team: str) -> None:
    fake.do(
        fake.api.put,
        "dynamographdeployments",
        {
            "kind": "DynamoGraphDeployment",
            "apiVersion": "nvidia.com/v1beta1",
            "metadata": {"name": name, "namespace": "ns", "labels": {"team": team}},
            "status": {"state": state},
        },
    )


def test_401_is_credentials_refused_and_403_not_allowed(fake: ServedFake, tmp_path: Path) -> None:
    config = str(fake.api.kubeconfig(tmp_path))
    fake.do(fake.api.fault, "discovery", Fault("status", status=401))
    result = run("get", "--kubeconfig", config)
    assert result.returncode == NOPERM
    assert result.stderr.decode() == (
        f"crashwatch: cannot discover the API of {fake.api.url}: the API server does not accept the credentials "
        "(401 Unauthorized: injected): are they expired?\n"
    )
    fake.do(fake.api.fault, "discovery", Fault("status", status=403))
    result = run("get", "--kubeconfig", config)
    assert result.returncode == NOPERM
    assert result.stderr.decode() == f"crashwatch: cannot discover the API of {fake.api.url}: not allowed: injected\n"
    fake.do(fake.api.fault, "list pods", Fault("status", status=401))
    result = run("tail", "--kubeconfig", config)
    assert result.returncode == NOPERM
    assert (
        b"crashwatch: cannot list and watch pods in namespace ns: the API server does not accept the credentials "
        b"(401 Unauthorized: injected)" in result.stderr
    )
    assert b"not allowed" not in result.stderr


def test_context_is_taken_without_a_current_context(fake: ServedFake, tmp_path: Path) -> None:
    config = fake.api.kubeconfig(tmp_path)
    document = yaml.safe_load(config.read_text())
    del document["current-context"]
    config.write_text(yaml.safe_dump(document))
    result = run("get", "--context", "fake", "--kubeconfig", str(config))
    assert result.returncode == 0, result.stderr
    result = run("get", "--kubeconfig", str(config))  # and without one: which to name
    assert result.returncode == CONFIG
    assert result.stderr.decode() == (
        f"crashwatch: kubeconfig {config}: no current-context; name one with --context (it has fake)\n"
    )


def _kubeconfig(path: Path, cluster: dict[str, object], user: dict[str, object]) -> str:
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "current-context": "c",
                "clusters": [{"name": "c", "cluster": cluster}],
                "users": [{"name": "u", "user": user}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
            }
        )
    )
    return str(path)


def test_a_kubeconfigs_problems_are_said_in_its_users_words(tmp_path: Path) -> None:
    server = {"server": "https://127.0.0.1:6443"}
    binary = tmp_path / "binary"
    binary.write_bytes(b"\x89PNG\r\n\x1a\n\x00\x00")
    missing_ca = _kubeconfig(
        tmp_path / "ca", {**server, "certificate-authority": "/nonexistent/ca.crt"}, {"token": "t"}
    )
    plugin = {"exec": {"apiVersion": "client.authentication.k8s.io/v1beta1", "command": "no-such-plugin"}}
    no_plugin = _kubeconfig(tmp_path / "plugin", server, plugin)
    expected = {
        str(binary): f"kubeconfig {binary}: not text (byte 0 is 0x89, which UTF-8 has no place for): not a kubeconfig",
        missing_ca: f"kubeconfig {missing_ca}: the file /nonexistent/ca.crt that it names does not exist",
        no_plugin: f"kubeconfig {no_plugin}: its credential plugin no-such-plugin (exec) is not installed: not found "
        "on the PATH",
    }
    for config, line in expected.items():
        result = run("get", "--kubeconfig", config)
        assert result.returncode == CONFIG
        assert result.stderr.decode() == f"crashwatch: {line}\n"  # one line: the library logs nothing of its own


def test_get_prints_yaml_names_and_a_table_without_headers(fake: ServedFake, tmp_path: Path) -> None:
    put_graph(fake, "a", "successful", "x")
    put_graph(fake, "b", "pending", "y")
    config = ("--kubeconfig", str(fake.api.kubeconfig(tmp_path)))
    as_json = json.loads(run("get", "-o", "json", *config).stdout)
    assert yaml.safe_load(run("get", "-o", "yaml", *config).stdout) == as_json
    assert [item["name"] for item in as_json["items"]] == ["a", "b"]
    names = run("get", "-o", "name", *config).stdout.decode()
    assert names == "dynamographdeployment.nvidia.com/a\ndynamographdeployment.nvidia.com/b\n"
    table = run("get", *config).stdout.decode().splitlines()
    assert table[0].split() == ["NAME", "STATE", "VERDICT", "READY", "CRASH-LOOPING"]
    bare = run("get", "--no-headers", *config).stdout.decode().splitlines()
    assert [row.split() for row in bare] == [row.split() for row in table[1:]]
    selected = run("get", "-l", "team=y", "-o", "name", *config)
    assert selected.returncode == 0 and selected.stdout == b"dynamographdeployment.nvidia.com/b\n"
    both = run("get", "dgd/a", "-l", "team=y", *config)
    assert both.returncode == 2 and b"name the graphs or select them with -l, not both" in both.stderr
    bad = run("get", "-l", "team in", *config)
    assert bad.returncode == 2 and bad.stderr.startswith(b"crashwatch get: error: -l/--selector: ")


def test_wait_selects_by_label_and_prints_yaml_or_names(fake: ServedFake, tmp_path: Path) -> None:
    put_graph(fake, "a", "successful", "x")
    put_graph(fake, "b", "pending", "y")
    config = ("--kubeconfig", str(fake.api.kubeconfig(tmp_path)))
    ready = run("wait", "-l", "team=x", "--timeout", "1m", "-o", "yaml", *config)
    assert ready.returncode == 0, ready.stderr
    document = yaml.safe_load(ready.stdout)
    assert document["result"] == "ready" and [g["name"] for g in document["graphs"]] == ["a"]
    # every graph, one look: the names of those the result is about, the ones not ready yet
    pending = run("wait", "--all", "--timeout", "0", "-o", "name", *config)
    assert pending.returncode == 124 and pending.stdout == b"dynamographdeployment.nvidia.com/b\n"
    nothing = run("wait", "-l", "team=z", "--timeout", "1m", *config)
    assert nothing.returncode == 3
    assert b"no DynamoGraphDeployment found in namespace ns, labelled team=z" in nothing.stderr


def test_timeouts_take_durations_as_kubectl_does(fake: ServedFake, tmp_path: Path) -> None:
    config = ("--kubeconfig", str(fake.api.kubeconfig(tmp_path)))
    result = run("get", "--request-timeout", "30s", "--watch-idle-timeout", "1m30s", *config)
    assert result.returncode == 0, result.stderr
    for flag, value in (("--request-timeout", "0"), ("--request-timeout", "30x"), ("--watch-idle-timeout", "-1s")):
        refused = run("get", flag, value, *config)
        assert refused.returncode == 2 and refused.stderr.startswith(f"crashwatch get: error: argument {flag}".encode())


@pytest.mark.parametrize(
    "args,flag",
    [
        (["tail", "--watch", "5"], "--watch"),
        (["wait", "--all", "--time", "5s"], "--time"),
        (["get", "--no-head"], "--no-head"),
    ],
)
def test_no_flag_is_taken_by_a_prefix_of_its_name(args: list[str], flag: str) -> None:
    result = run(*args)
    assert result.returncode == 2
    assert (
        result.stderr.decode()
        == f"crashwatch {args[0]}: error: unknown flag: {flag}\nsee 'crashwatch {args[0]} --help'\n"
    )


def test_tail_prints_each_change_as_a_yaml_document(fake: ServedFake, tmp_path: Path) -> None:
    config = str(fake.api.kubeconfig(tmp_path))
    with Watcher("tail", "-o", "yaml", "--log-lines", "0", "--kubeconfig", config) as w:
        w.wait_synced()
        fake.do(fake.api.put, "pods", crashing("p-0"))
        w.wait_line("kind: graph")
        assert w.stop() == 0
    documents = list(yaml.safe_load_all(w.stdout()))
    assert [d["kind"] for d in documents] == ["component", "graph"]
    assert documents[0]["crash_looping"] is True and documents[0]["pod"] == "p-0"
    assert w.stdout().startswith("---\n")
