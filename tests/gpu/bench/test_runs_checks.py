"""A layout held as row runs in the harness, without a GPU: the sampled fp64 reference equals the
dense fp64 reference element for element, the counts equal the dense path's, contenders that
need the dense grid say so, and the long-context option is checked before anything runs."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import designer.layout
from designer.block_runs import BlockRuns
from designer.layout import Layout
from designer.patterns.attention_sinks import attention_sinks_runs
from gpu.bench import BenchConfig, run_benchmark
from gpu.bench import checks as checks_module
from gpu.bench.__main__ import main
from gpu.bench.cases import LONG_CONTEXT_CONTENDERS, long_context_design
from gpu.bench.checks import row_sample
from gpu.bench.contenders import RUNS_CONTENDERS, Case
from gpu.bench.flex import RUNS, SINKS, FlexSession, FlexUnavailable, runs_variants
from gpu.bench.metrics import active_pairs, all_pairs, runs_active_pairs
from gpu.bench.runs_checks import RunsAttention, key_heads, runs_references, sampled_runs_references
from gpu.reference import dense_masked_attention, dense_masked_attention_backward


@pytest.fixture
def runs_form(monkeypatch):
    """Layouts built from runs stay runs at any size (as past the dense grid's cap)."""
    monkeypatch.setattr(designer.layout, "DENSE_CELLS", 0)


def _inputs(heads, kv_heads, seq_q, seq_k, seed):
    gen = torch.Generator().manual_seed(seed)
    q = torch.randn(2, heads, seq_q, 8, generator=gen, dtype=torch.float64)
    k, v = (torch.randn(2, kv_heads, seq_k, 8, generator=gen, dtype=torch.float64)
            for _ in range(2))  # fmt: skip
    return q, k, v, torch.randn(q.shape, generator=gen, dtype=torch.float64)


@settings(max_examples=25, deadline=None)
@given(
    st.sampled_from([(2, 2, 1), (4, 2, 4), (3, 3, 1)]),  # query heads, kv heads, layout heads
    st.sampled_from([16, 32]),
    st.integers(1, 9),
    st.integers(1, 9),
    st.booleans(),
    st.sampled_from([0.2, 0.6, 1.0]),
    st.integers(0, 2**16),
)
def test_the_runs_reference_is_the_dense_reference_on_every_sampled_element(
    heads, block, n_q, n_k, causal, density, seed
):
    """Output and dq on query windows, dk and dv on key windows (GQA groups summed), at
    lengths ending inside the last blocks, causal bottom-right; every element compared."""
    n_heads, kv_heads, layout_heads = heads
    seq_q, seq_k = n_q * block - (seed % block), n_k * block - (seed // 7 % block)
    q, k, v, grad_out = _inputs(n_heads, kv_heads, seq_q, seq_k, seed)
    gen = torch.Generator().manual_seed(seed)
    blocks = torch.rand(layout_heads, n_q, n_k, generator=gen) < density
    offset = seq_k - seq_q
    attention = RunsAttention(q, k, v, BlockRuns.from_dense(blocks), block, causal=causal,
                              scale=0.3, causal_offset=offset)  # fmt: skip
    windows = ((0, block), (2 * block, seq_q)) if n_q > 2 else ((0, seq_q),)
    key_windows = ((block, seq_k),) if n_k > 1 else ((0, seq_k),)
    found = runs_references(attention, windows, key_windows, grad_out)
    options = {"causal": causal, "causal_alignment": "bottom_right", "scale": 0.3}
    out = dense_masked_attention(q, k, v, blocks, block, **options)
    dq, dk, dv = dense_masked_attention_backward(q, k, v, grad_out, blocks, block, **options)
    rows = torch.cat([out[:, :, a:b] for a, b in windows], dim=2)
    assert torch.allclose(found.out, rows, atol=1e-12, rtol=0)
    assert torch.allclose(found.grads[0], torch.cat([dq[:, :, a:b] for a, b in windows], 2),
                          atol=1e-12, rtol=0)  # fmt: skip
    for got, want in zip(found.grads[1:], (dk, dv), strict=True):
        want = torch.cat([want[:, list(found.heads), a:b] for a, b in key_windows], dim=2)
        assert torch.allclose(got, want, atol=1e-12, rtol=0)
    _assert_errors_vanish(found, out, (dq, dk, dv))


def test_the_harness_sample_of_a_long_case_covers_first_last_and_sink_keys(monkeypatch):
    """Past the full-check budget, windows of rows and keys from the first block to the last:
    the sink key block (attended by every query) is among the keys checked."""
    monkeypatch.setattr(checks_module, "MAX_CHECKED_PAIRS", 512 * 768)
    runs = attention_sinks_runs(2, 32, 32, sink_blocks=1, window_blocks=4)
    q, k, v, grad_out = _inputs(2, 2, 512, 512, 3)
    layout = Layout(runs, 16)
    case = Case(q, k, v, None, 16, True, 0.3, None, FlexSession(), grad_out=grad_out,
                runs_layout=layout)  # fmt: skip
    sample = row_sample(2, 512, 512, 16)
    assert sample.windows[0][0] == 0 and sample.windows[-1][1] == 512
    found = sampled_runs_references(case, sample)
    assert found.key_windows == sample.windows  # square: the same windows for the keys
    dq, dk, dv = dense_masked_attention_backward(q, k, v, grad_out, layout.to_runs().to_dense(),
                                                 16, causal=True, scale=0.3)  # fmt: skip
    out = dense_masked_attention(q, k, v, layout.to_runs().to_dense(), 16, causal=True, scale=0.3)
    _assert_errors_vanish(found, out, (dq, dk, dv))


def _assert_errors_vanish(found, out, grads) -> None:
    """The harness's errors of the dense reference against ``found`` are fp64 rounding: a
    relative error is judged only where its reference has a scale (a gradient that is 0 but for
    rounding has none)."""
    errors = found.grad_errors(grads) | found.output_errors(out)
    assert errors["max_abs_error"] < 1e-12 and errors["grad_max_abs_error"] < 1e-12
    references = {"rel_error": found.out} | dict(zip(("dq", "dk", "dv"), found.grads, strict=True))
    for name, ref in references.items():
        relative = errors[name if name == "rel_error" else f"{name}_rel_error"]
        assert relative < 1e-12 or float(ref.norm()) < 1e-9, (name, relative)


def test_key_heads_spread_over_the_heads():
    assert key_heads(32) == (0, 10, 21, 31) and key_heads(4) == (0, 1, 2, 3)
    assert key_heads(1) == (0,)


@settings(max_examples=40, deadline=None)
@given(st.integers(1, 3), st.integers(1, 12), st.integers(1, 12), st.booleans(),
       st.integers(0, 2**16))  # fmt: skip
def test_pairs_counted_from_runs_are_the_dense_counts(heads, n_q, n_k, causal, seed):
    gen = torch.Generator().manual_seed(seed)
    blocks = torch.rand(heads, n_q, n_k, generator=gen) < 0.5
    runs = BlockRuns.from_dense(blocks)
    assert runs_active_pairs(runs, 16, causal=causal) == active_pairs(blocks, 16, causal=causal)
    ones = torch.ones(1, n_q, n_k, dtype=torch.bool)
    assert all_pairs(n_q, n_k, 16, causal=causal) == active_pairs(ones, 16, causal=causal)


def test_a_runs_case_on_the_cpu_is_checked_and_reports_what_cannot_run_it(runs_form):
    """The counts are the dense path's; contenders needing the grid say so and name those that
    run it; the reference (dk and dv on sampled keys) is computed."""
    runs = attention_sinks_runs(2, 16, 16, sink_blocks=1, window_blocks=4)
    config = BenchConfig(heads=2, seq_q=1024, head_dim=16, causal=True, device="cpu",
                         contenders=("reference", "fused"), backward=True)  # fmt: skip
    result = run_benchmark(config, Layout(runs, 64))
    dense = run_benchmark(config, Layout(runs.to_dense(), 64))
    assert result.layout == dense.layout and result.flops == dense.flops
    assert result.checked_rows == 1024 and result.checked_key_rows == 1024
    assert result.checked_key_heads == (0, 1) and dense.checked_key_rows is None
    reference, fused = result.results
    assert reference.status == "unavailable" and "held as row runs" in reference.message
    assert ", ".join(RUNS_CONTENDERS) in reference.message
    assert fused.status == "unavailable" and "needs a CUDA device" in fused.message


def test_the_variants_of_a_runs_layout():
    sinks = Layout(attention_sinks_runs(2, 16, 16, sink_blocks=1, window_blocks=4), 64)
    assert [v.name for v in runs_variants(sinks)] == ["sinks-t128", "runs-t128"]
    assert [v.backend for v in runs_variants(sinks, backend="FLASH")] == ["FLASH", "FLASH"]
    band = Layout(BlockRuns.from_dense(torch.ones(1, 8, 8, dtype=torch.bool).tril(1)), 32)
    assert [v.mask for v in runs_variants(band)] == [RUNS]
    comb = Layout(BlockRuns.from_dense(torch.arange(40).remainder(2).bool().view(1, 2, 20)), 16)
    with pytest.raises(FlexUnavailable, match="more than 8 runs"):
        runs_variants(comb)
    with pytest.raises(FlexUnavailable, match="blocks dividing 128 tokens, got block_size 96"):
        runs_variants(Layout(BlockRuns.from_dense(torch.ones(1, 2, 2, dtype=torch.bool)), 96))
    assert SINKS in {v.mask for v in runs_variants(sinks)}


def test_the_long_context_design_is_the_benchmarks_and_held_as_runs():
    design = long_context_design("128K")
    layout = design.layout
    assert layout.runs is not None and layout.shape == (32, 2048, 2048)
    assert layout.block_size == 64 and design.causal
    assert layout.nnz == 32 * (sum(min(m + 1, 64) for m in range(2048)) + 2048 - 64)
    with pytest.raises(ValueError, match="long context must be one of '128K', '1M', got '2M'"):
        long_context_design("2M")


def test_the_long_context_option_is_checked_before_anything_runs(capsys):
    with pytest.raises(SystemExit) as exited:
        main(["--long-context", "2M"])
    assert exited.value.code == 2 and "invalid choice: '2M'" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exited:
        main(["--long-context", "128K", "--seq", "4096"])
    assert "--seq sets the length of --case and --sweep" in capsys.readouterr().err
    if not torch.cuda.is_available():
        with pytest.raises(SystemExit) as exited:
            main(["--long-context", "128K"])
        err = capsys.readouterr().err
        assert exited.value.code == 2 and "The GPU benchmark cannot run here" in err
        assert ", ".join(LONG_CONTEXT_CONTENDERS) in err
