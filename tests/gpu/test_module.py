"""``gpu.BlockSparseAttention`` on the CPU with ``impl="reference"``: building from designs, the
state dict, memory orders, gradients, the plan's life and every refusal."""

from __future__ import annotations

import io

import pytest
import torch

import gpu
from designer.design import Design
from designer.formats import save_design
from designer.layout import Layout
from designer.patterns import attention_sinks
from gpu import BlockSparseAttention, GpuUnavailableError, block_sparse_attention
from gpu.reference import dense_masked_attention_backward
from tests.factories import random_layout
from tests.gpu.oracle import naive_attention


def _qkv(heads=4, kv_heads=2, seq_q=64, seq_k=64, dim=8, dtype=torch.float64, seed=0):
    gen = torch.Generator().manual_seed(seed)
    shapes = [(2, heads, seq_q, dim), (2, kv_heads, seq_k, dim), (2, kv_heads, seq_k, dim)]
    return tuple(torch.randn(s, generator=gen, dtype=dtype) for s in shapes)


def _design(causal=True) -> Design:
    layout = Layout(attention_sinks(2, 4, 4, sink_blocks=1, window_blocks=2), 16)
    return Design(layout, name="sinks", causal=causal)


def _module(rng, **kwargs) -> BlockSparseAttention:
    layout = random_layout(rng, 4, 4, 4, density=0.5, block_size=16)
    return BlockSparseAttention(layout, impl="reference", **kwargs)


@pytest.mark.parametrize("source", ["path", "bytes", "file", "design"])
def test_from_design_matches_the_oracle(tmp_path, source):
    design = _design()
    path = tmp_path / "sinks.pt"
    save_design(design, path)
    given = {"path": str(path), "bytes": path.read_bytes(), "file": io.BytesIO(path.read_bytes()),
             "design": design}[source]  # fmt: skip
    attn = BlockSparseAttention.from_design(given, impl="reference")
    assert (attn.name, attn.block_size, attn.causal, attn.seq_q) == ("sinks", 16, True, 64)
    assert torch.equal(attn.blocks, design.layout.blocks)
    q, k, v = _qkv(heads=2, kv_heads=1)
    expected = naive_attention(q, k, v, design.layout.blocks, 16, causal=True)
    torch.testing.assert_close(attn(q, k, v), expected, rtol=1e-12, atol=1e-12)


def test_from_design_refuses_a_bad_file():
    with pytest.raises(ValueError, match="design file"):
        BlockSparseAttention.from_design(b"PK\x03\x04 not a zip", impl="reference")


def test_state_dict_round_trip_into_a_module_of_another_design(rng):
    source = _module(rng, causal=True, causal_alignment="bottom_right", seq_q=60, seq_k=50,
                     name="mine")  # fmt: skip
    buffer = io.BytesIO()
    torch.save(source.state_dict(), buffer)
    state = torch.load(io.BytesIO(buffer.getvalue()), weights_only=True)
    fresh = BlockSparseAttention(torch.ones(1, 2, 3, dtype=torch.bool), 32, impl="reference")
    fresh.load_state_dict(state)
    assert fresh.blocks.dtype == torch.bool
    assert torch.equal(fresh.blocks, source.blocks)
    assert fresh.get_extra_state() == source.get_extra_state()
    q, k, v = _qkv(seq_q=60, seq_k=50)
    torch.testing.assert_close(fresh(q, k, v), source(q, k, v), rtol=0, atol=0)


def test_state_dict_of_a_model_holding_the_module(rng):
    model = torch.nn.Sequential(torch.nn.Linear(2, 2), _module(rng, name="inner"))
    copy = torch.nn.Sequential(torch.nn.Linear(2, 2), _module(rng))
    copy.load_state_dict(model.state_dict())
    assert copy[1].name == "inner" and torch.equal(copy[1].blocks, model[1].blocks)


@pytest.mark.parametrize(
    ("key", "value", "match"),
    [
        ("blocks", torch.full((4, 4, 4), 2), "only 0 and 1"),
        ("blocks", torch.ones(4, 4, 4), "integers or bools"),
        ("_extra_state", {"block_size": 16}, "extra state must be a dict with keys"),
        ("_extra_state", "x", "extra state must be a dict"),
    ],
)
def test_load_state_dict_refuses_bad_state_and_keeps_the_module(rng, key, value, match):
    attn = _module(rng, name="kept")
    before = (attn.blocks.clone(), attn.get_extra_state())
    state = {**attn.state_dict(), key: value}
    with pytest.raises((ValueError, TypeError), match=match):
        attn.load_state_dict(state)
    assert torch.equal(attn.blocks, before[0]) and attn.get_extra_state() == before[1]


def test_load_state_dict_refuses_lengths_the_blocks_cannot_cover(rng):
    attn = _module(rng)
    state = attn.state_dict()
    state["_extra_state"] = {**state["_extra_state"], "seq_q": 65}
    with pytest.raises(ValueError, match=r"seq_q \(4 blocks of 16\) must be in \[49, 64\], got 65"):
        attn.load_state_dict(state)


def test_bshd_reads_and_returns_the_other_memory_order(rng):
    attn = _module(rng, causal=True)
    q, k, v = _qkv()
    bshd = attn(*(x.transpose(1, 2).contiguous() for x in (q, k, v)), layout="bshd")
    assert bshd.shape == (2, 64, 4, 8)
    torch.testing.assert_close(bshd.transpose(1, 2), attn(q, k, v), rtol=0, atol=0)


def test_forward_matches_the_functional_api_with_scale(rng):
    attn = _module(rng)
    q, k, v = _qkv()
    expected = block_sparse_attention(q, k, v, attn.blocks, 16, scale=0.3, impl="reference")
    torch.testing.assert_close(attn(q, k, v, scale=0.3), expected, rtol=0, atol=0)


def test_repr_shows_name_density_block_size_and_causal():
    attn = BlockSparseAttention.from_design(_design(), impl="reference")
    text = repr(attn)
    for part in ("name='sinks'", "blocks=4x4 of 16", "density=", "causal=top_left", "heads=2"):
        assert part in text
    assert f"{attn.density:.2%}" in text
    plain = BlockSparseAttention(torch.ones(1, 2, 2, dtype=torch.bool), 32, impl="reference")
    assert "causal=False" in repr(plain) and "name=" not in repr(plain)


def test_gradients_flow_and_match_the_fp64_reference_backward(rng):
    attn = _module(rng, causal=True, seq_q=60, seq_k=60)
    q, k, v = (x.requires_grad_() for x in _qkv(seq_q=60, seq_k=60))
    grad_out = torch.randn(q.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(9))
    attn(q, k, v, scale=0.5).backward(grad_out)
    expected = dense_masked_attention_backward(
        q.detach(), k.detach(), v.detach(), grad_out, attn.blocks, 16, causal=True, scale=0.5
    )
    for got, want in zip((q.grad, k.grad, v.grad), expected, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-10, atol=1e-10)


def test_the_plan_is_built_once_and_again_after_a_change(rng):
    attn = _module(rng)
    q, k, v = _qkv()
    first = attn.plan()
    attn(q, k, v)
    assert attn.plan() is first
    before = attn(q, k, v)
    with torch.no_grad():
        attn.blocks.zero_()  # an in-place edit: a new plan, and every row is empty now
    assert attn.plan() is not first
    assert torch.count_nonzero(attn(q, k, v)) == 0 and torch.count_nonzero(before) > 0
    rebuilt = attn.plan()
    attn.load_state_dict(_module(rng).state_dict())
    assert attn.plan() is not rebuilt
    attn.to(torch.float32)  # any move drops the plan
    assert attn._plan is None


def test_torch_compile_traces_the_module_forward_and_backward(rng):
    attn = _module(rng, causal=True)
    q, k, v = (x.requires_grad_() for x in _qkv())
    attn.plan()  # with a plan built first, no graph break

    def loss(q, k, v):
        return attn(q, k, v).square().sum()

    compiled = torch.compile(loss, backend="eager", fullgraph=True)
    got = torch.autograd.grad(compiled(q, k, v), (q, k, v))
    want = torch.autograd.grad(loss(q, k, v), (q, k, v))
    for a, b in zip(got, want, strict=True):
        torch.testing.assert_close(a, b, rtol=0, atol=0)
    attn.load_state_dict(_module(rng, causal=False).state_dict())
    attn.plan()  # compiled code follows the new plan
    torch.testing.assert_close(compiled(q, k, v), loss(q, k, v), rtol=0, atol=0)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"impl": "cuda"}, ValueError, "impl must be one of"),
        ({"block_size": None}, TypeError, "block_size is required"),
        ({"block_size": 0}, ValueError, "block_size must be"),
        ({"seq_q": 100}, ValueError, r"seq_q \(2 blocks of 16\) must be in \[17, 32\]"),
        ({"causal": 1}, TypeError, "causal must be True or False"),
        ({"causal_alignment": "top"}, ValueError, "causal_alignment must be one of"),
        ({"name": 3}, TypeError, "name must be a string"),
        ({"layout": torch.ones(1, 2, 2)}, TypeError, "integers or bools"),
        ({"layout": torch.ones(1, 2, 2, 2, dtype=torch.bool)}, ValueError, "rank"),
        ({"layout": torch.ones(1, 0, 2, dtype=torch.bool)}, ValueError, "at least one"),
        ({"layout": Layout(torch.ones(1, 2, 2, dtype=torch.bool), 32)}, ValueError, "must equal"),
    ],
)
def test_bad_construction_says_what_is_wrong(kwargs, error, match):
    arguments = {"layout": torch.ones(1, 2, 2, dtype=torch.bool), "block_size": 16,
                 "impl": "reference", **kwargs}  # fmt: skip
    with pytest.raises(error, match=match):
        BlockSparseAttention(arguments.pop("layout"), **arguments)


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda m, q: m(q, q, q, layout="sbhd"), ValueError, "layout must be one of"),
        (lambda m, q: m(q[0], q, q), ValueError, r"q must be a \[B, H, S, D\] tensor"),
        (lambda m, q: m(q, q[0], q, layout="bshd"), ValueError, r"k must be a \[B, S, H, D\]"),
        (lambda m, q: m(q, q.numpy(), q), TypeError, "k must be a torch tensor"),
        (lambda m, q: m(q[:, :, :16], q, q), ValueError, "plan's lengths Sq x Sk = 32 x 32"),
        (lambda m, q: m(q.to("meta"), q, q), ValueError, "the module's layout is on cpu"),
        (lambda m, q: m(q, q, q, scale=-1.0), ValueError, "scale must be > 0"),
        (lambda m, q: m(q, q[:, :3], q[:, :3]), ValueError, "must divide"),
    ],
)
def test_bad_calls_say_what_is_wrong(call, error, match):
    attn = BlockSparseAttention(torch.ones(1, 2, 2, dtype=torch.bool), 16, impl="reference")
    with pytest.raises(error, match=match):
        call(attn, torch.randn(1, 4, 32, 8))


@pytest.mark.skipif(gpu.unavailable_reason() is None, reason="a GPU is available here")
@pytest.mark.parametrize("impl", ["fused", "sdd"])
def test_cuda_implementations_refuse_to_build_without_a_gpu(impl):
    with pytest.raises(GpuUnavailableError, match=f'impl="{impl}" needs a CUDA GPU.*reference'):
        BlockSparseAttention.from_design(_design(), impl=impl)
