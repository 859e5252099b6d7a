"""Caches for work done per head of a layout, shared by every session of a server.

Large designs stay interactive because an edit changes few heads: the views and lints key the
per-head work on ``head_key`` (the head's content), so only changed heads are recomputed and an
undo finds its heads again. ``LruCache`` holds immutable values, bounded by a total size and an
age.
"""

from __future__ import annotations

import hashlib
import threading
import time
import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Any

import numpy as np


def head_key(blocks: np.ndarray) -> str:
    """A digest of one head's ``[M, N]`` blocks: its shape and every block (bit-packed)."""
    digest = hashlib.blake2b(repr(blocks.shape).encode(), digest_size=16)
    digest.update(np.packbits(np.asarray(blocks, dtype=bool)).tobytes())
    return digest.hexdigest()


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=16).hexdigest()


def head_keys(layout: Any) -> tuple[str, ...]:
    """``head_key`` of every head of a ``Layout``, computed once per layout object."""
    known = _LAYOUT_KEYS.peek(id(layout))
    if known is None or known[0]() is not layout:
        if layout.runs is not None:  # held as runs: each head's canonical runs, digested
            keys = tuple(_digest(signature) for signature in layout.runs.head_signatures())
        else:
            keys = tuple(head_key(head) for head in layout.to_numpy())
        known = (weakref.ref(layout), keys)
        _LAYOUT_KEYS.put(id(layout), known)
    return known[1]


class LruCache:
    """A thread-safe least-recently-used cache of immutable values, bounded by a total size
    and, when ``ttl_seconds`` is given, by age: memory a server holds for work nobody asks for
    again comes back.

    ``size(value)`` is what each value counts against ``budget`` (1 by default: an entry
    count; ``nbytes`` for a byte budget). Shared by every session of the server (the values are
    never modified), so an undo finds the heads it had before. A value larger than the whole
    budget is returned but not kept.

    >>> cache = LruCache(10, size=len)
    >>> cache.get("a", lambda: "xxxx"), cache.get("b", lambda: "yyyyyyyy"), cache.keys()
    ('xxxx', 'yyyyyyyy', ['b'])
    """

    def __init__(
        self,
        budget: int,
        size: Callable[[Any], int] = lambda value: 1,
        *,
        ttl_seconds: float | None = None,
    ) -> None:
        self._items: OrderedDict[Hashable, tuple[Any, int, float]] = OrderedDict()
        self._lock = threading.Lock()
        self._budget, self._size, self._used = budget, size, 0
        self._ttl = ttl_seconds

    def get(self, key: Hashable, make: Callable[[], Any]) -> Any:
        """The value under ``key``, made (outside the lock) and kept when missing."""
        found = self.peek(key)
        if found is not None:
            return found
        value = make()
        self.put(key, value)
        return value

    def put(self, key: Hashable, value: Any) -> None:
        size = self._size(value)
        with self._lock:
            if key in self._items:
                self._used -= self._items.pop(key)[1]
            if size > self._budget:
                return
            self._items[key] = (value, size, time.monotonic())
            self._used += size
            while self._used > self._budget:
                self._used -= self._items.popitem(last=False)[1][1]

    def peek(self, key: Hashable) -> Any | None:
        """The value under ``key`` (now the most recent), or None."""
        with self._lock:
            self._expire()
            item = self._items.get(key)
            if item is None:
                return None
            self._items.move_to_end(key)
            return item[0]

    def keys(self) -> list[Hashable]:
        with self._lock:
            self._expire()
            return list(self._items)

    def used(self) -> int:
        """The total size of the values kept."""
        with self._lock:
            return self._used

    def clear(self) -> None:
        """Forget every value (their memory goes back once nobody else holds them)."""
        with self._lock:
            self._items.clear()
            self._used = 0

    def _expire(self) -> None:
        if self._ttl is None:
            return
        oldest = time.monotonic() - self._ttl
        for key in [key for key, (_, _, made) in self._items.items() if made < oldest]:
            self._used -= self._items.pop(key)[1]


#: ``id(layout) -> (weak reference, head keys)``: a rerun asks for the same layout's keys often.
_LAYOUT_KEYS = LruCache(64)
