"""What our CUDA kernels support, in one table: every check, kernel build and benchmark reads it.

- dtypes: bfloat16 and float16 (the 16-bit tensor-core inputs), each with one name, ``"bf16"``
  and ``"fp16"``, used by the kernel builds, the benchmarks and their results alike;
- head dims: 64 and 128 (a tile row is one or two 128-byte swizzle rows);
- layout block sizes: 16 to 128 tokens (a 128 x 128 tile holds at most 64 blocks, one mask bit
  each; blocks of 16 are one ``mma`` atom).

The dense reference (``impl="reference"``) takes any block size and float dtype besides.

>>> dtype_name(torch.float16), DTYPES["bf16"]
('fp16', torch.bfloat16)
"""

from __future__ import annotations

import math

import torch

#: The kernels' dtypes and their names.
DTYPE_NAMES = {torch.bfloat16: "bf16", torch.float16: "fp16"}
#: The dtypes by name.
DTYPES = {name: dtype for dtype, name in DTYPE_NAMES.items()}
HEAD_DIMS = (64, 128)
BLOCK_SIZES = (16, 32, 64, 128)
#: Scores are exponentiated in base 2: ``e^x = 2^(x · LOG2_E)``.
LOG2_E = math.log2(math.e)


def dtype_name(dtype: torch.dtype) -> str:
    """The name of one of the kernels' dtypes; anything else is refused."""
    if dtype not in DTYPE_NAMES:
        allowed = ", ".join(str(t) for t in DTYPE_NAMES)
        raise ValueError(f"dtype must be one of {allowed}, got {dtype}")
    return DTYPE_NAMES[dtype]
