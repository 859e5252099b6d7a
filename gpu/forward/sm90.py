"""The Hopper forward build (``sm90.cu``, sm_90a): its configuration.

Same algorithm, tables and operands as the ``mma.sync`` build of ``gpu.forward.sm80``; on
Hopper one producer warpgroup loads Q, K and V tiles with TMA and one or two consumer
warpgroups, 64 query rows each, run ``wgmma`` and the softmax, pipelined and taking turns. TMA
reads any strides ``check_strides`` accepts, so one build serves every view (no strides
compiled in). The grid is persistent: at most ``min_blocks`` CTAs per SM, each running its
share of the work heaviest first, in L2-sized groups of heads. Two consumers (128-row query
tiles, one CTA per SM) are the fastest at D=128; one consumer (64-row tiles, two or three CTAs
per SM) wins at D=64, where the CTAs hide each other's softmax, and wastes less on layouts
scattered in small blocks (``gpu.forward.builds`` says which a plan takes). Only ``tokens``
builds mask token tiles (partial blocks): their token code slowed full tiles by 9 % at D=64,
so plans without partial blocks take builds without it. With ``token_stages`` a token tile's
words travel with its K tile into a shared slot per stage; without, the consumers load them
from global memory a tile ahead (for builds with no shared memory to spare).

>>> config = HopperConfig("bf16", 128)
>>> config.block_m, config.block_n, config.threads, config.shared_bytes
(128, 128, 384, 200960)
>>> narrow = HopperConfig("bf16", 128, block_n=64, pingpong=False, consumers=1, min_blocks=2)
>>> narrow.block_m, narrow.threads, narrow.min_blocks, narrow.shared_bytes
(64, 256, 2, 99584)
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

import torch

from designer.validate import check_bool, check_choice
from gpu.forward.tensor_maps import RowMaps
from gpu.params import HopperForwardParams
from gpu.runtime import check_shared_memory, source_beside
from gpu.support import DTYPES, HEAD_DIMS, LOG2_E

if TYPE_CHECKING:
    from gpu.forward.launch import FusedPlan
#: Shared bytes after the tiles for the ring's mbarriers.
BARRIER_BYTES = 256


@dataclass(frozen=True)
class HopperConfig:
    """Compile-time choices of one Hopper forward build; each becomes a ``-D`` define."""

    dtype: str  # a name of gpu.support.DTYPES
    head_dim: int
    block_n: int = 128  # keys per tile
    stages: int = 2  # K/V buffers in the ring
    pingpong: bool = True  # consumers take turns to issue their products (two consumers)
    consumers: int = 2  # consumer warpgroups of 64 query rows
    min_blocks: int = 1  # CTAs per SM: 1 with two consumers (their registers fill it), 2 or 3
    tokens: bool = False  # token tiles masked (plans with partial blocks)
    token_stages: bool = True  # with tokens: their words copied with the K tile into a slot

    wgmma = True
    source = source_beside(__file__)
    function = "fused_attention_fwd_hopper"
    params = HopperForwardParams

    def __post_init__(self) -> None:
        check_choice("dtype", self.dtype, tuple(DTYPES))
        check_choice("head_dim", self.head_dim, HEAD_DIMS)
        check_choice("block_n", self.block_n, (64, 128))
        check_choice("stages", self.stages, (2, 3, 4))
        check_bool("pingpong", self.pingpong)
        check_bool("tokens", self.tokens)
        check_bool("token_stages", self.token_stages)
        check_choice("consumers", self.consumers, (1, 2))
        if self.pingpong and self.consumers == 1:
            raise ValueError("pingpong needs two consumers: one has no partner to take turns with")
        allowed = (1,) if self.consumers == 2 else (2, 3)
        if self.min_blocks not in allowed:
            raise ValueError(
                f"min_blocks must be one of {', '.join(map(str, allowed))} with "
                f"{self.consumers} consumer(s) (the registers of an SM), got {self.min_blocks!r}"
            )
        if self.min_blocks == 3 and self.block_n != 64:
            raise ValueError("three CTAs per SM hold 64-key tiles only (136 registers a thread)")
        check_shared_memory(
            self.shared_bytes,
            f"block_n={self.block_n}, stages={self.stages}, head_dim={self.head_dim}, "
            f"tokens={self.tokens}" + (f", token_stages={self.token_stages}" * self.tokens),
            ctas_per_sm=self.min_blocks,
        )

    @property
    def block_m(self) -> int:
        """Query rows per CTA."""
        return 64 * self.consumers

    @property
    def n_warps(self) -> int:
        """The producer warpgroup and the consumers."""
        return 4 * (1 + self.consumers)

    @property
    def threads(self) -> int:
        return 32 * self.n_warps

    @property
    def token_tile_bytes(self) -> int:
        """One token tile's words: a row of ``block_n / 32`` 32-bit words per query row."""
        return self.block_m * -(-self.block_n // 32) * 4

    @property
    def shared_bytes(self) -> int:
        """Two Q tiles, ``stages`` K and V tiles (16-bit), a token slot per stage
        (``tokens`` and ``token_stages``) and the mbarriers."""
        tiles = (2 * self.block_m + 2 * self.stages * self.block_n) * self.head_dim * 2
        slots = self.stages * self.token_tile_bytes if self.tokens and self.token_stages else 0
        return tiles + slots + BARRIER_BYTES

    def defines(self) -> dict[str, int]:
        return {
            "DTYPE_BF16": int(self.dtype == "bf16"),
            "HEAD_DIM": self.head_dim,
            "BLOCK_N": self.block_n,
            "STAGES": self.stages,
            "CONSUMERS": self.consumers,
            "MIN_BLOCKS": self.min_blocks,
            "PINGPONG": int(self.pingpong),
            "TOKENS": int(self.tokens),
            "TOKEN_STAGES": int(self.token_stages),
        }

    def tensor_maps(self) -> RowMaps:
        """The per-call tensor maps this build loads through (boxes of its tile rows)."""
        return RowMaps(self.block_m, self.block_n, self.block_n)

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
        """The ``HopperForwardParams`` of one launch over ``n_ctas`` work units, in field order."""
        batch, q_heads, seq_q, _ = q.shape
        q_map, k_map, v_map, broadcast = plan.maps(q, k, v)
        group = min(batch * heads_per_item, plan.pairs_in_l2)  # run together (the kernel doc)
        return (
            # operands, the plan's table
            q_map, k_map, v_map, plan.token_map, out.data_ptr(),
            0 if lse is None else lse.data_ptr(),
            plan.items.data_ptr(), plan.entries.data_ptr(), plan.token_words.data_ptr(),
            # strides of out
            *out.stride()[:3],
            # work and shapes
            n_ctas, batch, q_heads, heads_per_item, q_heads // k.shape[1], group, seq_q,
            k.shape[2], broadcast,
            # masking and scaling
            plan.causal_offset, plan.sub_rows_log2, plan.sub_cols_log2, scale * LOG2_E,
        )  # fmt: skip
