"""A small thread-safe cache bounded in bytes, in entries and in time, for per-design results.

``st.cache_data`` bounds entries only, and one analysis of the largest design is about 192 MiB,
so a handful of sessions could pin gigabytes for the life of the server. This cache evicts the
least recently used entries past ``max_bytes`` or ``max_entries``, drops entries older than
``ttl_seconds``, and does not keep a value larger than ``max_bytes`` at all.
"""

from __future__ import annotations

import threading
import time
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

V = TypeVar("V")


class BoundedCache(Generic[V]):
    """``get(key, make, size)``: the cached value, or ``make()`` stored under ``key``.

    >>> cache = BoundedCache(max_bytes=10, max_entries=2, ttl_seconds=60)
    >>> cache.get("a", lambda: "x" * 4, len), cache.get("b", lambda: "y" * 8, len)
    ('xxxx', 'yyyyyyyy')
    >>> cache.keys()  # 'a' was evicted: 4 + 8 bytes is more than 10
    ['b']
    """

    def __init__(self, max_bytes: int, max_entries: int, ttl_seconds: float) -> None:
        self.max_bytes, self.max_entries, self.ttl_seconds = max_bytes, max_entries, ttl_seconds
        self._entries: OrderedDict[Hashable, tuple[V, int, float]] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, key: Hashable, make: Callable[[], V], size: Callable[[V], int]) -> V:
        now = time.monotonic()
        with self._lock:
            self._expire(now)
            if key in self._entries:
                self._entries.move_to_end(key)
                return self._entries[key][0]
        value = make()  # outside the lock: other sessions are not held up
        nbytes = size(value)
        with self._lock:
            if nbytes <= self.max_bytes:
                self._entries[key] = (value, nbytes, now)
                self._entries.move_to_end(key)
                self._evict()
        return value

    def keys(self) -> list[Hashable]:
        with self._lock:
            return list(self._entries)

    def nbytes(self) -> int:
        with self._lock:
            return sum(entry[1] for entry in self._entries.values())

    def _expire(self, now: float) -> None:
        for key in [k for k, (_, _, at) in self._entries.items() if now - at > self.ttl_seconds]:
            del self._entries[key]

    def _evict(self) -> None:
        total = sum(entry[1] for entry in self._entries.values())
        while self._entries and (total > self.max_bytes or len(self._entries) > self.max_entries):
            _, (_, nbytes, _) = self._entries.popitem(last=False)
            total -= nbytes
