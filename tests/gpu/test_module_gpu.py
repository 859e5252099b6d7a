"""``gpu.BlockSparseAttention`` with our fused kernel on a GPU: forward and backward against the
fp64 references, a saved design and its state dict, no host sync per call, ``torch.compile``."""

from __future__ import annotations

import io

import pytest
import torch

from designer.design import Design
from designer.formats import save_design
from designer.layout import Layout
from designer.patterns import attention_sinks, random_blocks
from gpu import BlockSparseAttention
from gpu.reference import dense_masked_attention, dense_masked_attention_backward
from tests.gpu.oracle import relative_error

pytestmark = pytest.mark.gpu

FORWARD_TOLERANCE = {torch.bfloat16: 1e-2, torch.float16: 5e-3}
BACKWARD_TOLERANCE = {torch.bfloat16: 2e-2, torch.float16: 5e-3}


def _randn(shape, dtype, seed):
    gen = torch.Generator(device="cuda").manual_seed(seed)
    return torch.randn(shape, generator=gen, device="cuda", dtype=dtype)


def _saved_design(causal: bool) -> bytes:
    blocks = attention_sinks(4, 8, 8, sink_blocks=1, window_blocks=3) | random_blocks(
        4, 8, 8, probability=0.2, seed=5
    )
    buffer = io.BytesIO()
    save_design(Design(Layout(blocks, 64), name="sinks+random", causal=causal), buffer)
    return buffer.getvalue()


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("layout", ["bhsd", "bshd"])
def test_forward_and_backward_match_fp64(dtype, causal, layout):
    attn = BlockSparseAttention.from_design(_saved_design(causal), device="cuda")
    shapes = [(2, 4, 512, 64), (2, 2, 512, 64), (2, 2, 512, 64)]  # GQA 4 / 2
    q, k, v = (_randn(s, dtype, seed) for seed, s in enumerate(shapes))
    grad_out = _randn(shapes[0], dtype, 7)
    leaves = [x.clone().requires_grad_() for x in (q, k, v)]
    inputs = [x.transpose(1, 2) for x in leaves] if layout == "bshd" else leaves
    out = attn(*inputs, layout=layout)
    out = out.transpose(1, 2) if layout == "bshd" else out
    out.backward(grad_out)

    blocks = attn.blocks.cpu()
    expected = dense_masked_attention(q, k, v, blocks, 64, causal=causal)
    assert relative_error(out.detach(), expected) <= FORWARD_TOLERANCE[dtype]
    grads = dense_masked_attention_backward(q, k, v, grad_out, blocks, 64, causal=causal)
    for name, leaf, want in zip("qkv", leaves, grads, strict=True):
        error = relative_error(leaf.grad, want)
        assert error <= BACKWARD_TOLERANCE[dtype], f"d{name}: relative error {error:.2e}"


def test_state_dict_round_trip_and_moves_on_the_gpu():
    source = BlockSparseAttention.from_design(_saved_design(True), device="cuda")
    fresh = BlockSparseAttention(torch.ones(1, 1, 1, dtype=torch.bool), 64).cuda()
    fresh.load_state_dict(source.state_dict())
    q, k, v = (_randn((1, 4, 512, 128), torch.bfloat16, seed) for seed in range(3))
    torch.testing.assert_close(fresh(q, k, v), source(q, k, v), rtol=0, atol=0)
    on_cpu = fresh.to("cpu")
    with pytest.raises(ValueError, match="move the module"):
        on_cpu(q, k, v)
    torch.testing.assert_close(on_cpu.to("cuda")(q, k, v), source(q, k, v), rtol=0, atol=0)


def test_a_call_after_the_first_does_no_host_sync():
    attn = BlockSparseAttention.from_design(_saved_design(True), device="cuda")
    q, k, v = (_randn((1, 4, 512, 64), torch.bfloat16, seed) for seed in range(3))
    first = attn(q, k, v)  # builds the plan and compiles: outside the check
    torch.cuda.set_sync_debug_mode("error")
    try:
        again = attn(q, k, v)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.testing.assert_close(again, first, rtol=0, atol=0)


def test_torch_compile_forward_and_backward():
    attn = BlockSparseAttention.from_design(_saved_design(True), device="cuda")
    leaves = [_randn((1, 4, 512, 64), torch.bfloat16, seed).requires_grad_() for seed in range(3)]
    attn(*leaves)  # the plan exists before tracing

    def loss(q, k, v):
        return attn(q * 1.0, k, v).float().square().sum()

    loss(*leaves).backward()
    eager = [leaf.grad.clone() for leaf in leaves]
    for leaf in leaves:
        leaf.grad = None
    torch.compile(loss, fullgraph=True)(*leaves).backward()
    for got, want in zip((leaf.grad for leaf in leaves), eager, strict=True):
        torch.testing.assert_close(got, want)
