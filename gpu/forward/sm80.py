"""The ``mma.sync`` forward build (``sm80.cu``, sm_80 and newer): its configuration.

One CTA per work unit (a query tile of one batch element and head), ``n_warps`` warps of 32
query rows each, K and V double-buffered with ``cp.async``; the K and V row strides are
compiled in, so that the copies of the main loop address rows by immediate offsets.

>>> config = KernelConfig("bf16", 64)
>>> config.block_m, config.block_n, config.threads, config.shared_bytes
(128, 64, 128, 51200)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from designer.validate import check_choice, check_int
from gpu.forward.lut import TILE_SIZES
from gpu.params import ForwardParams
from gpu.runtime import check_shared_memory, source_beside
from gpu.support import DTYPES, HEAD_DIMS, LOG2_E

if TYPE_CHECKING:
    from gpu.forward.launch import FusedPlan


@dataclass(frozen=True)
class KernelConfig:
    """Compile-time choices of one ``mma.sync`` kernel build (sm_80 and newer, 32 query rows per
    warp); each becomes a ``-D`` define. Hopper builds are ``gpu.forward.sm90.HopperConfig``.
    """

    dtype: str  # a name of gpu.support.DTYPES
    head_dim: int
    block_m: int = 128  # query rows per CTA
    block_n: int = 64  # keys per tile
    n_warps: int = 4
    min_blocks: int = 2  # CTAs per SM the register budget is sized for
    k_row_stride: int | None = None  # elements between key rows (None: head_dim, contiguous)
    v_row_stride: int | None = None  # elements between value rows (None: head_dim)

    wgmma = False
    source = source_beside(__file__)
    function = "fused_attention_fwd"
    params = ForwardParams

    def __post_init__(self) -> None:
        check_choice("dtype", self.dtype, tuple(DTYPES))
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
        """Q tile plus double-buffered K and V tiles, 16-bit, and a token-word slot per K/V
        buffer (``block_n / 32`` words per query row)."""
        slots = 2 * self.block_m * -(-self.block_n // 32) * 4
        return (self.block_m + 4 * self.block_n) * self.head_dim * 2 + slots

    @property
    def row_strides(self) -> tuple[int, int]:
        """The K and V row strides compiled in, in elements."""
        return self.k_row_stride or self.head_dim, self.v_row_stride or self.head_dim

    def defines(self) -> dict[str, int]:
        k_rows, v_rows = self.row_strides
        return {
            "DTYPE_BF16": int(self.dtype == "bf16"),
            "HEAD_DIM": self.head_dim,
            "BLOCK_M": self.block_m,
            "BLOCK_N": self.block_n,
            "N_WARPS": self.n_warps,
            "MIN_BLOCKS": self.min_blocks,
            "K_ROW_STRIDE": k_rows,
            "V_ROW_STRIDE": v_rows,
        }

    def param_values(
        self,
        plan: FusedPlan,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        out: torch.Tensor,
        lse: torch.Tensor | None,
        scale: float,
        n_ctas: int,
        heads_per_item: int,
    ) -> tuple:
        """The ``ForwardParams`` of one launch of ``n_ctas`` CTAs, in field order."""
        batch, q_heads, seq_q, _ = q.shape
        return (
            # operands, the plan's table
            q.data_ptr(), k.data_ptr(), v.data_ptr(), out.data_ptr(),
            0 if lse is None else lse.data_ptr(), plan.items.data_ptr(), plan.entries.data_ptr(),
            plan.token_words.data_ptr(),
            # strides
            *q.stride()[:3], *k.stride()[:2], *v.stride()[:2], *out.stride()[:3],
            # shapes
            batch, q_heads, heads_per_item, q_heads // k.shape[1], seq_q, k.shape[2],
            # masking and scaling
            plan.causal_offset, plan.sub_rows_log2, plan.sub_cols_log2, scale * LOG2_E,
        )  # fmt: skip


def row_stride_or_none(stride: int | None, head_dim: int) -> int | None:
    """None for contiguous rows (``stride == head_dim``), so equal configs compare equal."""
    return None if stride in (None, head_dim) else stride
