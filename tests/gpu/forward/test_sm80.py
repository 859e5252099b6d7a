"""The ``mma.sync`` build's configuration checks its invariants."""

from __future__ import annotations

import pytest

from gpu.forward.sm80 import KernelConfig


@pytest.mark.parametrize(
    ("kwargs", "error", "match"),
    [
        ({"dtype": "f32"}, ValueError, "dtype must be one of"),
        ({"head_dim": 96}, ValueError, "head_dim must be one of"),
        ({"block_n": 48}, ValueError, "block_n must be one of"),
        ({"n_warps": 3}, ValueError, "n_warps must be one of 1, 2, 4"),
        ({"block_m": 64}, ValueError, "block_m must be 32 x n_warps = 128"),
        ({"min_blocks": 0}, ValueError, r"min_blocks must be in \[1, 4\]"),
        (
            {"head_dim": 128, "n_warps": 2, "block_m": 64},
            ValueError,
            "n_warps must be at least head_dim / 32 = 4",
        ),
    ],
)
def test_kernel_config_names_bad_values(kwargs, error, match):
    with pytest.raises(error, match=match):
        KernelConfig(**{"dtype": "bf16", "head_dim": 64, **kwargs})
