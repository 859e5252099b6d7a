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
        assert script.main(["--tiny", "--steps", "3", "--out", str(out)]) == 0
    document = json.loads(out.read_text())
    ours, flex = document["runs"]["ours"], document["runs"]["flex"]
    assert ours["impl"] == "reference" and ours["trained"] and len(ours["losses"]) == 3
    assert all(math.isfinite(x) for x in ours["losses"])
    assert ours["losses"][-1] != ours["losses"][0]  # the weights moved
    assert ours["timed_steps"] == 2 and ours["tokens_per_s"] > 0
    assert not flex["trained"] and len(flex["losses"]) == 1  # no Flex backward on the CPU
    comparison = document["comparison"]
    assert comparison["agree"] and comparison["steps_compared"] == 1
    assert comparison["max_abs_loss_difference"] <= comparison["tolerance"]
    assert document["design"]["causal"] and document["environment"]["transformers"]
    assert set(document["runs"]["flex_flash"]) == {"skipped"}  # FLASH needs FA4 and a GPU


def test_bad_arguments_are_refused():
    with pytest.raises(SystemExit):
        load_script("examples/train_llama").main(["--tiny", "--steps", "2", "--warmup", "2"])
