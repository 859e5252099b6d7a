"""``examples/train_llama.py --tiny``: the whole comparison on the CPU (our reference against
eager Flex at step 0) writes a complete result. Skipped without transformers."""

from __future__ import annotations

import json
import math
import warnings

import pytest

from tests.scripts import load_script

pytest.importorskip("transformers")


def test_tiny_run_trains_compares_and_writes_its_result(tmp_path):
    out = tmp_path / "tiny.json"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # eager Flex says it is unfused
        script = load_script("examples/train_llama")
        assert script.main(["--tiny", "--steps", "3", "--seq", "512", "--window", "100",
                            "--out", str(out)]) == 0  # fmt: skip
    document = json.loads(out.read_text())
    ours, flex = document["runs"]["ours"], document["runs"]["flex"]
    assert ours["impl"] == "reference" and ours["trained"] and len(ours["losses"]) == 3
    assert all(math.isfinite(x) for x in ours["losses"])
    assert ours["losses"][-1] != ours["losses"][0]  # the weights moved
    assert ours["timed_steps"] == 2 and ours["tokens_per_s"] > 0
    assert ours["attention_share"] is None  # profiled on a GPU only
    assert document["model"]["seq_len"] == 512
    assert document["design"]["name"] == "sinks 16 + window 112 tokens"  # whole blocks
    assert not flex["trained"] and len(flex["losses"]) == 1  # no Flex backward on the CPU
    comparison = document["comparison"]
    assert comparison["agree"] and comparison["steps_compared"] == 1
    assert comparison["max_abs_loss_difference"] <= comparison["tolerance"]
    assert document["design"]["causal"] and document["environment"]["transformers"]
    assert set(document["runs"]["flex_flash"]) == {"skipped"}  # FLASH needs FA4 and a GPU


@pytest.mark.parametrize("arguments", [
    ["--steps", "2", "--warmup", "2"],
    ["--seq", "100"],  # not whole blocks
    ["--seq", "512", "--window", "0"],
    ["--window", "300"],  # longer than the tiny sequence
    ["--seq", "512", "--design", "x.pt"],
])  # fmt: skip
def test_bad_arguments_are_refused(arguments):
    with pytest.raises(SystemExit):
        load_script("examples/train_llama").main(["--tiny", *arguments])
