"""The peers on the CPU: the block lists cuDNN BSA gets and the BlockMask and ``mask_mod``
FlexAttention's FLASH backend gets, each against a brute-force token mask over random layouts;
the form of the FLASH ``mask_mod`` (what torch 2.11's CuTe DSL code generator can compile); the
refusals; and the harness without the peers' packages."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.fx.experimental.proxy_tensor import make_fx

from designer.formats.flex_tiles import listed_tiles
from designer.layout import Layout
from gpu.bench import BenchConfig, peers, run_benchmark
from gpu.bench.cases import find_case
from gpu.bench.contenders import Case, Unavailable, prepare
from gpu.bench.cudnn_bsa import block_lists, bsa_block, refusal
from gpu.bench.fa4 import fa4_refusal
from gpu.bench.flex import (
    DENSE,
    FLASH,
    LOOKUP,
    TRITON,
    FlexSession,
    FlexUnavailable,
    FlexVariant,
    flex_variants,
)
from gpu.bench.flex_masks import generate_gather_mask
from tests.scripts import ROOT

CPU = torch.device("cpu")


def _blocks(data, heads, n_q, n_k, causal=False):
    """A random bool ``[heads, n_q, n_k]`` layout (a causal one keeps its lower triangle)."""
    density = data.draw(st.sampled_from([0.0, 0.3, 0.7, 1.0]))
    seed = data.draw(st.integers(0, 2**31))
    gen = torch.Generator().manual_seed(seed)
    blocks = torch.rand(heads, n_q, n_k, generator=gen) < density
    return blocks & torch.ones(n_q, n_k, dtype=torch.bool).tril() if causal else blocks


def _token_mask(blocks, block_size, heads, causal):
    """``[heads, Sq, Sk]``: the layout's tokens, a one-head layout for every head."""
    tokens = blocks.repeat_interleave(block_size, 1).repeat_interleave(block_size, 2)
    tokens = tokens.expand(heads, -1, -1)
    return tokens & torch.ones(tokens.shape[1:], dtype=torch.bool).tril() if causal else tokens


@settings(max_examples=40, deadline=None)
@given(
    data=st.data(),
    layout_heads=st.sampled_from([1, 3]),
    n_q=st.integers(1, 3),
    n_k=st.integers(1, 3),
    block_size=st.sampled_from([64, 128, 192, 256]),
    batch=st.integers(1, 2),
)
def test_cudnn_block_lists_give_the_layouts_token_mask(
    data, layout_heads, n_q, n_k, block_size, batch
):
    heads = 3
    blocks = _blocks(data, layout_heads, n_q, n_k)
    index, nums, block = block_lists(blocks, block_size, heads=heads, batch=batch)
    assert block == bsa_block(block_size) and block_size % block == 0
    rows, cols = n_q * block_size // block, n_k * block_size // block
    assert index.dtype == nums.dtype == torch.int32
    assert nums.shape == (batch, heads, rows) and index.shape[:3] == (batch, heads, rows)
    assert 1 <= index.shape[3] <= cols and int(index.min()) >= 0 and int(index.max()) < cols
    expected = _token_mask(blocks, block_size, heads, causal=False)
    for b in range(batch):
        listed = torch.zeros_like(expected)
        for h in range(heads):
            for r in range(rows):
                row = index[b, h, r, : nums[b, h, r]].tolist()
                assert row == sorted(set(row))  # ascending, distinct
                for c in row:
                    listed[h, r * block : (r + 1) * block, c * block : (c + 1) * block] = True
        assert torch.equal(listed, expected)


@pytest.mark.parametrize(
    ("changes", "reason"),
    [
        ({}, None),
        ({"block_size": 32}, "cuDNN BSA takes whole blocks of 64 or 128 tokens; this layout's "
         "blocks are 32 tokens"),
        ({"block_size": 16}, "blocks are 16 tokens"),
        ({"causal": True}, "cuDNN BSA has no causal mode"),
        ({"head_dim": 64, "backward": True}, "backward on Hopper takes head dim 128, got 64"),
        ({"head_dim": 64}, None),
        ({"head_dim": 256}, "forward on Hopper takes head dim 64 or 96 or 128, got 256"),
        ({"heads_kv": 4, "backward": True}, "no GQA), got 16 query and 4 kv heads"),
        ({"heads_kv": 4}, None),  # the forward takes GQA
        ({"dtype": torch.float16, "backward": True}, "backward takes bf16 only, got float16"),
        ({"head_dim": 64, "backward": True, "arch_major": 10}, None),  # cuDNN's own word there
    ],
)  # fmt: skip
def test_cudnn_bsa_refuses_what_it_cannot_express(changes, reason):
    case = {"block_size": 64, "causal": False, "head_dim": 128, "dtype": torch.bfloat16,
            "heads_q": 16, "heads_kv": 16, "backward": False, "arch_major": 9}  # fmt: skip
    said = refusal(**{**case, **changes})
    assert said == reason if reason is None else reason in said
    with pytest.raises(ValueError, match="block_size must be a multiple of 64, got 32"):
        block_lists(torch.ones(1, 2, 2, dtype=torch.bool), 32, heads=1, batch=1)


@settings(max_examples=40, deadline=None)
@given(
    data=st.data(),
    layout_heads=st.sampled_from([1, 2]),
    n_blocks=st.integers(1, 8),
    block_size=st.sampled_from([16, 32, 64, 128]),
    causal=st.booleans(),
)
def test_flash_block_masks_and_mask_mods_give_the_layouts_token_mask(
    data, layout_heads, n_blocks, block_size, causal
):
    """Every FLASH variant of a random layout: its full tiles are the tiles the token mask fills,
    its partial tiles those it touches, and its ``mask_mod`` on every pair is the token mask."""
    from torch.nn.attention.flex_attention import create_mask

    heads, seq = 2, n_blocks * block_size
    if seq % 128 and block_size < 64:
        return  # no tile divides the length (Flex's own limit, tested in test_flex_variants)
    blocks = _blocks(data, layout_heads, n_blocks, n_blocks, causal)
    expected = _token_mask(blocks, block_size, heads, causal)
    session = FlexSession()
    for variant in flex_variants(blocks, block_size, causal=causal, backend=FLASH):
        call = session.prepare(blocks, block_size, causal=causal, device=CPU, variant=variant,
                               heads=heads)  # fmt: skip
        mask, tile = call.block_mask, variant.tile_size
        assert call.kernel_options == {"BACKEND": "FLASH"}
        n = -(-seq // tile)
        full = listed_tiles(mask.full_kv_num_blocks, mask.full_kv_indices, n)[0]
        partial = listed_tiles(mask.kv_num_blocks, mask.kv_indices, n)[0]
        tiles = expected.reshape(heads, n, tile, n, tile)
        assert torch.equal(full.expand(heads, -1, -1), tiles.all(dim=4).all(dim=2))
        touched = tiles.any(dim=4).any(dim=2)
        assert torch.equal((full | partial).expand(heads, -1, -1), touched)
        if variant.mask == DENSE:  # FLASH ignores the lists then: only a dense layout may
            assert bool(expected.all())
        else:
            tokens = create_mask(mask.mask_mod, 1, heads, seq, seq, device="cpu")[0]
            assert torch.equal(tokens, expected), variant.name


def _flash_problems(mask_mod) -> list[str]:
    """What torch 2.11's CuTe DSL code generator cannot compile in ``mask_mod``: a constant
    (Python int) index, which it passes where it needs a vector value; a captured 0-d tensor,
    whose load it indexes with a constant; and a captured dimension of 1, which invites one."""
    ids = [torch.zeros(1, dtype=torch.int32) for _ in range(4)]
    graph = make_fx(mask_mod)(*ids)
    problems = []
    for node in graph.graph.nodes:
        if node.op == "call_function" and node.target == torch.ops.aten.select.int:
            problems.append(f"constant index {node.args[1:]}")
        if node.op == "get_attr":
            shape = tuple(getattr(graph, node.target).shape)
            if not shape or min(shape) < 2:
                problems.append(f"captured tensor of shape {shape}")
    return problems


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("layout_heads", [1, 4])
def test_the_flash_mask_mod_is_tensors_only_and_the_check_catches_the_trap(causal, layout_heads):
    blocks = torch.ones(layout_heads, 4, 4, dtype=torch.bool).tril()
    blocks[:, 0, 0] = False  # no closed form: the lookup
    session = FlexSession()
    variants = flex_variants(blocks, 64, causal=causal, backend=FLASH)
    assert [v.name for v in variants] == ["lookup-t128", "lookup-t64"]
    for variant in variants:
        call = session.prepare(blocks, 64, causal=causal, device=CPU, variant=variant, heads=4)
        assert _flash_problems(call.block_mask.mask_mod) == []
    # the Triton gather, which FLASH in torch 2.11 cannot compile, is caught
    gather = generate_gather_mask(torch.zeros(1, 16, 16, dtype=torch.bool),
                                  torch.zeros((), dtype=torch.bool))  # fmt: skip
    assert set(_flash_problems(gather)) == {
        "constant index (0, 0)", "captured tensor of shape (1, 16, 16)",
        "captured tensor of shape ()",
    }  # fmt: skip


def test_flash_never_gets_a_mask_free_block_mask_for_a_sparse_layout():
    band = find_case("banded_7pct-b128-d64").layout(seq_len=2048).blocks
    assert [v.name for v in flex_variants(band, 128, causal=False, backend=FLASH)] == [
        "lookup-t128"
    ]
    dense = torch.ones(1, 16, 16, dtype=torch.bool)
    assert [v.name for v in flex_variants(dense, 128, causal=False, backend=FLASH)] == [
        "dense-t128"
    ]
    causal = find_case("causal-b64-d64").layout(seq_len=2048).blocks
    assert [v.name for v in flex_variants(causal, 64, causal=True, backend=FLASH)] == [
        "causal-t128", "causal-t64"
    ]  # fmt: skip
    with pytest.raises(FlexUnavailable, match="pytorch issue 188322"):
        FlexSession().prepare(band, 128, causal=False, device=CPU,
                              variant=FlexVariant(DENSE, 128, backend=FLASH))  # fmt: skip
    with pytest.raises(ValueError, match="mask 'gather' does not run on the FLASH backend"):
        FlexVariant("gather", 128, backend=FLASH)
    with pytest.raises(ValueError, match="mask 'lookup' does not run on the TRITON backend"):
        FlexVariant(LOOKUP, 128, backend=TRITON)


def test_fa4_runs_dense_and_causal_only():
    assert fa4_refusal(torch.ones(1, 4, 4, dtype=torch.bool).tril(), 64, causal=True) is None
    assert fa4_refusal(torch.ones(1, 4, 4, dtype=torch.bool), 16, causal=False) is None  # dense
    for name, causal in (("banded_7pct-b64-d64", False), ("banded_7pct-b64-d64", True),
                         ("banded_7pct-b16-d64", False)):  # fmt: skip
        blocks = find_case(name).layout(seq_len=1024).blocks
        assert "sparse layouts run on FA4 through flex_flash" in fa4_refusal(
            blocks, 64, causal=causal
        )


def _cpu_case(backward=False):
    q, k, v = (torch.randn(1, 2, 128, 64) for _ in range(3))
    blocks = torch.ones(1, 2, 2, dtype=torch.bool)
    grad = torch.randn(1, 2, 128, 64) if backward else None
    return Case(q, k, v, blocks, 64, False, 0.125, None, FlexSession(), grad_out=grad)


def test_without_their_packages_the_peers_say_what_to_install_and_nothing_else_changes():
    for name in ("flex_flash", "cudnn_bsa", "fa4"):
        if peers.installed(name):
            pytest.skip(f"{name} is installed here")
        with pytest.raises(Unavailable, match=r'^not installed: pip install ".*" \(or pip install '
                                              r'-e "\.\[peers\]"\)$'):  # fmt: skip
            prepare(name, _cpu_case())
    config = BenchConfig(heads=2, seq_q=128, head_dim=16, warmup=0, reps=1, device="cpu",
                         contenders=("reference", "flex_flash", "cudnn_bsa"))  # fmt: skip
    layout = Layout(torch.ones(1, 2, 2, dtype=torch.bool), 64)
    reference, flash, bsa = run_benchmark(config, layout).results
    assert reference.status == "ok" and reference.rel_error < 1e-2
    assert reference.speedup_vs_flex is None and reference.speedup_vs_bsa is None
    assert flash.status == bsa.status == "unavailable"
    assert "flash-attn-4" in flash.message and "nvidia-cudnn-frontend" in bsa.message


def test_installed_peers_still_need_a_gpu(monkeypatch):
    monkeypatch.setattr(peers, "missing", lambda name: None)
    for name in ("flex_flash", "cudnn_bsa", "fa4"):
        with pytest.raises(Unavailable, match=f"{name} needs a CUDA device"):
            prepare(name, _cpu_case(backward=True))


def test_the_messages_name_what_the_peers_extra_installs():
    tomllib = pytest.importorskip("tomllib")  # Python 3.11 and newer
    extra = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    extra = extra["optional-dependencies"]["peers"]
    named = {requirement for peer in peers.PEERS.values() for _, _, requirement in peer.needs}
    assert named == set(extra)
    assert peers.missing("fused") is None and peers.missing("sdpa") is None
