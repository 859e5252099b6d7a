import re

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.nn.attention.flex_attention import create_mask

from designer import from_mask_mod
from designer.mask_bounds import Span, bounds_of
from designer.mask_mod import MAX_EVAL_PAIRS, tile_bounds


def brute_force(mask_mod, heads, seq_q, seq_k):
    """Every token pair, one at a time: the obviously right mask."""
    out = torch.zeros(heads, seq_q, seq_k, dtype=torch.bool)
    for h in range(heads):
        for q in range(seq_q):
            for k in range(seq_k):
                out[h, q, k] = bool(mask_mod(torch.tensor(0), torch.tensor(h), torch.tensor(q),
                                             torch.tensor(k)))  # fmt: skip
    return out


def rules(rng: np.random.Generator, heads: int, seq: int):
    """Mask_mods of the shapes attention-gym's families take, with random parameters."""
    window = int(rng.integers(1, max(seq, 2)))  # a one-token sequence too
    lengths = torch.from_numpy(rng.integers(1, 9, seq)).cumsum(0)
    doc = torch.searchsorted(lengths, torch.arange(seq), right=True)
    per_head = torch.from_numpy(rng.integers(0, seq, heads))
    dilation = int(rng.integers(1, 4))
    return [
        lambda b, h, q, k: (q - k >= 0) & (q - k < window),
        lambda b, h, q, k: (doc[q] == doc[k]) & (q >= k),
        lambda b, h, q, k: (k < window) | (k <= q),
        lambda b, h, q, k: torch.abs(q - k) <= per_head[h],
        lambda b, h, q, k: ((q - k) % dilation == 0) & (abs(q - k) < 2 * window),
        lambda b, h, q, k: torch.where(q // 5 == k // 5, q >= k, ~(k > 3)),
        lambda b, h, q, k: torch.logical_or(q % 7 == 0, torch.minimum(q, k) * 2 > q + 1),
    ]


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 2), st.integers(1, 23),
       st.sampled_from([1, 2, 4, 5, 8]))  # fmt: skip
def test_from_mask_mod_is_the_brute_force_mask(seed, heads, seq, block):
    rng = np.random.default_rng(seed)
    seq_k = int(rng.integers(1, 24))
    for rule in rules(rng, heads, max(seq, seq_k)):
        layout = from_mask_mod(rule, heads=heads, seq_q=seq, seq_k=seq_k, block_size=block)
        assert torch.equal(layout.token_mask(), brute_force(rule, heads, seq, seq_k))


@settings(max_examples=25, deadline=None)
@given(st.integers(0, 2**32 - 1), st.sampled_from([3, 8, 16]))
def test_bounds_are_sound(seed, block):
    rng = np.random.default_rng(seed)
    seq = int(rng.integers(8, 80))
    for rule in rules(rng, 2, seq):
        bounds = tile_bounds(rule, heads=2, seq_q=seq, seq_k=seq, block_size=block)
        mask = create_mask(rule, 1, 2, seq, seq, device="cpu")[0]
        n = -(-seq // block)
        padded = torch.zeros(2, n * block, n * block, dtype=torch.bool)
        inside = torch.zeros_like(padded)
        padded[:, :seq, :seq], inside[:, :seq, :seq] = mask, True
        tiles = padded.view(2, n, block, n, block).transpose(2, 3)
        where = inside.view(2, n, block, n, block).transpose(2, 3)
        full = (tiles | ~where).all(-1).all(-1)
        empty = ~tiles.any(-1).any(-1)
        assert bool((bounds.full <= full).all())  # surely full is full
        assert bool((~(bounds.full | bounds.unknown) <= empty).all())  # surely empty is empty
        assert bounds.bounded


def test_bounds_of_a_gather_follow_range_minimum_and_maximum():
    doc = torch.tensor([0, 0, 1, 1, 1, 2, 3, 3])
    q = Span(torch.tensor([0, 2, 5]), torch.tensor([1, 4, 7]))
    surely, maybe = bounds_of(doc[q] == doc[q])
    assert surely.tolist() == [True, True, False] and maybe.all()


@pytest.mark.parametrize("causal_alignment", ["top_left", "bottom_right"])
def test_causal_layouts_store_the_causal_diagonal_as_full(causal_alignment):
    d = 40 if causal_alignment == "bottom_right" else 0
    docs = torch.repeat_interleave(torch.arange(3), torch.tensor([70, 30, 100]))[:200]
    rule = lambda b, h, q, k: (k <= q + d) & (k >= 0)  # noqa: E731
    layout = from_mask_mod(rule, heads=1, seq_q=160, seq_k=200, block_size=16, causal=True,
                           causal_alignment=causal_alignment)  # fmt: skip
    assert layout.partials is None  # every diagonal block is the causal rule's own
    causal = torch.ones(160, 200, dtype=torch.bool).tril(d)
    assert torch.equal(layout.token_mask()[0] & causal, causal)
    both = lambda b, h, q, k: rule(b, h, q, k) & (docs[q] == docs[k])  # noqa: E731
    layout = from_mask_mod(both, heads=1, seq_q=160, seq_k=200, block_size=16, causal=True,
                           causal_alignment=causal_alignment)  # fmt: skip
    expected = create_mask(both, 1, 1, 160, 200, device="cpu")[0, 0]
    assert torch.equal(layout.token_mask()[0] & causal, expected)
    assert layout.n_partial < from_mask_mod(both, heads=1, seq_q=160, seq_k=200,
                                            block_size=16).n_partial  # fmt: skip


def test_attention_under_the_layout_is_attention_under_create_mask():
    """fp64 masked softmax attention, the layout's token mask against Flex's create_mask."""
    torch.manual_seed(0)
    lengths = torch.tensor([100, 400, 300, 200])
    doc = torch.repeat_interleave(torch.arange(4), lengths)
    families = [
        lambda b, h, q, k: (q - k >= 0) & (q - k < 200),
        lambda b, h, q, k: (doc[q] == doc[k]) & (q >= k),
        lambda b, h, q, k: (k < 300) | (k <= q),
    ]
    q, k, v = torch.randn(3, 1, 2, 1000, 16, dtype=torch.float64)

    def attention(mask):
        scores = (q @ k.transpose(-1, -2)).masked_fill(~mask, float("-inf"))
        return torch.nan_to_num(torch.softmax(scores, -1)) @ v

    for family in families:
        for block in (16, 64, 128):
            layout = from_mask_mod(family, heads=2, seq_q=1000, seq_k=1000, block_size=block)
            expected = attention(create_mask(family, 1, 2, 1000, 1000, device="cpu"))
            assert (attention(layout.token_mask()[None]) - expected).abs().max() <= 1e-9


@pytest.mark.parametrize(
    ("mask_mod", "kwargs", "error", "message"),
    [
        ("window", {}, TypeError, "mask_mod must be a function"),
        (lambda b, h, q, k: q.item() > 0, {}, ValueError, "on index tensors"),
        (lambda b, h, q, k: q >= k, {"causal": True, "block_size": 64}, ValueError, ""),
        (lambda b, h, q, k: k >= q, {"causal": True}, ValueError, "causal rule .*masks"),
        (lambda b, h, q, k: q >= k, {"heads": 0}, ValueError, r"heads must be in \[1, 1024\]"),
        (lambda b, h, q, k: q >= k, {"block_size": 0}, ValueError, r"block_size must be in"),
        (lambda b, h, q, k: q >= k, {"causal_alignment": "top"}, ValueError, "causal_alignment"),
    ],
)
def test_errors(mask_mod, kwargs, error, message):
    arguments = {"heads": 1, "seq_q": 100, "seq_k": 100, "block_size": 16, **kwargs}
    if not message:  # a causal mask_mod under causal=True is fine
        assert from_mask_mod(mask_mod, **arguments).partials is None
        return
    with pytest.raises(error, match=message):
        from_mask_mod(mask_mod, **arguments)


def test_unbounded_work_is_refused_with_its_estimate():
    table = torch.ones(65536, dtype=torch.bool)
    opaque = lambda b, h, q, k: table[q] & table[k] & (q.float() >= 0)  # noqa: E731 - not bounded
    pairs = 65536 * 65536  # the head is not read: one head evaluated for all
    assert pairs > MAX_EVAL_PAIRS
    message = re.escape(f"needs {pairs:,} token pairs evaluated")
    with pytest.raises(ValueError, match=message):
        from_mask_mod(opaque, heads=16, seq_q=65536, seq_k=65536, block_size=64)


def test_past_a_dense_grid_one_heads_layout_is_copied_as_runs(monkeypatch):
    import designer.layout

    rule = rules(np.random.default_rng(4), 3, 40)[0]  # a window, the same on every head
    dense = from_mask_mod(rule, heads=3, seq_q=40, seq_k=37, block_size=8)
    monkeypatch.setattr(designer.layout, "DENSE_CELLS", 0)  # held as runs at any size
    layout = from_mask_mod(rule, heads=3, seq_q=40, seq_k=37, block_size=8)
    assert layout.runs is not None and dense.runs is None and layout.n_partial > 0
    assert layout.partials == dense.partials and layout.to_runs() == dense.to_runs()
    assert torch.equal(layout.token_mask(), brute_force(rule, 3, 40, 37))


def test_long_context_token_windows_are_refused_by_their_partial_masks():
    """32 heads x 128K tokens (2,048^2 blocks of 64): each head keeps its own partial blocks,
    and a 1,000-token window has two or three per block row: past the 32 MiB they may take."""
    window = lambda b, h, q, k: (q >= k) & (q - k < 1000)  # noqa: E731
    with pytest.raises(ValueError, match=r"partial blocks of 64 tokens would take .* 32.0 MiB"):
        from_mask_mod(window, heads=32, seq_q=1 << 17, seq_k=1 << 17, block_size=64)
    per_head = torch.arange(32) * 64
    reads_head = lambda b, h, q, k: (q >= k) & (q - k < per_head[h])  # noqa: E731
    with pytest.raises(ValueError, match=r"reads the head, so it is bounded on a grid of 32 heads"):
        from_mask_mod(reads_head, heads=32, seq_q=1 << 17, seq_k=1 << 17, block_size=64)
    with pytest.raises(ValueError, match=r"bounded on a grid of 16384 x 16384 blocks"):
        from_mask_mod(window, heads=1, seq_q=1 << 20, seq_k=1 << 20, block_size=64)
