"""The exported ``BlockMask`` in compiled ``flex_attention`` on CUDA, forward and backward, on
Flex's Triton backend and on its FLASH (FA4) one.

Compiled Flex visits only the listed tiles and runs ``mask_mod`` inside partial ones (FLASH
compiles it to CuTe-DSL, which takes it only with tensor indices: a one-head design failed there
before); Triton's backward needs tiles divisible by its own (torch 2.11 refused 64-token ones).
Each case is one layout and shape, so one compile of the forward and one of the backward per
backend; the cases together cover one-head and per-head layouts, causal at both alignments and
not, partial lengths and blocks of 16, 32, 64 and 128. Out, dq, dk and dv are compared with the
fp64 reference (relative error, bf16 tolerance).
"""

from __future__ import annotations

import pytest
import torch

import designer.layout
from designer.formats import block_mask_tensors, to_block_mask
from designer.formats.runs_block_mask import sinks_window_mask_mod
from designer.layout import Layout
from designer.patterns.attention_sinks import attention_sinks_runs
from gpu.reference import dense_masked_attention, dense_masked_attention_backward
from tests.gpu.flex_backends import BACKENDS, KERNEL_OPTIONS
from tests.gpu.oracle import relative_error

pytestmark = pytest.mark.gpu

#: bf16 inputs, fp32 accumulation: the tolerance the fused kernel's gradients are held to.
TOLERANCE = 2e-2


@pytest.fixture(scope="module")
def compiled_flex():
    """One compiled ``flex_attention``: a fresh compile cache, room for a graph per case and
    backend, past which Dynamo raises rather than run eager, and ``fullgraph``, so nothing runs
    uncompiled."""
    from torch.nn.attention.flex_attention import flex_attention

    torch._dynamo.reset()
    with torch._dynamo.config.patch(recompile_limit=32, fail_on_recompile_limit_hit=True):
        yield torch.compile(flex_attention, dynamic=False, fullgraph=True)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("heads", "block", "alignment", "seq_q", "seq_k"),
    [
        (1, 16, "bottom_right", 900, 1000),  # one head serves both; partial blocks, Sq < Sk
        (2, 32, "top_left", 1000, 700),  # Sq > Sk, partial blocks
        (1, 64, "top_left", 960, 960),  # 15 whole blocks: a short last tile
        (2, 128, "bottom_right", 1000, 600),  # Sq > Sk: the first 400 queries keep no key
        (2, 64, None, 640, 900),  # not causal
    ],
)
def test_compiled_flex_gives_the_layouts_attention_and_gradients(
    compiled_flex, backend, heads, block, alignment, seq_q, seq_k
):
    n_q, n_k = -(-seq_q // block), -(-seq_k // block)
    generator = torch.Generator().manual_seed(block)
    blocks = torch.rand(heads, n_q, n_k, generator=generator) < 0.4
    blocks[:, 1] = False  # an empty query block row: zero output and gradients, no NaN
    causal, alignment = alignment is not None, alignment or "top_left"
    mask = to_block_mask(
        Layout(blocks, block), causal=causal, causal_alignment=alignment, seq_q=seq_q,
        seq_k=seq_k, device="cuda",
    )  # fmt: skip
    cuda = torch.Generator(device="cuda").manual_seed(block)

    def randn(seq):
        return torch.randn(1, 2, seq, 64, generator=cuda, device="cuda", dtype=torch.bfloat16)

    q, k, v, grad = randn(seq_q), randn(seq_k), randn(seq_k), randn(seq_q)
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out = compiled_flex(*leaves, block_mask=mask, kernel_options=KERNEL_OPTIONS[backend])
    out.backward(grad)
    _check(out, leaves, (q, k, v, grad), blocks, block, causal=causal,
           causal_alignment=alignment)  # fmt: skip


def _check(out, leaves, inputs, blocks, block, **rule) -> None:
    """Out and the leaves' gradients against the fp64 reference of ``blocks``."""
    q, k, v, grad = inputs
    expected = dense_masked_attention(q, k, v, blocks, block, **rule)
    gradients = dense_masked_attention_backward(q, k, v, grad, blocks, block, **rule)
    assert torch.isfinite(out).all()
    errors = {"out": relative_error(out, expected)}
    for name, leaf, want in zip(("dq", "dk", "dv"), leaves, gradients, strict=True):
        assert torch.isfinite(leaf.grad).all(), name
        errors[name] = relative_error(leaf.grad, want)
    assert max(errors.values()) <= TOLERANCE, errors


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("from_file", [False, True])
def test_a_design_held_as_runs_trains_in_compiled_flex(compiled_flex, monkeypatch, backend,
                                                       from_file):  # fmt: skip
    """A long-context design's BlockMask (made from its runs) and its file, read by
    ``from_kv_blocks``: compiled Flex's backward read compact lists out of range on the H200,
    so both are one entry per tile wide."""
    from torch.nn.attention.flex_attention import BlockMask

    monkeypatch.setattr(designer.layout, "DENSE_CELLS", 0)  # held as runs, as past the cap
    layout = Layout(attention_sinks_runs(2, 24, 24, sink_blocks=1, window_blocks=4), 64)
    assert layout.runs is not None
    if from_file:
        tensors = block_mask_tensors(layout, causal=True)
        tensors.pop("layout")
        lists = {key: value.cuda() if isinstance(value, torch.Tensor) else value
                 for key, value in tensors.items()}  # fmt: skip
        mask_mod = sinks_window_mask_mod(64, 1, 4, causal=True)
        mask = BlockMask.from_kv_blocks(**lists, mask_mod=mask_mod)
    else:
        mask = to_block_mask(layout, causal=True, device="cuda")
    cuda = torch.Generator(device="cuda").manual_seed(7)
    q, k, v, grad = (torch.randn(1, 2, 1536, 64, generator=cuda, device="cuda",
                                 dtype=torch.bfloat16) for _ in range(4))  # fmt: skip
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out = compiled_flex(*leaves, block_mask=mask, kernel_options=KERNEL_OPTIONS[backend])
    out.backward(grad)
    _check(out, leaves, (q, k, v, grad), layout.to_runs().to_dense(), 64, causal=True)
