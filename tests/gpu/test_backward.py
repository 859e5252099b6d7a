"""The backward kernels' configurations: they compile (Hopper and Ampere) and check themselves."""

from __future__ import annotations

import pytest
import torch

from gpu.backward import BackwardConfig, choose_backward_config
from gpu.fused import DTYPE_NAMES, HEAD_DIMS
from tests.gpu.nvcc import compile_source, nvcc_or_skip


@pytest.mark.parametrize("dtype", list(DTYPE_NAMES))
def test_every_chosen_config_compiles_with_nvcc(tmp_path, dtype):
    nvcc = nvcc_or_skip()
    for head_dim in HEAD_DIMS:
        config = choose_backward_config(head_dim=head_dim, dtype=dtype)
        for target in ("-gencode=arch=compute_90a,code=sm_90a", "-arch=sm_80"):
            out = tmp_path / f"{config.dtype}_{head_dim}_{target[-5:]}.o"
            result = compile_source(nvcc, "fused_attention_bwd.cu", config.defines(), out,
                                    target=target)  # fmt: skip
            assert result.returncode == 0, f"{config} {target}:\n{result.stderr}"


def test_configs_fit_and_say_what_is_wrong():
    for head_dim in HEAD_DIMS:
        config = choose_backward_config(head_dim=head_dim, dtype=torch.float16)
        assert config.block_n == 16 * config.n_warps and config.shared_bytes <= 227 * 1024
    with pytest.raises(ValueError, match="n_warps must be one of 4, 8"):
        BackwardConfig("bf16", 64, n_warps=2)
    with pytest.raises(ValueError, match="dtype must be one of"):
        choose_backward_config(head_dim=64, dtype=torch.float32)
