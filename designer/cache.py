"""Caches for work done per head of a layout, shared by every session of a server.

Large designs stay interactive because an edit changes few heads: the views and lints key the
per-head work on ``head_key`` (the head's content), so only changed heads are recomputed and an
undo finds its heads again. ``LruCache`` holds immutable values, bounded by a total size.
"""

from __future__ import annotations

import hashlib
import threading
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


def head_keys(layout: Any) -> tuple[str, ...]:
    """``head_key`` of every head of a ``Layout``, computed once per layout object."""
    known = _LAYOUT_KEYS.peek(id(layout))
    if known is None or known[0]() is not layout:
        known = (weakref.ref(layout), tuple(head_key(head) for head in layout.to_numpy()))
        _LAYOUT_KEYS.put(id(layout), known)
    return known[1]


class LruCache:
    """A thread-safe least-recently-used cache of immutable values, bounded by a total size.

    Shared by every session of the server (the values are never modified), so an undo finds
    the heads it had before.
    """

    def __init__(self, budget: int, size: Callable[[Any], int] = lambda value: 1) -> None:
        self._items: OrderedDict[Hashable, Any] = OrderedDict()
        self._lock = threading.Lock()
        self._budget, self._size, self._used = budget, size, 0

    def get(self, key: Hashable, make: Callable[[], Any]) -> Any:
        """The value under ``key``, made (outside the lock) and kept when missing."""
        with self._lock:
            if key in self._items:
                self._items.move_to_end(key)
                return self._items[key]
        value = make()
        self.put(key, value)
        return value

    def put(self, key: Hashable, value: Any) -> None:
        with self._lock:
            if key in self._items:
                self._used -= self._size(self._items.pop(key))
            self._items[key] = value
            self._used += self._size(value)
            while self._used > self._budget and len(self._items) > 1:
                _, dropped = self._items.popitem(last=False)
                self._used -= self._size(dropped)

    def peek(self, key: Hashable) -> Any | None:
        with self._lock:
            return self._items.get(key)


#: ``id(layout) -> (weak reference, head keys)``: a rerun asks for the same layout's keys often.
_LAYOUT_KEYS = LruCache(64)
