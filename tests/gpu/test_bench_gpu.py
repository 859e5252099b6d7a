"""The harness end to end on a small case, on a GPU: every contender runs, ours are correct."""

from __future__ import annotations

import pytest
import torch

from designer.layout import Layout
from gpu.bench import CONTENDERS, BenchConfig, BenchSession, format_table, run_benchmark
from gpu.bench.cases import family_blocks

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize(("block", "causal"), [(16, False), (64, True)])
def test_every_contender_on_a_small_case(block, causal):
    n_blocks = 1024 // block
    blocks = family_blocks("causal" if causal else "bigbird_10pct", n_blocks, block)
    config = BenchConfig(seq_q=1024, head_dim=64, causal=causal, contenders=CONTENDERS,
                         warmup=1, reps=3)  # fmt: skip
    session = BenchSession(torch.device("cuda"))
    result = run_benchmark(config, Layout(blocks, block), name="small", session=session)
    print(format_table([result]))
    by_name = {r.name: r for r in result.results}
    for name in ("fused", "sdd", "sdd_w1", "flex", "flex_tuned", "reference"):
        r = by_name[name]
        assert r.status == "ok", r.message
        assert r.rel_error < 1e-2 and r.ms > 0 and r.tflops > 0
    for name in ("sdd_qk", "sdd_qk_w1", "sdpa", "sdpa_cudnn"):
        assert by_name[name].status == "ok", by_name[name].message
    assert by_name["fused"].speedup_vs_cudnn is not None
    # "x Flex" divides by the faster FlexAttention of the run
    assert max(by_name[n].speedup_vs_flex for n in ("flex", "flex_tuned")) == pytest.approx(1.0)
