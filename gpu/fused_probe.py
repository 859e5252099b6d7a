"""Quick timing of the fused kernel next to dense cuDNN SDPA and FlexAttention, for tuning.

``python -m gpu.fused_probe [--flex] [--variants] [--json PATH]`` times bf16, B=1, H=16,
S=16384, D=64 and 128 on banded layouts (block 128 at ≈2.3 %, 6.9 %, 24 %, the same token
bands at blocks 16 and 64), a causal and a dense layout. Method: CUDA events around the call
alone, 3 warm-ups, median of 15, the L2 flushed by writing a 256 MB buffer before each rep.
Effective TFLOP/s = 4·B·H·Sq·Sk·D·density / time. Errors are checked on 256 sampled query rows
of head 0 against fp64. ``python -m gpu.bench`` is the full harness; this is the short loop.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time
from collections.abc import Callable

import torch
import torch.nn.functional as F

from gpu.fused import KernelConfig, choose_config, plan_fused_with, run_fused
from gpu.fused_lut import tile_masks

BATCH, HEADS, SEQ = 1, 16, 16384
# (name, block size, band half-width in blocks or None for dense, causal)
CASES = [
    ("band 2.3%", 128, 1, False),
    ("band 6.9%", 128, 4, False),
    ("band 24%", 128, 16, False),
    ("dense", 128, None, False),
    ("causal", 128, None, True),
    ("band 2.3% @64", 64, 3, False),
    ("band 6.9% @64", 64, 9, False),
    ("band 2.3% @16", 16, 12, False),
    ("band 6.9% @16", 16, 36, False),
]
# Tiles timed with --variants on VARIANT_CASES (and checked by tests/gpu/test_fused.py):
# (head_dim, block_m, block_n, n_warps, min_blocks, wgmma)
ALTERNATIVE_TILES = [
    (64, 128, 128, 4, 1, False),
    (64, 64, 64, 2, 4, False),
    (64, 128, 128, 8, 1, True),
    (64, 64, 64, 4, 3, True),
    (128, 128, 128, 8, 1, True),
    (128, 64, 64, 4, 2, True),
]
VARIANT_CASES = ("band 6.9%", "dense", "band 6.9% @16")


def band_layout(block_size: int, half_width: int | None) -> torch.Tensor:
    n = SEQ // block_size
    if half_width is None:
        return torch.ones(HEADS, n, n, dtype=torch.bool)
    index = torch.arange(n)
    return ((index[:, None] - index[None, :]).abs() <= half_width).expand(HEADS, n, n).clone()


def timed_ms(fn: Callable[[], object], flush: torch.Tensor, reps: int = 15) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(reps):
        flush.zero_()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def sampled_error(out, q, k, v, blocks, block_size, causal, scale) -> float:
    """Relative error on 256 random query rows of batch 0, head 0, against fp64."""
    rows = torch.randperm(q.shape[2], device=q.device)[:256]
    scores = (q[0, 0, rows].double() @ k[0, 0].double().T) * scale
    keys = torch.arange(k.shape[2], device=q.device)
    allowed = blocks[0].to(q.device)[rows // block_size][:, keys // block_size]
    if causal:
        allowed &= rows[:, None] >= keys[None, :]
    probs = torch.softmax(scores.masked_fill(~allowed, float("-inf")), -1).nan_to_num(0.0)
    expected = probs @ v[0, 0].double()
    return float((out[0, 0, rows].double() - expected).norm() / expected.norm())


def flex_contender() -> Callable:
    """FlexAttention at its block size 128 with the same token mask (full tiles unmasked).

    One mask function reads layout buffers that each case overwrites in place, so the compiled
    kernel is reused across cases (one compilation per head dim).
    """
    from torch.nn.attention.flex_attention import BlockMask, flex_attention

    fine = torch.zeros(HEADS, SEQ // 16, SEQ // 16, dtype=torch.bool, device="cuda")
    is_causal = torch.zeros((), dtype=torch.bool, device="cuda")

    def mask_mod(b, h, q_idx, kv_idx):
        return fine[h, q_idx // 16, kv_idx // 16] & ((q_idx >= kv_idx) | ~is_causal)

    compiled = torch.compile(flex_attention, dynamic=False)

    def csr(active: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        counts = active.sum(-1).to(torch.int32)
        order = torch.argsort((~active).to(torch.int8), dim=-1, stable=True).to(torch.int32)
        return counts[None].cuda(), order[None].cuda()

    def prepare(q, k, v, blocks, block_size, causal, scale):
        words, flags = tile_masks(blocks, block_size, block_m=128, block_n=128, causal=causal)
        active, flags = torch.from_numpy(words != 0), torch.from_numpy(flags)
        repeat = block_size // 16
        fine.copy_(blocks.repeat_interleave(repeat, 1).repeat_interleave(repeat, 2))
        is_causal.fill_(causal)
        (kv_num, kv_idx), (full_num, full_idx) = (
            csr(active & (flags != 0)),
            csr(active & (flags == 0)),
        )
        block_mask = BlockMask.from_kv_blocks(
            kv_num, kv_idx, full_num, full_idx, BLOCK_SIZE=128, mask_mod=mask_mod
        )
        return lambda: compiled(q, k, v, block_mask=block_mask, scale=scale)

    return prepare


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--flex", action="store_true", help="also time FlexAttention")
    parser.add_argument("--variants", action="store_true", help="also time alternative tiles")
    parser.add_argument("--json", default=None, help="write the records here")
    parser.add_argument("--head-dims", default="64,128")
    args = parser.parse_args()
    torch.manual_seed(0)
    flush = torch.empty(256 * 2**20, dtype=torch.uint8, device="cuda")
    flex = flex_contender() if args.flex else None
    print(f"{torch.cuda.get_device_name()}, torch {torch.__version__}", flush=True)
    records = []
    for head_dim in (int(d) for d in args.head_dims.split(",")):
        records += probe_head_dim(head_dim, flush, flex, variants=args.variants)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(
                {"device": torch.cuda.get_device_name(), "records": records}, handle, indent=1
            )


def probe_head_dim(
    head_dim: int, flush: torch.Tensor, flex: Callable | None, *, variants: bool
) -> list[dict]:
    """Time every case at one head dim; print a line per (case, tiles) and return the records."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    shape = (BATCH, HEADS, SEQ, head_dim)
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    scale = 1 / math.sqrt(head_dim)
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        cudnn_ms = timed_ms(lambda: F.scaled_dot_product_attention(q, k, v), flush)
    dense_flops = 4 * BATCH * HEADS * SEQ * SEQ * head_dim
    print(f"D={head_dim}: cuDNN {cudnn_ms:.3f} ms {dense_flops / cudnn_ms / 1e9:.0f} TFLOP/s")
    records = []
    for name, block_size, half_width, causal in CASES:
        blocks = band_layout(block_size, half_width)
        if causal:
            blocks = blocks & torch.ones_like(blocks[0]).tril()
        density = _token_density(blocks, block_size, causal)
        useful = dense_flops * density
        hopper = torch.cuda.get_device_capability() == (9, 0)
        configs = [
            choose_config(head_dim=head_dim, dtype=torch.bfloat16, wgmma=wgmma)
            for wgmma in ((False, True) if hopper else (False,))
        ]
        if variants and name in VARIANT_CASES:
            configs += [
                KernelConfig("bf16", d, *tiles, wgmma=wgmma)
                for d, *tiles, wgmma in ALTERNATIVE_TILES
                if d == head_dim and (hopper or not wgmma)
            ]
        flex_ms = None
        if flex is not None:
            began = time.perf_counter()
            try:
                flex_ms = timed_ms(flex(q, k, v, blocks, block_size, causal, scale), flush)
            except Exception as error:  # keep timing our kernels; say what Flex did
                print(f"  FlexAttention failed: {type(error).__name__}: {error}", flush=True)
            print(f"  (flex done in {time.perf_counter() - began:.0f} s)", flush=True)
        for config in configs:
            plan = plan_fused_with(blocks, block_size, config, causal=causal, device=q.device)
            out = torch.empty_like(q)
            ms = timed_ms(lambda p=plan, o=out: run_fused(p, q, k, v, scale=scale, out=o), flush)
            error = sampled_error(out, q, k, v, blocks, block_size, causal, scale)
            record = {
                "case": name, "head_dim": head_dim, "block_size": block_size, "causal": causal,
                "density": density,
                "tiles": [config.block_m, config.block_n, config.n_warps, config.min_blocks],
                "instruction": "wgmma" if config.wgmma else "mma.sync",
                "ms": ms, "tflops": useful / ms / 1e9,
                "executed_tflops": plan.flops(BATCH) / ms / 1e9,
                "cudnn_ms": cudnn_ms, "vs_cudnn_time": cudnn_ms / ms,
                "flex_ms": flex_ms, "flex_tflops": useful / flex_ms / 1e9 if flex_ms else None,
                "vs_flex": flex_ms / ms if flex_ms else None,
                "error": error,
            }  # fmt: skip
            records.append(record)
            flex_text = (
                f" flex {record['flex_tflops']:.0f} x{record['vs_flex']:.2f}" if flex_ms else ""
            )
            print(
                f"  {name:15s} {density:6.2%} {record['instruction']:8s} "
                f"{record['tiles']!s:17s} {ms:8.3f} ms "
                f"{record['tflops']:5.0f} eff {record['executed_tflops']:5.0f} exec TFLOP/s"
                f"{flex_text} err {error:.1e}",
                flush=True,
            )
    return records


def _token_density(blocks: torch.Tensor, block_size: int, causal: bool) -> float:
    active = blocks.double().sum() * block_size * block_size
    if causal:  # diagonal blocks keep (b² + b) / 2 of their b² entries
        diagonal = blocks.diagonal(dim1=1, dim2=2).double().sum()
        active -= diagonal * (block_size * block_size - block_size) / 2
    return float(active / blocks.numel() / block_size**2)


if __name__ == "__main__":
    main()
