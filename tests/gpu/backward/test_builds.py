"""The backward's builds: every build compiles (Hopper and Ampere) with no spills, with and
without the token-tile path, the table names the build a plan takes (partial blocks or not), and
configurations check themselves."""

from __future__ import annotations

import re
import subprocess
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch

import gpu
from gpu.backward import builds, sm90
from gpu.backward.builds import (
    BUILDS,
    BackwardConfig,
    backward_build_config,
    choose_backward_build,
    choose_backward_config,
)
from gpu.backward.fused import SOURCE
from gpu.backward.sm90 import HopperBackwardConfig, group_splits
from gpu.backward.sm90_dq import HopperDqConfig, plan_dq
from gpu.partials import split_token_mask
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
    """Each sm90 build (both dQ kernels besides), bf16 and fp16, D 64 and 128, and with the
    token-tile path (bf16: the dtype does not touch it): ptxas reports no spill and no wgmma it
    had to serialise or wait for (C75xx)."""
    nvcc = nvcc_or_skip()
    configs = [backward_build_config(name, head_dim=d, dtype=t, hopper=True, token_tiles=tokens)
               for name in BUILDS[1:] for d in HEAD_DIMS for t in DTYPE_NAMES
               for tokens in (False, True) if t == torch.bfloat16 or not tokens]  # fmt: skip
    configs += [HopperDqConfig(DTYPE_NAMES[t], d, tokens=tokens)
                for d in HEAD_DIMS for t in DTYPE_NAMES
                for tokens in (False, True) if t == torch.bfloat16 or not tokens]  # fmt: skip
    configs += [HopperBackwardConfig("bf16", 64, dq=dq, tokens=tokens, block_m=128)
                for dq in sm90.DQ_MODES for tokens in (False, True)]  # fmt: skip
    assert len(configs) == 30 and sum(c.tokens for c in configs) == 11

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
    with pytest.raises(TypeError, match="tokens must be True or False, got int 1"):
        HopperBackwardConfig("bf16", 64, tokens=1)
    with pytest.raises(ValueError, match="block_m=128 needs head_dim=64"):
        HopperBackwardConfig("bf16", 128, block_m=128)
    with pytest.raises(ValueError, match="block_m must be one of 64, 128, got 32"):
        HopperBackwardConfig("bf16", 64, block_m=32)
    with pytest.raises(ValueError, match=r"stages=3, head_dim=64, tokens=False, block_m=128 need "
                       r"232704 bytes of shared memory"):  # fmt: skip
        HopperBackwardConfig("bf16", 64, stages=3, block_m=128)
    assert HopperBackwardConfig("bf16", 64, block_m=128, tokens=True).shared_bytes == 203008
    with pytest.raises(TypeError, match="tokens must be True or False"):
        HopperDqConfig("bf16", 64, tokens="yes")
    with pytest.raises(TypeError, match="token_tiles must be True or False"):
        backward_build_config("sm90_bulk", head_dim=64, dtype=torch.bfloat16, hopper=True,
                              token_tiles=None)  # fmt: skip


def test_the_token_tile_path_costs_a_slot_per_stage_and_plans_without_it_keep_theirs():
    """A 1 KB slot of token words per stage (128 keys x 2 words; 128 queries x 2 in the dQ
    kernel), TOKENS=1; without token tiles the shared memory and the defines are what they were
    (TOKENS=0 compiles none of the path). Three stages of sm90_bulk at D=128 leave no room for
    the slots, and say so."""
    for dq in ("bulk", "atomic", "separate"):
        for head_dim in HEAD_DIMS:
            for stages in (2, 3):
                plain = HopperBackwardConfig("bf16", head_dim, dq=dq, stages=stages)
                assert plain.defines()["TOKENS"] == 0
                if (dq, head_dim, stages) == ("bulk", 128, 3):
                    continue  # refused below
                tokens = HopperBackwardConfig("bf16", head_dim, dq=dq, stages=stages, tokens=True)
                assert tokens.shared_bytes - plain.shared_bytes == stages * 1024
                assert tokens.defines()["TOKENS"] == 1
    refused = (r"dq='bulk', stages=3, head_dim=128, tokens=True, block_m=64 need 234240 bytes "
               r"of shared memory, more than 232448")  # fmt: skip
    with pytest.raises(ValueError, match=refused):
        HopperBackwardConfig("bf16", 128, dq="bulk", stages=3, tokens=True)
    assert HopperBackwardConfig("bf16", 128).shared_bytes == 197888  # as measured before
    assert HopperDqConfig("bf16", 128).shared_bytes == 131328
    assert HopperDqConfig("bf16", 128, tokens=True).shared_bytes == 131328 + 2 * 1024
    assert HopperDqConfig("fp16", 64, tokens=True).defines() == {
        "DTYPE_BF16": 0, "HEAD_DIM": 64, "STAGES": 2, "TOKENS": 1}  # fmt: skip


def test_the_table_names_the_build_a_plan_takes(monkeypatch):
    assert choose_backward_build(hopper=False, deterministic=False) == "fused"
    assert choose_backward_build(hopper=True, deterministic=False) == "sm90_bulk"
    assert choose_backward_build(hopper=True, deterministic=True) == "sm90_separate"
    assert choose_backward_build(hopper=True, deterministic=False, build="sm90_atomic") == (
        "sm90_atomic"
    )
    monkeypatch.setattr(builds, "SM90_DEFAULT", False)
    assert choose_backward_build(hopper=True, deterministic=False) == "fused"
    assert choose_backward_build(hopper=False, deterministic=False) == "fused"
    for name in BUILDS:
        config = backward_build_config(name, head_dim=64, dtype=torch.bfloat16, hopper=True)
        assert isinstance(config, BackwardConfig if name == "fused" else HopperBackwardConfig)
        assert name == "fused" or config.deterministic == (name == "sm90_separate")
    assert not backward_build_config("fused", head_dim=64, dtype=torch.bfloat16,
                                     hopper=False).wgmma  # fmt: skip


def test_each_sm90_build_takes_its_measured_schedule_where_its_ring_fits():
    """``SM90_SCHEDULES`` sets the ring depth and dQ order; a ring of three stages whose token
    slots leave no room (sm90_bulk at D=128) takes two, keeping its dQ order."""

    def schedule(name: str, head_dim: int, tokens: bool) -> tuple[int, bool]:
        config = backward_build_config(name, head_dim=head_dim, dtype=torch.bfloat16,
                                       hopper=True, token_tiles=tokens)  # fmt: skip
        return config.stages, config.dq_first

    assert schedule("sm90_bulk", 128, False) == (3, True)
    assert schedule("sm90_bulk", 128, True) == (2, True)
    assert schedule("sm90_bulk", 64, True) == schedule("sm90_bulk", 64, False) == (3, False)
    assert schedule("sm90_atomic", 128, True) == (2, True)
    assert schedule("sm90_separate", 128, False) == (2, False)
    for (name, head_dim), fields in builds.SM90_SCHEDULES.items():
        config = backward_build_config(name, head_dim=head_dim, dtype=torch.bfloat16, hopper=True)
        assert all(getattr(config, field) == value for field, value in fields.items())
    tall = backward_build_config("sm90_bulk", head_dim=64, dtype=torch.float16, hopper=True,
                                 token_tiles=True, tall=True)  # fmt: skip
    assert (tall.block_m, tall.stages, tall.dq_writer, tall.tokens) == (128, 2, True, True)
    for name, head_dim in (("sm90_bulk", 128), ("sm90_atomic", 64), ("sm90_separate", 64)):
        assert not builds.has_tall_schedule(name, head_dim)
        config = backward_build_config(name, head_dim=head_dim, dtype=torch.bfloat16,
                                       hopper=True, tall=True)  # fmt: skip
        assert config.block_m == 64
    assert HopperBackwardConfig("bf16", 128, dq_first=True).defines()["DQ_FIRST"] == 1
    assert HopperBackwardConfig("bf16", 64, dq_writer=True).defines()["DQ_WRITER"] == 1
    with pytest.raises(ValueError, match="dq_writer needs dq='bulk'"):
        HopperBackwardConfig("bf16", 64, dq="atomic", dq_writer=True)


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


@pytest.mark.parametrize("partial_blocks", [False, True])
def test_a_hopper_plan_takes_an_sm90_build_with_or_without_partial_blocks(
    partial_blocks, monkeypatch
):
    """What ``plan.backward`` compiles on an H200: sm90_bulk (sm90_separate when deterministic,
    its dQ kernel alike), with the token-tile path exactly when the plan has partial blocks;
    ``fused`` off Hopper, which always masks token tiles."""
    mask = torch.ones(1, 200, 200, dtype=torch.bool).tril()  # diagonal blocks partial
    blocks, partials = split_token_mask(mask, 64)
    the_plan = gpu.plan(blocks, 64, seq_q=200, seq_k=200, device="cpu",
                        partials=partials if partial_blocks else None)  # fmt: skip
    assert (the_plan.n_partials > 0) == partial_blocks
    assert choose_backward_build(hopper=True, deterministic=False) == "sm90_bulk"
    monkeypatch.setattr(sm90, "plan_hopper_backward", lambda layout, config: config)
    object.__setattr__(the_plan, "_hopper", True)  # as gpu.plan sets it on an H200
    for deterministic, dq in ((False, "bulk"), (True, "separate")):
        config = the_plan.backward(torch.bfloat16, 128, deterministic=deterministic)
        assert isinstance(config, HopperBackwardConfig)
        assert (config.dq, config.tokens, config.defines()["TOKENS"]) == (
            dq, partial_blocks, int(partial_blocks))  # fmt: skip
    for name in BUILDS[1:]:
        config = the_plan.backward(torch.float16, 64, build=name)
        assert config.dq == name.removeprefix("sm90_") and config.tokens == partial_blocks
    object.__setattr__(the_plan, "_hopper", False)
    monkeypatch.setattr(
        "gpu.backward.fused.plan_backward", lambda layout, config: config, raising=True
    )
    config = the_plan.backward(torch.bfloat16, 64)
    assert isinstance(config, BackwardConfig) and not config.wgmma


def test_a_build_without_the_token_path_is_refused_for_partial_blocks():
    blocks, partials = split_token_mask(torch.ones(1, 128, 128, dtype=torch.bool).tril(), 64)
    the_plan = gpu.plan(blocks, 64, partials=partials, device="cpu")
    with pytest.raises(ValueError, match=r"2 partial blocks, which HopperBackwardConfig masks "
                       r"only with tokens=True .* got tokens=False"):  # fmt: skip
        sm90.plan_hopper_backward(the_plan, HopperBackwardConfig("bf16", 64, dq="atomic"))
    with pytest.raises(ValueError, match="HopperDqConfig masks only with tokens=True"):
        plan_dq(the_plan, HopperDqConfig("bf16", 128))


def test_group_splits_fill_the_gpu_with_the_fewest_partials():
    assert group_splits(264, 8, 132) == 1  # two CTAs per SM already
    assert group_splits(100, 8, 132) == 4  # 2 would give 200 < 264
    assert group_splits(100, 6, 132) == 3
    assert group_splits(1, 16, 132) == 16  # never more than the group
    assert group_splits(10, 1, 132) == 1
