"""The error check on a sample of query rows: which rows, and that each window's reference is
exactly the whole reference's rows (output and dq), causal or not, square or not."""

from __future__ import annotations

import json

import pytest
import torch

from designer.layout import Layout
from gpu.bench import BenchConfig, BenchSession, document, format_table, run_benchmark
from gpu.bench import checks as checks_module
from gpu.bench.checks import MAX_CHECKED_PAIRS, RowSample, references, row_sample
from gpu.bench.contenders import Case
from gpu.bench.flex import FlexSession
from gpu.reference import dense_masked_attention, dense_masked_attention_backward

SIZES = [(1, 4096, None), (1, 16384, None), (4, 16384, 4096), (4, 65536, 1024), (1, 65536, 4096)]


@pytest.mark.parametrize(("batch", "seq", "checked"), SIZES)
@pytest.mark.parametrize("block", [16, 64, 128, 256])
def test_large_cases_are_checked_on_spread_block_aligned_windows(batch, seq, checked, block):
    sample = row_sample(batch, seq, seq, block)
    if checked is None:
        assert sample is None  # the standard size is checked in full, as before
        return
    assert sample.rows <= max(checked, block) and batch * sample.rows * seq <= max(
        MAX_CHECKED_PAIRS, batch * block * seq
    )
    starts = [row0 for row0, _ in sample.windows]
    assert starts[0] == 0 and sample.windows[-1][1] == seq
    for (_, row1), (next0, _) in zip(sample.windows, sample.windows[1:], strict=False):
        assert row1 < next0  # disjoint, ascending, with gaps
    for row0, row1 in sample.windows:
        assert row0 % block == 0 and row1 % block == 0 and row1 - row0 >= 128


def test_take_gathers_the_windows_rows():
    tensor = torch.arange(10.0).reshape(1, 1, 10, 1)
    sample = RowSample(((0, 2), (6, 8)))
    assert sample.rows == 4
    assert sample.take(tensor).flatten().tolist() == [0.0, 1.0, 6.0, 7.0]


def _case(seq_q, seq_k, block, causal, *, backward):
    gen = torch.Generator().manual_seed(seq_q + seq_k + block)
    q = torch.randn(2, 3, seq_q, 8, generator=gen, dtype=torch.float64)
    k, v = (torch.randn(2, 3, seq_k, 8, generator=gen, dtype=torch.float64) for _ in range(2))
    blocks = torch.rand(3, seq_q // block, seq_k // block, generator=gen) < 0.6
    grad_out = torch.randn(q.shape, generator=gen, dtype=torch.float64) if backward else None
    return Case(q, k, v, blocks, block, causal, 0.3, None, FlexSession(), grad_out=grad_out)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize(("seq_q", "seq_k"), [(256, 256), (256, 128), (128, 256), (192, 96)])
def test_sampled_references_are_the_whole_references_rows(seq_q, seq_k, causal):
    case = _case(seq_q, seq_k, 16, causal, backward=True)
    sample = RowSample(((0, 32), (48, 112), (160, seq_q)) if seq_q > 160 else ((0, 32), (64, 96)))
    sampled = references(case, sample)
    args = (case.q, case.k, case.v)
    whole = dense_masked_attention(*args, case.blocks, 16, causal=causal, scale=0.3)
    dq, _, _ = dense_masked_attention_backward(
        *args, case.grad_out, case.blocks, 16, causal=causal, scale=0.3
    )
    torch.testing.assert_close(sampled.out, sample.take(whole), rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(sampled.grads[0], sample.take(dq), rtol=1e-12, atol=1e-12)
    # The same fp64 sums, blocked differently by the CPU's BLAS: equal to rounding, not bitwise.
    errors = sampled.output_errors(whole)
    assert errors.keys() == {"max_abs_error", "rel_error"}
    assert max(errors.values()) < 1e-12
    grad_errors = sampled.grad_errors((dq, None, None))
    assert grad_errors.keys() == {"dq_rel_error", "grad_max_abs_error"}  # dk, dv unchecked
    assert max(grad_errors.values()) < 1e-12


def test_the_harness_checks_a_large_case_on_a_sample(monkeypatch):
    monkeypatch.setattr(checks_module, "MAX_CHECKED_PAIRS", 64 * 512)  # 64 rows of S=512
    config = BenchConfig(heads=2, seq_q=512, head_dim=16, contenders=("reference",), warmup=0,
                         reps=1, device="cpu", causal=True)  # fmt: skip
    layout = Layout(torch.ones(1, 32, 32, dtype=torch.bool), 16)
    result = run_benchmark(config, layout, session=BenchSession(torch.device("cpu")))
    (reference,) = result.results
    assert result.checked_rows == 128  # one window of 128 rows, the first
    assert reference.status == "ok" and 0 < reference.rel_error < 1e-2
    doc = json.loads(json.dumps(document([result], env={"gpu": "test"})))
    assert doc["cases"][0]["checked_rows"] == 128 and doc["cases"][0]["config"]["seq_q"] == 512
    assert "too large to check in full" in format_table([result])
    monkeypatch.undo()
    assert run_benchmark(config, layout).checked_rows == 512
