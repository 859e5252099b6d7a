"""The fused kernel: its configurations compile, its arguments are checked, and on the GPU it
matches fp64 dense masked attention across block sizes, head dims, dtypes and masks."""

from __future__ import annotations

import dataclasses
import math
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from gpu.fused import (
    DTYPE_NAMES,
    HEAD_DIMS,
    HOPPER_BUILDS,
    KernelConfig,
    choose_config,
    plan_fused,
    plan_fused_with,
    run_fused,
)
from gpu.fused_hopper import HopperConfig
from gpu.fused_lut import build_fused_lut, group_heads
from gpu.fused_probe import ALTERNATIVE_TILES, HOPPER_ALTERNATIVES
from tests.gpu.nvcc import compile_source, nvcc_or_skip

TOLERANCE = {torch.bfloat16: 1e-2, torch.float16: 5e-3}


# --------------------------------------------------------------------------- CPU checks
def test_every_chosen_config_compiles_with_nvcc(tmp_path):
    nvcc = nvcc_or_skip()
    configs = [
        choose_config(head_dim=d, dtype=t, wgmma=w)
        for d in HEAD_DIMS
        for t in DTYPE_NAMES
        for w in (False, True)
    ]

    configs += [HopperConfig("bf16", d, **settings) for d, settings in HOPPER_ALTERNATIVES]
    configs += [HopperConfig("bf16", d, **settings) for d in HEAD_DIMS
                for settings, _ in HOPPER_BUILDS[d]]  # fmt: skip

    def compile_one(config: KernelConfig | HopperConfig) -> subprocess.CompletedProcess:
        out = tmp_path / f"{abs(hash(config))}.o"
        return compile_source(nvcc, config.source, config.defines(), out)

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(compile_one, configs))
    for config, result in zip(configs, results, strict=True):
        assert result.returncode == 0, f"{config}:\n{result.stderr}"


def test_choose_config_gives_valid_tiles():
    for head_dim in HEAD_DIMS:
        config = choose_config(head_dim=head_dim, dtype=torch.float16, wgmma=False)
        assert config.dtype == "f16" and config.block_m == 32 * config.n_warps
        assert config.defines()["HEAD_DIM"] == head_dim
        assert "WGMMA" not in config.defines()
        hopper_config = choose_config(head_dim=head_dim, dtype=torch.float16, wgmma=True)
        assert isinstance(hopper_config, HopperConfig)
        assert hopper_config.source == "fused_attention_hopper.cu"
        assert hopper_config.defines()["HEAD_DIM"] == head_dim
        assert hopper_config.defines()["DTYPE_BF16"] == 0


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"dtype": "f32"}, "dtype must be one of"),
        ({"head_dim": 96}, "head_dim must be one of"),
        ({"block_n": 32}, "block_n must be one of 64, 128"),
        ({"stages": 5}, "stages must be one of 2, 3, 4"),
        ({"head_dim": 128, "stages": 3}, "need 262400 bytes of shared memory"),
        ({"consumers": 3}, "consumers must be one of 1, 2"),
        ({"consumers": 1, "min_blocks": 2}, "pingpong needs two consumers"),
        ({"min_blocks": 2}, "min_blocks must be one of 1 with 2 consumer"),
        ({"consumers": 1, "pingpong": False}, "min_blocks must be one of 2, 3 with 1 consumer"),
        (
            {"consumers": 1, "pingpong": False, "min_blocks": 3},
            "three CTAs per SM hold 64-key tiles only",
        ),
        (
            {"head_dim": 128, "consumers": 1, "pingpong": False, "min_blocks": 2},
            "need 164096 bytes of shared memory per CTA, too many for 2 CTAs per SM",
        ),
    ],
)
def test_hopper_config_names_bad_values(kwargs, match):
    with pytest.raises(ValueError, match=match):
        HopperConfig(**{"dtype": "bf16", "head_dim": 64, **kwargs})


@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_hopper_takes_the_build_with_least_costed_work(head_dim):
    """Full tiles keep the default build; once its tiles compute more than the alternative's
    cost times the alternative's tile area, the alternative wins."""
    (default, _), (alternative, cost) = HOPPER_BUILDS[head_dim]
    first = HopperConfig("bf16", head_dim, **default)
    second = HopperConfig("bf16", head_dim, **alternative)

    def choose(first_area: float, second_area: float) -> HopperConfig:
        """The choice when the layout's active tiles cover these areas in each build."""
        counts = {(c.block_m, c.block_n): round(a / (c.block_m * c.block_n))
                  for c, a in ((first, first_area), (second, second_area))}  # fmt: skip
        return choose_config(head_dim=head_dim, dtype=torch.bfloat16, wgmma=True,
                             work=lambda m, n: (counts[m, n], 0))  # fmt: skip

    full = 2**20
    assert choose(full, full) == first
    assert choose(full * cost * 1.01, full) == second  # the default's tiles are mostly empty
    assert choose(full * cost * 0.99, full) == first
    assert choose(0, 0) == first  # an empty layout keeps the default
    assert choose_config(head_dim=head_dim, dtype=torch.bfloat16, wgmma=True) == first


@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_hopper_counts_a_fixed_cost_per_work_item(head_dim):
    """Each work item costs UNIT_TILES tiles besides its own: a band of 11 blocks of 64 (short
    rows, which the tile area alone would give the default build) takes the build of small
    tiles, a band of 49 blocks the default."""
    (default, _), (alternative, _) = HOPPER_BUILDS[head_dim]
    rows = torch.arange(64)

    def choice(width: int) -> tuple[int, int]:
        blocks = ((rows[:, None] - rows[None, :]).abs() <= width)[None]

        def work(block_m: int, block_n: int) -> tuple[int, int]:
            return build_fused_lut(blocks, 64, block_m=block_m, block_n=block_n,
                                   causal=False).work  # fmt: skip

        config = choose_config(head_dim=head_dim, dtype=torch.bfloat16, wgmma=True, work=work)
        return config.block_m, config.block_n

    small = HopperConfig("bf16", head_dim, **alternative)
    assert choice(5) == (small.block_m, small.block_n)
    large = HopperConfig("bf16", head_dim, **default)
    assert choice(24) == (large.block_m, large.block_n)


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"dtype": "f32"}, ValueError, "dtype must be one of"),
        ({"head_dim": 96}, ValueError, "head_dim must be one of"),
        ({"block_n": 48}, ValueError, "block_n must be one of"),
        ({"n_warps": 3}, ValueError, "n_warps must be one of 1, 2, 4"),
        ({"block_m": 64}, ValueError, "block_m must be 32 x n_warps = 128"),
        ({"min_blocks": 0}, ValueError, r"min_blocks must be in \[1, 4\]"),
        (
            {"head_dim": 128, "n_warps": 2, "block_m": 64},
            ValueError,
            "n_warps must be at least head_dim / 32 = 4",
        ),
    ],
)
def test_kernel_config_names_bad_values(kwargs, error, match):
    with pytest.raises(error, match=match):
        KernelConfig(**{"dtype": "bf16", "head_dim": 64, **kwargs})


def test_choose_config_rejects_other_dtypes():
    with pytest.raises(ValueError, match="dtype must be one of"):
        choose_config(head_dim=64, dtype=torch.float32, wgmma=False)


def test_plan_needs_a_cuda_device():
    with pytest.raises(ValueError, match="device must be a CUDA device, got cpu"):
        plan_fused(
            torch.ones(1, 2, 2, dtype=torch.bool),
            64,
            causal=False,
            head_dim=64,
            dtype=torch.bfloat16,
            device=torch.device("cpu"),
        )


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

    ``config`` None: the tiles ``plan_fused`` picks for this GPU.
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
        plan = plan_fused(
            blocks, block_size, causal=causal, head_dim=head_dim, dtype=dtype, device=q.device
        )
    else:
        plan = plan_fused_with(blocks, block_size, config, causal=causal, device=q.device)
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
    return torch.cuda.get_device_capability() == (9, 0)


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
    half = HopperConfig("f16", head_dim, **settings)
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
    plan = plan_fused_with(blocks, 64, config, causal=True, device=torch.device("cuda"))
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
    plan = plan_fused(blocks, 64, causal=False, head_dim=64, dtype=torch.bfloat16,
                      device=torch.device("cuda"))  # fmt: skip
    lut = build_fused_lut(blocks, 64, block_m=plan.config.block_m, block_n=plan.config.block_n,
                          causal=False)  # fmt: skip
    generator = torch.Generator(device="cuda").manual_seed(13)
    q, k, v = (torch.randn(2, 6, 9 * 64, 64, device="cuda", generator=generator).bfloat16()
               for _ in range(3))  # fmt: skip
    outputs = []
    for items in (lut.items, group_heads(lut.items, heads_per_group)):
        ordered = dataclasses.replace(plan, items=items.cuda())
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
    plan = plan_fused(blocks, 64, causal=True, head_dim=64, dtype=torch.bfloat16,
                      device=torch.device("cuda"))  # fmt: skip
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
    plan = plan_fused(blocks, 64, causal=True, head_dim=64, dtype=torch.bfloat16, device=q.device)
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
    plan = plan_fused(blocks, 64, causal=False, head_dim=64, dtype=torch.bfloat16, device=q.device)
    out = run_fused(plan, q, k, k, scale=0.125, out=torch.full_like(q, float("nan")))
    assert (out == 0).all()


@pytest.mark.gpu
def test_run_checks_its_tensors():
    blocks = torch.ones(2, 2, 2, dtype=torch.bool)
    q = torch.randn(1, 2, 128, 64, device="cuda").half()
    plan = plan_fused(blocks, 64, causal=False, head_dim=64, dtype=torch.float16, device=q.device)
    cases = [
        ((q[:, :1], q[:, :1], q[:, :1]), {}, ValueError, "q must have the plan's 2 heads, got 1"),
        ((q, q[:, :, :64], q), {}, ValueError, "k and v must have the same shape"),
        ((q, q[:, :, :64], q[:, :, :64]), {}, ValueError, "plan's lengths Sq x Sk = 128 x 128"),
        ((q, q, q.bfloat16()), {}, ValueError, "v must match q's dtype"),
        ((q, q, q.transpose(2, 3).contiguous().transpose(2, 3)), {}, ValueError,
         "v must have a contiguous head dim"),
        ((q, q, q), {"scale": -1.0}, ValueError, "scale must be positive"),
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
