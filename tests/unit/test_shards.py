"""Sharding by namespace (stream.model.shards): the hash, the flags, the selector, and what a relabelled namespace
does to the watches (stream.sources.namespaces)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from types import SimpleNamespace

import pytest
from cli import run

from crashwatch.cli import build_parser, main
from stream.model.objects import ObjectMeta
from stream.model.shards import (
    LabelSelector,
    NamespaceFilter,
    SelectorError,
    Shard,
    fnv1a64,
    parse_selector,
    shard_of,
)
from stream.sources.namespaces import Namespace, SelectedNamespaces, _NamespaceEvent


def test_the_hash_is_fnv1a_64_as_published() -> None:
    # the FNV reference vectors (Fowler, Noll, Vo): anyone can compute a namespace's shard elsewhere
    assert fnv1a64("") == 0xCBF29CE484222325
    assert fnv1a64("a") == 0xAF63DC4C8601EC8C
    assert fnv1a64("foobar") == 0x85944171F73967E8
    assert shard_of("foobar", 7) == 0x85944171F73967E8 % 7


def test_every_namespace_is_in_exactly_one_shard_and_the_shards_are_near_even() -> None:
    names = [f"team-{n}" for n in range(4000)]
    for count in (1, 2, 3, 8):
        shards = [Shard(i, count) for i in range(count)]
        owners = Counter(sum(s.owns(name) for s in shards) for name in names)
        assert owners == Counter({1: len(names)})
        sizes = Counter(shard_of(name, count) for name in names)
        assert set(sizes) == set(range(count))
        assert max(sizes.values()) < 1.15 * len(names) / count


def test_the_assignment_is_the_same_in_every_process() -> None:
    """Python's own hash() of a str changes with PYTHONHASHSEED; ours must not."""
    code = "from stream.model.shards import shard_of; print([shard_of(f'ns-{n}', 5) for n in range(50)])"
    outputs = set()
    for seed in ("1", "2", "random"):
        env = {**os.environ, "PYTHONHASHSEED": seed}
        done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
        outputs.add(done.stdout)
    assert outputs == {str([shard_of(f"ns-{n}", 5) for n in range(50)]) + "\n"}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--shard-count", "0"], "--shard-count must be at least 1, not 0"),
        (["--shard-index", "2", "--shard-count", "2"], "--shard-index must be from 0 to 1 (--shard-count 2), not 2"),
        (["--shard-index", "-1", "--shard-count", "3"], "--shard-index must be from 0 to 2 (--shard-count 3), not -1"),
        (["--shard-index", "1"], "--shard-index must be from 0 to 0 (--shard-count 1), not 1"),
        (["--shard-count", "two"], "not a whole number: 'two'"),
        (["--namespace-selector", "team in (a,b"], "--namespace-selector: not a label selector"),
        (["--namespace-selector", ""], "--namespace-selector: an empty selector"),
        (["--namespace-selector", "a=b,,c"], "--namespace-selector: not a label selector at ',c'"),
    ],
)
@pytest.mark.parametrize("command", ["run", "tail", "record"])
def test_bad_shard_flags_are_a_usage_error_in_one_line(command: str, args: list[str], message: str) -> None:
    extra = ["-o", os.devnull] if command == "record" else []
    done = run(command, *extra, *args, "--kubeconfig", "/nonexistent")
    assert done.returncode == 2
    errors = [line for line in done.stderr.decode().splitlines() if "error:" in line]
    assert len(errors) == 1 and message in errors[0], done.stderr
    assert b"Traceback" not in done.stderr


def test_wait_and_get_take_no_shard_flags() -> None:
    for command in ("wait", "get"):
        with pytest.raises(SystemExit) as exit_:
            main([command, "--all", "--shard-count", "2"])
        assert exit_.value.code == 2


def test_each_shard_leads_on_a_lease_of_its_own() -> None:
    from crashwatch.cli import _leader_settings

    parser = build_parser()
    names = []
    for argv in (
        ["run", "--leader-elect"],
        ["run", "--leader-elect", "--shard-index", "1", "--shard-count", "3"],
        ["run", "--leader-elect", "--leader-election-id", "cw", "--shard-index", "0", "--shard-count", "2"],
    ):
        settings = _leader_settings(parser, parser.parse_args(argv))
        assert settings is not None
        names.append(settings.name)
    assert names == ["crashwatch", "crashwatch-1", "cw-0"]


@pytest.mark.parametrize(
    ("selector", "labels", "matches"),
    [
        ("team=llm", {"team": "llm"}, True),
        ("team==llm", {"team": "llm"}, True),
        ("team=llm", {"team": "web"}, False),
        ("team!=llm", {}, True),  # kubectl: an absent label is not equal
        ("team!=llm", {"team": "llm"}, False),
        ("env in (prod, staging)", {"env": "staging"}, True),
        ("env in (prod,staging)", {"env": "dev"}, False),
        ("env notin (dev)", {}, True),
        ("env notin (dev)", {"env": "dev"}, False),
        ("crashwatch.example.com/shard", {"crashwatch.example.com/shard": ""}, True),
        ("!legacy", {"legacy": "yes"}, False),
        ("team=llm,!legacy,env in (prod)", {"team": "llm", "env": "prod"}, True),
        ("team=llm,!legacy,env in (prod)", {"team": "llm", "env": "prod", "legacy": "1"}, False),
        ("team=", {"team": ""}, True),
    ],
)
def test_selectors_read_and_match_as_kubectl(selector: str, labels: dict[str, str], matches: bool) -> None:
    assert parse_selector(selector).matches(labels) is matches


@pytest.mark.parametrize("bad", ["=x", "team=llm,", "a b", "env in ()", "env in (a b)", "x=-y", "a=b)"])
def test_a_selector_kubectl_would_refuse_is_refused(bad: str) -> None:
    with pytest.raises(SelectorError):
        parse_selector(bad)


def test_a_shard_keeps_its_namespaces_and_a_selector_those_that_match_now() -> None:
    shard = Shard(1, 2)
    ours = next(f"ns-{n}" for n in range(100) if shard_of(f"ns-{n}", 2) == 1)
    theirs = next(f"ns-{n}" for n in range(100) if shard_of(f"ns-{n}", 2) == 0)
    kept = NamespaceFilter(shard)
    assert kept.keeps(ours) and not kept.keeps(theirs)

    kept = NamespaceFilter(shard, parse_selector("team=llm"))
    assert not kept.keeps(ours)  # not seen matching yet
    assert kept.select(ours, {"team": "llm"}) is True
    assert kept.select(theirs, {"team": "llm"}) is None  # matches, but another shard's: no change
    assert kept.keeps(ours) and not kept.keeps(theirs)
    assert kept.select(ours, {"team": "llm", "x": "y"}) is None
    assert kept.select(ours, {"team": "web"}) is False  # relabelled out (a MODIFIED that no longer matches)
    assert kept.select(ours, {"team": "llm"}) is True
    assert kept.select(ours, None) is False  # deleted, or dropped by the server's selector


class StubReflector:
    def __init__(self, kind: str, order: list[str]) -> None:
        self.resource = SimpleNamespace(kind=kind)
        self.forgotten: list[str] = []
        self.order = order
        self.relists = 0

    async def forget(self, namespace: str) -> None:
        self.forgotten.append(namespace)
        self.order.append(self.resource.kind)

    def relist(self) -> None:
        self.relists += 1


def ns_event(kind: str, name: str, **labels: str) -> _NamespaceEvent:
    return _NamespaceEvent(kind, Namespace(ObjectMeta(name=name, labels=labels)))  # type: ignore[arg-type]


@pytest.mark.anyio
async def test_a_namespace_relabelled_in_makes_the_watches_list_again_and_one_relabelled_out_is_forgotten() -> None:
    kept = NamespaceFilter(None, LabelSelector("team=llm", parse_selector("team=llm").requirements))
    said: list[str] = []
    selection = SelectedNamespaces(None, kept, log=said.append)  # type: ignore[arg-type]
    take = selection._take  # what its reflector hands on
    await take([ns_event("ADDED", "a", team="llm"), ns_event("ADDED", "b", team="llm")])  # the first list
    assert kept.selected == {"a", "b"}
    order: list[str] = []
    stubs = [StubReflector("Pod", order), StubReflector("DynamoGraphDeployment", order)]
    selection.reflectors = stubs  # type: ignore[assignment]
    await take([ns_event("MODIFIED", "a", team="llm", other="1")])  # still matches: nothing to do
    assert [(s.relists, s.forgotten) for s in stubs] == [(0, [])] * 2
    await take([ns_event("DELETED", "b")])  # relabelled out (the server sends DELETED), or deleted
    assert [(s.relists, s.forgotten) for s in stubs] == [(0, ["b"])] * 2
    assert order == ["DynamoGraphDeployment", "Pod"]  # the status's object first: losing its Pods writes nothing
    await take([ns_event("MODIFIED", "a", team="web")])  # a MODIFIED that no longer matches: out too
    assert [(s.relists, s.forgotten) for s in stubs] == [(0, ["b", "a"])] * 2
    await take([ns_event("ADDED", "b", team="llm"), ns_event("ADDED", "c", team="llm")])  # relabelled in
    assert [(s.relists, s.forgotten) for s in stubs] == [(1, ["b", "a"])] * 2  # one list for both
    assert kept.selected == {"b", "c"}
    assert any("namespace b, c now matches team=llm" in line for line in said)
    assert any("namespace a no longer matches team=llm" in line for line in said)
