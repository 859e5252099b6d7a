"""The backward kernels' configurations: they compile (Hopper and Ampere) and check themselves."""

from __future__ import annotations

import pytest
import torch

from gpu.backward.builds import BackwardConfig, choose_backward_config
from gpu.backward.fused import SOURCE
from gpu.support import DTYPE_NAMES, HEAD_DIMS
from tests.gpu.nvcc import compile_source, nvcc_or_skip


@pytest.mark.parametrize("dtype", list(DTYPE_NAMES))
def test_every_chosen_config_compiles_with_nvcc(tmp_path, dtype):
    nvcc = nvcc_or_skip()
    for head_dim, wgmma in ((d, w) for d in HEAD_DIMS for w in (False, True)):
        config = choose_backward_config(head_dim=head_dim, dtype=dtype, wgmma=wgmma)
        targets = ["-gencode=arch=compute_90a,code=sm_90a"] + ([] if wgmma else ["-arch=sm_80"])
        for target in targets:
            out = tmp_path / f"{config.dtype}_{head_dim}_{wgmma}_{target[-5:]}.o"
            result = compile_source(nvcc, SOURCE, config.defines(), out, target=target)
            assert result.returncode == 0, f"{config} {target}:\n{result.stderr}"


def test_configs_fit_and_say_what_is_wrong():
    for head_dim, wgmma in ((d, w) for d in HEAD_DIMS for w in (False, True)):
        config = choose_backward_config(head_dim=head_dim, dtype=torch.float16, wgmma=wgmma)
        assert config.block_n == 16 * config.n_warps and config.shared_bytes <= 227 * 1024
    with pytest.raises(ValueError, match="n_warps must be one of 4, 8"):
        BackwardConfig("bf16", 64, n_warps=2)
    with pytest.raises(ValueError, match="dtype must be one of"):
        choose_backward_config(head_dim=64, dtype=torch.float32, wgmma=False)
    with pytest.raises(ValueError, match="n_warps must be head_dim / 16 = 8"):
        BackwardConfig("bf16", 128, n_warps=4, wgmma=True)
