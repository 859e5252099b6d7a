"""Every implementation through the public API against fp64 dense masked attention, on a GPU.

Fresh random inputs (never zeros), outputs poisoned with NaN first so an unwritten element fails,
relative error ‖out − ref‖ / ‖ref‖ ≤ 1e-2 (bf16) / 5e-3 (fp16).
"""

from __future__ import annotations

import importlib.util

import numpy as np
import pytest
import torch

from gpu import block_sparse_attention
from gpu.reference import dense_masked_attention
from tests.gpu.oracle import relative_error

pytestmark = pytest.mark.gpu

TOLERANCE = {torch.bfloat16: 1e-2, torch.float16: 5e-3}
IMPLS = ["reference", "sdd"] + (["fused"] if importlib.util.find_spec("gpu.forward") else [])
#: (dtype, block, head dim): every block size, head dim and dtype, without the full product
#: (each CUDA config is one compilation).
CONFIGS = [
    (torch.bfloat16, 16, 64),
    (torch.bfloat16, 32, 128),
    (torch.bfloat16, 64, 64),
    (torch.bfloat16, 128, 128),
    (torch.float16, 16, 128),
    (torch.float16, 32, 64),
    (torch.float16, 64, 128),
    (torch.float16, 128, 64),
]


def _inputs(batch, heads, seq_q, seq_k, dim, dtype, seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    return tuple(
        torch.randn(batch, heads, s, dim, generator=gen, device="cuda", dtype=dtype)
        for s in (seq_q, seq_k, seq_k)
    )


def _random_blocks(heads, n_q, n_k, density, seed):
    rng = np.random.default_rng(seed)
    blocks = torch.from_numpy(rng.random((heads, n_q, n_k)) < density)
    blocks[:, min(1, n_q - 1)] = False  # an empty query block row in every head
    return blocks


def _check(impl, q, k, v, blocks, block, *, causal=False, start_width=None, scale=None):
    out = torch.full_like(q, float("nan"))
    kwargs = {"start_width": start_width} if impl == "sdd" else {}
    result = block_sparse_attention(
        q, k, v, blocks, block, causal=causal, impl=impl, scale=scale, out=out, **kwargs
    )
    torch.cuda.synchronize()
    assert result is out
    ref = dense_masked_attention(q, k, v, blocks, block, causal=causal, scale=scale)
    assert not torch.isnan(out).any(), "an output element was not written (or is NaN)"
    error = relative_error(out, ref)
    assert error <= TOLERANCE[q.dtype], f"{impl}: relative error {error:.2e}"
    empty = ~blocks.expand(q.shape[1], -1, -1).any(-1).repeat_interleave(block, -1)  # [H, Sq]
    assert (out.permute(1, 2, 0, 3)[empty.cuda()] == 0).all(), "rows without keys must be zeros"
    return error


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize(("dtype", "block", "dim"), CONFIGS)
@pytest.mark.parametrize("causal", [False, True])
def test_random_per_head_layouts(impl, dtype, block, dim, causal):
    n_q, n_k = 512 // block, 384 // block + 1  # Sq != Sk
    q, k, v = _inputs(2, 3, n_q * block, n_k * block, dim, dtype, seed=block + dim)
    blocks = _random_blocks(3, n_q, n_k, 0.35, seed=block)
    _check(impl, q, k, v, blocks, block, causal=causal)


@pytest.mark.parametrize("impl", IMPLS)
@pytest.mark.parametrize(
    "layout",
    ["full", "single", "empty", "diagonal", "one_head_broadcast", "first_column"],
)
def test_special_layouts(impl, layout):
    block, n = 64, 6
    q, k, v = _inputs(1, 4, n * block, n * block, 128, torch.bfloat16, seed=7)
    blocks = torch.zeros(4, n, n, dtype=torch.bool)
    if layout == "full":
        blocks[:] = True
    elif layout == "single":
        blocks[:, 2, 3] = True
    elif layout == "empty":
        blocks = blocks[:1]
    elif layout == "diagonal":
        blocks[:] = torch.eye(n, dtype=torch.bool)
    elif layout == "one_head_broadcast":
        blocks = _random_blocks(1, n, n, 0.5, seed=3)
    else:
        blocks[:, :, 0] = True
    for causal in (False, True):
        _check(impl, q, k, v, blocks, block, causal=causal)


@pytest.mark.parametrize("start_width", [1, 2, 3, 8, 64])
def test_sdd_any_start_width(start_width):
    block = 16
    q, k, v = _inputs(1, 2, 24 * block, 20 * block, 64, torch.float16, seed=start_width)
    blocks = _random_blocks(2, 24, 20, 0.6, seed=start_width)
    _check("sdd", q, k, v, blocks, block, causal=True, start_width=start_width, scale=0.2)


@pytest.mark.parametrize("impl", IMPLS)
def test_cupy_arrays_in_and_out_and_non_contiguous_inputs(impl):
    import cupy

    block = 32
    q, k, v = _inputs(1, 2, 8 * block, 8 * block, 64, torch.float16, seed=11)  # CuPy has no bf16
    blocks = _random_blocks(2, 8, 8, 0.5, seed=11)
    expected = block_sparse_attention(q, k, v, blocks, block, impl=impl)
    result = block_sparse_attention(
        cupy.from_dlpack(q), cupy.from_dlpack(k), cupy.from_dlpack(v), blocks, block, impl=impl
    )
    assert isinstance(result, cupy.ndarray)
    torch.testing.assert_close(torch.from_dlpack(result), expected, rtol=0, atol=0)
    strided = [x.transpose(1, 2).contiguous().transpose(1, 2) for x in (q, k, v)]
    assert not strided[0].is_contiguous()
    if impl == "sdd":  # the SDD pipeline reads contiguous inputs only, and says so
        with pytest.raises(ValueError, match='impl="sdd" does not support non-contiguous q'):
            block_sparse_attention(*strided, blocks, block, impl=impl)
        return
    torch.testing.assert_close(
        block_sparse_attention(*strided, blocks, block, impl=impl), expected, rtol=0, atol=0
    )


@pytest.mark.parametrize("impl", IMPLS)
def test_runs_on_the_callers_stream(impl):
    block = 64
    q, k, v = _inputs(1, 2, 4 * block, 4 * block, 64, torch.float16, seed=5)
    blocks = torch.ones(2, 4, 4, dtype=torch.bool)
    expected = block_sparse_attention(q, k, v, blocks, block, impl=impl)
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        result = block_sparse_attention(q * 1, k, v, blocks, block, impl=impl)
    torch.cuda.current_stream().wait_stream(stream)
    torch.testing.assert_close(result, expected, rtol=0, atol=0)
