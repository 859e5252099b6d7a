"""The fused block-sparse flash-attention backward: configuration, plan and launch.

``plan_backward`` compiles ``gpu/kernels/fused_attention_bwd.cu`` for a dtype and head dim and
takes a transposed look-up table (``gpu.fused_lut.build_backward_lut``) already on the device;
``launch_backward`` enqueues the preprocessing kernel (Δ = rowsum(dO ∘ O) - dLSE and the base-2
logsumexp) and the dK/dV/dQ kernel on the caller's stream, then casts the fp32 dQ.

Work of one call, with ``T`` the (query tile, key tile) pairs visited per batch element: five
``BLOCK_M x BLOCK_N x D`` products per pair (Sᵀ, dPᵀ, dV, dK, dQ), so ``10 · B · T · BLOCK_M ·
BLOCK_N · D`` FLOPs against the ``2.5 x`` forward FLOPs that count as useful.

>>> config = choose_backward_config(head_dim=128, dtype=torch.bfloat16, wgmma=True)
>>> config.block_m, config.block_n, config.n_warps, config.shared_bytes
(64, 128, 8, 148480)
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import torch

from designer.validate import check_bool, check_choice, check_int
from gpu.fused import DTYPE_NAMES, HEAD_DIMS, LOG2_E, dtype_name
from gpu.fused_lut import BackwardLut
from gpu.operands import check_strides
from gpu.runtime import KernelLauncher, check_shared_memory, compile_kernel, current_raw_stream

KERNEL_SOURCE = "fused_attention_bwd.cu"
#: Parameter kinds (``KernelLauncher``): 6 pointers, 6 strides, 4 ints.
PREP_SIGNATURE = "p" * 6 + "q" * 6 + "i" * 4
#: 12 pointers, 12 strides, 12 ints, 2 floats.
MAIN_SIGNATURE = "p" * 12 + "q" * 12 + "i" * 12 + "f" * 2
PREP_THREADS = 256
#: Query rows per step of the main kernel; lse and Δ are padded to a multiple of it.
BLOCK_M = 64

# (n_warps, min_blocks) per (wgmma, head dim); BLOCK_N = 16 keys per warp. Registers from ptxas
# 13.0, mma.sync: D=64 4 warps 207 (168 at 3 CTAs per SM), 8 warps 203; D=128 4 warps 255 (16 B
# spilled), 8 warps 255 (20 B). wgmma: D=64 185 (168 with 12 B spilled at 3 CTAs per SM); D=128
# 255 (4 B spilled).
# Measured (tools/probes/backward_tiles.py, H200, bf16, B=1, H=16, S=16384, 2026-11-30,
# benchmarks/results/2026-11-30-h200-backward-tiles.json; effective TFLOP/s dense b128 / band 7 %
# b64 / band 7 % b16 at D=64, dense / band 24 % / causal b128 at D=128):
# - mma.sync D=64: 4 warps, 2 CTAs per SM 214 / 192 / 175; 3 CTAs 218 / 199 / 185; 8 warps
#   218 / 178 / 161. D=128: 4 warps 218 / 217 / 224; 8 warps 248 / 243 / 251.
# - wgmma D=64: 2 CTAs per SM 253 / 220 / 199; 3 CTAs 265 / 243 / 224. D=128 (8 warps): 348 /
#   334 / 347. Issuing Sᵀ and dPᵀ together (and dV with dK) to overlap the softmax with the
#   tensor cores measured no faster (D=128 349; D=64 257 at 2 CTAs per SM, 150 at 3 where it
#   spills 520 bytes), so the products run one after another.
# dQ: the atomics cost the most. mma.sync D=128 dense, 4 warps: 25.2 ms, 17.1 without the
# atomics (product kept), 14.2 without the dQ product. Staging each dQ tile in shared memory
# and adding it with one bulk reduction (cp.reduce.async.bulk) ran 21.9 ms with 8 warps (22.1 by
# atomics) and 29.6 with 4: the L2 reduction traffic (B·H·T·BLOCK_M·D·4 bytes), not the
# instruction count, is the bound, so wider key tiles per CTA win. A separate dQ pass would
# recompute Sᵀ and dPᵀ (about 10.6 ms more at the measured rate).
_TILES = {
    (False, 64): (4, 3),
    (False, 128): (8, 1),
    (True, 64): (4, 3),
    (True, 128): (8, 1),
}


@dataclass(frozen=True)
class BackwardConfig:
    """Compile-time choices of one backward build; each becomes a ``-D`` define."""

    dtype: str  # "bf16" or "f16"
    head_dim: int
    n_warps: int = 4
    min_blocks: int = 1
    wgmma: bool = False  # Hopper (sm_90a): one warpgroup per 64 keys; else mma.sync

    def __post_init__(self) -> None:
        check_choice("dtype", self.dtype, tuple(DTYPE_NAMES.values()))
        check_choice("head_dim", self.head_dim, HEAD_DIMS)
        check_choice("n_warps", self.n_warps, (4, 8))
        check_int("min_blocks", self.min_blocks, low=1, high=4)
        check_bool("wgmma", self.wgmma)
        if self.wgmma and self.n_warps != self.head_dim // 16:
            raise ValueError(
                f"with wgmma each warpgroup computes 64 head dims of dQ, so n_warps must be "
                f"head_dim / 16 = {self.head_dim // 16}, got {self.n_warps}"
            )
        check_shared_memory(self.shared_bytes, f"n_warps={self.n_warps}, head_dim={self.head_dim}")

    block_m = BLOCK_M

    @property
    def block_n(self) -> int:
        return 16 * self.n_warps

    @property
    def threads(self) -> int:
        return 32 * self.n_warps

    @property
    def shared_bytes(self) -> int:
        """K and V tiles, double-buffered Q and dO, the dSᵀ tile, lse and Δ rows."""
        row = self.head_dim * 2
        tiles = 2 * self.block_n * row + 4 * BLOCK_M * row + self.block_n * BLOCK_M * 2
        return tiles + 16 * BLOCK_M

    def defines(self) -> dict[str, int]:
        return {
            "DTYPE_BF16": int(self.dtype == "bf16"),
            "HEAD_DIM": self.head_dim,
            "WGMMA": int(self.wgmma),
            "BLOCK_M": BLOCK_M,
            "BLOCK_N": self.block_n,
            "N_WARPS": self.n_warps,
            "MIN_BLOCKS": self.min_blocks,
        }


def choose_backward_config(*, head_dim: int, dtype: torch.dtype, wgmma: bool) -> BackwardConfig:
    """The tiles we use for ``head_dim`` and ``dtype`` (any layout block size); ``wgmma`` picks
    the Hopper path (compute capability 9.0)."""
    check_choice("head_dim", head_dim, HEAD_DIMS)
    n_warps, min_blocks = _TILES[check_bool("wgmma", wgmma), head_dim]
    return BackwardConfig(dtype_name(dtype), head_dim, n_warps, min_blocks, wgmma)


@dataclass(frozen=True)
class BackwardPlan:
    """Everything a backward launch needs: the uploaded table and both compiled kernels."""

    config: BackwardConfig
    causal_offset: int
    n_heads: int  # the layout's: 1 serves every query head
    seq_q: int
    seq_k: int
    lists: torch.Tensor
    entries: torch.Tensor
    order: torch.Tensor
    n_k_tiles: int
    n_tiles: int
    sub_rows_log2: int
    sub_cols_log2: int
    prep: KernelLauncher
    main: KernelLauncher

    def flops(self, batch: int, q_heads: int) -> int:
        """FLOPs the main kernel executes for ``batch`` elements (five products per pair)."""
        cfg = self.config
        repeats = q_heads if self.n_heads == 1 else 1
        return 10 * batch * repeats * self.n_tiles * cfg.block_m * cfg.block_n * cfg.head_dim


def upload_backward_lut(lut: BackwardLut, device: torch.device) -> BackwardLut:
    """The table with its tensors on ``device`` (one dummy entry when empty: no null pointer)."""
    entries = lut.entries if len(lut.entries) else torch.zeros(1, 4, dtype=torch.int32)
    return replace(
        lut, lists=lut.lists.to(device), entries=entries.to(device), order=lut.order.to(device)
    )


def plan_backward(
    config: BackwardConfig,
    lut: BackwardLut,
    *,
    causal_offset: int,
    n_heads: int,
    seq_q: int,
    seq_k: int,
    device: torch.device,
) -> BackwardPlan:
    """Compile both kernels of ``config`` for ``device`` around an uploaded table."""
    defines = config.defines()
    prep = compile_kernel(KERNEL_SOURCE, "attention_bwd_prep", defines, device=device.index)
    main = compile_kernel(KERNEL_SOURCE, "attention_bwd", defines, device=device.index)
    return BackwardPlan(
        config=config,
        causal_offset=causal_offset,
        n_heads=n_heads,
        seq_q=seq_q,
        seq_k=seq_k,
        lists=lut.lists,
        entries=lut.entries,
        order=lut.order,
        n_k_tiles=lut.n_k_tiles,
        n_tiles=lut.n_tiles,
        sub_rows_log2=int(math.log2(lut.sub_rows)),
        sub_cols_log2=int(math.log2(lut.sub_cols)),
        prep=KernelLauncher(prep, PREP_SIGNATURE, device.index, 0),
        main=KernelLauncher(main, MAIN_SIGNATURE, device.index, config.shared_bytes),
    )


def launch_backward(
    plan: BackwardPlan,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    grad_out: torch.Tensor,
    grad_lse: torch.Tensor | None,
    scale: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(dq, dk, dv)`` for checked forward operands, its ``out`` and fp32 ``lse``.

    ``grad_out`` may be any view (copied when its strides cannot be read in place);
    ``grad_lse``, the gradient of the logsumexp output, may be None. dk and dv come back
    contiguous ``[B, Hkv, Sk, D]``, dq contiguous ``[B, Hq, Sq, D]``.
    """
    batch, q_heads, seq_q, head_dim = q.shape
    kv_heads, seq_k = k.shape[1], k.shape[2]
    grad_out = _readable(grad_out)
    grad_lse = None if grad_lse is None else grad_lse.float().contiguous()
    seq_q_pad = -(-seq_q // BLOCK_M) * BLOCK_M
    n_rows = batch * q_heads * seq_q_pad
    rows = q.new_empty((2, n_rows), dtype=torch.float32)  # lse2, Δ
    dq_acc = q.new_zeros(q.shape, dtype=torch.float32)
    dk = k.new_empty(k.shape)
    dv = v.new_empty(v.shape)
    stream = current_raw_stream(q.device.index)
    rows_per_cta = PREP_THREADS // 32 * (32 // (head_dim // 8))
    plan.prep(
        -(-n_rows // rows_per_cta), PREP_THREADS, 0, stream,
        out.data_ptr(), grad_out.data_ptr(), lse.data_ptr(),
        0 if grad_lse is None else grad_lse.data_ptr(), rows[0].data_ptr(), rows[1].data_ptr(),
        *out.stride()[:3], *grad_out.stride()[:3], q_heads, seq_q, seq_q_pad, n_rows,
    )  # fmt: skip
    n_ctas = plan.n_k_tiles * batch * kv_heads
    cfg = plan.config
    plan.main(
        n_ctas, cfg.threads, cfg.shared_bytes, stream,
        q.data_ptr(), k.data_ptr(), v.data_ptr(), grad_out.data_ptr(), rows[0].data_ptr(),
        rows[1].data_ptr(), dq_acc.data_ptr(), dk.data_ptr(), dv.data_ptr(),
        plan.lists.data_ptr(), plan.entries.data_ptr(), plan.order.data_ptr(),
        *q.stride()[:3], *k.stride()[:3], *v.stride()[:3], *grad_out.stride()[:3],
        batch, q_heads, kv_heads, q_heads // kv_heads, int(plan.n_heads == 1), plan.n_k_tiles,
        seq_q, seq_k, seq_q_pad, plan.causal_offset, plan.sub_rows_log2, plan.sub_cols_log2,
        scale, scale * LOG2_E,
    )  # fmt: skip
    return dq_acc.to(q.dtype), dk, dv


def _readable(x: torch.Tensor) -> torch.Tensor:
    """``x`` if the kernels can read it in place, else a contiguous copy."""
    try:
        check_strides("grad_out", x)
    except ValueError:
        return x.contiguous()
    return x
