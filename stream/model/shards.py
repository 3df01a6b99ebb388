"""Which namespaces one watcher keeps: its shard of a split cluster, and an optional Namespace label selector.

A cluster too large for one watcher is split by namespace, so a graph, its DCDs, Deployments, Pods and
LeaderWorkerSets (which all live in the graph's namespace) are always judged by the same watcher. A
namespace belongs to shard `fnv1a64(name) % count`: FNV-1a, 64 bits, over the name's UTF-8 bytes (offset
basis 14695981039346656037, prime 1099511628211), the same in every process and every language, unlike
Python's `hash()`, which is salted per process. `--namespace-selector` partitions explicitly instead (or
as well): only namespaces whose labels match it are kept; which ones match is learnt from a watch of
Namespaces (`stream.sources.namespaces`).

Pure: no I/O. The reflector asks `NamespaceFilter.keeps(namespace)` right after decoding each object,
so an object of another shard costs its decoding and nothing more.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

FNV_OFFSET = 0xCBF29CE484222325
FNV_PRIME = 0x100000001B3
_MASK = (1 << 64) - 1


def fnv1a64(text: str) -> int:
    """FNV-1a (64 bits) of the UTF-8 bytes of `text`."""
    value = FNV_OFFSET
    for byte in text.encode():
        value = ((value ^ byte) * FNV_PRIME) & _MASK
    return value


def shard_of(namespace: str, count: int) -> int:
    """The shard (0 to count - 1) a namespace belongs to."""
    return fnv1a64(namespace) % count


@dataclass(frozen=True)
class Shard:
    index: int
    count: int

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ValueError(f"--shard-count must be at least 1, not {self.count}")
        if not 0 <= self.index < self.count:
            raise ValueError(
                f"--shard-index must be from 0 to {self.count - 1} (--shard-count {self.count}), not {self.index}"
            )

    def owns(self, namespace: str) -> bool:
        return self.count == 1 or shard_of(namespace, self.count) == self.index

    def __str__(self) -> str:
        return f"shard {self.index} of {self.count}"


# --- label selectors, in kubectl's syntax -----------------------------------------------------------------

_NAME = r"[A-Za-z0-9](?:[-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
_PREFIX = r"[a-z0-9](?:[-a-z0-9]*[a-z0-9])?(?:\.[a-z0-9](?:[-a-z0-9]*[a-z0-9])?)*"
_KEY = rf"(?:{_PREFIX}/)?{_NAME}"
_VALUE = rf"(?:{_NAME})?"
_KEY_RE = re.compile(_KEY)
_VALUE_RE = re.compile(_VALUE)
_REQUIREMENT = re.compile(
    rf"""\s*(?:
        (?P<not>!)\s*(?P<absent>{_KEY})
      | (?P<setkey>{_KEY})\s+(?P<setop>in|notin)\s*\((?P<values>[^()]*)\)
      | (?P<key>{_KEY})\s*(?P<op>==|!=|=)\s*(?P<value>{_VALUE})
      | (?P<exists>{_KEY})
    )\s*""",
    re.VERBOSE,
)


@dataclass(frozen=True)
class Requirement:
    key: str
    op: str  # "=", "!=", "in", "notin", "exists", "!"
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        value = labels.get(self.key)
        if self.op == "exists":
            return value is not None
        if self.op == "!":
            return value is None
        if self.op in ("=", "in"):
            return value is not None and value in self.values
        return value is None or value not in self.values  # != and notin: an absent label matches, as kubectl


class SelectorError(ValueError):
    """A label selector kubectl would refuse; the message says where."""


@dataclass(frozen=True)
class LabelSelector:
    text: str
    requirements: tuple[Requirement, ...]

    def matches(self, labels: Mapping[str, str]) -> bool:
        return all(r.matches(labels) for r in self.requirements)

    def __str__(self) -> str:
        return self.text


def parse_selector(text: str) -> LabelSelector:
    """A label selector as kubectl takes it: `a=b`, `a==b`, `a!=b`, `a in (x,y)`, `a notin (x)`, `a`, `!a`,
    joined by commas (all must match). The API server applies it; this reads it first so a typo is a
    usage error, not a watcher that keeps nothing."""
    if not text.strip():
        raise SelectorError("an empty selector would keep every namespace: leave the flag out instead")
    requirements = []
    position = 0
    while True:
        found = _REQUIREMENT.match(text, position)
        if found is None or found.end() == found.start():
            raise SelectorError(f"not a label selector at {text[position:][:40]!r} (in {text!r})")
        requirements.append(_requirement(found, text))
        position = found.end()
        if position == len(text):
            return LabelSelector(text, tuple(requirements))
        if text[position] != ",":
            raise SelectorError(f"not a label selector at {text[position:][:40]!r} (in {text!r})")
        position += 1


def _requirement(found: re.Match[str], text: str) -> Requirement:
    if found["absent"]:
        return Requirement(found["absent"], "!")
    if found["setkey"]:
        values = [v.strip() for v in found["values"].split(",")]
        bad = [v for v in values if not _VALUE_RE.fullmatch(v)]
        if bad or not any(values):
            raise SelectorError(f"not a label value: {bad[0] if bad else ''!r} (in {text!r})")
        return Requirement(found["setkey"], found["setop"], frozenset(values))
    if found["key"]:
        op = "=" if found["op"] in ("=", "==") else "!="
        return Requirement(found["key"], op, frozenset((found["value"],)))
    return Requirement(found["exists"], "exists")


# --- the filter the reflectors ask --------------------------------------------------------------------------


class NamespaceFilter:
    """Whether a namespace is this watcher's: in its shard, and (with a selector) among the namespaces the
    selector matches right now. The shard's answers are remembered (hashing a name per event would cost
    more than the lookup); the selected set changes as Namespaces are relabelled."""

    def __init__(self, shard: Shard | None = None, selector: LabelSelector | None = None) -> None:
        self.shard = shard
        self.selector = selector
        self.selected: set[str] = set()  # the namespaces the selector matches, as last seen
        self._owned: dict[str, bool] = {}

    def keeps(self, namespace: str) -> bool:
        if self.selector is not None and namespace not in self.selected:
            return False
        if self.shard is None:
            return True
        owned = self._owned.get(namespace)
        if owned is None:
            owned = self._owned[namespace] = self.shard.owns(namespace)
        return owned

    def select(self, namespace: str, labels: Mapping[str, str] | None) -> bool | None:
        """Take in a Namespace as seen (labels None: deleted, or no longer matching). True: it starts being
        kept; False: it stops; None: no change for the objects."""
        before = self.keeps(namespace)
        if labels is not None and (self.selector is None or self.selector.matches(labels)):
            self.selected.add(namespace)
        else:
            self.selected.discard(namespace)
            self._owned.pop(namespace, None)  # a name gone may never come back: hold nothing for it
        after = self.keeps(namespace)
        return None if before == after else after

    def describe(self) -> str:
        parts = []
        if self.shard is not None:
            parts.append(f"{self.shard} (namespaces by FNV-1a hash of their name)")
        if self.selector is not None:
            parts.append(f"namespaces matching {self.selector}")
        return " and ".join(parts)
