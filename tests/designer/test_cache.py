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
