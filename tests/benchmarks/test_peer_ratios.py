"""``benchmarks/peer_ratios.py``: our speedup over each peer per case, from fake-harness documents
(the committed ones come from the H200)."""

from __future__ import annotations

from gpu.bench.harness import BSA_CONTENDER
from tests.gpu.bench.test_results import make_doc
from tests.scripts import load_script

PEER_RUN = ("fused", "fused_api", "flex", "flex_tuned", "flex_flash", "cudnn_bsa", "sdpa_cudnn")


def test_each_peer_over_ours_forward_and_backward(monkeypatch):
    script = load_script("benchmarks/peer_ratios")
    times = {"fused_api": 2.0, "flex": 3.0, "flex_tuned": 2.5, "flex_flash": 1.0}
    forward = make_doc(monkeypatch, contenders=PEER_RUN, times=times)
    refused = {BSA_CONTENDER: ValueError("cuDNN BSA has no causal mode")}
    backward = make_doc(monkeypatch, contenders=PEER_RUN[:1] + PEER_RUN[2:], backward=True,
                        failures=refused)  # fmt: skip
    cells, reasons = script.ratios(forward["cases"][0])
    assert cells == {"Flex Triton": 1.25, "Flex FLASH": 0.5, "cuDNN BSA": 1.3 / 2.0}
    assert reasons == []
    table = script.markdown([forward, backward]).splitlines()
    assert table[0] == (
        "| case | fwd vs Flex Triton | fwd vs Flex FLASH | fwd vs cuDNN BSA | fwd+bwd vs Flex "
        "Triton | fwd+bwd vs Flex FLASH | fwd+bwd vs cuDNN BSA |"
    )
    assert table[2] == "| tiny | 1.25 | 0.50 | 0.65 | 1.20 | 1.10 | — |"
    assert table[-1] == "- tiny / cudnn_bsa: ValueError: cuDNN BSA has no causal mode"


def test_parts_of_one_sweep_share_its_columns(monkeypatch):
    script = load_script("benchmarks/peer_ratios")
    slow_flex = {"flex": 4.0, "flex_tuned": 4.0}
    first = make_doc(monkeypatch, contenders=PEER_RUN, times={"fused_api": 2.0, **slow_flex})
    second = make_doc(monkeypatch, contenders=PEER_RUN, times={"fused_api": 1.0, **slow_flex})
    second["cases"][0]["case"] = "other"
    table = script.markdown([first, second]).splitlines()
    assert table[0] == "| case | fwd vs Flex Triton | fwd vs Flex FLASH | fwd vs cuDNN BSA |"
    rows = [row.split(" | ")[:2] for row in table[2:4]]
    assert rows == [["| tiny", "2.00"], ["| other", "4.00"]]
