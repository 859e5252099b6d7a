"""The forward's launch: a plan needs a CUDA device, its arguments are checked, and on the GPU
every build matches fp64 dense masked attention across block sizes, head dims, dtypes and
masks."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

import gpu
from gpu.forward.builds import ALTERNATIVE_TILES, HOPPER_ALTERNATIVES, HOPPER_BUILDS, choose_config
from gpu.forward.launch import plan_forward, run_fused
from gpu.forward.lut import group_heads
from gpu.forward.sm80 import KernelConfig
from gpu.forward.sm90 import HopperConfig
from gpu.partials import split_token_mask
from gpu.runtime import is_hopper
from gpu.support import HEAD_DIMS

TOLERANCE = {torch.bfloat16: 1e-2, torch.float16: 5e-3}


# --------------------------------------------------------------------------- CPU checks
def test_plan_needs_a_cuda_device():
    layout = gpu.plan(torch.ones(1, 2, 2, dtype=torch.bool), 64, device="cpu")
    config = KernelConfig("bf16", 64)
    with pytest.raises(ValueError, match="device must be a CUDA device, got cpu"):
        plan_forward(layout, config)
    with pytest.raises(TypeError, match="config must be a KernelConfig or HopperConfig"):
        plan_forward(layout, "bf16")


def test_plans_with_partial_blocks_take_builds_that_mask_them():
    """Only ``tokens`` builds carry the token-tile code (it slowed full tiles): a plan with partial
    blocks takes them, one without does not, and a build without it is refused for partials."""
    blocks, partials = split_token_mask(torch.ones(1, 128, 128, dtype=torch.bool).tril(), 64)
    with_partials = gpu.plan(blocks, 64, partials=partials, device="cpu")
    full = gpu.plan(blocks, 64, device="cpu")
    for head_dim in HEAD_DIMS:
        for the_plan, tokens in ((with_partials, True), (full, False)):
            partial = the_plan.n_partials > 0  # what gpu.plan passes
            config = choose_config(head_dim=head_dim, dtype=torch.bfloat16, wgmma=True,
                                   work=the_plan.tile_work, tokens=partial)  # fmt: skip
            assert config.tokens is tokens and config.defines()["TOKENS"] == int(tokens)
    with pytest.raises(ValueError, match=r"2 partial blocks, which HopperConfig masks only with "
                       r"tokens=True .* got tokens=False"):  # fmt: skip
        plan_forward(with_partials, HopperConfig("bf16", 64))


def planned(blocks, block_size, *, causal, head_dim, dtype, device):
    """The forward plan ``gpu.plan`` makes for contiguous operands of this head dim and dtype."""
    layout = gpu.plan(blocks, block_size, causal=causal, device=device)
    return layout.fused(dtype, head_dim, head_dim, head_dim)


# --------------------------------------------------------------------------- GPU checks
def reference(q, k, v, blocks, block_size, causal, scale):
    """fp64 dense masked attention; rows without an allowed key give zeros."""
    mask = blocks.to(q.device).repeat_interleave(block_size, 1).repeat_interleave(block_size, 2)
    if causal:
        mask = mask & torch.ones_like(mask[0]).tril()
    scores = (q.double() @ k.double().transpose(-1, -2)) * scale
    scores = scores.masked_fill(~mask, float("-inf"))
    probs = torch.softmax(scores, -1).nan_to_num(0.0)
    return probs @ v.double()


def check(blocks, block_size, *, causal, head_dim, dtype, batch=2, seed=0, config=None):
    """Run the kernel on fresh random inputs into a NaN-poisoned output and compare.

    ``config`` None: the build a plan picks for this GPU.
    """
    n_heads, n_q, n_k = blocks.shape
    generator = torch.Generator(device="cuda").manual_seed(seed)
    shape_q = (batch, n_heads, n_q * block_size, head_dim)
    shape_k = (batch, n_heads, n_k * block_size, head_dim)
    q, k, v = (
        torch.randn(s, device="cuda", generator=generator).to(dtype)
        for s in (shape_q, shape_k, shape_k)
    )
    scale = 1.0 / math.sqrt(head_dim)
    if config is None:
        plan = planned(blocks, block_size, causal=causal, head_dim=head_dim, dtype=dtype,
                       device=q.device)  # fmt: skip
    else:
        plan = plan_forward(gpu.plan(blocks, block_size, causal=causal, device=q.device), config)
    out = torch.full_like(q, float("nan"))
    assert run_fused(plan, q, k, v, scale=scale, out=out) is out
    torch.cuda.synchronize()
    expected = reference(q, k, v, blocks, block_size, causal, scale)
    assert not out.isnan().any(), "unwritten or NaN output elements"
    error = (out.double() - expected).norm() / expected.norm().clamp_min(1e-30)
    assert error <= TOLERANCE[dtype], f"relative error {error:.2e}"
    silent = expected.abs().amax(-1) == 0  # rows with no allowed key
    assert (out[silent] == 0).all()
    return error


def mixed_layout(n_q: int, n_k: int, seed: int) -> torch.Tensor:
    """Three heads: random with an empty row, all ones, one block."""
    generator = torch.Generator().manual_seed(seed)
    blocks = torch.zeros(3, n_q, n_k, dtype=torch.bool)
    blocks[0] = torch.rand(n_q, n_k, generator=generator) < 0.4
    blocks[0, min(1, n_q - 1)] = False
    blocks[1] = True
    blocks[2, n_q // 2, n_k // 3] = True
    return blocks


# Sq != Sk, and neither a multiple of the 128 x 64 tiles where the block allows it.
SHAPES = {16: (13, 21), 32: (7, 11), 64: (5, 3), 128: (3, 5)}


def hopper() -> bool:
    return is_hopper(torch.device("cuda"))


@pytest.mark.gpu
@pytest.mark.parametrize("wgmma", [False, True])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("head_dim", HEAD_DIMS)
@pytest.mark.parametrize("block_size", sorted(SHAPES))
def test_matches_fp64_reference(block_size, head_dim, dtype, causal, wgmma):
    if wgmma and not hopper():
        pytest.skip("wgmma needs a Hopper GPU (compute capability 9.0)")
    n_q, n_k = SHAPES[block_size]
    blocks = mixed_layout(n_q, n_k, seed=block_size + head_dim)
    config = choose_config(head_dim=head_dim, dtype=dtype, wgmma=wgmma)
    check(blocks, block_size, causal=causal, head_dim=head_dim, dtype=dtype, config=config)


@pytest.mark.gpu
@pytest.mark.parametrize("tiles", ALTERNATIVE_TILES)
def test_alternative_tiles_match_reference(tiles):
    """Every tile shape the timing probe measures computes the same function."""
    head_dim, *shape = tiles
    config = KernelConfig("bf16", head_dim, *shape)
    for causal in (False, True):
        check(
            mixed_layout(13, 21, seed=7),
            16,
            causal=causal,
            head_dim=head_dim,
            dtype=torch.bfloat16,
            config=config,
        )


@pytest.mark.gpu
@pytest.mark.parametrize(
    ("head_dim", "settings"),
    HOPPER_ALTERNATIVES + [(d, settings) for d in HEAD_DIMS for settings, _ in HOPPER_BUILDS[d]],
)
def test_hopper_builds_match_reference(head_dim, settings):
    """Every Hopper build a plan may take or the probe measures computes the same function,
    long rows included."""
    if not hopper():
        pytest.skip("the Hopper kernel needs compute capability 9.0")
    config = HopperConfig("bf16", head_dim, **settings)
    for causal in (False, True):
        check(mixed_layout(13, 21, seed=7), 16, causal=causal, head_dim=head_dim,
              dtype=torch.bfloat16, config=config)  # fmt: skip
    full = torch.ones(1, 12, 12, dtype=torch.bool)
    half = HopperConfig("fp16", head_dim, **settings)
    check(full, 64, causal=False, head_dim=head_dim, dtype=torch.float16, config=half, batch=1)


@pytest.mark.gpu
@pytest.mark.parametrize("build", ["planned", "128x128", "64x64"])
@pytest.mark.parametrize("causal", [False, True])
def test_many_work_units_per_cta(causal, build):
    """More work units than SMs several times over: each persistent CTA runs many units of
    different lengths (empty ones included), so its rings and Q buffers wrap many times."""
    if build != "planned" and not hopper():
        pytest.skip("the Hopper kernel needs compute capability 9.0")
    generator = torch.Generator().manual_seed(11)
    blocks = torch.rand(4, 40, 40, generator=generator) < 0.3
    blocks[:, 3] = False  # empty query rows
    blocks[1, :, :5] = True  # long rows on one head
    config = {
        "planned": None,
        "128x128": HopperConfig("bf16", 64, 128, pingpong=True, consumers=2),
        "64x64": HopperConfig("bf16", 64, 64, pingpong=False, consumers=1, min_blocks=3),
    }[build]
    check(blocks, 128, causal=causal, head_dim=64, dtype=torch.bfloat16, batch=3, seed=4,
          config=config)  # fmt: skip


@pytest.mark.gpu
@pytest.mark.parametrize("consumers", [2, 1])
@pytest.mark.parametrize("max_ctas", [None, 7])
def test_head_groups_give_the_same_output(consumers, max_ctas):
    """Units run in groups of (batch, head) pairs sized by the L2; a group of 3 over 10 pairs
    (the last one partial) computes exactly what one group of all pairs does, whether a group
    is one round of CTAs or several with idle CTAs in its last (7 CTAs: 3 or 4 rounds a group)."""
    if not hopper():
        pytest.skip("the Hopper kernel needs compute capability 9.0")
    blocks = mixed_layout(9, 9, seed=8)[:1]
    seq = 9 * 64
    config = HopperConfig("bf16", 64, 128, pingpong=consumers == 2, consumers=consumers,
                          min_blocks=3 - consumers)  # fmt: skip
    plan = plan_forward(gpu.plan(blocks, 64, causal=True, device="cuda"), config)
    if max_ctas is not None:
        plan = dataclasses.replace(plan, max_ctas=max_ctas)
    generator = torch.Generator(device="cuda").manual_seed(9)
    q, k, v = (torch.randn(2, 5, seq, 64, device="cuda", generator=generator).bfloat16()
               for _ in range(3))  # fmt: skip
    pair_bytes = 4 * seq * 64
    grouped = dataclasses.replace(plan, pairs_in_l2=3)
    assert (
        plan.pairs_in_l2
        == max(1, torch.cuda.get_device_properties(q.device).L2_cache_size // 2 // pair_bytes)
        >= 10
    )
    out = run_fused(grouped, q, k, v, scale=0.125, out=torch.full_like(q, float("nan")))
    torch.testing.assert_close(out, run_fused(plan, q, k, v, scale=0.125), rtol=0, atol=0)
    expected = reference(q, k, v, blocks.expand(5, -1, -1), 64, True, 0.125)
    assert (out.double() - expected).norm() / expected.norm() <= TOLERANCE[torch.bfloat16]


@pytest.mark.gpu
@pytest.mark.parametrize("heads_per_group", [1, 3])
def test_item_head_groups_give_the_same_output(heads_per_group):
    """Items ordered in groups of layout heads (the plan's L2-sized order) compute exactly what
    the heaviest-first order over every head does."""
    if not hopper():
        pytest.skip("the Hopper kernel needs compute capability 9.0")
    blocks = mixed_layout(9, 9, seed=12)
    blocks = torch.cat([blocks, blocks.flip(1)])  # 6 heads
    layout = gpu.plan(blocks, 64, device="cuda")
    plan = layout.fused(torch.bfloat16, 64, 64, 64)
    lut = layout.forward_lut(plan.config.block_m, plan.config.block_n)
    generator = torch.Generator(device="cuda").manual_seed(13)
    q, k, v = (torch.randn(2, 6, 9 * 64, 64, device="cuda", generator=generator).bfloat16()
               for _ in range(3))  # fmt: skip
    outputs = []
    for items in (lut.items, group_heads(lut.items, heads_per_group)):
        ordered = dataclasses.replace(plan, items=items)
        outputs.append(run_fused(ordered, q, k, v, scale=0.125,
                                 out=torch.full_like(q, float("nan"))))  # fmt: skip
    torch.testing.assert_close(outputs[0], outputs[1], rtol=0, atol=0)
    expected = reference(q, k, v, blocks, 64, False, 0.125)
    assert (outputs[1].double() - expected).norm() / expected.norm() <= TOLERANCE[torch.bfloat16]


@pytest.mark.gpu
def test_a_plan_launches_again_and_on_two_streams_at_once():
    """A plan keeps no state between launches: repeated launches and launches on two streams
    at once each compute every unit."""
    blocks = mixed_layout(12, 12, seed=14)
    plan = planned(blocks, 64, causal=True, head_dim=64, dtype=torch.bfloat16, device="cuda")
    generator = torch.Generator(device="cuda").manual_seed(15)
    q, k, v = (torch.randn(4, 3, 12 * 64, 64, device="cuda", generator=generator).bfloat16()
               for _ in range(3))  # fmt: skip
    first = run_fused(plan, q, k, v, scale=0.125)
    for _ in range(3):
        again = run_fused(plan, q, k, v, scale=0.125, out=torch.full_like(q, float("nan")))
        torch.testing.assert_close(again, first, rtol=0, atol=0)
    streams = [torch.cuda.Stream() for _ in range(2)]
    outs = [torch.full_like(q, float("nan")) for _ in streams]
    for stream in streams:
        stream.wait_stream(torch.cuda.current_stream())
    for _ in range(5):
        for stream, out in zip(streams, outs, strict=True):
            with torch.cuda.stream(stream):
                run_fused(plan, q, k, v, scale=0.125, out=out)
    torch.cuda.synchronize()
    for out in outs:
        torch.testing.assert_close(out, first, rtol=0, atol=0)


@pytest.mark.gpu
def test_broadcast_and_strided_views_match_their_copies():
    """Zero batch / head strides (expanded k, v) and a [B, S, H, D] q, read in place."""
    blocks = mixed_layout(5, 7, seed=3)
    generator = torch.Generator(device="cuda").manual_seed(5)
    q = torch.randn(2, 5 * 64, 3, 64, device="cuda", generator=generator).bfloat16().transpose(1, 2)
    k_row = torch.randn(1, 1, 7 * 64, 64, device="cuda", generator=generator).bfloat16()
    k = k_row.expand(2, 3, -1, -1)
    v = (
        torch.randn(2, 1, 7 * 64, 64, device="cuda", generator=generator)
        .bfloat16()
        .expand(2, 3, -1, -1)
    )
    plan = planned(blocks, 64, causal=True, head_dim=64, dtype=torch.bfloat16, device=q.device)
    out = run_fused(plan, q, k, v, scale=0.125, out=torch.full_like(q, float("nan")))
    copies = run_fused(plan, q.contiguous(), k.contiguous(), v.contiguous(), scale=0.125)
    torch.testing.assert_close(out, copies, rtol=0, atol=0)
    expected = reference(q, k, v, blocks, 64, True, 0.125)
    assert (out.double() - expected).norm() / expected.norm() <= TOLERANCE[torch.bfloat16]


@pytest.mark.gpu
@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_dense_long_rows_and_causal_longer_keys(head_dim):
    """Many key tiles per row (double buffering over several tiles), both causal shapes."""
    full = torch.ones(2, 16, 16, dtype=torch.bool)
    check(full, 64, causal=False, head_dim=head_dim, dtype=torch.bfloat16, batch=1)
    check(full[:, :6], 64, causal=True, head_dim=head_dim, dtype=torch.bfloat16, seed=1)
    check(full[:, :, :6], 64, causal=True, head_dim=head_dim, dtype=torch.float16, seed=2)


@pytest.mark.gpu
def test_small_blocks_band_partial_tiles():
    """A 16-token band: most visited 128 x 64 tiles are partial."""
    index = torch.arange(64)
    band = ((index[:, None] - index[None, :]).abs() <= 5).unsqueeze(0).repeat(2, 1, 1)
    band[1, :, ::3] = False  # a different layout per head
    for causal in (False, True):
        check(band, 16, causal=causal, head_dim=128, dtype=torch.bfloat16, batch=1)


@pytest.mark.gpu
def test_empty_layout_writes_zeros():
    blocks = torch.zeros(2, 3, 4, dtype=torch.bool)
    q = torch.randn(1, 2, 192, 64, device="cuda").bfloat16()
    k = torch.randn(1, 2, 256, 64, device="cuda").bfloat16()
    plan = planned(blocks, 64, causal=False, head_dim=64, dtype=torch.bfloat16, device=q.device)
    out = run_fused(plan, q, k, k, scale=0.125, out=torch.full_like(q, float("nan")))
    assert (out == 0).all()


@pytest.mark.gpu
def test_run_checks_its_tensors():
    blocks = torch.ones(2, 2, 2, dtype=torch.bool)
    q = torch.randn(1, 2, 128, 64, device="cuda").half()
    plan = planned(blocks, 64, causal=False, head_dim=64, dtype=torch.float16, device=q.device)
    cases = [
        ((q[:, :1], q[:, :1], q[:, :1]), {}, ValueError,
         "q must have the plan's 2 heads, got Hq = 1"),
        ((q, q[:, :, :64], q), {}, ValueError, "k and v must have the same shape"),
        ((q, q[:, :, :64], q[:, :, :64]), {}, ValueError, "plan's lengths Sq x Sk = 128 x 128"),
        ((q, q, q.bfloat16()), {}, ValueError, "v must match q's dtype"),
        ((q, q, q.transpose(2, 3).contiguous().transpose(2, 3)), {}, ValueError,
         "v must have a contiguous head dim"),
        ((q, q, q), {"scale": -1.0}, ValueError, "scale must be > 0"),
        ((q, q, q), {"out": q.cpu()}, ValueError, "out must be a .* tensor on cuda"),
        ((q, q, q), {"lse": torch.zeros(1, 2, 64, device="cuda")}, ValueError,
         "lse must be a contiguous float32"),
        ((q, q, [1]), {}, TypeError, "v must be a torch tensor"),
    ]  # fmt: skip
    if not hopper():  # the mma.sync kernel compiles its K/V row strides in
        cases.append(((q, q.transpose(1, 2).contiguous().transpose(1, 2), q), {}, ValueError,
                      "k and v rows must be 64 and 64 elements apart"))  # fmt: skip
    for args, kwargs, error, match in cases:
        with pytest.raises(error, match=match):
            run_fused(plan, *args, **{"scale": 0.125, **kwargs})
