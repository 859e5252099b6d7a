"""The fused kernel as a library, on a GPU: plans, strided views, GQA, logsumexp, causal alignment,
partial last blocks, ``torch.compile``, CUDA graphs, streams and several devices, each against
fp64 dense masked attention on fresh random inputs with NaN-poisoned outputs."""

from __future__ import annotations

import pytest
import torch

import gpu
from gpu import block_sparse_attention
from gpu.reference import dense_masked_attention
from tests.gpu.oracle import relative_error

pytestmark = pytest.mark.gpu

TOLERANCE = {torch.bfloat16: 1e-2, torch.float16: 5e-3}


def _randn(*shape, dtype=torch.bfloat16, seed=0):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(shape, generator=gen, device="cuda", dtype=dtype)


def _random_blocks(heads, n_q, n_k, density=0.4, seed=0):
    gen = torch.Generator().manual_seed(seed)
    blocks = torch.rand(heads, n_q, n_k, generator=gen) < density
    blocks[:, min(1, n_q - 1)] = False  # an empty block row
    return blocks


def _check(q, k, v, the_plan, *, scale=None, lse_too=True):
    """Run with a poisoned out, compare out (and LSE) with the fp64 reference; return out."""
    out = torch.full_like(q, float("nan"))
    result, lse = block_sparse_attention(q, k, v, the_plan, scale=scale, out=out, return_lse=True)
    assert result is out
    ref, ref_lse = dense_masked_attention(
        q, k, v, the_plan.blocks, the_plan.block_size, causal=the_plan.causal,
        causal_alignment=the_plan.causal_alignment, scale=scale, return_lse=True,
    )  # fmt: skip
    torch.cuda.synchronize()
    assert not out.isnan().any(), "an output element was not written (or is NaN)"
    error = relative_error(out, ref)
    assert error <= TOLERANCE[q.dtype], f"relative error {error:.2e}"
    empty = torch.isinf(ref_lse)
    assert (out[empty] == 0).all(), "rows without keys must be zeros"
    if lse_too:
        assert lse.dtype == torch.float32 and lse.shape == q.shape[:3]
        assert (lse[empty] == float("-inf")).all()
        torch.testing.assert_close(lse[~empty].double(), ref_lse[~empty], rtol=2e-3, atol=2e-3)
    return out


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("head_dim", [64, 128])
@pytest.mark.parametrize("block", [16, 32, 64, 128])
def test_plan_call_matches_layout_call_and_reference(dtype, head_dim, block):
    n_q, n_k = 512 // block, 768 // block
    blocks = _random_blocks(3, n_q, n_k, seed=block)
    q = _randn(2, 3, n_q * block, head_dim, dtype=dtype, seed=1)
    k, v = (_randn(2, 3, n_k * block, head_dim, dtype=dtype, seed=s) for s in (2, 3))
    the_plan = gpu.plan(blocks, block, causal=True, device=q.device)
    out = _check(q, k, v, the_plan)
    by_layout = block_sparse_attention(q, k, v, blocks, block, causal=True)
    torch.testing.assert_close(by_layout, out, rtol=0, atol=0)


@pytest.mark.parametrize(("q_heads", "kv_heads"), [(16, 4), (16, 1), (8, 8)])
@pytest.mark.parametrize("one_layout_head", [False, True])
def test_gqa_and_mqa(q_heads, kv_heads, one_layout_head):
    block, n = 64, 6
    blocks = _random_blocks(1 if one_layout_head else q_heads, n, n, 0.5, seed=q_heads + kv_heads)
    q = _randn(2, q_heads, n * block, 64, seed=4)
    k, v = (_randn(2, kv_heads, n * block, 64, seed=s) for s in (5, 6))
    _check(q, k, v, gpu.plan(blocks, block, causal=True, device=q.device))


@pytest.mark.parametrize("head_dim", [64, 128])
def test_bshd_memory_is_read_in_place(head_dim):
    """``[B, S, H, D]`` memory as ``[B, S, H, D]``.transpose(1, 2), and a fused QKV slice."""
    batch, seq, heads, block = 2, 512, 4, 64
    blocks = _random_blocks(heads, seq // block, seq // block, 0.5, seed=9)
    qkv = _randn(batch, seq, 3, heads, head_dim, seed=8)
    q, k, v = (qkv[:, :, i].transpose(1, 2) for i in range(3))
    assert not q.is_contiguous()
    the_plan = gpu.plan(blocks, block, device=q.device)
    out = _check(q, k, v, the_plan)
    contiguous = block_sparse_attention(q.contiguous(), k.contiguous(), v.contiguous(), the_plan)
    torch.testing.assert_close(out, contiguous, rtol=0, atol=0)
    bshd_out = torch.empty(batch, seq, heads, head_dim, device="cuda", dtype=q.dtype)
    result = block_sparse_attention(q, k, v, the_plan, out=bshd_out.transpose(1, 2))
    assert result.data_ptr() == bshd_out.data_ptr()
    torch.testing.assert_close(bshd_out.transpose(1, 2), contiguous, rtol=0, atol=0)
    default_out = block_sparse_attention(
        *(x.transpose(1, 2).contiguous().transpose(1, 2) for x in (q, k, v)), the_plan
    )
    assert default_out.transpose(1, 2).is_contiguous()  # out keeps q's memory order


@pytest.mark.parametrize(("seq_q", "seq_k"), [(256, 640), (640, 256), (1000, 1500)])
@pytest.mark.parametrize("alignment", ["top_left", "bottom_right"])
def test_causal_alignments(seq_q, seq_k, alignment):
    block = 64
    n_q, n_k = -(-seq_q // block), -(-seq_k // block)
    blocks = _random_blocks(2, n_q, n_k, 0.7, seed=seq_q)
    q = _randn(1, 2, seq_q, 128, seed=10)
    k, v = (_randn(1, 2, seq_k, 128, seed=s) for s in (11, 12))
    the_plan = gpu.plan(blocks, block, causal=True, causal_alignment=alignment, seq_q=seq_q,
                        seq_k=seq_k, device=q.device)  # fmt: skip
    _check(q, k, v, the_plan)


@pytest.mark.parametrize(
    ("seq_q", "seq_k", "block"), [(1000, 1000, 64), (1000, 1500, 64), (4000, 4000, 128),
                                  (100, 37, 16), (33, 70, 32)],
)  # fmt: skip
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("head_dim", [64, 128])
def test_partial_last_blocks(seq_q, seq_k, block, causal, head_dim):
    n_q, n_k = -(-seq_q // block), -(-seq_k // block)
    blocks = _random_blocks(2, n_q, n_k, 0.6, seed=seq_k)
    blocks[:, -1, -1] = True  # the corner block, cut on both sides
    q = _randn(2, 2, seq_q, head_dim, seed=13)
    k, v = (_randn(2, 2, seq_k, head_dim, seed=s) for s in (14, 15))
    the_plan = gpu.plan(blocks, block, causal=causal, seq_q=seq_q, seq_k=seq_k, device=q.device)
    _check(q, k, v, the_plan)
    by_layout = block_sparse_attention(q, k, v, blocks, block, causal=causal)  # lengths from q, k
    torch.testing.assert_close(by_layout, block_sparse_attention(q, k, v, the_plan))


def test_empty_rows_and_empty_layout():
    q = _randn(1, 2, 256, 64, seed=16)
    k = v = _randn(1, 2, 256, 64, seed=17)
    empty = gpu.plan(torch.zeros(1, 4, 4, dtype=torch.bool), 64, device=q.device)
    out, lse = block_sparse_attention(q, k, v, empty, return_lse=True)
    assert (out == 0).all() and (lse == float("-inf")).all()
    _check(q, k, v, gpu.plan(_random_blocks(2, 4, 4, 0.5, seed=3), 64, device=q.device))


def test_torch_compile_fullgraph():
    blocks = _random_blocks(4, 8, 8, 0.5, seed=18)
    q = _randn(2, 4, 512, 64, seed=19)
    k, v = (_randn(2, 2, 512, 64, seed=s) for s in (20, 21))
    the_plan = gpu.plan(blocks, 64, causal=True, device=q.device)

    def attention(q, k, v):
        out, lse = block_sparse_attention(q * 1.0, k, v, the_plan, return_lse=True)
        return out.float().sum(-1) + lse

    compiled = torch.compile(attention, fullgraph=True)
    torch.testing.assert_close(compiled(q, k, v), attention(q, k, v))


def test_cuda_graph_capture_and_replay():
    blocks = _random_blocks(2, 8, 8, 0.5, seed=22)
    q = _randn(1, 2, 512, 128, seed=23)
    k, v = (_randn(1, 2, 512, 128, seed=s) for s in (24, 25))
    the_plan = gpu.plan(blocks, 64, causal=True, device=q.device)
    eager = block_sparse_attention(q, k, v, the_plan)  # first call compiles: outside capture
    static_q = q.clone()
    graph = torch.cuda.CUDAGraph()
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        block_sparse_attention(static_q, k, v, the_plan)  # warm-up on the side stream
    torch.cuda.current_stream().wait_stream(stream)
    with torch.cuda.graph(graph):
        static_out = block_sparse_attention(static_q, k, v, the_plan)
    static_out.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(static_out, eager, rtol=0, atol=0)
    new_q = _randn(1, 2, 512, 128, seed=26)
    static_q.copy_(new_q)
    graph.replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(static_out, block_sparse_attention(new_q, k, v, the_plan))


def test_two_streams_run_their_own_calls():
    blocks = _random_blocks(2, 8, 8, 0.5, seed=27)
    the_plan = gpu.plan(blocks, 64, device="cuda")
    inputs = [tuple(_randn(1, 2, 512, 64, seed=30 + 3 * i + j) for j in range(3)) for i in range(2)]
    expected = [block_sparse_attention(*x, the_plan) for x in inputs]
    streams = [torch.cuda.Stream() for _ in inputs]
    results = []
    for stream, x in zip(streams, inputs, strict=True):
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            results.append(block_sparse_attention(*x, the_plan))
    for stream in streams:
        torch.cuda.current_stream().wait_stream(stream)
    for result, want in zip(results, expected, strict=True):
        torch.testing.assert_close(result, want, rtol=0, atol=0)


def test_layout_form_cache_hit_needs_no_sync_for_a_cuda_layout():
    blocks = _random_blocks(2, 8, 8, 0.5, seed=28).cuda()
    q, k, v = (_randn(1, 2, 512, 64, seed=s) for s in (40, 41, 42))
    first = block_sparse_attention(q, k, v, blocks, 64)  # a miss: copies the layout once
    the_plan = gpu.plan(blocks.cpu(), 64, device="cuda")
    block_sparse_attention(q, k, v, the_plan)  # compiles nothing new, but outside the check
    torch.cuda.set_sync_debug_mode("error")  # any synchronising torch call now raises
    try:
        again = block_sparse_attention(q, k, v, blocks, 64)
        with_plan = block_sparse_attention(q, k, v, the_plan)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.testing.assert_close(again, first, rtol=0, atol=0)
    torch.testing.assert_close(with_plan, first, rtol=0, atol=0)


def test_bad_operands_are_named():
    the_plan = gpu.plan(torch.ones(2, 4, 4, dtype=torch.bool), 64, device="cuda")
    q = _randn(1, 2, 256, 64)
    flat = _randn(2 * 256 * 64 + 1, seed=1)
    misaligned = flat[1:].view(1, 2, 256, 64)
    padded_rows = _randn(1, 2, 256, 68, seed=2)[..., :64]
    cases = [
        ((misaligned, q, q), ValueError, "q must start at a 16-byte aligned address"),
        ((q, padded_rows, q), ValueError, "k's strides of dims 0-2 must be multiples of 8"),
        ((q, q, q.transpose(2, 3).contiguous().transpose(2, 3)), ValueError,
         "v must have a contiguous head dim"),
        ((q, q[:, :1].expand(1, 3, 256, 64), q[:, :1].expand(1, 3, 256, 64)), ValueError,
         "Hkv must divide"),
        ((q.float(), q, q), TypeError, "q dtype must be one of bfloat16, float16"),
        ((q, q.half(), q.half()), ValueError, "k must match q's dtype"),
        ((q[:, :, :200], q, q), ValueError, "plan's lengths Sq x Sk = 256 x 256"),
        ((q.cpu(), q.cpu(), q.cpu()), ValueError, 'impl="fused" needs CUDA tensors'),
    ]  # fmt: skip
    for args, error, match in cases:
        with pytest.raises(error, match=match):
            block_sparse_attention(*args, the_plan)
    with pytest.raises(ValueError, match=r"out must be a \[1, 2, 256, 64\]"):
        block_sparse_attention(q, q, q, the_plan, out=q[:, :1], return_lse=True)
    with pytest.raises(RuntimeError, match='impl="sdd" has no backward pass'):
        block_sparse_attention(q.requires_grad_(), q, q, the_plan, impl="sdd")


def test_a_plan_for_another_device_is_refused_and_each_device_runs_its_own():
    if torch.cuda.device_count() < 2:
        pytest.skip(f"needs 2 GPUs, this machine has {torch.cuda.device_count()}")
    blocks = _random_blocks(2, 4, 4, 0.6, seed=50)
    plans = [gpu.plan(blocks, 64, causal=True, device=f"cuda:{i}") for i in range(2)]
    q0, k0, v0 = (_randn(1, 2, 256, 64, seed=s) for s in (51, 52, 53))
    with pytest.raises(ValueError, match="plan's device cuda:1"):
        block_sparse_attention(q0, k0, v0, plans[1])
    expected = _check(q0, k0, v0, plans[0])
    with torch.cuda.device(0):  # the current device is not q's
        on_one = block_sparse_attention(*(x.to("cuda:1") for x in (q0, k0, v0)), plans[1])
    torch.testing.assert_close(on_one.cpu(), expected.cpu(), rtol=0, atol=0)


def test_a_fresh_thread_launches_into_a_given_out():
    """A thread that never touched CUDA: the launcher enters the kernel's own context."""
    import threading

    the_plan = gpu.plan(_random_blocks(2, 4, 4, 0.6, seed=60), 64, device="cuda")
    q, k, v = (_randn(1, 2, 256, 64, seed=s) for s in (61, 62, 63))
    expected = block_sparse_attention(q, k, v, the_plan)
    out = torch.full_like(q, float("nan"))
    errors = []

    def work():
        try:
            block_sparse_attention(q, k, v, the_plan, out=out)
            torch.cuda.synchronize(q.device)
        except Exception as error:  # reported below, on the test's thread
            errors.append(error)

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert not errors, errors
    torch.testing.assert_close(out, expected, rtol=0, atol=0)
