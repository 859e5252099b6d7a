"""The forward's build table: every build compiles, a plan takes the build its cost model picks
and a config refuses other dtypes."""

from __future__ import annotations

import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

import gpu
from gpu.forward.builds import (
    HOPPER_ALTERNATIVES,
    HOPPER_BUILDS,
    choose_config,
    hopper_token_paths,
)
from gpu.forward.sm80 import KernelConfig
from gpu.forward.sm90 import HopperConfig
from gpu.support import DTYPE_NAMES, HEAD_DIMS
from tests.gpu.nvcc import compile_source, nvcc_or_skip


def test_every_chosen_config_compiles_with_nvcc(tmp_path):
    nvcc = nvcc_or_skip()
    configs = [
        choose_config(head_dim=d, dtype=t, wgmma=w)
        for d in HEAD_DIMS
        for t in DTYPE_NAMES
        for w in (False, True)
    ]

    configs += [HopperConfig("bf16", d, **settings) for d, settings in HOPPER_ALTERNATIVES]
    configs += [c for d in HEAD_DIMS for c in hopper_token_paths("bf16", d)]
    configs = list(dict.fromkeys(configs))

    def compile_one(config: KernelConfig | HopperConfig) -> subprocess.CompletedProcess:
        out = tmp_path / f"{abs(hash(config))}.o"
        return compile_source(nvcc, config.source, config.defines(), out)

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(compile_one, configs))
    for config, result in zip(configs, results, strict=True):
        assert result.returncode == 0, f"{config}:\n{result.stderr}"


def test_choose_config_gives_valid_tiles():
    for head_dim in HEAD_DIMS:
        config = choose_config(head_dim=head_dim, dtype=torch.float16, wgmma=False)
        assert config.dtype == "fp16" and config.block_m == 32 * config.n_warps
        assert config.defines()["HEAD_DIM"] == head_dim
        assert "WGMMA" not in config.defines()
        hopper_config = choose_config(head_dim=head_dim, dtype=torch.float16, wgmma=True)
        assert isinstance(hopper_config, HopperConfig)
        assert hopper_config.source == "forward/sm90.cu"
        assert hopper_config.defines()["HEAD_DIM"] == head_dim
        assert hopper_config.defines()["DTYPE_BF16"] == 0


@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_hopper_takes_the_build_with_least_costed_work(head_dim):
    """Full tiles keep the default build; once its tiles compute more than the alternative's
    cost times the alternative's tile area, the alternative wins."""
    (default, _), (alternative, cost) = HOPPER_BUILDS[head_dim]
    first = HopperConfig("bf16", head_dim, **default)
    second = HopperConfig("bf16", head_dim, **alternative)

    def choose(first_area: float, second_area: float) -> HopperConfig:
        """The choice when the layout's active tiles cover these areas in each build."""
        counts = {(c.block_m, c.block_n): round(a / (c.block_m * c.block_n))
                  for c, a in ((first, first_area), (second, second_area))}  # fmt: skip
        return choose_config(head_dim=head_dim, dtype=torch.bfloat16, wgmma=True,
                             work=lambda m, n: (counts[m, n], 0))  # fmt: skip

    full = 2**20
    assert choose(full, full) == first
    assert choose(full * cost * 1.01, full) == second  # the default's tiles are mostly empty
    assert choose(full * cost * 0.99, full) == first
    assert choose(0, 0) == first  # an empty layout keeps the default
    assert choose_config(head_dim=head_dim, dtype=torch.bfloat16, wgmma=True) == first


@pytest.mark.parametrize("head_dim", HEAD_DIMS)
def test_hopper_counts_a_fixed_cost_per_work_item(head_dim):
    """Each work item costs UNIT_TILES tiles besides its own: a band of 11 blocks of 64 (short
    rows, which the tile area alone would give the default build) takes the build of small
    tiles, a band of 49 blocks the default."""
    (default, _), (alternative, _) = HOPPER_BUILDS[head_dim]
    rows = torch.arange(64)

    def choice(width: int) -> tuple[int, int]:
        blocks = ((rows[:, None] - rows[None, :]).abs() <= width)[None]

        work = gpu.plan(blocks, 64, device="cpu").tile_work
        config = choose_config(head_dim=head_dim, dtype=torch.bfloat16, wgmma=True, work=work)
        return config.block_m, config.block_n

    small = HopperConfig("bf16", head_dim, **alternative)
    assert choice(5) == (small.block_m, small.block_n)
    large = HopperConfig("bf16", head_dim, **default)
    assert choice(24) == (large.block_m, large.block_n)


def test_choose_config_rejects_other_dtypes():
    with pytest.raises(ValueError, match="dtype must be one of"):
        choose_config(head_dim=64, dtype=torch.float32, wgmma=False)
