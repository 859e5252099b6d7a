"""The backward's builds: every build compiles (Hopper and Ampere) with no spills, the table
names the build a plan takes, and configurations check themselves."""

from __future__ import annotations

import re
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

from gpu.backward import builds
from gpu.backward.builds import (
    BUILDS,
    BackwardConfig,
    backward_build_config,
    choose_backward_build,
    choose_backward_config,
)
from gpu.backward.fused import SOURCE
from gpu.backward.sm90 import HopperBackwardConfig, group_splits
from gpu.backward.sm90_dq import HopperDqConfig
from gpu.support import DTYPE_NAMES, HEAD_DIMS
from tests.gpu.nvcc import HOPPER, compile_source, nvcc_or_skip

_SPILLS = re.compile(r"(\d+) bytes spill stores, (\d+) bytes spill loads")


@pytest.mark.parametrize("dtype", list(DTYPE_NAMES))
def test_every_chosen_config_compiles_with_nvcc(tmp_path, dtype):
    nvcc = nvcc_or_skip()
    for head_dim, wgmma in ((d, w) for d in HEAD_DIMS for w in (False, True)):
        config = choose_backward_config(head_dim=head_dim, dtype=dtype, wgmma=wgmma)
        targets = [HOPPER] + ([] if wgmma else ["-arch=sm_80"])
        for target in targets:
            out = tmp_path / f"{config.dtype}_{head_dim}_{wgmma}_{target[-5:]}.o"
            result = compile_source(nvcc, SOURCE, config.defines(), out, target=target)
            assert result.returncode == 0, f"{config} {target}:\n{result.stderr}"


def test_every_hopper_build_compiles_without_spills_or_serialised_wgmma(tmp_path):
    """Each sm90 build (both dQ kernels besides), bf16 and fp16, D 64 and 128: ptxas reports no
    spill and no wgmma it had to serialise or wait for (C75xx)."""
    nvcc = nvcc_or_skip()
    configs = [backward_build_config(name, head_dim=d, dtype=t, hopper=True)
               for name in BUILDS[1:] for d in HEAD_DIMS for t in DTYPE_NAMES]  # fmt: skip
    configs += [HopperDqConfig(DTYPE_NAMES[t], d) for d in HEAD_DIMS for t in DTYPE_NAMES]

    def compile_one(config) -> subprocess.CompletedProcess:
        out = tmp_path / f"{abs(hash(config))}.o"
        return compile_source(nvcc, config.source, config.defines(), out, verbose=True)

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(compile_one, configs))
    for config, result in zip(configs, results, strict=True):
        log = result.stdout + result.stderr
        assert result.returncode == 0, f"{config}:\n{log}"
        assert all(m == ("0", "0") for m in _SPILLS.findall(log)) and _SPILLS.search(log), log
        assert not re.search(r"C75\d\d", log), f"{config}:\n{log}"


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
    with pytest.raises(ValueError, match="dq must be one of 'separate'"):
        HopperBackwardConfig("bf16", 64, dq="tensor")
    with pytest.raises(ValueError, match="stages must be one of 2, 3, got 4"):
        HopperDqConfig("bf16", 64, stages=4)
    assert HopperBackwardConfig("bf16", 128, stages=3).shared_bytes <= 227 * 1024


def test_the_table_names_the_build_a_plan_takes(monkeypatch):
    assert choose_backward_build(hopper=False, deterministic=False) == "fused"
    assert choose_backward_build(hopper=True, deterministic=False) == "sm90_bulk"
    assert choose_backward_build(hopper=True, deterministic=True) == "sm90_separate"
    assert choose_backward_build(hopper=True, deterministic=False, build="sm90_atomic") == (
        "sm90_atomic"
    )
    assert choose_backward_build(hopper=True, deterministic=False, token_tiles=True) == "fused"
    monkeypatch.setattr(builds, "SM90_DEFAULT", False)
    assert choose_backward_build(hopper=True, deterministic=False) == "fused"
    assert choose_backward_build(hopper=False, deterministic=False) == "fused"
    for name in BUILDS:
        config = backward_build_config(name, head_dim=64, dtype=torch.bfloat16, hopper=True)
        assert isinstance(config, BackwardConfig if name == "fused" else HopperBackwardConfig)
        assert name == "fused" or config.deterministic == (name == "sm90_separate")
    assert not backward_build_config("fused", head_dim=64, dtype=torch.bfloat16,
                                     hopper=False).wgmma  # fmt: skip


def test_the_table_refuses_what_it_cannot_give():
    with pytest.raises(ValueError, match="deterministic=True needs the Hopper backward"):
        choose_backward_build(hopper=False, deterministic=True)
    with pytest.raises(ValueError, match="sm90_bulk is the Hopper backward"):
        choose_backward_build(hopper=False, deterministic=False, build="sm90_bulk")
    with pytest.raises(ValueError, match="needs the sm90_separate backward build"):
        choose_backward_build(hopper=True, deterministic=True, build="sm90_bulk")
    with pytest.raises(ValueError, match="build must be one of 'fused', 'sm90_bulk'"):
        choose_backward_build(hopper=True, deterministic=False, build="sm90")
    with pytest.raises(TypeError, match="deterministic must be True or False"):
        choose_backward_build(hopper=True, deterministic=1)
    with pytest.raises(ValueError, match=r"token-masked .* fused backward only, got build 'sm90"):
        choose_backward_build(hopper=True, deterministic=False, build="sm90_bulk", token_tiles=True)
    with pytest.raises(ValueError, match="fused backward only, got deterministic=True"):
        choose_backward_build(hopper=True, deterministic=True, token_tiles=True)


def test_group_splits_fill_the_gpu_with_the_fewest_partials():
    assert group_splits(264, 8, 132) == 1  # two CTAs per SM already
    assert group_splits(100, 8, 132) == 4  # 2 would give 200 < 264
    assert group_splits(100, 6, 132) == 3
    assert group_splits(1, 16, 132) == 16  # never more than the group
    assert group_splits(10, 1, 132) == 1
