"""The fused block-sparse flash-attention forward: kernel configuration, plan and launch.

``plan_fused`` does all host work once per layout (look-up table, upload, compilation);
``run_fused`` only checks its tensors and launches ``gpu/kernels/fused_attention.cu`` on the
caller's torch stream, so a benchmark that times ``run_fused`` times the kernel alone.
``launch_fused`` is the launch without the checks, for callers that validated already
(``gpu.block_sparse_attention`` with a ``gpu.plan``).

Work and traffic of one call, with ``T`` the key tiles visited per batch element
(``plan.n_tiles``: active ``block_m x block_n`` tiles summed over heads and query tiles):

- FLOPs executed: ``4 · B · T · block_m · block_n · D`` (two matmuls), against the
  ``4 · B · H · Sq · Sk · D · density`` that count as useful (effective TFLOP/s). A partial tile
  (small layout blocks, causal diagonal) costs a full tile.
- Device-memory bytes, at least: ``2 · B · H · (2 · Sq + 2 · Sk) · D`` (Q, K, V read once, O
  written once, 16-bit). K and V tiles are read once per visiting query tile, mostly from L2.

>>> config = choose_config(head_dim=128, dtype=torch.bfloat16, wgmma=True)
>>> config.block_m, config.block_n, config.n_warps, config.shared_bytes
(128, 128, 12, 196864)
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace

import torch

from designer.validate import as_block_tensor, check_bool, check_choice, check_float, check_int
from gpu.fused_hopper import ONE_CONSUMER, HopperConfig
from gpu.fused_lut import BLOCK_SIZES, TILE_SIZES, FusedLut, build_fused_lut, group_heads
from gpu.operands import check_attention_operands, check_lse, check_out, check_strides
from gpu.runtime import (
    KernelLauncher,
    check_shared_memory,
    compile_kernel,
    current_raw_stream,
    prefer_shared_memory,
)
from gpu.tensor_maps import RowMaps

KERNEL_SOURCE = "fused_attention.cu"
KERNEL_FUNCTION = "fused_attention_fwd"
#: Parameter kinds of the kernel (``KernelLauncher``): 7 pointers, 10 strides, 9 ints, the scale.
KERNEL_SIGNATURE = "p" * 7 + "q" * 10 + "i" * 9 + "f"
DTYPE_NAMES = {torch.bfloat16: "bf16", torch.float16: "f16"}
HEAD_DIMS = (64, 128)
LOG2_E = math.log2(math.e)

# mma.sync: (block_m, block_n, n_warps, min_blocks) per head dim; registers from ptxas 13.0.
# Measured alternatives (H200, bf16, B=1, H=16, S=16384, 2026-11-29; band 6.9 % / dense / band
# 7 % at block 16, effective TFLOP/s):
# - D=64 128x64 237 regs: 268 / 288 / 245; 128x128 (spills 60 B) 267 / 279 / 202; 64x64 2 warps
#   252 / 278 / 226; 128x32 237 / 254 (run 1).
# - D=128 128x64 255 regs (32 B spilled per key tile): 256 / 334 / 254; 128x32 298 / 300 vs
#   316 / 336 (run 1).
_TILES = {64: (128, 64, 4, 2), 128: (128, 64, 4, 2)}
# Hopper: per head dim, the builds a plan chooses from (HopperConfig settings) and each one's
# cost, its time per executed FLOP on dense layouts over the first's; the first is the default.
# A plan takes the build with the least tile area to compute, each query tile counting
# UNIT_TILES tiles more, times its cost.
HOPPER_BUILDS = {
    64: (({**ONE_CONSUMER, "block_n": 128, "stages": 3}, 1.0),
         ({**ONE_CONSUMER, "block_n": 64, "min_blocks": 3}, 491 / 439)),
    128: (({"block_n": 128}, 1.0),
          ({**ONE_CONSUMER, "block_n": 64}, 682 / 537)),
}  # fmt: skip
# A work unit's fixed cost in its build's tiles: the Q load, the first S and the last P V that
# nothing overlaps, the epilogue. Fitted on the band layouts below (time = tile area x cost plus
# units x this many tiles): 2.2 for 64 x 128, 2.5 for 64 x 64 at 3 CTAs per SM, 2.8 for 128 x 128.
UNIT_TILES = 2.0
# Measured (gpu.fused_probe, H200, bf16, B=1, H=16, S=16384, persistent CTAs, effective TFLOP/s;
# benchmarks/results/checks/2026-11-30-h200-hopper-{tiles,narrow-tiles,ctas-tiles,
# dense-d64-tiles}.json):
# - D=64 (dense / band 2.3 % b64 / band 7.3 % b64 / band 6.9 % b128): 64 x 128, one consumer,
#   2 CTAs per SM 482 / 260 / 358 / 384 (3 stages 491 / 265 / 367 / 391); 64 x 64 at 3 CTAs
#   per SM 439 / 316 / 378 / 378 (3 stages 447 / 314 / 379 / 379); 64 x 64 at 2 CTAs, 4 stages
#   410 / 284 / 352 / 351; 128 x 128, two consumers with ping-pong 454 / 212 / 324 / 381 (3
#   stages 466 / 218 / 334 / 393; without ping-pong 408 dense); 128 x 64 377 dense. BigBird:
#   b128 324 (64 x 128) / 289 (128 x 128); b64 283 (64 x 64, 2 CTAs) / 207 / 131.
# - D=128 (dense / BigBird b64 / band 2.3 % b64): 128 x 128 with ping-pong 682 / 203 / 329
#   (without ping-pong 530; earlier, dense / causal / band 2.3 % b128 / band 7 % b128: 685 /
#   611 / 429 / 575 against 532 / 505 / 384 / 473 without and 558 / 516 / 377 / 483 at 128 x 64;
#   3 stages of 128 keys do not fit beside two Q buffers); 64 x 64, one consumer 537 / 351 /
#   377 (64 x 128 with one consumer needs 164 KB, too much for two CTAs per SM).
# - Short rows (checks/2026-11-30-h200-hopper-short-rows-tiles.json): band 2.3 % b128, D=64:
#   64 x 128 with 3 stages 308, 64 x 64 at 3 CTAs 305; D=128: 128 x 128 410, 64 x 64 364. Band
#   7.3 % b64, D=64: 64 x 64 at 3 CTAs 381, 64 x 128 with 3 stages 362.


@dataclass(frozen=True)
class KernelConfig:
    """Compile-time choices of one ``mma.sync`` kernel build (sm_80 and newer, 32 query rows per
    warp); each becomes a ``-D`` define. Hopper builds are ``gpu.fused_hopper.HopperConfig``.
    """

    dtype: str  # "bf16" or "f16"
    head_dim: int
    block_m: int = 128  # query rows per CTA
    block_n: int = 64  # keys per tile
    n_warps: int = 4
    min_blocks: int = 2  # CTAs per SM the register budget is sized for
    k_row_stride: int | None = None  # elements between key rows (None: head_dim, contiguous)
    v_row_stride: int | None = None  # elements between value rows (None: head_dim)

    wgmma = False
    source = KERNEL_SOURCE
    function = KERNEL_FUNCTION
    signature = KERNEL_SIGNATURE

    def __post_init__(self) -> None:
        check_choice("dtype", self.dtype, tuple(DTYPE_NAMES.values()))
        check_choice("head_dim", self.head_dim, HEAD_DIMS)
        check_choice("n_warps", self.n_warps, (1, 2, 4))
        check_choice("block_n", self.block_n, TILE_SIZES)
        check_int("min_blocks", self.min_blocks, low=1, high=4)
        for name in ("k_row_stride", "v_row_stride"):
            stride = getattr(self, name)
            if stride is not None and (check_int(name, stride, low=self.head_dim) % 8):
                raise ValueError(f"{name} must be a multiple of 8 elements, got {stride}")
        if self.block_m != 32 * self.n_warps:
            raise ValueError(
                f"block_m must be 32 x n_warps = {32 * self.n_warps} (32 query rows per warp), "
                f"got {self.block_m}"
            )
        if self.threads < self.head_dim:
            raise ValueError(
                f"n_warps must be at least head_dim / 32 = {self.head_dim // 32} (tile copies "
                f"cover 8 whole rows per pass), got {self.n_warps}"
            )
        check_shared_memory(
            self.shared_bytes,
            f"block_m={self.block_m}, block_n={self.block_n}, head_dim={self.head_dim}",
        )

    @property
    def threads(self) -> int:
        return 32 * self.n_warps

    @property
    def shared_bytes(self) -> int:
        """Q tile plus double-buffered K and V tiles, 16-bit."""
        return (self.block_m + 4 * self.block_n) * self.head_dim * 2

    def defines(self) -> dict[str, int]:
        return {
            "DTYPE_BF16": int(self.dtype == "bf16"),
            "HEAD_DIM": self.head_dim,
            "BLOCK_M": self.block_m,
            "BLOCK_N": self.block_n,
            "N_WARPS": self.n_warps,
            "MIN_BLOCKS": self.min_blocks,
            "K_ROW_STRIDE": self.k_row_stride or self.head_dim,
            "V_ROW_STRIDE": self.v_row_stride or self.head_dim,
        }


def choose_config(
    *,
    head_dim: int,
    dtype: torch.dtype,
    wgmma: bool,
    k_row_stride: int | None = None,
    v_row_stride: int | None = None,
    work: Callable[[int, int], tuple[int, int]] | None = None,
) -> KernelConfig | HopperConfig:
    """The kernel build we use for ``head_dim`` and ``dtype``.

    ``wgmma`` picks the Hopper kernel (``gpu.fused_hopper``; ``plan_fused`` sets it on compute
    capability 9.0), which reads any strides through TMA: the first of ``HOPPER_BUILDS``, or
    given ``work(block_m, block_n)`` (the layout's active tiles and work items at that tiling),
    the build whose costed tile area is least, each item counting ``UNIT_TILES`` more tiles.
    The ``mma.sync`` kernel compiles the K and V row strides in (None: contiguous rows).
    """
    name = dtype_name(dtype)
    check_choice("head_dim", head_dim, HEAD_DIMS)
    if check_bool("wgmma", wgmma):
        builds = [(HopperConfig(name, head_dim, **settings), cost)
                  for settings, cost in HOPPER_BUILDS[head_dim]]  # fmt: skip
        if work is None:
            return builds[0][0]

        def costed_area(build: tuple[HopperConfig, float]) -> float:
            config, cost = build
            tiles, items = work(config.block_m, config.block_n)
            return (tiles + UNIT_TILES * items) * config.block_m * config.block_n * cost

        return min(builds, key=costed_area)[0]
    block_m, block_n, n_warps, min_blocks = _TILES[head_dim]
    return KernelConfig(
        name, head_dim, block_m, block_n, n_warps, min_blocks,
        row_stride_or_none(k_row_stride, head_dim), row_stride_or_none(v_row_stride, head_dim),
    )  # fmt: skip


def row_stride_or_none(stride: int | None, head_dim: int) -> int | None:
    """None for contiguous rows (``stride == head_dim``), so equal configs compare equal."""
    return None if stride in (None, head_dim) else stride


def kv_row_strides(k: torch.Tensor, v: torch.Tensor) -> tuple[int, int]:
    """The row strides of k and v that a kernel build needs (any value for a single row)."""
    head_dim = k.shape[3]
    return (
        k.stride(2) if k.shape[2] > 1 else head_dim,
        v.stride(2) if v.shape[2] > 1 else head_dim,
    )


@dataclass(frozen=True)
class FusedPlan:
    """Everything a launch needs: the uploaded tables, the compiled kernel and the shapes.

    ``n_heads`` is the layout's: 1 serves any number of query heads.
    """

    config: KernelConfig | HopperConfig
    block_size: int
    causal: bool
    causal_offset: int  # keys k_idx <= q_idx + causal_offset are kept when causal
    n_heads: int
    seq_q: int
    seq_k: int
    device: torch.device
    items: torch.Tensor  # int32 [n_items, 4] on device
    entries: torch.Tensor  # int32 [max(n_entries, 1), 4] on device
    n_tiles: int  # key tiles visited per batch element and layout head set
    sub_rows_log2: int
    sub_cols_log2: int
    launcher: KernelLauncher
    maps: RowMaps | None  # the Hopper kernel's per-call tensor maps (None: no maps)
    max_ctas: int | None  # the Hopper kernel's persistent grid: min_blocks per SM (None: no limit)
    pairs_in_l2: int  # (batch, head) pairs the Hopper kernel runs together (its head groups)

    def flops(self, batch: int, q_heads: int | None = None) -> int:
        """FLOPs the kernel executes for ``batch`` elements (full tiles, both matmuls)."""
        cfg = self.config
        repeats = (q_heads or 1) if self.n_heads == 1 else 1
        return 4 * batch * repeats * self.n_tiles * cfg.block_m * cfg.block_n * cfg.head_dim


def plan_fused(
    blocks: torch.Tensor,
    block_size: int,
    *,
    causal: bool,
    head_dim: int,
    dtype: torch.dtype,
    device: torch.device,
    causal_offset: int = 0,
    seq_q: int | None = None,
    seq_k: int | None = None,
    k_row_stride: int | None = None,
    v_row_stride: int | None = None,
) -> FusedPlan:
    """Build the look-up table for a ``[H, M, N]`` layout, upload it and compile the kernel.

    Uses ``wgmma`` on Hopper (compute capability 9.0) and ``mma.sync`` elsewhere. ``seq_q`` /
    ``seq_k`` default to whole blocks; the K/V row strides to contiguous rows.
    """
    device = _cuda_device(device)
    luts: dict[tuple[int, int], FusedLut] = {}

    def work(block_m: int, block_n: int) -> tuple[int, int]:
        if (block_m, block_n) not in luts:
            luts[block_m, block_n] = build_fused_lut(
                blocks, block_size, block_m=block_m, block_n=block_n, causal=causal,
                causal_offset=causal_offset, seq_q=seq_q, seq_k=seq_k,
            )  # fmt: skip
        return luts[block_m, block_n].work

    config = choose_config(
        head_dim=head_dim, dtype=dtype, wgmma=is_hopper(device), k_row_stride=k_row_stride,
        v_row_stride=v_row_stride, work=work,
    )  # fmt: skip
    lut = luts.get((config.block_m, config.block_n))
    return plan_fused_with(
        blocks, block_size, config, causal=causal, device=device,
        causal_offset=causal_offset, seq_q=seq_q, seq_k=seq_k,
        lut=None if lut is None else upload_lut(lut, device),
    )  # fmt: skip


def is_hopper(device: torch.device) -> bool:
    """Compute capability 9.0: the ``wgmma`` path."""
    return torch.cuda.get_device_capability(device) == (9, 0)


def plan_fused_with(
    blocks: torch.Tensor,
    block_size: int,
    config: KernelConfig,
    *,
    causal: bool,
    device: torch.device,
    causal_offset: int = 0,
    seq_q: int | None = None,
    seq_k: int | None = None,
    lut: FusedLut | None = None,
) -> FusedPlan:
    """``plan_fused`` with explicit tiles (to measure alternatives).

    ``lut``: a table already built for these tiles (``gpu.plan`` shares one between dtypes).
    """
    blocks = as_block_tensor("blocks", blocks)
    block_size = check_choice("block_size", block_size, BLOCK_SIZES)
    causal = check_bool("causal", causal)
    if not isinstance(config, (KernelConfig, HopperConfig)):
        raise TypeError(
            f"config must be a KernelConfig or HopperConfig, got {type(config).__name__}"
        )
    device = _cuda_device(device)
    n_heads, n_q_blocks, n_k_blocks = blocks.shape
    seq_q = n_q_blocks * block_size if seq_q is None else seq_q
    seq_k = n_k_blocks * block_size if seq_k is None else seq_k
    if lut is None:
        lut = upload_lut(
            build_fused_lut(
                blocks, block_size, block_m=config.block_m, block_n=config.block_n,
                causal=causal, causal_offset=causal_offset, seq_q=seq_q, seq_k=seq_k,
            ),
            device,
        )  # fmt: skip
    hopper = isinstance(config, HopperConfig)
    properties = torch.cuda.get_device_properties(device)
    max_ctas = properties.multi_processor_count * config.min_blocks if hopper else None
    # K and V (16-bit) of this many (batch, head) pairs fill half the L2: the Hopper kernel runs
    # units in groups of that many, layout heads first (the items' order) where each head has
    # rows for 3 rounds of CTAs (the kernel deals rounds across these groups, and a round that
    # straddles two costs balance), then batch elements
    in_l2 = max(1, properties.L2_cache_size // 2 // (4 * seq_k * config.head_dim or 1))
    long_heads = hopper and lut.n_q_tiles >= 3 * max_ctas
    heads_per_group = min(n_heads, in_l2) if long_heads else n_heads
    items = group_heads(lut.items, heads_per_group) if long_heads else lut.items
    kernel = compile_kernel(config.source, config.function, config.defines(), device=device.index)
    if hopper and config.min_blocks > 1:
        prefer_shared_memory(kernel, device.index)
    launcher = KernelLauncher(kernel, config.signature, device.index, config.shared_bytes)
    return FusedPlan(
        config=config,
        block_size=block_size,
        causal=causal,
        causal_offset=causal_offset,
        n_heads=n_heads,
        seq_q=seq_q,
        seq_k=seq_k,
        device=device,
        items=items,
        entries=lut.entries,
        n_tiles=lut.n_tiles,
        sub_rows_log2=int(math.log2(lut.sub_rows)),
        sub_cols_log2=int(math.log2(lut.sub_cols)),
        launcher=launcher,
        maps=config.tensor_maps() if hopper else None,
        max_ctas=max_ctas,
        pairs_in_l2=max(1, in_l2 // heads_per_group),
    )


def upload_lut(lut: FusedLut, device: torch.device) -> FusedLut:
    """The table with its tensors on ``device`` (one dummy entry when empty: no null pointer)."""
    entries = lut.entries if len(lut.entries) else torch.zeros(1, 4, dtype=torch.int32)
    return replace(lut, items=lut.items.to(device), entries=entries.to(device))


def run_fused(
    plan: FusedPlan,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    scale: float,
    out: torch.Tensor | None = None,
    lse: torch.Tensor | None = None,
) -> torch.Tensor:
    """Check the operands against the plan, then launch; return ``out``.

    q ``[B, Hq, Sq, D]``, k and v ``[B, Hkv, Sk, D]`` (``Hkv`` divides ``Hq``) of the plan's
    dtype, device and lengths, as any views that ``check_strides`` accepts; ``lse``, when given,
    a contiguous fp32 ``[B, Hq, Sq]`` that receives each row's logsumexp. ``scale`` multiplies
    ``QK^T`` and must be positive. Runs on the torch current stream of ``q``'s device.
    """
    cfg = plan.config
    dtype = next(t for t, name in DTYPE_NAMES.items() if name == cfg.dtype)
    check_attention_operands(q, k, v, dtypes=(dtype,))
    _check_against_plan(plan, q, k)
    out = torch.empty_like(q) if out is None else check_out("out", out, q)
    check_operand_strides(q, k, v, out)
    k_row, v_row = kv_row_strides(k, v)
    if isinstance(cfg, KernelConfig) and (k_row, v_row) != (
        cfg.k_row_stride or cfg.head_dim,
        cfg.v_row_stride or cfg.head_dim,
    ):
        raise ValueError(
            f"k and v rows must be {cfg.k_row_stride or cfg.head_dim} and "
            f"{cfg.v_row_stride or cfg.head_dim} elements apart (compiled into this plan's "
            f"kernel), got {k_row} and {v_row}; plan with k_row_stride and v_row_stride"
        )
    scale = check_float("scale", scale)
    if scale <= 0:
        raise ValueError(f"scale must be positive, got {scale}")
    if lse is not None:
        check_lse(lse, q)
    launch_fused(plan, q, k, v, out, lse, scale)
    return out


def launch_fused(
    plan: FusedPlan,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor | None,
    scale: float,
) -> None:
    """Enqueue the kernel on q's device and current stream; operands already checked, strides
    and alignment included (``check_operand_strides``)."""
    batch, q_heads, seq_q, _ = q.shape
    heads_per_item = q_heads if plan.n_heads == 1 else 1
    n_ctas = len(plan.items) * batch * heads_per_item
    if n_ctas == 0:
        return
    cfg = plan.config
    shapes = (batch, q_heads, heads_per_item, q_heads // k.shape[1], seq_q, k.shape[2])
    masking = (plan.causal_offset, plan.sub_rows_log2, plan.sub_cols_log2, scale * LOG2_E)
    lse_pointer = 0 if lse is None else lse.data_ptr()
    stream = current_raw_stream(q.device.index)
    grid = n_ctas
    if plan.maps is not None:
        q_map, k_map, v_map, broadcast = plan.maps(q, k, v)
        group = min(batch * heads_per_item, plan.pairs_in_l2)  # run together (the kernel doc)
        arguments = (
            q_map, k_map, v_map, out.data_ptr(), lse_pointer, plan.items.data_ptr(),
            plan.entries.data_ptr(), *out.stride()[:3], n_ctas, *shapes[:4], group, *shapes[4:],
            broadcast, *masking,
        )  # fmt: skip
        grid = min(n_ctas, plan.max_ctas)
    else:
        arguments = (
            *(t.data_ptr() for t in (q, k, v, out)), lse_pointer, plan.items.data_ptr(),
            plan.entries.data_ptr(), *q.stride()[:3], *k.stride()[:2], *v.stride()[:2],
            *out.stride()[:3], *shapes, *masking,
        )  # fmt: skip
    plan.launcher(grid, cfg.threads, cfg.shared_bytes, stream, *arguments)


def check_operand_strides(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor
) -> None:
    """What a fault would otherwise report: every operand's strides and 16-byte alignment."""
    for name, tensor in (("q", q), ("k", k), ("v", v), ("out", out)):
        check_strides(name, tensor)


def _check_against_plan(plan: FusedPlan, q: torch.Tensor, k: torch.Tensor) -> None:
    if plan.n_heads not in (1, q.shape[1]):
        raise ValueError(f"q must have the plan's {plan.n_heads} heads, got {q.shape[1]}")
    if (q.shape[2], k.shape[2]) != (plan.seq_q, plan.seq_k):
        raise ValueError(
            f"q and k must have the plan's lengths Sq x Sk = {plan.seq_q} x {plan.seq_k}, got "
            f"{q.shape[2]} x {k.shape[2]}"
        )
    if q.shape[3] != plan.config.head_dim:
        raise ValueError(
            f"q must have the plan's head dim {plan.config.head_dim}, got {q.shape[3]}"
        )
    if q.device != plan.device:
        raise ValueError(f"q must be on {plan.device} (the plan's), got {q.device}")


def _cuda_device(device: torch.device | str) -> torch.device:
    device = torch.device(device)
    if device.type != "cuda":
        raise ValueError(f"device must be a CUDA device, got {device}")
    if device.index is None:
        device = torch.device("cuda", torch.cuda.current_device())
    return device


def dtype_name(dtype: torch.dtype) -> str:
    """The kernels' name of a 16-bit dtype (``"bf16"`` or ``"f16"``); anything else is refused."""
    if dtype not in DTYPE_NAMES:
        allowed = ", ".join(str(t) for t in DTYPE_NAMES)
        raise ValueError(f"dtype must be one of {allowed}, got {dtype}")
    return DTYPE_NAMES[dtype]
