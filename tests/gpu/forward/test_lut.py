"""The forward's look-up table against a token-by-token construction (CPU, runs in CI)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu.forward.lut import (
    FLAG_DIAGONAL,
    FLAG_KEY_BOUND,
    FLAG_PARTIAL,
    FLAG_TOKENS,
    build_fused_lut,
    group_heads,
    tile_masks,
)
from gpu.partials import check_partials
from tests.gpu.tables import layouts, partial_layouts, token_layouts, token_mask


def slow_lut(blocks, block_size, block_m, block_n, causal, offset=0, seq=None):
    """Per listed tile: (mask word, flags), built cell by cell from the token masks."""
    allowed = token_mask(blocks, block_size, causal, offset, seq)
    layout = token_mask(blocks, block_size, False, 0, seq)
    n_heads, seq_q, seq_k = allowed.shape
    sub_r, sub_c = min(block_size, block_m), min(block_size, block_n)
    per_row, per_col = block_n // sub_c, block_m // sub_r
    tiles = {}
    for h in range(n_heads):
        for qt in range(-(-seq_q // block_m)):
            for kt in range(-(-seq_k // block_n)):
                word, n_cells, diagonal, bound = 0, 0, False, False
                for r in range(per_col):
                    for c in range(per_row):
                        q0, k0 = qt * block_m + r * sub_r, kt * block_n + c * sub_c
                        if not allowed[h, q0 : q0 + sub_r, k0 : k0 + sub_c].any():
                            continue
                        word |= 1 << (r * per_row + c)
                        n_cells += 1
                        cell = layout[h, q0 : q0 + sub_r, k0 : k0 + sub_c]
                        rows = np.arange(q0, q0 + cell.shape[0])[:, None]
                        cols = np.arange(k0, k0 + cell.shape[1])[None, :]
                        diagonal |= causal and bool((cell & (rows + offset < cols)).any())
                        bound |= k0 < seq_k < k0 + sub_c
                if word:
                    flags = FLAG_PARTIAL * (n_cells < per_col * per_row) + FLAG_DIAGONAL * diagonal
                    flags += FLAG_KEY_BOUND * bound
                    tiles[h, qt, kt] = (word, flags)
    return tiles


def decode(lut, n_heads, seq_q, seq_k, block_m, block_n, offset=0) -> np.ndarray:
    """The token mask the kernel applies, read back from the table as the kernel reads it."""
    mask = np.zeros((n_heads, -(-seq_q // block_m) * block_m, -(-seq_k // block_n) * block_n), bool)
    per_row = block_n // lut.sub_cols
    for head, q_tile, first, count in lut.items.tolist():
        for k_tile, flags, low, high in lut.entries[first : first + count].tolist():
            word = (low & 0xFFFFFFFF) | ((high & 0xFFFFFFFF) << 32)
            q0, k0 = q_tile * block_m, k_tile * block_n
            rows = np.arange(block_m)[:, None]
            cols = np.arange(block_n)[None, :]
            bit = (rows // lut.sub_rows) * per_row + cols // lut.sub_cols
            bits = (np.uint64(word) >> bit.astype(np.uint64)) & np.uint64(1)
            on = bits == 1 if flags & FLAG_PARTIAL else np.ones_like(bit, bool)
            if flags & FLAG_TOKENS:  # row r, word c // 32, bit c % 32; nothing else applies
                assert flags == FLAG_TOKENS and high == 0
                tile = lut.token_words[low].numpy().astype(np.uint32)
                on = (tile[rows, cols // 32] >> (cols % 32).astype(np.uint32)) & 1 == 1
            if flags & FLAG_DIAGONAL:
                on &= q0 + rows + offset >= k0 + cols
            if flags & FLAG_KEY_BOUND:
                on &= k0 + cols < seq_k
            mask[head, q0 : q0 + block_m, k0 : k0 + block_n] = on
    return mask[:, :seq_q, :seq_k]


@settings(max_examples=60, deadline=None)
@given(partial_layouts())
def test_table_matches_slow_construction(case):
    blocks, block_size, (block_m, block_n), causal, seq, offset = case
    words, flags = tile_masks(
        torch.from_numpy(blocks), block_size, block_m=block_m, block_n=block_n, causal=causal,
        causal_offset=offset, seq_q=seq[0], seq_k=seq[1],
    )  # fmt: skip
    expected = slow_lut(blocks, block_size, block_m, block_n, causal, offset, seq)
    got = {
        tuple(int(i) for i in index): (int(words[index]), int(flags[index]))
        for index in zip(*np.nonzero(words), strict=True)
    }
    assert got == expected


@settings(max_examples=80, deadline=None)
@given(token_layouts())
def test_kernel_view_of_table_is_the_token_mask(drawn):
    """Partial blocks included: token tiles read their words, the others their cell bits."""
    case, partials = drawn
    blocks, block_size, (block_m, block_n), causal, (seq_q, seq_k), offset = case
    layout = torch.from_numpy(blocks)
    lut = build_fused_lut(
        layout, block_size, block_m=block_m, block_n=block_n, causal=causal,
        causal_offset=offset, seq_q=seq_q, seq_k=seq_k,
        partials=check_partials(partials, layout, block_size),
    )  # fmt: skip
    assert len(lut.token_words) == int((lut.entries[:, 1] == FLAG_TOKENS).sum())
    assert lut.token_words.shape[1:] == (block_m, -(-block_n // 32))
    got = decode(lut, blocks.shape[0], seq_q, seq_k, block_m, block_n, offset)
    expected = token_mask(blocks, block_size, causal, offset, (seq_q, seq_k), partials)
    np.testing.assert_array_equal(got, expected)
    assert all(
        flags != FLAG_TOKENS or bool(lut.token_words[low].any())
        for _, flags, low, _ in lut.entries.tolist()
    )  # no token tile lets nothing through


@settings(max_examples=40, deadline=None)
@given(layouts())
def test_work_list_covers_every_query_tile_heaviest_first(case):
    blocks, block_size, (block_m, block_n), causal = case
    lut = build_fused_lut(
        torch.from_numpy(blocks), block_size, block_m=block_m, block_n=block_n, causal=causal
    )
    items = lut.items.numpy()
    assert items.dtype == np.int32 and lut.entries.dtype == torch.int32
    n_heads = blocks.shape[0]
    assert sorted(map(tuple, items[:, :2].tolist())) == [
        (h, t) for h in range(n_heads) for t in range(lut.n_q_tiles)
    ]
    counts = items[:, 3]
    assert (np.diff(counts) <= 0).all()
    spans = sorted((first, count) for first, count in items[:, 2:].tolist())
    assert sum(count for _, count in spans) == len(lut.entries) == lut.n_tiles
    assert all(a[0] + a[1] == b[0] for a, b in itertools.pairwise(spans))
    for _, _, first, count in items.tolist():
        k_tiles = lut.entries[first : first + count, 0].numpy()
        assert (np.diff(k_tiles) > 0).all() and ((k_tiles >= 0) & (k_tiles < lut.n_k_tiles)).all()


@settings(max_examples=30, deadline=None)
@given(layouts(), st.integers(1, 5))
def test_head_groups_keep_every_item_heaviest_first_within_each(case, heads_per_group):
    blocks, block_size, (block_m, block_n), causal = case
    items = build_fused_lut(
        torch.from_numpy(blocks), block_size, block_m=block_m, block_n=block_n, causal=causal
    ).items
    grouped = group_heads(items, heads_per_group).numpy()
    assert sorted(map(tuple, grouped.tolist())) == sorted(map(tuple, items.numpy().tolist()))
    groups = grouped[:, 0] // heads_per_group
    assert (np.diff(groups) >= 0).all()
    for group in np.unique(groups):
        assert (np.diff(grouped[groups == group, 3]) <= 0).all()


def test_block_16_in_a_128_tile_uses_all_64_bits():
    blocks = torch.ones(1, 8, 8, dtype=torch.bool)
    blocks[0, 7, 7] = False
    lut = build_fused_lut(blocks, 16, block_m=128, block_n=128, causal=False)
    _, flags, low, high = lut.entries[0].tolist()
    assert flags == FLAG_PARTIAL
    assert (low & 0xFFFFFFFF, high & 0xFFFFFFFF) == (0xFFFFFFFF, 0x7FFFFFFF)


def test_full_tiles_carry_no_flags_and_empty_rows_stay_listed():
    blocks = torch.zeros(2, 4, 4, dtype=torch.bool)
    blocks[0] = True
    lut = build_fused_lut(blocks, 64, block_m=128, block_n=64, causal=False)
    assert lut.items.tolist()[:2] == [[0, 0, 0, 4], [0, 1, 4, 4]]
    assert lut.items[2:, 3].tolist() == [0, 0]
    assert set(lut.entries[:, 1].tolist()) == {0}


def test_block_128_spans_two_64_wide_key_tiles():
    lut = build_fused_lut(
        torch.ones(1, 1, 1, dtype=torch.bool), 128, block_m=128, block_n=64, causal=True
    )
    assert lut.entries[:, :2].tolist() == [[0, FLAG_DIAGONAL], [1, FLAG_DIAGONAL]]


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"block_m": 256}, ValueError, "block_m must be one of"),
        ({"block_n": 48}, ValueError, "block_n must be one of"),
    ],
)
def test_bad_tiles_are_named(kwargs, error, match):
    """The layout, its block size and causal flag come checked from ``gpu.plan``
    (``tests/gpu/test_plans.py``); the tiles are the table's own."""
    args = {
        "blocks": torch.ones(1, 2, 2, dtype=torch.bool),
        "block_size": 16,
        "block_m": 128,
        "block_n": 64,
        "causal": False,
        **kwargs,
    }
    with pytest.raises(error, match=match):
        build_fused_lut(args.pop("blocks"), args.pop("block_size"), **args)
