"""The SDD pipeline's host tables, checked by running the pipeline's index math in torch on the CPU.

``emulate_pipeline`` walks the tables exactly as the three kernels do (groups split into pieces,
packed slots by ``orig_idx``, CSR rows for softmax and DSD) in fp64; it must agree with the naive
oracle, and every active block must be computed exactly once.
"""

from __future__ import annotations

from itertools import product

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from gpu.sdd.lut import build_tables, csr_rows, group_table, heaviest_first, piece_size
from tests.gpu.oracle import naive_attention


def emulate_pipeline(tables, q, k, v, block, *, scale, causal):
    batch, n_heads, seq_q, _ = q.shape
    q, k, v = q.double(), k.double(), v.double()
    scores = torch.full((batch, tables.nnz, block, block), float("nan"), dtype=torch.float64)
    offsets = torch.arange(block)
    for table in tables.widths:
        w, piece, splits = table.width, table.piece, table.splits(block)
        assert (w * block) % piece == 0 and piece % 16 == 0
        for entry in table.groups.long():
            head, rows, cols, orig = (
                entry[0],
                entry[1 : 1 + w],
                entry[1 + w : 1 + 2 * w],
                entry[1 + 2 * w :],
            )
            q_tok = (rows[:, None] * block + offsets).reshape(-1)
            k_tok = (cols[:, None] * block + offsets).reshape(-1)
            tile = torch.empty(batch, w * block, w * block, dtype=torch.float64)
            for sr, sc in product(range(splits), repeat=2):  # one CTA piece each
                r, c = slice(sr * piece, (sr + 1) * piece), slice(sc * piece, (sc + 1) * piece)
                part = q[:, head, q_tok[r]] @ k[:, head, k_tok[c]].transpose(-1, -2) * scale
                if causal:
                    part[:, k_tok[c][None, :] > q_tok[r][:, None]] = float("-inf")
                tile[:, r, c] = part
            tile = tile.reshape(batch, w, block, w, block).permute(0, 1, 3, 2, 4)
            assert torch.isnan(scores[:, orig]).all(), "a packed slot was written twice"
            scores[:, orig] = tile.reshape(batch, w * w, block, block)
    assert not torch.isnan(scores).any(), "a packed slot was never written"

    out = torch.empty(q.shape, dtype=torch.float64)
    n_q_blocks = seq_q // block
    for block_row in range(n_heads * n_q_blocks):
        head, m = divmod(block_row, n_q_blocks)
        begin, end = int(tables.row_ptr[block_row]), int(tables.row_ptr[block_row + 1])
        rows = slice(m * block, (m + 1) * block)
        if begin == end:
            out[:, head, rows] = 0
            continue
        row_scores = torch.cat(list(scores[:, begin:end].unbind(1)), dim=-1)  # [B, b, n·b]
        top = row_scores.amax(-1, keepdim=True)
        weights = torch.exp(row_scores - torch.where(torch.isinf(top), 0.0, top))
        total = weights.sum(-1, keepdim=True)
        probs = weights / torch.where(total > 0, total, 1.0)
        keys = torch.cat([torch.arange(block) + int(c) * block for c in tables.col_idx[begin:end]])
        out[:, head, rows] = probs @ v[:, head, keys]
    return scores, out


def _inputs(seed, batch, heads, seq_q, seq_k, dim=8):
    gen = torch.Generator().manual_seed(seed)
    return tuple(torch.randn(batch, heads, s, dim, generator=gen) for s in (seq_q, seq_k, seq_k))


@settings(max_examples=15, deadline=None)
@given(
    heads=st.integers(1, 3),
    n_q=st.integers(1, 6),
    n_k=st.integers(1, 6),
    block=st.sampled_from([16, 32]),
    density=st.floats(0.0, 1.0),
    start_width=st.sampled_from([None, 1, 2, 3, 4, 5, 8]),
    causal=st.booleans(),
    seed=st.integers(0, 2**31),
)
def test_pipeline_index_math_matches_the_oracle(
    heads, n_q, n_k, block, density, start_width, causal, seed
):
    rng = np.random.default_rng(seed)
    blocks = torch.from_numpy(rng.random((heads, n_q, n_k)) < density)
    q, k, v = _inputs(seed, 2, heads, n_q * block, n_k * block)
    tables = build_tables(blocks, block, start_width)
    scores, out = emulate_pipeline(tables, q, k, v, block, scale=0.5, causal=causal)
    expected = naive_attention(q, k, v, blocks, block, causal=causal, scale=0.5)
    torch.testing.assert_close(out, expected, rtol=1e-9, atol=1e-9)
    # every packed slot holds its own block: (head, row, col) of the orig_idx-th active block
    dense = torch.einsum("bhqd,bhkd->bhqk", q.double(), k.double()) * 0.5
    for o, (h, m, n) in enumerate(blocks.nonzero().tolist()):
        want = dense[:, h, m * block : (m + 1) * block, n * block : (n + 1) * block]
        got = scores[:, o]
        assert torch.allclose(got[torch.isfinite(got)], want[torch.isfinite(got)])


def test_default_start_width_gives_128_token_groups():
    blocks = torch.ones(2, 16, 16, dtype=torch.bool)
    tables = build_tables(blocks, 16, None)
    assert [(t.width, t.piece, t.n_groups) for t in tables.widths] == [(8, 128, 8)]
    assert tables.nnz == 512


def test_wide_groups_split_into_pieces():
    tables = build_tables(torch.ones(1, 4, 4, dtype=torch.bool), 128, 2)
    (table,) = tables.widths
    assert (table.width, table.piece, table.splits(128), table.n_groups) == (2, 128, 2, 4)


def test_non_contiguous_groups_keep_their_row_and_column_lists():
    blocks = torch.zeros(1, 16, 16, dtype=torch.bool)
    blocks[0, ::2, ::2] = True  # a single width-8 group over every other row and column
    (table,) = build_tables(blocks, 16, 8).widths
    entry = table.groups[0]
    assert entry[0] == 0
    assert entry[1:9].tolist() == list(range(0, 16, 2)) == entry[9:17].tolist()
    assert entry[17:].tolist() == list(range(64))


@pytest.mark.parametrize(
    ("width", "block", "piece"), [(1, 16, 16), (2, 16, 32), (8, 16, 128), (5, 16, 16), (3, 64, 64)]
)
def test_piece_size(width, block, piece):
    assert piece_size(width, block) == piece


def test_csr_rows_and_heaviest_first():
    blocks = torch.tensor([[[1, 0, 1], [0, 0, 0], [1, 1, 1]]], dtype=torch.bool)
    row_ptr, col_idx = csr_rows(blocks)
    assert row_ptr.tolist() == [0, 2, 2, 5]
    assert col_idx.tolist() == [0, 2, 0, 1, 2]
    assert heaviest_first(row_ptr).tolist() == [2, 0, 1]
    assert row_ptr.dtype == col_idx.dtype == torch.int32


def test_group_table_refuses_rows_that_are_not_a_cartesian_group():
    rows = torch.tensor([[0, 0, 0, 0], [0, 0, 1, 1], [0, 1, 0, 2], [0, 2, 1, 3]])
    with pytest.raises(ValueError, match="do not form w×w Cartesian groups"):
        group_table(2, rows)
    with pytest.raises(ValueError, match=r"must be \[k·4, 4\], got \[3, 4\]"):
        group_table(2, rows[:3])


def test_start_width_zero_is_refused():
    with pytest.raises(ValueError, match="start_width must be >= 1, got 0"):
        build_tables(torch.ones(1, 2, 2, dtype=torch.bool), 16, 0)
