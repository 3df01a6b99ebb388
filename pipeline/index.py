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

    __slots__ = ("_sets",)

    def __init__(self) -> None:
        self._sets: dict[K, set[M]] = {}

    def add(self, key: K, obj: M) -> None:
        members = self._sets.get(key)
        if members is None:
            self._sets[key] = {obj}
        else:
            members.add(obj)

    def remove(self, key: K, obj: M) -> bool:
        """Remove a member; True when that emptied (and dropped) the key."""
        members = self._sets.get(key)
        if members is None:
            return False
        members.discard(obj)
        if not members:
            del self._sets[key]
            return True
        return False

    def get(self, key: K) -> set[M]:
        return self._sets.get(key) or EMPTY

    def keys(self) -> list[K]:
        return list(self._sets)

    def __len__(self) -> int:
        return len(self._sets)


EMPTY: set[Any] = set()  # what `get` answers for a key with no members: never added to
