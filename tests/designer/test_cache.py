"""Per-head caches: the content key, the bounded LRU, and per-head DeepSpeed findings."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from designer.cache import LruCache, head_key, head_keys
from designer.layout import Layout
from designer.lints import _layout_defects
from designer.segment_stats import deepspeed_defects
from tests.factories import random_layout


def test_head_key_sees_shape_and_every_block(rng):
    blocks = rng.random((33, 17)) < 0.5
    key = head_key(blocks)
    assert head_key(blocks.astype(np.uint8)) == key
    flipped = blocks.copy()
    flipped[32, 16] ^= True
    assert head_key(flipped) != key
    assert head_key(np.zeros((4, 8), bool)) != head_key(np.zeros((8, 4), bool))


def test_lru_cache_keeps_the_recent_within_its_budget():
    cache = LruCache(10, size=len)
    made = []

    def make(value):
        made.append(value)
        return value

    cache.get("a", lambda: make("aaaa"))
    cache.get("b", lambda: make("bbbb"))
    assert cache.get("a", lambda: make("never")) == "aaaa"  # a is now the most recent
    cache.get("c", lambda: make("cccc"))  # 12 > 10: b, the least recent, goes
    assert cache.peek("b") is None and cache.peek("a") == "aaaa" and cache.peek("c") == "cccc"
    assert made == ["aaaa", "bbbb", "cccc"]
    cache.put("a", "x")  # replacing a value counts its size once
    assert cache.peek("a") == "x" and cache.peek("c") == "cccc"


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**16), density=st.floats(0.3, 1), width=st.integers(3, 6))
def test_per_head_deepspeed_findings_equal_the_whole_layouts(seed, density, width):
    layout = random_layout(np.random.default_rng(seed), 3, 12, 10, density=density)
    assert _layout_defects(layout, width) == deepspeed_defects(layout, width)


def test_head_keys_are_computed_once_per_layout(rng):
    layout = random_layout(rng, 3, 8, 8, density=0.5)
    keys = head_keys(layout)
    assert head_keys(layout) is keys
    assert keys == tuple(head_key(head) for head in layout.to_numpy())
    copy = Layout(layout.blocks.clone(), layout.block_size)
    assert head_keys(copy) == keys and head_keys(copy) is not keys


def test_lru_cache_drops_what_nobody_asked_for_within_its_ttl(monkeypatch):
    clock = [0.0]
    monkeypatch.setattr("designer.cache.time.monotonic", lambda: clock[0])
    cache = LruCache(100, size=lambda value: value, ttl_seconds=60)
    for key in "abc":
        cache.get(key, lambda: 30)
    assert cache.keys() == ["a", "b", "c"] and cache.used() == 90
    assert cache.get("huge", lambda: 500) == 500
    assert cache.keys() == ["a", "b", "c"], "a value larger than the whole budget is not kept"
    clock[0] = 61.0
    made = []
    assert cache.get("a", lambda: made.append(1) or 30) == 30
    assert made == [1] and cache.keys() == ["a"] and cache.used() == 30


def test_lru_cache_is_shared_between_threads_safely():
    import threading

    cache = LruCache(8)
    results = []

    def worker():
        for i in range(200):
            results.append((i % 16, cache.get(i % 16, lambda i=i: i % 16)))

    threads = [threading.Thread(target=worker) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(results) == 800 and all(key == value for key, value in results)
    assert len(cache.keys()) <= 8 and cache.used() == len(cache.keys())
