"""``benchmarks/token_masks.py`` without a GPU: its families are the designer's mask_mods, the
designs it times let through exactly the pairs its fp64 reference allows, that reference is
right, and without CUDA it says so."""

from __future__ import annotations

import pytest
import torch

from designer import from_mask_mod
from designer.patterns.token_documents import token_documents
from tests.scripts import load_script

SEQ = 1024  # the families at a small length (NATTEN: 256 wide, 4 rows)


@pytest.fixture(scope="module")
def bench():
    script = load_script("benchmarks/token_masks")
    script.SEQ = SEQ
    return script


def brute_force(mask_mod) -> torch.Tensor:
    """The mask pair by pair."""
    zero = torch.tensor(0)
    return torch.tensor([[bool(mask_mod(zero, zero, torch.tensor(q), torch.tensor(k)))
                          for k in range(SEQ)] for q in range(0, SEQ, 37)])  # fmt: skip


@pytest.mark.parametrize("family", list(load_script("benchmarks/token_masks").FAMILIES))
def test_family_masks_and_designs_agree(bench, family):
    make_mask, causal = bench.FAMILIES[family]
    mask = bench.token_mask(make_mask("cpu"), "cpu")
    assert mask.shape == (SEQ, SEQ) and 0 < int(mask.sum()) < SEQ * SEQ
    assert torch.equal(mask[::37], brute_force(make_mask("cpu")))
    for block in bench.BLOCKS:
        layout = from_mask_mod(make_mask("cpu"), heads=1, seq_q=SEQ, seq_k=SEQ,
                               block_size=block, causal=causal)  # fmt: skip
        design = layout.token_mask()[0]
        if causal:
            design &= torch.ones(SEQ, SEQ, dtype=torch.bool).tril()
        assert torch.equal(design, mask), (family, block)


def test_causal_documents_are_the_designers(bench):
    ours = bench.token_mask(bench.causal_documents("cpu"), "cpu")
    designer = token_documents([SEQ // 8, SEQ // 2 - SEQ // 8, SEQ // 2], causal=True)
    assert torch.equal(ours, bench.token_mask(designer, "cpu"))


def test_fp64_reference_matches_autograd_of_masked_attention(bench):
    gen = torch.Generator().manual_seed(0)
    q, k, v, grad = (torch.randn(1, 2, SEQ, 16, generator=gen) for _ in range(4))
    allowed = bench.token_mask(bench.FAMILIES["prefix-LM S/4"][0]("cpu"), "cpu")
    got = bench.fp64_head0([q, k, v], grad, allowed)
    q0, k0, v0 = (x[0, 0].double().requires_grad_() for x in (q, k, v))
    weights = (q0 @ k0.T / 4).masked_fill(~allowed, float("-inf")).softmax(-1)
    out = weights @ v0
    assert torch.allclose(got["out"], out)
    expected = torch.autograd.grad(out, (q0, k0, v0), grad[0, 0].double())
    for name, value in zip(("dq", "dk", "dv"), expected, strict=True):
        assert torch.allclose(got[name], value), name


def test_speedups_take_our_best_over_the_faster_flex(bench):
    case = {"contenders": [
        {"contender": "ours b64", "status": "ok", "forward_ms": 2.0, "step_ms": 8.0},
        {"contender": "ours b128", "status": "ok", "forward_ms": 1.0, "step_ms": 9.0},
        {"contender": "flex triton", "status": "ok", "forward_ms": 3.0, "step_ms": 12.0},
        {"contender": "flex flash", "status": "not installed"},
    ]}  # fmt: skip
    assert bench.speedups(case) == {"forward_ms": 3.0, "step_ms": 1.5}


def test_without_cuda_it_says_so(bench, monkeypatch, capsys):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit) as exit_info:
        bench.main(["--families", "prefix-LM S/4"])
    assert exit_info.value.code == 2 and "needs a CUDA GPU" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        bench.main(["--families", "nope"])
