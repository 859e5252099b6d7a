"""The standard cases at other lengths: ``--seq``, the layouts and configs it builds, one-head
layouts through the harness, the SDD pipeline's refusal, and memory at B=4, S=65536."""

from __future__ import annotations

import pytest
import torch

from designer.layout import Layout
from designer.validate import MAX_LAYOUT_CELLS
from gpu.bench import BenchConfig, BenchSession, run_benchmark
from gpu.bench.__main__ import _jobs, _parser, main
from gpu.bench.cases import FAMILIES, case_seq_len, find_case, standard_cases
from gpu.bench.checks import row_sample
from gpu.bench.contenders import Case, sdd_refusal
from gpu.bench.flex import FlexSession
from gpu.bench.memory import estimate_memory
from gpu.bench.metrics import token_density

H200_BYTES = 141 * 10**9


def _jobs_of(*args):
    return _jobs(_parser().parse_args(list(args)))


def test_seq_sets_the_length_of_the_sweep():
    jobs, skipped = _jobs_of("--sweep", "standard", "--seq", "4096")
    assert [name for name, _, _ in jobs] == [c.name for c in standard_cases()] and not skipped
    for _, config, layout in jobs:
        assert (config.seq_q, config.seq_len_k, config.batch) == (4096, 4096, 1)
        assert (layout.seq_len_q, layout.shape[0]) == (4096, 16)
        assert config.reps == 10  # --seq alone keeps the full method
    quick, _ = _jobs_of("--case", "dense-b64-d64", "--quick", "--seq", "8192")
    assert quick[0][1].seq_q == 8192 and quick[0][1].reps == 3


def test_seq_65536_at_batch_4_builds_every_case_that_fits():
    names = "banded_2pct-b16-d64,bigbird_10pct-b16-d128,causal-b16-d64,bigbird_10pct-b64-d128"
    jobs, skipped = _jobs_of("--case", names, "--seq", "65536", "--batch", "4")
    assert [name for name, _, _ in jobs] == [
        "banded_2pct-b16-d64", "causal-b16-d64", "bigbird_10pct-b64-d128"
    ]  # fmt: skip
    for _, config, layout in jobs:
        assert (config.seq_q, config.batch, config.heads) == (65536, 4, 16)
        assert layout.seq_len_q == 65536
        assert layout.n_heads * layout.n_q_blocks * layout.n_k_blocks <= MAX_LAYOUT_CELLS
    assert [layout.n_heads for _, _, layout in jobs] == [1, 1, 16]  # one head serves all 16
    (reason,) = skipped
    assert reason.startswith("bigbird_10pct-b16-d128 at S=65536: ") and "67,108,864" in reason
    band = jobs[0][2]
    # the same 192-token half-width as at S=16384 (12 blocks a side): a quarter of the density
    assert token_density(band.blocks, 16, causal=False) == pytest.approx(23 * 16 / 65536, rel=0.01)


def test_the_command_line_says_what_it_skipped(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr("gpu.bench.__main__.run_benchmark", lambda *a, **k: pytest.fail("ran"))
    with pytest.raises(SystemExit):
        main(["--case", "bigbird_10pct-b16-d64", "--seq", "65536"])
    assert "no case can be built: bigbird_10pct-b16-d64 at S=65536" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (["--sweep", "standard", "--seq", "1000"], "seq_len must be a multiple of 128, got 1000"),
        (["--sweep", "standard", "--seq", "64"], "seq_len must be in"),
        (["--design", "x.pt", "--seq", "4096"], "--seq sets the length of --case and --sweep"),
    ],
)
def test_bad_lengths_are_refused(args, match, capsys):
    with pytest.raises(SystemExit):
        main(args)
    assert match in capsys.readouterr().err


def test_case_seq_len_defaults_and_checks():
    assert case_seq_len() == 16384 and case_seq_len(quick=True, seq_len=65536) == 65536
    with pytest.raises(ValueError, match="seq_len must be a multiple of 128, got 4000"):
        find_case("dense-b16-d64").layout(seq_len=4000)


def test_a_one_head_layout_measures_as_its_heads_broadcast():
    config = BenchConfig(heads=4, seq_q=128, head_dim=16, contenders=("reference",), warmup=0,
                         reps=1, device="cpu", causal=True)  # fmt: skip
    one = Layout(find_case("causal-b16-d64").layout(seq_len=128).blocks[:1], 16)
    every = Layout(one.blocks.expand(4, -1, -1), 16)
    results = [run_benchmark(config, layout, session=BenchSession(torch.device("cpu")))
               for layout in (one, every)]  # fmt: skip
    assert results[0].flops == results[1].flops and results[0].layout == results[1].layout
    assert results[0].layout.shape == (4, 8, 8)
    assert results[0].results[0].rel_error == results[1].results[0].rel_error


def test_sdd_refuses_layouts_past_the_limit_or_the_free_memory():
    def case(blocks, batch=4):
        q = torch.empty(batch, 16, blocks.shape[1] * 16, 8, dtype=torch.bfloat16)
        return Case(q, q, q, blocks, 16, False, 1.0, None, FlexSession())

    huge = torch.ones(1, 4096, 4096, dtype=torch.bool)  # 16 heads x 4096^2 blocks
    assert "exceed the layout limit of 67,108,864 cells" in sdd_refusal(case(huge), 16, 10**12)
    dense = torch.ones(1, 64, 64, dtype=torch.bool)
    packed = 4 * 16 * 64 * 64 * 16 * 16 * (4 + 2)
    assert sdd_refusal(case(dense), 16, packed) is None
    refusal = sdd_refusal(case(dense), 16, packed - 2**20)
    assert "need 384.0 MiB, more than the 383.0 MiB free" in refusal


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("backward", [False, True])
def test_a_65536_token_case_at_batch_4_fits_an_h200(family, backward):
    """Everything the harness keeps, the fp64 reference on its sample of rows, and the largest
    contender workspace (SDD refuses itself past the free memory, so it is left out)."""
    case = find_case(f"{family}-b64-d128")
    contenders = tuple(
        c for c in case.config(backward=backward).contenders if not c.startswith("sdd")
    )
    config = BenchConfig(batch=4, seq_q=65536, head_dim=128, contenders=contenders,
                         causal=case.causal, backward=backward)  # fmt: skip
    nnz = 16 * (65536 // 64) ** 2  # dense: the largest
    estimate = estimate_memory(config, nnz, 64)
    assert estimate.total * 1.25 < H200_BYTES, estimate.parts()
    sample = row_sample(4, 65536, 65536, 64)
    assert estimate.reference == 8 * 4 * 16 * sample.rows * 128  # the sampled rows only
