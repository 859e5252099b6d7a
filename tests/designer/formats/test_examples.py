"""The example files under assets/examples load, and each JSON recipe regenerates its .pt design."""

from pathlib import Path

import pytest
import torch

from designer.formats import design_from_json, load_design
from designer.patterns.registry import make_pattern

EXAMPLES = Path(__file__).resolve().parents[3] / "assets" / "examples"


@pytest.mark.parametrize("stem", ["streaming_sinks_window", "bigbird_edited"])
def test_json_recipe_regenerates_the_saved_design(stem):
    design = load_design(EXAMPLES / f"{stem}.pt")
    assert design.recipe is not None
    assert design_from_json((EXAMPLES / f"{stem}.json").read_text()) == design


def test_bare_deepspeed_layout_loads_with_its_block_size():
    design = load_design(EXAMPLES / "deepspeed_fixed_layout.pt", block_size=16)
    params = {"num_local_blocks": 4, "num_global_blocks": 1, "attention": "unidirectional"}
    expected = make_pattern("deepspeed_fixed", 4, 32, 32, 16, params)
    assert design.layout == expected and design.recipe is None
    assert (
        torch.load(EXAMPLES / "deepspeed_fixed_layout.pt", weights_only=True).dtype == torch.int64
    )


def test_size_cap_example_is_the_largest_design_and_builds_within_budget():
    """The benchmarks' and browser tests' design at the size cap (4 × 4096² blocks of 16)."""
    design = load_design(EXAMPLES / "size_cap_window_globals.json")
    assert design.layout.shape == (4, 4096, 4096) and design.layout.block_size == 16
    blocks = design.layout.blocks
    assert blocks[1:].equal(blocks[1:2].expand(3, -1, -1))  # random blocks in head 0 only
    assert (blocks[0] & ~blocks[1]).any()
