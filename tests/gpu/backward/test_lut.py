"""The backward's transposed look-up table against the token mask, read as the kernel walks it
(CPU, runs in CI)."""

from __future__ import annotations

import numpy as np
import torch
from hypothesis import given, settings

from gpu.backward.lut import build_backward_lut
from gpu.forward.lut import FLAG_DIAGONAL, FLAG_KEY_BOUND, FLAG_PARTIAL, FLAG_TOKENS
from gpu.partials import check_partials
from tests.gpu.tables import token_layouts, token_mask


def decode_backward(lut, n_heads, seq_q, seq_k, block_m, block_n, offset=0) -> np.ndarray:
    """The token mask the backward kernel applies, walking key tiles as the kernel walks them."""
    mask = np.zeros((n_heads, -(-seq_q // block_m) * block_m, -(-seq_k // block_n) * block_n), bool)
    per_row = block_n // lut.sub_cols
    lists = lut.lists.numpy().reshape(n_heads, lut.n_k_tiles, 2)
    for head in range(n_heads):
        for k_tile in lut.order.tolist():
            first, count = lists[head, k_tile]
            for q_tile, flags, low, high in lut.entries[first : first + count].tolist():
                word = (low & 0xFFFFFFFF) | ((high & 0xFFFFFFFF) << 32)
                q0, k0 = q_tile * block_m, k_tile * block_n
                keys = np.arange(block_n)[:, None]  # the kernel's rows are keys
                queries = np.arange(block_m)[None, :]
                bit = (queries // lut.sub_rows) * per_row + keys // lut.sub_cols
                bits = (np.uint64(word) >> bit.astype(np.uint64)) & np.uint64(1)
                on = bits == 1 if flags & FLAG_PARTIAL else np.ones_like(bit, bool)
                if flags & FLAG_TOKENS:  # key row r, word q // 32, bit q % 32
                    assert flags == FLAG_TOKENS and high == 0
                    tile = lut.token_words[low].numpy().astype(np.uint32)
                    on = (tile[keys, queries // 32] >> (queries % 32).astype(np.uint32)) & 1 == 1
                if flags & FLAG_DIAGONAL:
                    on &= k0 + keys <= q0 + queries + offset
                if flags & FLAG_KEY_BOUND:
                    on &= k0 + keys < seq_k
                mask[head, q0 : q0 + block_m, k0 : k0 + block_n] = on.T
    return mask[:, :seq_q, :seq_k]


@settings(max_examples=80, deadline=None)
@given(token_layouts())
def test_backward_view_of_table_is_the_token_mask(drawn):
    case, partials = drawn
    blocks, block_size, (block_m, block_n), causal, (seq_q, seq_k), offset = case
    layout = torch.from_numpy(blocks)
    lut = build_backward_lut(
        layout, block_size, block_m=block_m, block_n=block_n, causal=causal,
        causal_offset=offset, seq_q=seq_q, seq_k=seq_k,
        partials=check_partials(partials, layout, block_size),
    )  # fmt: skip
    assert lut.token_words.shape[1:] == (block_n, -(-block_m // 32))
    assert sorted(lut.order.tolist()) == list(range(lut.n_k_tiles))  # every key tile, once
    work = lut.lists.numpy().reshape(blocks.shape[0], lut.n_k_tiles, 2)[..., 1].sum(0)
    assert (np.diff(work[lut.order.numpy()]) <= 0).all()  # heaviest first
    assert lut.n_tiles == len(lut.entries)
    got = decode_backward(lut, blocks.shape[0], seq_q, seq_k, block_m, block_n, offset)
    expected = token_mask(blocks, block_size, causal, offset, (seq_q, seq_k), partials)
    np.testing.assert_array_equal(got, expected)
