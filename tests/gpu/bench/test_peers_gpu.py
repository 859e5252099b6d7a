"""The peers on a GPU, each skipped with the reason when its packages are missing: outputs and
gradients against fp64 on small cases, what cuDNN BSA refuses, and the no-op-mask trap (a
sparse mask must never be timed as dense attention on Flex's FLASH backend).

Each CuTe DSL kernel compiles once per process in tens of seconds, so the cases are few and
share kernels where they can.
"""

from __future__ import annotations

import pytest
import torch

from designer.layout import Layout
from gpu.bench import BenchConfig, BenchSession, format_table, peers, run_benchmark
from gpu.bench.cases import find_case
from gpu.bench.flex import FLASH, flex_variants

pytestmark = pytest.mark.gpu


def _needs(name: str) -> None:
    if reason := peers.missing(name):
        pytest.skip(f"{name}: {reason}")


def _run(contenders, layout, *, head_dim, causal=False, backward=False, seq=1024):
    config = BenchConfig(heads=layout.n_heads, seq_q=seq, head_dim=head_dim, causal=causal,
                         contenders=contenders, warmup=1, reps=3, backward=backward)  # fmt: skip
    result = run_benchmark(config, layout, name="small", session=BenchSession(torch.device("cuda")))
    print(format_table([result]))
    return result


def _accurate(result, backward=False):
    assert result.status == "ok", result.message
    assert result.rel_error < 1e-2 and result.max_abs_error < 5e-2, result
    if backward:
        for error in (result.dq_rel_error, result.dk_rel_error, result.dv_rel_error):
            assert error < 2e-2, result


@pytest.mark.parametrize(
    "name", ["bigbird_10pct-b16-d64", "banded_7pct-b64-d64", "causal-b128-d64"]
)  # partial tiles everywhere; both tiles, full at 64; the causal form
def test_flex_flash_forward_matches_fp64(name):
    _needs("flex_flash")
    case = find_case(name)
    layout = case.layout(seq_len=1024)
    (flash,) = _run(("flex_flash",), layout, head_dim=64, causal=case.causal).results
    expected = flex_variants(layout.blocks, layout.block_size, causal=case.causal, backend=FLASH)
    assert [v.name for v in flash.variants] == [v.name for v in expected]
    for variant in flash.variants:
        assert variant.status == "ok" and variant.accurate, variant
    _accurate(flash)


@pytest.mark.parametrize(
    ("peer", "name"),
    [("flex_flash", "bigbird_10pct-b16-d64"), ("cudnn_bsa", "banded_7pct-b128-d128")],
)  # cuDNN's backward takes D=128 only on Hopper
def test_a_training_step_matches_fp64(peer, name):
    _needs(peer)
    case = find_case(name)
    (result,) = _run((peer,), case.layout(seq_len=1024), head_dim=case.head_dim,
                     backward=True).results  # fmt: skip
    _accurate(result, backward=True)
    assert result.fwd_ms > 0 and result.bwd_ms > 0


def test_flex_flash_never_times_dense_attention_for_a_sparse_mask():
    """A 6.9 % band at 128-token blocks has only full tiles, so its ``mask_mod`` is never
    evaluated: FLASH skips the absent tiles only if it honours the block lists. Dense attention
    in its place is wrong (never timed: the run fails) and no faster than dense (here at most
    half of dense flash attention's time, against about a tenth when sparse)."""
    _needs("flex_flash")
    layout = find_case("banded_7pct-b128-d64").layout(seq_len=8192)
    result = _run(("flex_flash", "sdpa_flash"), layout, head_dim=64, seq=8192)
    flash, dense = result.results
    assert flash.variant == "lookup-t128"
    _accurate(flash)
    assert dense.status == "ok" and flash.ms < 0.5 * dense.ms, (flash.ms, dense.ms)


@pytest.mark.parametrize(
    ("name", "head_dim"), [("empty-rows-b64", 64), ("bigbird_10pct-b128-d128", 128)]
)
def test_cudnn_bsa_forward_matches_fp64(name, head_dim):
    _needs("cudnn_bsa")
    if name == "empty-rows-b64":  # a random layout with empty query-block rows
        blocks = torch.rand(16, 16, 16, generator=torch.Generator().manual_seed(0)) < 0.3
        blocks[:, ::3] = False
        layout = Layout(blocks, 64)
    else:
        layout = find_case(name).layout(seq_len=1024)
    (bsa,) = _run(("cudnn_bsa",), layout, head_dim=head_dim).results
    _accurate(bsa)


@pytest.mark.parametrize(
    ("name", "backward", "reason"),
    [
        ("causal-b128-d128", False, "cuDNN BSA has no causal mode"),
        ("banded_7pct-b16-d128", False, "whole blocks of 64 or 128 tokens"),
        ("banded_7pct-b128-d64", True, "backward on Hopper takes head dim 128, got 64"),
    ],
)
def test_cudnn_bsa_says_what_it_cannot_express(name, backward, reason):
    _needs("cudnn_bsa")
    case = find_case(name)
    layout = case.layout(seq_len=1024)
    (bsa,) = _run(("cudnn_bsa",), layout, head_dim=case.head_dim, causal=case.causal,
                  backward=backward).results  # fmt: skip
    assert bsa.status == "unavailable" and reason in bsa.message, bsa.message


@pytest.mark.parametrize("name", ["dense-b128-d64", "causal-b128-d64"])
def test_fa4_own_call_matches_fp64(name):
    _needs("fa4")
    case = find_case(name)
    (fa4,) = _run(("fa4",), case.layout(seq_len=1024), head_dim=64, causal=case.causal).results
    _accurate(fa4)


def test_fa4_refuses_a_sparse_layout():
    _needs("fa4")
    layout = find_case("banded_7pct-b64-d64").layout(seq_len=1024)
    (fa4,) = _run(("fa4",), layout, head_dim=64).results
    assert fa4.status == "unavailable" and "through flex_flash" in fa4.message, fa4.message
