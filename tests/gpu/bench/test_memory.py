"""The memory estimate: each part against a hand count, the peak, the refusal and its checks;
on a GPU, the estimate against the harness's real peak."""

from __future__ import annotations

import pytest
import torch

from designer.layout import Layout
from gpu.bench import BenchConfig, run_benchmark
from gpu.bench.memory import (
    DEFAULT_MARGIN,
    MemoryEstimate,
    estimate_memory,
    refusal,
)

MiB = 1 << 20


def config(**changes):
    base = dict(heads=16, seq_q=4096, head_dim=64, contenders=("fused",), flush_l2=False,
                check_error=False)  # fmt: skip
    return BenchConfig(**{**base, **changes})


def test_inputs_are_q_k_v_and_one_output():
    estimate = estimate_memory(config(seq_k=8192, batch=2), nnz=0, block_size=64)
    q_bytes = 2 * 2 * 16 * 4096 * 64
    assert estimate.inputs == q_bytes + 2 * (2 * q_bytes) + q_bytes
    assert estimate.total == estimate.inputs
    assert estimate.parts() == [("q, k, v and an output", estimate.inputs)]


def test_fp64_reference_chunk_and_error_check():
    estimate = estimate_memory(config(check_error=True), nnz=0, block_size=64)
    assert estimate.reference == 8 * 16 * 4096 * 64
    assert estimate.error_check == 3 * estimate.reference
    # 512 MiB / (4096 keys x 8 bytes x 64) = 256 blocks of rows, more than 4096 rows: all rows
    scores = 8 * 4096 * 4096
    assert estimate.reference_chunk == 4 * scores + 2 * 4096 * 4096 + 8 * 64 * 3 * 4096
    expected = (
        estimate.inputs + estimate.reference + max(estimate.reference_chunk, estimate.error_check)
    )
    assert estimate.total == expected


def test_reference_chunk_is_bounded_by_the_chunk_size_at_long_sequences():
    estimate = estimate_memory(config(seq_q=65536, check_error=True), nnz=0, block_size=128)
    rows = (512 * MiB // (65536 * 8 * 128)) * 128  # 64 blocks of rows
    assert estimate.reference_chunk == 4 * 8 * rows * 65536 + 2 * rows * 65536 + 8 * 64 * (
        2 * 65536 + rows
    )
    assert 4 * 512 * MiB <= estimate.reference_chunk < 5 * 512 * MiB


def test_sdd_scores_flex_workspace_and_flush():
    estimate = estimate_memory(
        config(contenders=("sdd", "flex"), flush_l2=True, dtype="fp16"), nnz=1000, block_size=32
    )
    assert estimate.sdd_scores == 1000 * 32 * 32 * (4 + 2)
    mask = 16 * (4096 // 16) ** 2
    tiles = 16 * (4096 // 64) ** 2  # the smallest tile a variant uses
    output = 2 * 16 * 4096 * 64
    assert estimate.flex_workspace == mask + 16 * tiles + output + 4 * 16 * 4096
    assert estimate.flush == 256 * MiB
    assert estimate.total == estimate.inputs + estimate.flush + estimate.flex_workspace


def test_a_training_step_adds_gradients_reference_gradients_and_workspace():
    cfg = config(backward=True, check_error=True, contenders=("fused", "reference"), seq_k=8192)
    estimate = estimate_memory(cfg, nnz=0, block_size=64)
    q_elements, k_elements = 16 * 4096 * 64, 16 * 8192 * 64
    assert estimate.grads == 2 * (3 * q_elements + 2 * k_elements)  # dO, kept out, dq; dk, dv
    assert estimate.reference_grads == 8 * (q_elements + 2 * k_elements)
    assert estimate.backward_workspace == 4 * q_elements + 8 * 16 * 4096
    assert estimate.reference_graph == 3 * 4 * 16 * 4096 * 8192  # the reference's own graph
    assert estimate.error_check == 3 * 8 * k_elements  # dk and dv are the larger ones here
    rows = min(512 * MiB // (8192 * 8 * 64) * 64, 4096)  # every row fits in one chunk
    assert estimate.reference_chunk == 6 * 8 * rows * 8192 + 2 * rows * 8192 + 8 * 64 * (
        2 * 8192 + rows
    )
    kept = estimate.inputs + estimate.reference + estimate.reference_grads + estimate.grads
    contender = estimate.reference_graph + estimate.backward_workspace + estimate.error_check
    assert estimate.total == kept + max(estimate.reference_chunk, contender)
    assert ("fp64 reference gradients", estimate.reference_grads) in estimate.parts()
    forward = estimate_memory(config(check_error=True, seq_k=8192), nnz=0, block_size=64)
    assert forward.grads == forward.reference_grads == forward.backward_workspace == 0
    assert forward.total < estimate.total


def test_refusal_names_every_part_and_the_free_memory():
    estimate = MemoryEstimate(3 * MiB, 0, MiB, 0, 0, 0, 0)
    assert refusal(estimate, 5 * MiB, 1.25) is None
    message = refusal(estimate, 4 * MiB, 1.25)
    assert message.startswith("Refused before launch: this case needs about 4.0 MiB")
    assert "q, k, v and an output 3.0 MiB, fp64 reference output 1.0 MiB" in message
    assert "×1.25 that is 5.0 MiB, but only 4.0 MiB are free" in message
    assert refusal(estimate, 0, 0.0) is None  # margin 0 turns the check off


@pytest.mark.parametrize(
    ("call", "error", "match"),
    [
        (lambda: estimate_memory("config", 1, 16), TypeError, "config must be a BenchConfig"),
        (lambda: estimate_memory(config(), -1, 16), ValueError, r"nnz must be >= 0, got -1"),
        (
            lambda: estimate_memory(config(), 1, 0),
            ValueError,
            r"block_size must be (>= 1|in \[1, \d+\]), got 0",
        ),
        (lambda: refusal(MemoryEstimate(1, 0, 0, 0, 0, 0, 0), -1, 1.0), ValueError, "free_bytes"),
        (lambda: refusal(MemoryEstimate(1, 0, 0, 0, 0, 0, 0), 1, 11.0), ValueError, "margin"),
        (lambda: refusal(MemoryEstimate(1, 0, 0, 0, 0, 0, 0), 1, "1"), TypeError, "margin"),
    ],
)
def test_argument_checks(call, error, match):
    with pytest.raises(error, match=match):
        call()


def measured_peak(cfg: BenchConfig, layout: Layout) -> int:
    """Device bytes a benchmark run allocates at its peak, above what was allocated before."""
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    before = torch.cuda.memory_allocated()
    run_benchmark(cfg, layout)
    return torch.cuda.max_memory_allocated() - before


@pytest.mark.gpu
@pytest.mark.parametrize("contenders", [("fused", "sdd", "sdpa_cudnn"), ("flex", "sdpa")])
@pytest.mark.parametrize("seq", [2048, 8192])
def test_estimate_covers_the_real_peak_on_the_gpu(contenders, seq):
    band = torch.ones(seq // 64, seq // 64, dtype=torch.bool).triu(-3).tril(3)
    layout = Layout(band[None].expand(8, -1, -1), 64)
    cfg = BenchConfig(heads=8, seq_q=seq, contenders=contenders, warmup=1, reps=2)
    assert measured_peak(cfg, layout) <= DEFAULT_MARGIN * estimate_memory(cfg, layout.nnz, 64).total


@pytest.mark.gpu
@pytest.mark.parametrize("contenders", [("fused", "sdpa_cudnn"), ("flex", "sdpa")])
def test_estimate_covers_the_real_peak_of_a_training_step_on_the_gpu(contenders):
    band = torch.ones(64, 64, dtype=torch.bool).triu(-3).tril(3)
    layout = Layout(band[None].expand(8, -1, -1), 64)
    cfg = BenchConfig(heads=8, seq_q=4096, contenders=contenders, warmup=1, reps=2, backward=True)
    assert measured_peak(cfg, layout) <= DEFAULT_MARGIN * estimate_memory(cfg, layout.nnz, 64).total
