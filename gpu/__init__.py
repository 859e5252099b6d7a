"""Block-sparse attention on the GPU: our CuPy CUDA kernels, dense references and the benchmarks.

Importing ``gpu`` never needs CUDA or CuPy; ``unavailable_reason()`` says why the GPU path is off on
this machine (None when it works).
"""

from gpu.api import block_sparse_attention
from gpu.module import BlockSparseAttention
from gpu.plans import BlockSparsePlan, plan
from gpu.runtime import GpuUnavailableError, unavailable_reason

__all__ = [
    "BlockSparseAttention",
    "BlockSparsePlan",
    "GpuUnavailableError",
    "block_sparse_attention",
    "plan",
    "unavailable_reason",
]
