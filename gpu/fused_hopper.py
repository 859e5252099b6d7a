"""The Hopper forward kernel's configuration and launch (``gpu/kernels/fused_attention_hopper.cu``).

Same algorithm, tables and operands as the ``mma.sync`` forward of ``gpu.fused``; on Hopper
(sm_90a) one producer warpgroup loads Q, K and V tiles with TMA and two consumer warpgroups,
64 query rows each, run ``wgmma`` and the softmax, pipelined and taking turns. TMA reads any
strides ``check_strides`` accepts, so one build serves every view (no strides compiled in).
The grid is persistent: at most one CTA per SM, each walking its share of the work heaviest
first.

>>> config = HopperConfig("bf16", 128)
>>> config.block_m, config.block_n, config.threads, config.shared_bytes
(128, 128, 384, 196864)
"""

from __future__ import annotations

from dataclasses import dataclass

from designer.validate import check_bool, check_choice
from gpu.runtime import check_shared_memory
from gpu.tensor_maps import RowMaps

KERNEL_SOURCE = "fused_attention_hopper.cu"
KERNEL_FUNCTION = "fused_attention_fwd_hopper"
#: Parameter kinds (``KernelLauncher``): 3 tensor maps, 4 pointers, 3 strides, 11 ints, the scale.
KERNEL_SIGNATURE = "m" * 3 + "p" * 4 + "q" * 3 + "i" * 11 + "f"
#: Shared bytes after the tiles for the ring's mbarriers.
BARRIER_BYTES = 256


@dataclass(frozen=True)
class HopperConfig:
    """Compile-time choices of one Hopper forward build; each becomes a ``-D`` define."""

    dtype: str  # "bf16" or "f16"
    head_dim: int
    block_n: int = 128  # keys per tile
    stages: int = 2  # K/V buffers in the ring
    pingpong: bool = True  # consumers take turns to issue their products

    block_m = 128  # query rows per CTA: two consumer warpgroups of 64
    n_warps = 12  # producer warpgroup + two consumers
    min_blocks = 1
    wgmma = True
    source = KERNEL_SOURCE
    function = KERNEL_FUNCTION
    signature = KERNEL_SIGNATURE

    def __post_init__(self) -> None:
        check_choice("dtype", self.dtype, ("bf16", "f16"))
        check_choice("head_dim", self.head_dim, (64, 128))
        check_choice("block_n", self.block_n, (64, 128))
        check_choice("stages", self.stages, (2, 3, 4))
        check_bool("pingpong", self.pingpong)
        check_shared_memory(
            self.shared_bytes,
            f"block_n={self.block_n}, stages={self.stages}, head_dim={self.head_dim}",
        )

    @property
    def threads(self) -> int:
        return 32 * self.n_warps

    @property
    def shared_bytes(self) -> int:
        """Two Q tiles, ``stages`` K and V tiles (16-bit) and the mbarriers."""
        tiles = 2 * self.block_m + 2 * self.stages * self.block_n
        return tiles * self.head_dim * 2 + BARRIER_BYTES

    def defines(self) -> dict[str, int]:
        return {
            "DTYPE_BF16": int(self.dtype == "bf16"),
            "HEAD_DIM": self.head_dim,
            "BLOCK_N": self.block_n,
            "STAGES": self.stages,
            "PINGPONG": int(self.pingpong),
        }

    def tensor_maps(self) -> RowMaps:
        """The per-call tensor maps this build loads through (boxes of its tile rows)."""
        return RowMaps(self.block_m, self.block_n)
