"""The benchmark harness on the CPU: FLOP counting, config checks, derived numbers with a fake
timer, JSON and table output, the standard cases, Flex's block mask and the command line."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from designer.design import Design
from designer.formats import save_design
from designer.layout import Layout
from gpu.bench import (
    BenchConfig,
    BenchSession,
    document,
    format_table,
    run_benchmark,
    seeded_inputs,
)
from gpu.bench import harness as harness_module
from gpu.bench.__main__ import main
from gpu.bench.cases import FAMILIES, find_case, standard_cases
from gpu.bench.contenders import Prepared
from gpu.bench.flex import FlexSession, tile_classes
from gpu.bench.metrics import active_pairs, median, token_density
from gpu.reference import dense_masked_attention
from tests.gpu.oracle import naive_attention

SMALL = dict(heads=2, seq_q=64, head_dim=16, warmup=1, reps=3, device="cpu")


def _layout(seed=0, heads=2, n=4, block=16, density=0.5):
    rng = np.random.default_rng(seed)
    return Layout(torch.from_numpy(rng.random((heads, n, n)) < density), block)


@settings(max_examples=30, deadline=None)
@given(
    heads=st.integers(1, 3),
    n_q=st.integers(1, 5),
    n_k=st.integers(1, 5),
    block=st.sampled_from([1, 2, 4]),
    causal=st.booleans(),
    seed=st.integers(0, 2**31),
)
def test_active_pairs_counts_the_token_mask(heads, n_q, n_k, block, causal, seed):
    rng = np.random.default_rng(seed)
    layout = Layout(torch.from_numpy(rng.random((heads, n_q, n_k)) < 0.5), block)
    expected = 0
    for h in range(heads):
        mask = layout.token_mask(h)[0]
        if causal:
            mask = mask & torch.ones_like(mask).tril()
        expected += int(mask.sum())
    assert active_pairs(layout.blocks, block, causal=causal) == expected


def test_token_density_of_causal_full_layout_is_about_half():
    ones = torch.ones(2, 8, 8, dtype=torch.bool)
    assert token_density(ones, 16, causal=True) == pytest.approx((128 * 129 / 2) / 128**2)


def test_median():
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([4.0, 1.0, 2.0, 3.0]) == 2.5


@pytest.mark.parametrize(
    ("changes", "error", "match"),
    [
        ({"batch": 0}, ValueError, "batch must be in"),
        ({"dtype": "fp32"}, ValueError, "dtype must be one of 'bf16', 'fp16'"),
        ({"contenders": ["fused"]}, TypeError, "contenders must be a non-empty tuple"),
        ({"contenders": ("fused", "triton")}, ValueError, "contenders item must be one of"),
        ({"contenders": ("fused", "fused")}, ValueError, "must not repeat"),
        ({"reps": 0}, ValueError, "reps must be in"),
        ({"causal": "yes"}, TypeError, "causal must be True or False"),
        ({"device": "tpu"}, ValueError, "device must be one of"),
    ],
)
def test_bench_config_checks(changes, error, match):
    with pytest.raises(error, match=match):
        BenchConfig(**changes)


def test_run_benchmark_checks_the_layout_against_the_config():
    with pytest.raises(ValueError, match="layout covers 64 x 64 tokens, the config 128 x 128"):
        run_benchmark(BenchConfig(**{**SMALL, "seq_q": 128}), _layout())
    with pytest.raises(ValueError, match="layout must have 1 head or 2, got 3"):
        run_benchmark(BenchConfig(**SMALL), _layout(heads=3))
    with pytest.raises(TypeError, match="layout must be a Layout"):
        run_benchmark(BenchConfig(**SMALL), torch.ones(2, 4, 4))


def test_reference_end_to_end_on_the_cpu_with_progress():
    stages = []
    config = BenchConfig(**SMALL, contenders=("reference", "fused", "flex"), causal=True)
    result = run_benchmark(
        config, _layout(), name="tiny", progress=lambda s, f: stages.append((s, f))
    )
    reference, fused, flex = result.results
    assert reference.status == "ok" and len(reference.times_ms) == 3
    assert reference.rel_error < 1e-2 and reference.max_abs_error < 1e-1
    assert fused.status == flex.status == "unavailable" and "CUDA" in fused.message
    fractions = [f for _, f in stages]
    assert fractions == sorted(fractions) and fractions[0] >= 0 and fractions[-1] == 1.0
    assert stages[-1][0] == "done" and ("timing reference" in {s for s, _ in stages})
    assert result.layout.token_density == token_density(
        _layout().blocks, 16, causal=True
    )  # fmt: skip


def test_derived_numbers_with_a_fake_timer(monkeypatch):
    times = {"fused": 1.0, "flex": 2.0, "sdpa_cudnn": 4.0, "sdd": 8.0}
    runs = {}

    def fake_prepare(name, case):
        if name == "sdd":
            raise RuntimeError("kernel exploded")

        def run():  # the layout's attention: accurate, so it is timed
            return dense_masked_attention(
                case.q, case.k, case.v, case.blocks, case.block_size, causal=case.causal,
                scale=case.scale, compute_dtype=torch.float32,
            ).to(case.q.dtype)  # fmt: skip

        runs[run] = name
        return Prepared(run, name != "sdpa_cudnn")

    monkeypatch.setattr(harness_module, "prepare", fake_prepare)
    config = BenchConfig(**SMALL, contenders=("fused", "sdd", "flex", "sdpa_cudnn"))
    calls = []

    def timer(run, *, reps):
        calls.append(runs[run])
        return [times[runs[run]]] * reps

    session = BenchSession(torch.device("cpu"), timer=timer)
    layout = _layout()
    result = run_benchmark(config, layout, session=session)
    fused, sdd, flex, cudnn = result.results
    flops = 4 * 16 * active_pairs(layout.blocks, 16, causal=False)
    assert result.flops == flops
    assert fused.tflops == pytest.approx(flops / 1e-3 / 1e12)
    assert (fused.speedup_vs_cudnn, fused.speedup_vs_flex) == (4.0, 2.0)
    assert flex.speedup_vs_flex == 1.0 and cudnn.speedup_vs_cudnn == 1.0
    assert cudnn.own_tflops == pytest.approx(4 * 16 * 2 * 64 * 64 / 4e-3 / 1e12)
    assert cudnn.rel_error is None and fused.rel_error is not None  # dense baseline: no check
    assert sdd.status == "failed" and "RuntimeError: kernel exploded" in sdd.message
    # a second case of the same shape reuses the dense baseline's timing
    run_benchmark(config, _layout(seed=1), session=session)
    assert calls.count("sdpa_cudnn") == 1 and calls.count("fused") == 2

    doc = json.loads(json.dumps(document([result], env={"gpu": "test"})))
    assert doc["format"] == "blocksparse-bench" and doc["version"] == 1
    case = doc["cases"][0]
    assert case["config"]["contenders"] == ["fused", "sdd", "flex", "sdpa_cudnn"]
    assert case["layout"]["shape"] == [2, 4, 4] and case["flops"] == flops
    assert [r["status"] for r in case["results"]] == ["ok", "failed", "ok", "ok"]
    table = format_table([result])
    assert table.splitlines()[0].split() == [
        "case", "contender", "status", "ms", "TFLOP/s", "x", "cuDNN", "x", "Flex", "x", "BSA",
        "rel", "err",
    ]  # fmt: skip
    assert "layout  fused" in table and "4.00" in table
    assert "not measured:" in table and "kernel exploded" in table


def test_standard_cases_cover_the_families_blocks_and_head_dims():
    cases = standard_cases()
    assert len(cases) == 36 and len({c.name for c in cases}) == 36
    assert {c.family for c in cases} == set(FAMILIES)
    expected = {
        "banded_2pct": (0.02, 0.03),
        "banded_7pct": (0.065, 0.075),
        "banded_25pct": (0.235, 0.25),
        "bigbird_10pct": (0.095, 0.105),
        "causal": (0.5, 0.5001),  # S·(S+1)/2 pairs
        "dense": (1.0, 1.0),
    }
    for case in cases:
        if case.head_dim != 64:
            continue
        layout = case.layout()
        assert layout.shape[0] == 16 and layout.seq_len_q == 16384
        low, high = expected[case.family]
        assert low <= token_density(layout.blocks, case.block_size, causal=case.causal) <= high
        config = case.config()
        assert (config.dtype, config.batch, config.heads, config.seq_q) == ("bf16", 1, 16, 16384)
        assert ("sdd_w1" in config.contenders) == case.in_segmentation_study
    assert find_case("dense-b16-d128").causal is False
    with pytest.raises(ValueError, match="case must be a standard case name"):
        find_case("dense-b8-d64")


@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
@pytest.mark.parametrize("block", [16, 32, 64, 128])
@pytest.mark.parametrize("causal", [False, True])
def test_flex_block_mask_matches_create_block_mask_and_the_oracle(block, causal):
    from torch.nn.attention.flex_attention import create_block_mask, flex_attention

    rng = np.random.default_rng(block)
    blocks = torch.from_numpy(rng.random((2, 512 // block, 256 // block)) < 0.3)
    ours = FlexSession().prepare(blocks, block, causal=causal, device=torch.device("cpu"))
    ours = ours.block_mask
    tokens = blocks.repeat_interleave(block, 1).repeat_interleave(block, 2)

    def mask_mod(b, h, q_idx, kv_idx):
        allowed = tokens[h, q_idx, kv_idx]
        return allowed & (q_idx >= kv_idx) if causal else allowed

    theirs = create_block_mask(mask_mod, 1, 2, 512, 256, device="cpu")

    def lists(num, idx):
        return [sorted(idx[0, h, r, : num[0, h, r]].tolist()) for h in range(2) for r in range(4)]

    assert lists(ours.kv_num_blocks, ours.kv_indices) == lists(
        theirs.kv_num_blocks, theirs.kv_indices
    )
    assert lists(ours.full_kv_num_blocks, ours.full_kv_indices) == lists(
        theirs.full_kv_num_blocks, theirs.full_kv_indices
    )
    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, s, 16, generator=gen) for s in (512, 256, 256))
    out = flex_attention(q, k, v, block_mask=ours)  # eager: only mask_mod decides
    expected = naive_attention(q, k, v, blocks, block, causal=causal)
    torch.testing.assert_close(out.double(), expected, rtol=1e-5, atol=1e-5)


def test_flex_refuses_blocks_it_cannot_express():
    from gpu.bench.flex import FlexUnavailable

    with pytest.raises(FlexUnavailable, match="block_size dividing 128"):
        tile_classes(torch.ones(1, 2, 2, dtype=torch.bool), 96, causal=False)


def test_command_line_lists_cases_and_runs_a_saved_design(tmp_path, capsys):
    assert main(["--list"]) == 0
    assert len(capsys.readouterr().out.split()) == 36
    path = tmp_path / "tiny.pt"
    save_design(Design(_layout(heads=1), name="tiny", causal=True), path)
    out = tmp_path / "result.json"
    args = ["--design", str(path), "--heads", "2", "--head-dim", "16", "--contenders",
            "reference,sdpa", "--reps", "2", "--warmup", "0", "--out", str(out)]  # fmt: skip
    assert main(args) == 0
    printed = capsys.readouterr().out
    assert "tiny" in printed and "reference" in printed and "not measured:" in printed
    doc = json.loads(out.read_text())
    (case,) = doc["cases"]
    assert case["config"]["causal"] is True and case["config"]["heads"] == 2
    assert case["results"][0]["status"] == "ok"


def test_command_line_names_a_bad_case(capsys):
    with pytest.raises(SystemExit):
        main(["--case", "dense-b8-d64"])
    assert "case must be a standard case name" in capsys.readouterr().err


def test_seeded_inputs_are_the_harness_inputs(monkeypatch):
    seen = {}

    def prepare(name, case):
        seen.update(q=case.q, k=case.k, v=case.v)
        return Prepared(lambda: case.q, False)

    monkeypatch.setattr(harness_module, "prepare", prepare)
    config = BenchConfig(heads=2, seq_q=64, seq_k=32, head_dim=16, contenders=("fused",),
                         warmup=0, reps=1, seed=7, device="cpu", check_error=False)  # fmt: skip
    run_benchmark(config, Layout(torch.ones(1, 4, 2, dtype=torch.bool), 16))
    q, k, v = seeded_inputs(config)
    assert torch.equal(q, seen["q"]) and torch.equal(k, seen["k"]) and torch.equal(v, seen["v"])


def test_a_sweep_split_over_several_runs_is_one_file(tmp_path, capsys, monkeypatch):
    """``--time-limit`` stops before a case that would end past it (the first always runs);
    ``--resume`` runs only what the file lacks, refuses other settings or another machine, and
    the file lists every run."""
    import gpu.bench.__main__ as cli

    fake = BenchSession(torch.device("cpu"), timer=lambda run, *, reps, setup=None: [1.0] * reps)
    monkeypatch.setattr(cli, "BenchSession", lambda device, flush_l2: fake)
    monkeypatch.setattr(harness_module, "references", lambda case, sample: None)  # fast
    out = tmp_path / "sweep.json"
    args = ["--case", "dense-b128-d64,causal-b64-d64", "--seq", "256", "--contenders",
            "reference", "--warmup", "0", "--reps", "1", "--out", str(out), "--resume"]  # fmt: skip
    assert main([*args, "--time-limit", "1e-6"]) == 0
    assert "time limit: stopped after 1 of 2 cases" in capsys.readouterr().out
    first = json.loads(out.read_text())
    assert [c["case"] for c in first["cases"]] == ["dense-b128-d64"]
    assert main(args) == 0
    assert "resuming" in capsys.readouterr().out
    doc = json.loads(out.read_text())
    assert [c["case"] for c in doc["cases"]] == ["dense-b128-d64", "causal-b64-d64"]
    assert [run["cases"] for run in doc["runs"]] == [["dense-b128-d64"], ["causal-b64-d64"]]
    assert doc["runs"][0]["command"].startswith("python -m gpu.bench --case dense-b128-d64")
    assert doc["date"] == first["date"] and doc["cases"][0] == first["cases"][0]
    assert main(args) == 0 and json.loads(out.read_text()) == doc  # nothing left to run
    with pytest.raises(SystemExit):
        main([*args, "--reps", "2"])
    assert "measured dense-b128-d64 with reps 1; this run asks for reps 2" in (
        capsys.readouterr().err
    )
    monkeypatch.setattr(cli, "environment", lambda: {**doc["environment"], "gpu": "other"})
    with pytest.raises(SystemExit):
        main(args)
    assert "was measured with gpu 'n/a', this machine has 'other'" in capsys.readouterr().err


def test_without_a_gpu_the_command_line_says_so_at_once_and_offers_the_cpu_check(
    monkeypatch, capsys
):
    import gpu.bench.__main__ as cli

    monkeypatch.setattr(cli.torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(cli, "run_benchmark", lambda *a, **k: pytest.fail("nothing may run"))
    for args in (["--case", "dense-b128-d64"], ["--sweep", "standard"]):
        with pytest.raises(SystemExit) as stopped:
            main(args)
        assert stopped.value.code == 2
        err = capsys.readouterr().err
        assert err.startswith("The GPU benchmark cannot run here:")
        assert "fused, sdd" in err and "python -m gpu.bench --cpu-check" in err


def test_the_cpu_check_on_the_command_line_says_what_it_checks_and_its_verdict(tmp_path, capsys):
    path = tmp_path / "tiny.pt"
    save_design(Design(_layout(heads=2, n=8), name="tiny", causal=True), path)
    out = tmp_path / "check.json"
    assert main(["--cpu-check", "--design", str(path), "--head-dim", "16", "--out", str(out)]) == 0
    printed = capsys.readouterr().out
    assert 'impl="reference"' in printed and "top-left 128 × 128 tokens of heads 0–1" in printed
    assert "relative error" in printed and "every error within its limit" in printed
    assert json.loads(out.read_text())["kind"] == "cpu-check"
    with pytest.raises(SystemExit):
        main(["--cpu-check", "--sweep", "standard"])
    assert "not --sweep" in capsys.readouterr().err
