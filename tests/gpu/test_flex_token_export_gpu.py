"""A token-exact layout's exported ``BlockMask`` in compiled ``flex_attention`` on CUDA, forward
and backward, on Flex's Triton and FLASH (FA4) backends: its partial tiles run the exported
``mask_mod``, which reads each partial block's bits with tensor-only indexing.

The layouts come from ``from_mask_mod`` of the catalogue's families at blocks 16 to 128 and
lengths that are not whole blocks, on their dense grid and held as runs; out, dq, dk and dv
are compared with fp64 attention under the layout's own token mask (relative error, bf16
tolerance), and that mask with Flex's ``create_mask`` of the same ``mask_mod``.
"""

from __future__ import annotations

import pytest
import torch
from torch.nn.attention.flex_attention import create_mask

import designer.layout
from designer import from_mask_mod
from designer.formats import to_block_mask
from designer.layout import Layout
from designer.patterns.token_canvas import token_natten
from designer.patterns.token_documents import token_documents
from designer.patterns.token_window import token_sliding_window
from tests.gpu.flex_backends import BACKENDS, KERNEL_OPTIONS
from tests.gpu.oracle import relative_error
from tests.gpu.test_flex_export_gpu import TOLERANCE, compiled_flex  # noqa: F401 - fixture

pytestmark = pytest.mark.gpu

FAMILIES = {
    "window": token_sliding_window(200),
    "documents": token_documents([100, 400, 300, 200], causal=True),
    "natten": token_natten(32, 7, 7, height=32),
}


def _fp64_attention(q, k, v, grad, mask):
    """Out and (dq, dk, dv) of fp64 masked softmax attention (autograd on the CPU)."""
    leaves = [t.double().cpu().requires_grad_() for t in (q, k, v)]
    scores = leaves[0] @ leaves[1].transpose(-1, -2) * q.shape[-1] ** -0.5
    weights = torch.softmax(scores.masked_fill(~mask, float("-inf")), -1).nan_to_num(0.0)
    out = weights @ leaves[2]
    out.backward(grad.double().cpu())
    return out, [leaf.grad for leaf in leaves]


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize(
    ("family", "block", "seq"),
    [("window", 16, 1000), ("documents", 64, 1000), ("natten", 128, 1024), ("window", 128, 900),
     ("documents", 32, 1000)],
)  # fmt: skip
@pytest.mark.parametrize("as_runs", [False, True])
def test_token_layouts_run_exactly_in_compiled_flex(
    compiled_flex,  # noqa: F811 - the fixture
    monkeypatch,
    backend,
    family,
    block,
    seq,
    as_runs,
):
    """On the dense grid's mask_mod, and held as runs (a long-context design's form), on the
    runs' one with its partial blocks' bits found by row."""
    mask_mod = FAMILIES[family]
    layout = from_mask_mod(mask_mod, heads=2, seq_q=seq, seq_k=seq, block_size=block)
    tokens = layout.token_mask()
    assert torch.equal(tokens, create_mask(mask_mod, 1, 2, seq, seq, device="cpu")[0])
    assert layout.partials is not None
    if as_runs:
        monkeypatch.setattr(designer.layout, "DENSE_CELLS", 0)
        layout = Layout(layout.to_runs(), block, layout.partials, seq, seq)
        assert layout.runs is not None
    block_mask = to_block_mask(layout, device="cuda")
    cuda = torch.Generator(device="cuda").manual_seed(block)

    def randn():
        return torch.randn(1, 2, seq, 64, generator=cuda, device="cuda", dtype=torch.bfloat16)

    q, k, v, grad = randn(), randn(), randn(), randn()
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out = compiled_flex(*leaves, block_mask=block_mask, kernel_options=KERNEL_OPTIONS[backend])
    out.backward(grad)
    expected, gradients = _fp64_attention(q, k, v, grad, tokens[None].cpu())
    errors = {"out": relative_error(out, expected)}
    for name, leaf, want in zip(("dq", "dk", "dv"), leaves, gradients, strict=True):
        assert torch.isfinite(leaf.grad).all(), name
        errors[name] = relative_error(leaf.grad, want)
    assert max(errors.values()) <= TOLERANCE, errors
