"""Named indexes, in the manner of client-go's indexer: an index key to the set of its members.

Every lookup a diagnosis makes goes through one, so its cost follows the size of the answer, never the
number of objects held; a key whose set empties is dropped, so churn does not grow memory.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any, Generic, TypeVar

K = TypeVar("K", bound=Hashable)
M = TypeVar("M", bound=Hashable)


class Index(Generic[K, M]):
    """A named index: index key -> set of members; a key whose set empties is dropped."""

    __slots__ = ("sets",)

    def __init__(self) -> None:
        self.sets: dict[K, set[M]] = {}  # read-only to others: `key in index.sets` asks with no call

    def add(self, key: K, obj: M) -> None:
        members = self.sets.get(key)
        if members is None:
            self.sets[key] = {obj}
        else:
            members.add(obj)

    def remove(self, key: K, obj: M) -> bool:
        """Remove a member; True when that emptied (and dropped) the key."""
        members = self.sets.get(key)
        if members is None:
            return False
        members.discard(obj)
        if not members:
            del self.sets[key]
            return True
        return False

    def get(self, key: K) -> set[M]:
        return self.sets.get(key) or EMPTY

    def keys(self) -> list[K]:
        return list(self.sets)

    def __len__(self) -> int:
        return len(self.sets)


EMPTY: set[Any] = set()  # what `get` answers for a key with no members: never added to
