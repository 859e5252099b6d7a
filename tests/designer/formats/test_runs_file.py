"""Design files of layouts held as row runs: stored by their runs, read back checked."""

import io

import pytest
import torch

import designer.layout
from designer.block_runs import BlockRuns
from designer.design import Design
from designer.formats import load_design, save_design
from designer.formats.pt_file import design_content
from designer.patterns import make_pattern
from tests.designer.formats.test_pt_file import design_bytes, saved
from tests.factories import token_layout_of


def test_a_long_context_design_saves_small_and_loads_back_equal():
    layout = make_pattern("attention_sinks", 32, 2048, 2048, 64,
                          {"sink_blocks": 1, "window_blocks": 64})  # fmt: skip
    design = Design(layout, name="128K", causal=True)
    data = design_bytes(design)
    assert len(data) <= 16 << 20  # 128K tokens x 32 heads: about 1.2 MiB
    loaded = load_design(io.BytesIO(data))
    assert loaded.layout.runs is not None and loaded.layout == layout
    assert (loaded.name, loaded.causal) == ("128K", True)


def test_partial_blocks_travel_beside_the_runs(monkeypatch):
    monkeypatch.setattr(designer.layout, "DENSE_CELLS", 0)
    mask = torch.rand(2, 13, 11, generator=torch.Generator().manual_seed(3)) < 0.6
    dense = token_layout_of(mask, 4)
    layout = designer.layout.Layout(dense.to_runs(), 4, dense.partials, dense.seq_q, dense.seq_k)
    assert layout.runs is not None and layout.partials is not None
    content = design_content(Design(layout))
    assert content["version"] == 4 and set(content["layout"]) == {
        "shape", "row_runs", "starts", "stops"
    }  # fmt: skip
    loaded = load_design(io.BytesIO(design_bytes(Design(layout)))).layout
    assert loaded == layout and torch.equal(loaded.token_mask(), dense.token_mask())


def runs_file(**changes) -> bytes:
    runs = BlockRuns.from_dense(torch.eye(4, dtype=torch.bool)[None].repeat(32, 1, 1))
    layout = {"shape": [32, 4096, 4096], "row_runs": torch.zeros(32 * 4096, dtype=torch.int32),
              "starts": runs.starts[:0], "stops": runs.stops[:0]}  # fmt: skip
    layout.update(changes)
    content = design_content(Design(designer.layout.Layout.zeros(32, 4096, 4096, 64)))
    return saved({**content, "layout": layout})


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"starts": torch.zeros(1, dtype=torch.int64)}, r"layout starts must be int32 \[n\]"),
        ({"row_runs": torch.zeros(5, dtype=torch.int32)}, r"must have 131,072 row counts"),
        ({"shape": [32, 4096, 1 << 17]}, r"n_k_blocks must be in \[1, 65536\]"),
        ({"row_runs": torch.full((32 * 4096,), -1, dtype=torch.int32)}, r"row_runs must be >= 0"),
        ({"starts": torch.tensor([0, 1], dtype=torch.int32),
          "stops": torch.tensor([1, 2], dtype=torch.int32),
          "row_runs": torch.nn.functional.pad(torch.tensor([2], dtype=torch.int32),
                                              (0, 32 * 4096 - 1))},
         r"sorted, disjoint and not touching"),
    ],
)  # fmt: skip
def test_bad_runs_in_a_file_are_refused(changes, message):
    assert load_design(io.BytesIO(runs_file())).layout.nnz == 0
    with pytest.raises(ValueError, match=message):
        load_design(io.BytesIO(runs_file(**changes)))


def test_dense_designs_keep_version_3():
    layout = make_pattern("causal", 2, 8, 8, 64, {})
    content = design_content(Design(layout))
    assert content["version"] == 3 and set(content["layout"]) == {"bits", "shape"}
    save_design(Design(layout), io.BytesIO())
