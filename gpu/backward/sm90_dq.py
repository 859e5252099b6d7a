"""The backward's deterministic dQ on Hopper (``sm90_dq.cu``, sm_90a): its build and launch.

The kernel walks the forward's table (the key tiles of each 128-row query tile, heaviest query
tiles first) and sums each query tile's dQ in registers: no atomics, the same order every run.
It recomputes S and dP for that: three ``128 x 64 x D`` products per (query tile, key tile)
pair, ``6 · B · T · 128 · 64 · D`` FLOPs with ``T`` the pairs of the forward table at 128 x 64
tiles. Bytes: Q, dO read once, K and V once per visiting query tile (mostly from L2), dQ
written once. With ``tokens`` (partial blocks) a token tile's words (128 query rows of 2 words,
1 KB) travel with its K tile into a slot per stage and mask S before P.

>>> config = HopperDqConfig("bf16", 128)
>>> config.block_m, config.block_n, config.threads, config.shared_bytes
(128, 64, 384, 131328)
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from designer.validate import check_bool, check_choice
from gpu.forward.tensor_maps import RowMaps, token_words_map
from gpu.launcher import KernelLauncher
from gpu.params import HopperDqParams
from gpu.partials import check_token_path
from gpu.runtime import check_shared_memory, compile_kernel, source_beside
from gpu.support import DTYPES, HEAD_DIMS, LOG2_E

if TYPE_CHECKING:
    from gpu.plans import BlockSparsePlan

#: Shared bytes after the tiles for the mbarriers.
BARRIER_BYTES = 256


@dataclass(frozen=True)
class HopperDqConfig:
    """Compile-time choices of the dQ kernel; each becomes a ``-D`` define."""

    dtype: str  # a name of gpu.support.DTYPES
    head_dim: int
    stages: int = 2  # K/V buffers in the ring
    tokens: bool = False  # token tiles: their words staged with each K tile

    block_m = 128  # query rows per CTA, 64 per consumer warpgroup
    block_n = 64  # keys per tile
    threads = 384  # the producer warpgroup and two consumers
    source = source_beside(__file__)
    function = "attention_bwd_dq_hopper"

    def __post_init__(self) -> None:
        check_choice("dtype", self.dtype, tuple(DTYPES))
        check_choice("head_dim", self.head_dim, HEAD_DIMS)
        check_choice("stages", self.stages, (2, 3))
        check_bool("tokens", self.tokens)
        check_shared_memory(
            self.shared_bytes,
            f"dQ stages={self.stages}, head_dim={self.head_dim}, tokens={self.tokens}",
        )

    @property
    def token_tile_bytes(self) -> int:
        """One token tile's words (``tokens``): a row of ``block_n / 32`` words per query."""
        return self.block_m * -(-self.block_n // 32) * 4 if self.tokens else 0

    @property
    def shared_bytes(self) -> int:
        """Q and dO, ``stages`` K and V tiles (16-bit) and token slots (``tokens``), and the
        mbarriers."""
        rows = 2 * self.block_m + 2 * self.stages * self.block_n
        slots = self.stages * self.token_tile_bytes
        return rows * self.head_dim * 2 + slots + BARRIER_BYTES

    def defines(self) -> dict[str, int]:
        return {"DTYPE_BF16": int(self.dtype == "bf16"), "HEAD_DIM": self.head_dim,
                "STAGES": self.stages, "TOKENS": int(self.tokens)}  # fmt: skip


@dataclass(frozen=True)
class DqPlan:
    """The dQ kernel of one plan: its forward table at 128 x 64 tiles and the compiled build."""

    config: HopperDqConfig
    items: torch.Tensor
    entries: torch.Tensor
    token_words: torch.Tensor  # the table's token tiles (one dummy row when none)
    token_map: bytes  # their tensor map (it points at token_words, kept alive here)
    n_tiles: int
    sub_rows_log2: int
    sub_cols_log2: int
    launcher: KernelLauncher
    maps: RowMaps

    def flops(self, batch: int, repeats: int) -> int:
        """FLOPs executed for ``batch`` elements, ``repeats`` query heads per layout head."""
        cfg = self.config
        return 6 * batch * repeats * self.n_tiles * cfg.block_m * cfg.block_n * cfg.head_dim


def plan_dq(layout: BlockSparsePlan, config: HopperDqConfig) -> DqPlan:
    """Compile ``config`` for the plan's device around the plan's forward table at its tiles
    (with ``tokens`` where the plan has partial blocks)."""
    check_token_path(layout, config)
    lut = layout.forward_lut(config.block_m, config.block_n)
    kernel = compile_kernel(config.source, config.function, config.defines(),
                            device=layout.device.index)  # fmt: skip
    return DqPlan(
        config=config, items=lut.items, entries=lut.entries, token_words=lut.token_words,
        token_map=token_words_map(lut.token_words), n_tiles=lut.n_tiles,
        sub_rows_log2=int(math.log2(lut.sub_rows)), sub_cols_log2=int(math.log2(lut.sub_cols)),
        launcher=KernelLauncher(kernel, HopperDqParams, layout.device.index, config.shared_bytes),
        maps=RowMaps(config.block_m, config.block_n, config.block_n, config.block_m),
    )  # fmt: skip


def launch_dq(
    plan: DqPlan,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    grad_out: torch.Tensor,
    rows: torch.Tensor,
    seq_q_pad: int,
    *,
    layout_heads: int,
    causal_offset: int,
    scale: float,
    stream: int,
) -> torch.Tensor:
    """Enqueue the dQ kernel; the contiguous 16-bit ``[B, Hq, Sq, D]`` dq it writes."""
    batch, q_heads, seq_q, _ = q.shape
    heads_per_item = q_heads if layout_heads == 1 else 1
    n_work = len(plan.items) * batch * heads_per_item
    dq = torch.empty_like(q, memory_format=torch.contiguous_format)
    q_map, k_map, v_map, do_map, broadcast = plan.maps(q, k, v, grad_out)
    cfg = plan.config
    plan.launcher(  # HopperDqParams, in field order
        n_work, cfg.threads, cfg.shared_bytes, stream,
        # operands, the forward table
        q_map, k_map, v_map, do_map, plan.token_map, rows[0].data_ptr(), rows[1].data_ptr(),
        dq.data_ptr(), plan.items.data_ptr(), plan.entries.data_ptr(),
        # work and shapes
        n_work, batch, q_heads, heads_per_item, q_heads // k.shape[1], seq_q, k.shape[2],
        seq_q_pad, broadcast,
        # masking and scaling
        causal_offset, plan.sub_rows_log2, plan.sub_cols_log2, scale, scale * LOG2_E,
    )  # fmt: skip
    return dq
