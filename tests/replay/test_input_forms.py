"""Input as users have it besides watch logs: manifests (as Dynamo's examples are written), `jq -s .`
of a watch log, `kubectl get -o yaml` of a large cluster, YAML with merge keys, JSON with comments."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from cli import EXAMPLES, run

LOG = EXAMPLES / "rollout-recovers.jsonl"


def events(path: Path = LOG) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def objects_without_namespace() -> list[dict[str, Any]]:
    """The example's objects as manifests: bare, without `time`, and without metadata.namespace."""
    out = []
    for event in events():
        obj = event["object"]
        del obj["metadata"]["namespace"]
        out.append(obj)
    return out


def lines(result: Any) -> list[str]:
    assert result.returncode == 0, result.stderr.decode()
    assert result.stderr.decode().startswith("crashwatch: read "), result.stderr  # the summary, nothing else
    assert len(result.stderr.splitlines()) <= 2
    return [str(line) for line in result.stdout.decode().splitlines()]


def test_a_manifest_without_a_namespace_is_read_into_default_or_the_one_named(tmp_path: Path) -> None:
    manifest = tmp_path / "vllm-agg.yaml"
    manifest.write_text(yaml.safe_dump_all(objects_without_namespace()))
    # the example's verdicts, in namespace NS, with no times (a manifest carries none)
    expected = ["-  " + line.split("  ", 1)[1].replace("dynamo/", "NS/") for line in lines(run("replay", str(LOG)))]
    assert len(expected) == 8
    assert lines(run("replay", str(manifest))) == [line.replace("NS/", "default/") for line in expected]
    assert lines(run("replay", "-n", "dynamo", str(manifest))) == [line.replace("NS/", "dynamo/") for line in expected]
    # a List of them (kubectl get -o json) too; a namespace the log names itself is kept, whatever -n says
    listed = tmp_path / "list.json"
    listed.write_text(json.dumps({"kind": "List", "apiVersion": "v1", "items": objects_without_namespace()}))
    assert lines(run("replay", "--namespace", "x", str(listed))) == [line.replace("NS/", "x/") for line in expected]
    assert lines(run("replay", "-n", "x", str(LOG))) == lines(run("replay", str(LOG)))


def test_a_watch_event_without_a_namespace_is_still_a_bad_record(tmp_path: Path) -> None:
    """The API server always names it: a watch event that does not is broken, not a manifest."""
    log = tmp_path / "log.jsonl"
    event = events()[-1]
    del event["object"]["metadata"]["namespace"]
    log.write_text(json.dumps(event) + "\n")
    result = run("replay", str(log))
    assert result.returncode == 65 and b"without metadata.namespace" in result.stderr


def test_replay_namespace_must_be_a_namespace_name() -> None:
    result = run("replay", "-n", "Not_A_Namespace", str(LOG))
    assert result.returncode == 2 and b"not a namespace name" in result.stderr


def test_json_after_comments_is_read_as_yaml_reads_it_with_or_without_the_extension(tmp_path: Path) -> None:
    """YAML is a superset of JSON, and kubectl reads a manifest of JSON with `#` comments (as a Helm
    template's `# Source:` header leaves): so does replay, whatever the file's name."""
    listed = {"kind": "List", "apiVersion": "v1", "items": [event["object"] for event in events()]}
    text = "# Source: charts/llm/templates/all.yaml\n#\n" + json.dumps(listed, indent=2)
    text = text.replace('\n  "kind": "List"', '\n  # the graph, its components and their Pods\n  "kind": "List"')
    expected = lines(run("replay", str(write(tmp_path / "plain.json", json.dumps(listed, indent=2)))))
    assert len(expected) == 8
    for name in ("all.yaml", "all", "all.json"):
        assert lines(run("replay", str(write(tmp_path / name, text)))) == expected, name


def write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


CRASHING_STATUS = (
    "{phase: Running, containerStatuses: [{name: main, ready: false, restartCount: 3, "
    "state: {waiting: {reason: CrashLoopBackOff}}, lastState: {terminated: {exitCode: 1}}}]}"
)


def test_yaml_merge_keys_are_read(tmp_path: Path) -> None:
    """`<<: *anchor` as hand-written manifests use it, even on a document's first line."""
    merged = write(
        tmp_path / "pods.yaml",
        "x-labels: &labels\n"
        "  nvidia.com/dynamo-graph-deployment-name: g\n"
        "  nvidia.com/dynamo-component: w\n"
        "kind: Pod\n"
        "apiVersion: v1\n"
        "metadata: &meta {name: p-1, namespace: ns, labels: *labels}\n"
        f"status: &crashing {CRASHING_STATUS}\n"
        "---\n"
        "<<: {kind: Pod, apiVersion: v1}\n"
        "metadata:\n"
        "  <<: {namespace: ns, labels: {nvidia.com/dynamo-graph-deployment-name: g, nvidia.com/dynamo-component: w}}\n"
        "  name: p-0\n"
        f"status: {CRASHING_STATUS}\n",
    )
    labels = {"nvidia.com/dynamo-graph-deployment-name": "g", "nvidia.com/dynamo-component": "w"}
    status = yaml.safe_load(CRASHING_STATUS)
    plain = [
        {"kind": "Pod", "metadata": {"name": name, "namespace": "ns", "labels": labels}, "status": status}
        for name in ("p-1", "p-0")
    ]
    expected = lines(run("replay", str(write(tmp_path / "plain.yaml", yaml.safe_dump_all(plain)))))
    assert expected[0] == "-  ns/g/w  CRASH-LOOPING  pod=p-1 container=main restarts=3 exit=1"
    assert lines(run("replay", str(merged))) == expected


def test_merge_keys_keep_the_bound_on_expansion(tmp_path: Path) -> None:
    """A "billion laughs" made of merge keys and aliases is refused within the bound, as one of aliases."""
    text = "a0: &a0 {k: '" + "x" * 1000 + "'}\n"
    for n in range(1, 40):
        text += f"a{n}: &a{n} {{<<: *a{n - 1}, m{n}: *a{n - 1}, n{n}: *a{n - 1}}}\n"
    text += "kind: Pod\nmetadata: {name: p, namespace: ns}\n"
    result = run("replay", "--max-record-size", "1Mi", str(write(tmp_path / "laughs.yaml", text)))
    assert result.returncode == 65
    assert b"document is too large once its aliases are expanded" in result.stderr


def test_a_pretty_printed_array_of_events_is_read_like_the_log(tmp_path: Path) -> None:
    """`jq -s . log.jsonl` (and `jq -c -s .`): the same verdicts, times included, record by record."""
    expected = (EXAMPLES / "rollout-recovers.expected.txt").read_text().splitlines()
    for name, text in (
        ("events.json", json.dumps(events(), indent=2)),
        ("events4.json", json.dumps(events(), indent=4)),
        ("compact.json", json.dumps(events())),
    ):
        assert lines(run("replay", str(write(tmp_path / name, text + "\n")))) == expected, name


def test_an_array_with_a_bad_record_keeps_the_others(tmp_path: Path) -> None:
    records: list[Any] = events()
    records.insert(3, {"type": "ADDED"})
    text = json.dumps(records, indent=2)
    result = run("replay", "--summary", "none", str(write(tmp_path / "events.json", text)))
    assert result.returncode == 65
    assert result.stdout == (EXAMPLES / "rollout-recovers.expected.txt").read_bytes()
    starts = [number for number, line in enumerate(text.splitlines(), 1) if line == "  {"]
    assert result.stderr.decode().splitlines() == [
        f"crashwatch: {tmp_path / 'events.json'}:{starts[3]}: watch event lacks `object`",
        "crashwatch: 1 bad record skipped",
    ]


def padded_list(indent: int, kind_first: bool) -> str:
    """The example's objects as a List of about 700 KB (each item padded to more than 10 KB), laid out
    as kubectl writes one (`items` before `kind`, 4 spaces) or as the API server orders it."""
    objects = [event["object"] for event in events()]
    for obj in objects:
        obj["metadata"].setdefault("annotations", {})["pad"] = "x" * 10_000
    listed = {"apiVersion": "v1", "items": objects, "kind": "List", "metadata": {"resourceVersion": ""}}
    if kind_first:
        listed = {"kind": "List", "apiVersion": "v1", "metadata": {}, "items": objects}
    return json.dumps(listed, indent=indent) + "\n"


def test_a_json_list_above_the_record_limit_is_read_item_by_item(tmp_path: Path) -> None:
    for indent, kind_first in ((2, True), (4, False)):
        log = write(tmp_path / "pods.json", padded_list(indent, kind_first))
        whole = lines(run("replay", str(log)))  # within the default 16Mi: read whole
        assert len(whole) == 8
        assert lines(run("replay", "--max-record-size", "64Ki", str(log))) == whole
    # an item above the limit is one bad record; the items around it are read (the 4-space one's items
    # are from 11 KB to 37.5 KB)
    result = run("replay", "--summary", "none", "--max-record-size", "36Ki", str(log))
    assert result.returncode == 65
    problems = result.stderr.decode().splitlines()
    assert problems[0].startswith(f"crashwatch: {log}:1: item ") and "more than the limit of 36Ki" in problems[0]
    assert problems[-1] == "crashwatch: 11 bad records skipped"  # of 24 items: the 13 others are read


def test_a_yaml_list_above_the_record_limit_is_read_item_by_item(tmp_path: Path) -> None:
    """`kubectl get -o yaml` (items at column 0, `kind: List` after them), and a PodList whose items are
    indented and have no kind of their own (the List's comes first)."""
    listed = json.loads(padded_list(2, False))
    kubectl = write(tmp_path / "kubectl.yaml", yaml.safe_dump(listed, width=1 << 20))
    pods = [{k: v for k, v in obj.items() if k != "kind"} for obj in listed["items"] if obj["kind"] == "Pod"]
    indented = "kind: PodList\napiVersion: v1\nmetadata: {}\nitems:\n" + "".join(
        "".join(f"  {line}\n" for line in yaml.safe_dump([pod], width=1 << 20).splitlines()) for pod in pods
    )
    for log in (kubectl, write(tmp_path / "podlist.yaml", indented)):
        whole = lines(run("replay", str(log)))
        assert len(whole) == 8
        assert lines(run("replay", "--max-record-size", "32Ki", str(log))) == whole
    result = run("replay", "--max-record-size", "12Ki", str(kubectl))
    assert result.returncode == 65
    first = result.stderr.decode().splitlines()[0]
    assert first.startswith(f"crashwatch: {kubectl}: document 1: item ") and "more than the limit of 12Ki" in first
