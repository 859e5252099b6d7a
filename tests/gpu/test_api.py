"""The API on the CPU: validation, dispatch rules and the reference implementation."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from designer.layout import Layout
from gpu import GpuUnavailableError, block_sparse_attention, unavailable_reason
from gpu import plan as gpu_plan
from gpu.reference import dense_masked_attention
from tests.factories import random_layout
from tests.gpu.oracle import naive_attention, relative_error


def _qkv(batch=1, heads=2, seq_q=64, seq_k=64, dim=16, dtype=torch.float32, seed=0):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, heads, seq_q, dim, generator=gen, dtype=dtype)
    k = torch.randn(batch, heads, seq_k, dim, generator=gen, dtype=dtype)
    v = torch.randn(batch, heads, seq_k, dim, generator=gen, dtype=dtype)
    return q, k, v


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("seq_q", "seq_k"), [(64, 64), (32, 96), (96, 32)])
def test_reference_matches_the_naive_oracle(rng, causal, seq_q, seq_k):
    q, k, v = _qkv(batch=2, heads=3, seq_q=seq_q, seq_k=seq_k, dtype=torch.float64)
    layout = random_layout(rng, 3, seq_q // 16, seq_k // 16, density=0.4, block_size=16)
    out = block_sparse_attention(q, k, v, layout, 16, causal=causal, impl="reference")
    ref = naive_attention(q, k, v, layout.blocks, 16, causal=causal)
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)


def test_chunking_does_not_change_the_result(rng):
    q, k, v = _qkv(heads=2, seq_q=128, seq_k=64, dtype=torch.float64)
    blocks = random_layout(rng, 2, 8, 4, density=0.5).blocks
    whole = dense_masked_attention(q, k, v, blocks, 16, causal=True)
    chunked = dense_masked_attention(q, k, v, blocks, 16, causal=True, chunk_bytes=1)
    torch.testing.assert_close(whole, chunked, rtol=0, atol=0)


def test_rows_without_keys_are_exact_zeros():
    q, k, v = _qkv(heads=1, seq_q=64, seq_k=64)
    blocks = torch.zeros(1, 4, 4, dtype=torch.bool)
    blocks[0, 1, 2] = True
    out = block_sparse_attention(q, k, v, blocks, 16, impl="reference")
    assert torch.isfinite(out).all()
    assert (out[:, :, :16] == 0).all() and (out[:, :, 32:] == 0).all()
    assert (out[:, :, 16:32] != 0).any()


def test_causal_block_above_the_diagonal_only_gives_zeros():
    q, k, v = _qkv(heads=1, seq_q=32, seq_k=32)
    blocks = torch.tensor([[[False, True], [False, False]]])
    out = block_sparse_attention(q, k, v, blocks, 16, causal=True, impl="reference")
    assert (out == 0).all()


def test_one_head_layout_broadcasts_like_the_expanded_one(rng):
    q, k, v = _qkv(heads=4)
    one = random_layout(rng, 1, 4, 4, density=0.5)
    broadcast = block_sparse_attention(q, k, v, one, 16, impl="reference")
    expanded = block_sparse_attention(
        q, k, v, one.blocks.expand(4, -1, -1).numpy(), 16, impl="reference"
    )
    torch.testing.assert_close(broadcast, expanded, rtol=0, atol=0)


def test_per_head_layouts_differ_per_head():
    q, k, v = _qkv(heads=2)
    blocks = torch.zeros(2, 4, 4, dtype=torch.bool)
    blocks[0].fill_diagonal_(True)
    blocks[1, :, 0] = True
    out = block_sparse_attention(q, k, v, blocks, 16, impl="reference")
    ref = naive_attention(q, k, v, blocks, 16)
    assert relative_error(out, ref) < 1e-6


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_inputs_come_back_in_their_dtype(rng, dtype):
    q, k, v = _qkv(dtype=dtype)
    layout = random_layout(rng, 2, 4, 4, density=0.5)
    out = block_sparse_attention(q, k, v, layout, 16, impl="reference", scale=0.3)
    assert out.dtype == dtype
    assert relative_error(out, naive_attention(q, k, v, layout.blocks, 16, scale=0.3)) < 1e-2


def test_out_is_written_in_place(rng):
    q, k, v = _qkv()
    layout = random_layout(rng, 2, 4, 4, density=0.5)
    out = torch.full_like(q, float("nan"))
    result = block_sparse_attention(q, k, v, layout, 16, impl="reference", out=out)
    assert result is out and torch.isfinite(out).all()


@settings(max_examples=25, deadline=None)
@given(
    heads=st.integers(1, 3),
    n_q=st.integers(1, 5),
    n_k=st.integers(1, 5),
    block=st.sampled_from([1, 2, 8]),
    density=st.floats(0.0, 1.0),
    causal=st.booleans(),
    seed=st.integers(0, 2**31),
)
def test_reference_property(heads, n_q, n_k, block, density, causal, seed):
    rng = np.random.default_rng(seed)
    layout_heads = int(rng.integers(0, 2)) * (heads - 1) + 1
    blocks = torch.from_numpy(rng.random((layout_heads, n_q, n_k)) < density)
    q, k, v = _qkv(heads=heads, seq_q=n_q * block, seq_k=n_k * block, dim=4, seed=seed)
    out = block_sparse_attention(q.double(), k.double(), v.double(), blocks, block,
                                 causal=causal, impl="reference")  # fmt: skip
    ref = naive_attention(q, k, v, blocks, block, causal=causal)
    torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-10)


# --------------------------------------------------------------------------- validation
def _call(**changes):
    q, k, v = _qkv()
    args = dict(q=q, k=k, v=v, layout=torch.ones(1, 4, 4, dtype=torch.bool), block_size=16)
    args.update(impl="reference")
    args.update(changes)
    return block_sparse_attention(**args)


@pytest.mark.parametrize(
    ("changes", "error", "match"),
    [
        ({"impl": "triton"}, ValueError, "impl must be one of 'fused', 'sdd', 'reference'"),
        ({"q": np.zeros((1, 2, 64, 16))}, TypeError, "q must be a torch tensor or CuPy array"),
        ({"q": torch.zeros(2, 64, 16)}, ValueError, r"q must be a non-empty \[B, H, S, D\]"),
        ({"v": torch.zeros(1, 2, 32, 16)}, ValueError, "k and v must have the same shape"),
        (
            {"k": torch.zeros(1, 3, 64, 16), "v": torch.zeros(1, 3, 64, 16)},
            ValueError,
            r"k's heads Hkv must divide q's heads Hq = 2 \(GQA/MQA\), got Hkv = 3",
        ),
        (
            {"k": torch.zeros(1, 2, 64, 8), "v": torch.zeros(1, 2, 64, 8)},
            ValueError,
            r"k must be \[B, Hkv, Sk, D\] with q's B and D",
        ),
        ({"q": torch.zeros(1, 2, 64, 16, dtype=torch.int32)}, TypeError, "q dtype must be"),
        ({"v": torch.zeros(1, 2, 64, 16, dtype=torch.float64)}, ValueError, "v must match q"),
        ({"block_size": 0}, ValueError, r"block_size must be >= 1, got 0"),
        ({"block_size": 16.0}, TypeError, "block_size must be an integer"),
        ({"layout": torch.ones(3, 4, 4)}, TypeError, "layout must hold integers or bools"),
        ({"layout": torch.ones(3, 4, 4, dtype=torch.bool)}, ValueError, "plan's 3 heads, got Hq"),
        (
            {"layout": torch.ones(1, 4, 5, dtype=torch.bool)},
            ValueError,
            r"covers 80 tokens along Sk, so Sk must be in \[65, 80\], got 64",
        ),
        (
            {"layout": torch.ones(1, 4, 4, dtype=torch.bool), "causal_alignment": "middle"},
            ValueError,
            "causal_alignment must be one of 'top_left', 'bottom_right'",
        ),
        (
            {"layout": gpu_plan(torch.ones(1, 4, 4, dtype=torch.bool), 16, device="cpu")},
            TypeError,
            "block_size, causal and causal_alignment come from the plan",
        ),
        ({"return_lse": True, "out": torch.zeros(1, 2, 64, 8)}, ValueError, "out must be a"),
        ({"layout": torch.full((1, 4, 4), 2)}, ValueError, "only 0 and 1"),
        (
            {"layout": Layout(torch.ones(1, 2, 2, dtype=torch.bool), 32)},
            ValueError,
            "layout's block_size",
        ),
        ({"causal": 1}, TypeError, "causal must be True or False"),
        ({"scale": float("nan")}, ValueError, "scale must be finite"),
        ({"scale": -0.5}, ValueError, r"scale must be > 0, got -0.5"),
        ({"scale": 0.0}, ValueError, r"scale must be > 0, got 0.0"),
        ({"start_width": 0}, ValueError, "start_width must be in"),
        ({"out": torch.zeros(1, 2, 64, 8)}, ValueError, r"out must be a \[1, 2, 64, 16\]"),
    ],
)
def test_bad_arguments_are_named(changes, error, match):
    with pytest.raises(error, match=match):
        _call(**changes)


@pytest.mark.skipif(unavailable_reason() is None, reason="this machine has a usable GPU")
@pytest.mark.parametrize("impl", ["fused", "sdd"])
def test_cuda_impls_without_a_gpu_say_why(impl):
    with pytest.raises(GpuUnavailableError, match=f'impl="{impl}" needs a CUDA GPU: .+'):
        _call(impl=impl)


@pytest.mark.gpu
@pytest.mark.parametrize(("device", "block_size", "match"), [
    ("cuda", 8, "block_size must be one of 16, 32, 64, 128, got 8"),
    ("cpu", 16, 'impl="sdd" needs CUDA tensors, got device cpu'),
])  # fmt: skip
def test_cuda_impl_limits_are_named(device, block_size, match):
    q, k, v = (x.to(device).half() for x in _qkv(dim=64))
    layout = torch.ones(1, 64 // block_size, 64 // block_size, dtype=torch.bool)
    with pytest.raises(ValueError, match=match):
        block_sparse_attention(q, k, v, layout, block_size, impl="sdd")


@pytest.mark.gpu
def test_cuda_impls_refuse_other_head_dims():
    q, k, v = (x.cuda().half() for x in _qkv(dim=96))
    with pytest.raises(ValueError, match=r"head dim D \(q.shape\[3\]\) must be one of 64, 128"):
        block_sparse_attention(q, k, v, torch.ones(1, 4, 4, dtype=torch.bool), 16, impl="sdd")


def test_layout_form_caches_plans_by_identity_version_and_content(monkeypatch):
    import gpu.api as api

    built = []
    real_plan = api.plan

    def counting_plan(*args, **kwargs):
        built.append(args[0])
        return real_plan(*args, **kwargs)

    monkeypatch.setattr(api, "plan", counting_plan)
    monkeypatch.setattr(api, "PLAN_CACHE_SIZE", 3)
    api.clear_plan_cache()
    blocks = torch.ones(1, 4, 4, dtype=torch.bool)
    call = lambda layout, **kw: _call(layout=layout, **kw)  # noqa: E731
    call(blocks)
    call(blocks)
    assert len(built) == 1  # same tensor, same version: cached
    call(blocks, causal=True)
    assert len(built) == 2  # causal is part of the key
    blocks[0, 0, 3] = False  # in place: a new version
    out = call(blocks)
    assert len(built) == 3
    torch.testing.assert_close(out, _call(layout=blocks.clone()))  # the new content is used
    array = np.ones((1, 4, 4), dtype=np.int64)
    call(array)
    call(array.copy())  # numpy: keyed by content
    assert len(built) == 5
    layout = Layout(torch.ones(1, 4, 4, dtype=torch.bool), 16)
    call(layout)
    call(layout)
    assert len(built) == 6
    assert len(api._PLANS) == 3  # bounded, oldest evicted first
    api.clear_plan_cache()
