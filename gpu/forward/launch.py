"""The fused block-sparse flash-attention forward: a plan's launch state, its checks and launch.

``plan_forward`` takes a ``gpu.plan`` (which checked the layout and holds its look-up tables) and
a kernel build (``gpu.forward.builds`` chooses one) and compiles it; ``run_fused`` only checks its
tensors and launches (``sm80.cu`` or ``sm90.cu``) on the caller's torch stream, so a benchmark
that times ``run_fused`` times the kernel alone. ``launch_fused`` is the launch without the
checks, for callers that validated already (``gpu.block_sparse_attention`` with a ``gpu.plan``).

Work and traffic of one call, with ``T`` the key tiles visited per batch element
(``plan.n_tiles``: active ``block_m x block_n`` tiles summed over heads and query tiles):

- FLOPs executed: ``4 · B · T · block_m · block_n · D`` (two matmuls), against the
  ``4 · B · H · Sq · Sk · D · density`` that count as useful (effective TFLOP/s). A partial tile
  (small layout blocks, causal diagonal, token masks) costs a full tile.
- Device-memory bytes, at least: ``2 · B · H · (2 · Sq + 2 · Sk) · D`` (Q, K, V read once, O
  written once, 16-bit). K and V tiles are read once per visiting query tile, mostly from L2.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from gpu.forward.lut import group_heads
from gpu.forward.sm80 import KernelConfig
from gpu.forward.sm90 import HopperConfig
from gpu.forward.tensor_maps import RowMaps, token_words_map
from gpu.launcher import KernelLauncher
from gpu.operands import (
    check_against_plan,
    check_attention_operands,
    check_lse,
    check_out,
    check_scale,
    check_strides,
)
from gpu.partials import check_token_path
from gpu.runtime import compile_kernel, current_raw_stream, prefer_shared_memory
from gpu.support import DTYPES

if TYPE_CHECKING:
    from gpu.plans import BlockSparsePlan


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
    token_words: torch.Tensor  # int32 [max(token tiles, 1), block_m, words] on device
    token_map: bytes | None  # the Hopper kernel's map of token_words (None: no maps)
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


def plan_forward(layout: BlockSparsePlan, config: KernelConfig | HopperConfig) -> FusedPlan:
    """Compile ``config`` for the plan's device around the plan's table for its tiles.

    ``gpu.plan(...).fused(...)`` does this for the build ``choose_config`` picks; call it
    directly to run another build (the tile probe, the tests). A plan with partial blocks needs
    a Hopper build with ``tokens``.
    """
    if not isinstance(config, (KernelConfig, HopperConfig)):
        raise TypeError(
            f"config must be a KernelConfig or HopperConfig, got {type(config).__name__}"
        )
    hopper = isinstance(config, HopperConfig)
    if hopper:
        check_token_path(layout, config)
    device = layout.device
    if device.type != "cuda":
        raise ValueError(f"device must be a CUDA device, got {device}")
    lut = layout.forward_lut(config.block_m, config.block_n)
    properties = torch.cuda.get_device_properties(device)
    max_ctas = properties.multi_processor_count * config.min_blocks if hopper else None
    # K and V (16-bit) of this many (batch, head) pairs fill half the L2: the Hopper kernel runs
    # units in groups of that many, layout heads first (the items' order) where each head has
    # rows for 3 rounds of CTAs (the kernel deals rounds across these groups, and a round that
    # straddles two costs balance), then batch elements
    in_l2 = max(1, properties.L2_cache_size // 2 // (4 * layout.seq_k * config.head_dim or 1))
    long_heads = hopper and lut.n_q_tiles >= 3 * max_ctas
    heads_per_group = min(layout.n_heads, in_l2) if long_heads else layout.n_heads
    items = group_heads(lut.items, heads_per_group) if long_heads else lut.items
    kernel = compile_kernel(config.source, config.function, config.defines(), device=device.index)
    if hopper and config.min_blocks > 1:
        prefer_shared_memory(kernel, device.index)
    launcher = KernelLauncher(kernel, config.params, device.index, config.shared_bytes)
    return FusedPlan(
        config=config,
        block_size=layout.block_size,
        causal=layout.causal,
        causal_offset=layout.causal_offset,
        n_heads=layout.n_heads,
        seq_q=layout.seq_q,
        seq_k=layout.seq_k,
        device=device,
        items=items,
        entries=lut.entries,
        token_words=lut.token_words,
        token_map=token_words_map(lut.token_words) if hopper else None,
        n_tiles=lut.n_tiles,
        sub_rows_log2=int(math.log2(lut.sub_rows)),
        sub_cols_log2=int(math.log2(lut.sub_cols)),
        launcher=launcher,
        maps=config.tensor_maps() if hopper else None,
        max_ctas=max_ctas,
        pairs_in_l2=max(1, in_l2 // heads_per_group),
    )


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
    check_attention_operands(q, k, v, dtypes=(DTYPES[cfg.dtype],))
    check_against_plan(plan, q, k, head_dims=(cfg.head_dim,))
    out = torch.empty_like(q) if out is None else check_out("out", out, q)
    check_operand_strides(q, k, v, out)
    k_row, v_row = kv_row_strides(k, v)
    if isinstance(cfg, KernelConfig) and (k_row, v_row) != cfg.row_strides:
        raise ValueError(
            f"k and v rows must be {cfg.row_strides[0]} and {cfg.row_strides[1]} elements apart "
            f"(compiled into this plan's kernel), got {k_row} and {v_row}; plan with "
            "k_row_stride and v_row_stride"
        )
    scale = check_scale(scale)
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
    batch, q_heads = q.shape[:2]
    heads_per_item = q_heads if plan.n_heads == 1 else 1
    n_ctas = len(plan.items) * batch * heads_per_item
    if n_ctas == 0:
        return
    cfg = plan.config
    values = cfg.param_values(plan, q, k, v, out, lse, scale, n_ctas, heads_per_item)
    grid = n_ctas if plan.max_ctas is None else min(n_ctas, plan.max_ctas)
    plan.launcher(grid, cfg.threads, cfg.shared_bytes, current_raw_stream(q.device.index), *values)


def check_operand_strides(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, out: torch.Tensor
) -> None:
    """What a fault would otherwise report: every operand's strides and 16-byte alignment."""
    for name, tensor in (("q", q), ("k", k), ("v", v), ("out", out)):
        check_strides(name, tensor)


def kv_row_strides(k: torch.Tensor, v: torch.Tensor) -> tuple[int, int]:
    """The row strides of k and v that a kernel build needs (any value for a single row)."""
    head_dim = k.shape[3]
    return (
        k.stride(2) if k.shape[2] > 1 else head_dim,
        v.stride(2) if v.shape[2] > 1 else head_dim,
    )
