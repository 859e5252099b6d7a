"""Per-head errors against a slow element-by-element count, the harness's inputs, and the CPU
correctness check."""

from __future__ import annotations

import math

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from designer.design import Design
from designer.layout import Layout
from gpu.bench import BenchConfig, run_benchmark
from gpu.bench.details import (
    MAX_MAP_ROWS,
    cpu_check,
    error_details,
    head_errors,
    small_layout,
)
from tests.factories import random_layout


def slow_head_errors(out, ref, block_size):
    batch, heads, seq, dim = ref.shape
    head_max, head_rel, block_max = [], [], []
    for h in range(heads):
        worst, diff_sq, ref_sq = 0.0, 0.0, 0.0
        rows = [0.0] * (seq // block_size)
        for b in range(batch):
            for i in range(seq):
                for d in range(dim):
                    diff = float(out[b, h, i, d]) - float(ref[b, h, i, d])
                    worst = max(worst, abs(diff))
                    rows[i // block_size] = max(rows[i // block_size], abs(diff))
                    diff_sq += diff * diff
                    ref_sq += float(ref[b, h, i, d]) ** 2
        head_max.append(worst)
        head_rel.append(math.sqrt(diff_sq) / math.sqrt(ref_sq) if ref_sq else math.sqrt(diff_sq))
        block_max.append(rows)
    return head_max, head_rel, block_max


@settings(max_examples=25, deadline=None)
@given(
    batch=st.integers(1, 2),
    heads=st.integers(1, 3),
    n_blocks=st.integers(1, 5),
    block=st.sampled_from([1, 2, 4]),
    dim=st.integers(1, 3),
    seed=st.integers(0, 2**31),
)
def test_head_errors_match_a_slow_count(batch, heads, n_blocks, block, dim, seed):
    gen = torch.Generator().manual_seed(seed)
    ref = torch.randn(batch, heads, n_blocks * block, dim, generator=gen, dtype=torch.float64)
    out = (ref + 1e-3 * torch.randn(ref.shape, generator=gen, dtype=torch.float64)).float()
    got = head_errors(out, ref, block)
    head_max, head_rel, block_max = slow_head_errors(out, ref, block)
    assert got["head_max_abs"] == head_max and got["block_max_abs"] == block_max
    assert got["head_rel"] == pytest.approx(head_rel, rel=1e-9)
    assert got["rows_per_cell"] == 1


def test_long_heads_are_pooled_and_nan_shows():
    ref = torch.zeros(1, 1, 2 * (MAX_MAP_ROWS + 1), 2, dtype=torch.float64)
    out = ref.clone()
    out[0, 0, -1, 0] = 0.25  # last block row alone in the last cell
    out[0, 0, 3, 1] = float("nan")
    got = head_errors(out, ref, 2)
    assert got["rows_per_cell"] == 2 and len(got["block_max_abs"][0]) == (MAX_MAP_ROWS + 2) // 2
    assert got["block_max_abs"][0][-1] == 0.25 and math.isnan(got["block_max_abs"][0][0])
    assert math.isnan(got["head_max_abs"][0]) and math.isnan(got["head_rel"][0])


def test_error_details_agree_with_the_harness_and_report_failures(rng):
    layout = random_layout(rng, n_heads=3, n_q_blocks=4, n_k_blocks=6, block_size=16)
    config = BenchConfig(heads=3, seq_q=64, seq_k=96, head_dim=16, contenders=("reference",),
                         warmup=0, reps=1, causal=True, device="cpu")  # fmt: skip
    harness = run_benchmark(config, layout).results[0]
    details = error_details(config, layout, ("reference", "fused"))
    assert max(details["reference"]["head_max_abs"]) == harness.max_abs_error
    assert len(details["reference"]["block_max_abs"]) == 3
    assert details["fused"]["error"].startswith('GpuUnavailableError: impl="fused" needs a CUDA')


def test_gradient_details_per_head_agree_with_the_harness(rng):
    layout = random_layout(rng, n_heads=3, n_q_blocks=4, n_k_blocks=6, block_size=16)
    config = BenchConfig(heads=3, seq_q=64, seq_k=96, head_dim=16, contenders=("reference",),
                         warmup=0, reps=1, causal=True, device="cpu", backward=True)  # fmt: skip
    harness = run_benchmark(config, layout).results[0]
    details = error_details(config, layout, ("reference", "sdd"))
    grads = details["reference"]["grads"]
    assert list(grads) == ["dq", "dk", "dv"]
    assert len(grads["dq"]["head_rel"]) == 3 and len(grads["dk"]["block_max_abs"][0]) == 6
    worst = max(max(grads[g]["head_max_abs"]) for g in grads)
    assert worst == harness.grad_max_abs_error  # the same inputs, output gradient and reference
    assert max(details["reference"]["head_max_abs"]) == harness.max_abs_error
    assert details["sdd"]["error"].startswith("GpuUnavailableError")


def test_cpu_check_forward_and_backward(rng):
    design = Design(random_layout(rng, n_heads=2, n_q_blocks=8, n_k_blocks=8), name="d")
    doc = cpu_check(design, head_dim=64, dtype="fp16", backward=True)
    (case,) = doc["cases"]
    (result,) = case["results"]
    assert doc["mode"] == case["mode"] == "forward+backward" and result["status"] == "ok"
    assert 0 < result["dq_rel_error"] < 5e-3 and 0 < result["dv_rel_error"] < 5e-3
    assert len(case["details"]["reference"]["grads"]["dv"]["head_rel"]) == 2


def test_small_layout_crops_to_the_top_left():
    blocks = torch.rand(20, 40, 50, generator=torch.Generator().manual_seed(0)) < 0.5
    small = small_layout(Layout(blocks, 64))
    assert small.shape == (16, 16, 16) and torch.equal(small.blocks, blocks[:16, :16, :16])
    assert small_layout(Layout(blocks, 4096)).shape == (16, 1, 1)


def test_cpu_check_runs_the_reference_against_fp64(rng):
    design = Design(random_layout(rng, n_heads=2, n_q_blocks=80, n_k_blocks=80), name="d")
    doc = cpu_check(design, head_dim=64, dtype="bf16")
    (case,) = doc["cases"]
    (result,) = case["results"]
    assert doc["kind"] == "cpu-check" and case["layout"]["shape"] == [2, 64, 64]
    assert result["name"] == "reference" and result["status"] == "ok"
    assert 0 < result["rel_error"] < 1e-2  # bf16 output rounding, nothing more
    details = case["details"]["reference"]
    assert np.max(details["head_max_abs"]) == result["max_abs_error"]
    assert len(details["block_max_abs"][0]) == 64
