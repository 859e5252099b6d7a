"""``gpu.plan`` on the CPU: checks, description, immutability, and the reference through a plan
(GQA, logsumexp, both causal alignments, partial last blocks) against the naive fp64 oracle."""

from __future__ import annotations

import threading

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from designer.layout import Layout
from gpu import BlockSparsePlan, block_sparse_attention, plan
from gpu.plans import plan_by_id
from tests.gpu.oracle import naive_attention


def _qkv(batch, q_heads, kv_heads, seq_q, seq_k, dim=8, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, q_heads, seq_q, dim, generator=gen, dtype=torch.float64)
    k = torch.randn(batch, kv_heads, seq_k, dim, generator=gen, dtype=torch.float64)
    v = torch.randn(batch, kv_heads, seq_k, dim, generator=gen, dtype=torch.float64)
    return q, k, v


def test_plan_describes_itself_and_keeps_its_layout():
    blocks = torch.zeros(2, 4, 6, dtype=torch.bool)
    blocks[:, :, :3] = True
    p = plan(blocks, 64, causal=True, causal_alignment="bottom_right", seq_q=200, seq_k=380,
             device="cpu")  # fmt: skip
    assert isinstance(p, BlockSparsePlan)
    assert (p.n_heads, p.n_q_blocks, p.n_k_blocks) == (2, 4, 6)
    assert (p.seq_q, p.seq_k, p.causal_offset, p.density) == (200, 380, 180, 0.5)
    assert repr(p) == (
        "BlockSparsePlan(heads=2, blocks=4x6 of 64, seq=200x380, density=50.00%, "
        "causal=bottom_right, device=cpu)"
    )
    copy = p.blocks
    copy[:] = False  # a copy: the plan is unchanged
    assert p.blocks.sum() == 24
    blocks[:] = False  # the caller's tensor too
    assert p.blocks.sum() == 24
    with pytest.raises(AttributeError, match="immutable"):
        p.causal = False
    assert plan_by_id(p.plan_id) is p


def test_plan_takes_a_layout_numpy_and_two_dims_are_refused():
    layout = Layout(torch.eye(3, dtype=torch.bool)[None], 32)
    assert plan(layout, device="cpu").block_size == 32
    assert plan(np.ones((1, 2, 2), dtype=np.int8), 16, device="cpu").seq_k == 32


@pytest.mark.parametrize(
    ("args", "kwargs", "error", "match"),
    [
        ((torch.ones(1, 2, 2, dtype=torch.bool),), {}, TypeError, "block_size is required"),
        ((Layout(torch.ones(1, 2, 2, dtype=torch.bool), 32), 64), {}, ValueError,
         r"block_size \(64\) must equal the layout's block_size \(32\)"),
        ((torch.ones(2, 2, dtype=torch.bool), 16), {}, ValueError, "layout must have rank 3"),
        ((torch.ones(1, 0, 2, dtype=torch.bool), 16), {}, ValueError, "at least one head"),
        ((torch.full((1, 2, 2), 3), 16), {}, ValueError, "only 0 and 1"),
        (([[1]], 16), {}, TypeError, "layout must be a torch tensor or numpy array"),
        ((torch.ones(1, 2, 2, dtype=torch.bool), 0), {}, ValueError, "block_size must be >= 1"),
        ((torch.ones(1, 2, 2, dtype=torch.bool), 16), {"causal": "yes"}, TypeError,
         "causal must be True or False"),
        ((torch.ones(1, 2, 2, dtype=torch.bool), 16), {"causal_alignment": "left"}, ValueError,
         "causal_alignment must be one of 'top_left', 'bottom_right'"),
        ((torch.ones(1, 2, 2, dtype=torch.bool), 16), {"seq_q": 16}, ValueError,
         r"seq_q \(the layout's 2 blocks of 16\) must be in \[17, 32\], got 16"),
        ((torch.ones(1, 2, 2, dtype=torch.bool), 16), {"seq_k": 33}, ValueError,
         r"seq_k \(the layout's 2 blocks of 16\) must be in \[17, 32\], got 33"),
        ((torch.ones(1, 2, 2, dtype=torch.bool), 16), {"device": "meta"}, ValueError,
         "device must be a CUDA device or the CPU, got meta"),
        # what the kernels take is told before any CUDA call, so on any machine
        ((torch.ones(1, 2, 2, dtype=torch.bool), 8), {"device": "cuda"}, ValueError,
         "block_size must be one of 16, 32, 64, 128, got 8"),
        ((torch.ones(1, 2, 2, dtype=torch.bool), 16), {"causal": 1}, TypeError,
         "causal must be True or False"),
        ((torch.ones(1, 2, 2, dtype=torch.bool), 16), {"deterministic": "yes"}, TypeError,
         "deterministic must be True or False"),
    ],
)  # fmt: skip
def test_bad_plans_are_named(args, kwargs, error, match):
    with pytest.raises(error, match=match):
        plan(*args, **{"device": "cpu", **kwargs})


def test_plan_keeps_its_deterministic_choice_and_a_call_checks_its_own():
    blocks = torch.ones(1, 2, 2, dtype=torch.bool)
    assert plan(blocks, 16, device="cpu").deterministic is False
    assert plan(blocks, 16, device="cpu", deterministic=True).deterministic is True
    q = torch.randn(1, 1, 32, 64)
    with pytest.raises(TypeError, match="deterministic must be True or False"):
        block_sparse_attention(q, q, q, plan(blocks, 16, device="cpu"), impl="reference",
                               deterministic=1)  # fmt: skip


@settings(max_examples=30, deadline=None)
@given(
    batch=st.integers(1, 2),
    kv_heads=st.sampled_from([1, 2]),
    group=st.sampled_from([1, 2]),
    one_layout_head=st.booleans(),
    n_q=st.integers(1, 4),
    n_k=st.integers(1, 4),
    block=st.sampled_from([2, 4]),
    cut_q=st.integers(0, 3),
    cut_k=st.integers(0, 3),
    causal=st.booleans(),
    bottom_right=st.booleans(),
    seed=st.integers(0, 2**31),
)
def test_reference_through_a_plan_matches_the_oracle(
    batch, kv_heads, group, one_layout_head, n_q, n_k, block, cut_q, cut_k, causal,
    bottom_right, seed,
):  # fmt: skip
    q_heads = kv_heads * group
    seq_q, seq_k = n_q * block - min(cut_q, block - 1), n_k * block - min(cut_k, block - 1)
    rng = np.random.default_rng(seed)
    blocks = torch.from_numpy(rng.random((1 if one_layout_head else q_heads, n_q, n_k)) < 0.6)
    p = plan(blocks, block, causal=causal, seq_q=seq_q, seq_k=seq_k, device="cpu",
             causal_alignment="bottom_right" if bottom_right else "top_left")  # fmt: skip
    q, k, v = _qkv(batch, q_heads, kv_heads, seq_q, seq_k, seed=seed % 1000)
    out, lse = block_sparse_attention(q, k, v, p, impl="reference", return_lse=True)
    ref, ref_lse = naive_attention(q, k, v, blocks, block, causal=causal,
                                   bottom_right=bottom_right, lse=True)  # fmt: skip
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-10)
    assert lse.dtype == torch.float64 and lse.shape == (batch, q_heads, seq_q)  # q's fp64
    torch.testing.assert_close(lse, ref_lse, rtol=1e-10, atol=1e-10)  # -inf too


def test_empty_rows_give_zeros_and_minus_infinity():
    blocks = torch.zeros(1, 2, 2, dtype=torch.bool)
    blocks[0, 1, 0] = True
    q, k, v = _qkv(1, 2, 2, 8, 8)
    out, lse = block_sparse_attention(q, k, v, plan(blocks, 4, device="cpu"), impl="reference",
                                      return_lse=True)  # fmt: skip
    assert (out[:, :, :4] == 0).all() and (lse[:, :, :4] == float("-inf")).all()
    assert torch.isfinite(lse[:, :, 4:]).all()


def test_bottom_right_with_more_queries_than_keys_leaves_the_first_rows_empty():
    q, k, v = _qkv(1, 1, 1, 12, 8)
    p = plan(torch.ones(1, 3, 2, dtype=torch.bool), 4, causal=True,
             causal_alignment="bottom_right", device="cpu")  # fmt: skip
    out, lse = block_sparse_attention(q, k, v, p, impl="reference", return_lse=True)
    assert (out[0, 0, :4] == 0).all() and (lse[0, 0, :4] == float("-inf")).all()
    assert torch.isfinite(lse[0, 0, 4:]).all()


def test_plan_against_wrong_operands_is_named():
    p = plan(torch.ones(4, 2, 2, dtype=torch.bool), 16, device="cpu")
    q, k, v = _qkv(1, 2, 2, 32, 32)
    with pytest.raises(ValueError, match="q must have the plan's 4 heads, got Hq = 2"):
        block_sparse_attention(q, k, v, p, impl="reference")
    q, k, v = _qkv(1, 4, 4, 32, 20)
    with pytest.raises(ValueError, match=r"plan's lengths Sq x Sk = 32 x 32 .* got 32 x 20"):
        block_sparse_attention(q, k, v, p, impl="reference")


def test_a_dropped_plan_cannot_be_found_by_id():
    p = plan(torch.ones(1, 1, 1, dtype=torch.bool), 16, device="cpu")
    plan_id = p.plan_id
    del p
    with pytest.raises(ValueError, match=f"no live BlockSparsePlan has id {plan_id}"):
        plan_by_id(plan_id)


def test_plans_are_shared_between_threads():
    p = plan(torch.ones(2, 3, 3, dtype=torch.bool), 4, causal=True, device="cpu")
    q, k, v = _qkv(1, 2, 2, 12, 12)
    expected = block_sparse_attention(q, k, v, p, impl="reference")
    results = [None] * 8

    def work(i):
        results[i] = block_sparse_attention(q, k, v, p, impl="reference")

    threads = [threading.Thread(target=work, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for result in results:
        torch.testing.assert_close(result, expected, rtol=0, atol=0)


def test_tall_backward_steps_are_taken_only_where_the_table_does_not_grow():
    """A layout of 128-token blocks (dense, causal) computes the same query rows at 128-row
    backward steps as at 64; one of scattered 64-token blocks computes up to twice as many, and
    keeps 64-row steps."""
    from gpu.backward.builds import takes_tall_steps

    dense = plan(torch.ones(2, 8, 8, dtype=torch.bool), 128, device="cpu")
    causal = plan(torch.ones(2, 8, 8, dtype=torch.bool), 128, causal=True, device="cpu")
    assert dense.backward_tiles(64) == 2 * dense.backward_tiles(128) == 2 * 2 * 64
    assert takes_tall_steps(dense.backward_tiles) and takes_tall_steps(causal.backward_tiles)
    blocks = torch.zeros(1, 16, 16, dtype=torch.bool)
    blocks[0, ::2, ::3] = True  # every other 64-row block: half of each 128-row tile is empty
    scattered = plan(blocks, 64, device="cpu")
    assert scattered.backward_tiles(128) == scattered.backward_tiles(64)
    assert not takes_tall_steps(scattered.backward_tiles)
    # the choice keeps only the table it takes
    assert dense._takes_tall_steps() and list(dense._backward_luts) == [(128, 128)]
    assert not scattered._takes_tall_steps() and list(scattered._backward_luts) == [(64, 128)]
