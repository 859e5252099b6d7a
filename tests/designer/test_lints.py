"""``lint_design`` on hand-made layouts: each finding, its heads, examples and message."""

from __future__ import annotations

import pytest
import torch

from designer.design import Design
from designer.layout import Layout
from designer.lints import MAX_EXAMPLES, SEVERITIES, Lint, lint_design
from tests.designer.test_segment import PHANTOM_EXAMPLE, longformer_layout


def band(n_heads: int, n_blocks: int, reach: int) -> torch.Tensor:
    """Every head: blocks within ``reach`` of the diagonal."""
    i = torch.arange(n_blocks)
    return ((i[:, None] - i[None, :]).abs() <= reach).expand(n_heads, -1, -1).clone()


def lints_of(blocks: torch.Tensor, block_size: int = 64, **design) -> list[Lint]:
    return lint_design(Design(Layout(blocks, block_size), **design))


def by_code(lints: list[Lint]) -> dict[str, list[Lint]]:
    found: dict[str, list[Lint]] = {}
    for lint in lints:
        found.setdefault(lint.code, []).append(lint)
    return found


def test_a_clean_design_has_no_findings():
    blocks = band(3, 12, 1)
    blocks[1, 5, 0] = True  # heads differ
    blocks[2, 7, 0] = True
    assert lints_of(torch.tril(blocks), causal=True) == []


def test_empty_query_rows():
    blocks = band(2, 10, 1)
    blocks[1, 3] = False
    blocks[1, 8] = False
    (lint,) = by_code(lints_of(blocks, block_size=32, start_width=2))["empty-query-rows"]
    assert (lint.severity, lint.heads) == ("warning", (1,))
    assert lint.rows == ((1, 3), (1, 8)) and lint.cells == ()
    assert lint.message.startswith("2 query block rows in head 1 have no active key block")
    assert "those 64 queries attend to nothing and output zeros" in lint.message


def test_empty_rows_examples_are_capped():
    blocks = torch.zeros(3, 4, 4, dtype=torch.bool)
    blocks[:, 0, 0] = True
    blocks[2, :, 1] = True  # heads differ, head 2 has no empty row
    (lint,) = by_code(lints_of(blocks))["empty-query-rows"]
    assert lint.heads == (0, 1) and len(lint.rows) == MAX_EXAMPLES
    assert lint.rows == ((0, 1), (0, 2), (0, 3), (1, 1), (1, 2))
    assert lint.message.startswith("6 query block rows in heads 0 and 1 have")


def test_causal_violations():
    blocks = torch.tril(band(3, 6, 2))
    blocks[0, 1, 4] = True
    blocks[2, 0, 5] = True
    blocks[2, 3, 4] = True
    lints = by_code(lints_of(blocks, causal=True))
    (lint,) = lints["causal-violation"]
    assert (lint.severity, lint.heads) == ("error", (0, 2))
    assert lint.cells == ((0, 1, 4), (2, 0, 5), (2, 3, 4))
    assert "heads 0 and 2 have 3 blocks above the diagonal" in lint.message
    assert "causal-violation" not in by_code(lints_of(blocks, causal=False))


def test_causal_violations_with_more_keys_than_queries():
    blocks = torch.ones(1, 2, 4, dtype=torch.bool)  # row 0 may see col 0, row 1 cols 0-1
    (lint,) = by_code(lints_of(blocks, causal=True))["causal-violation"]
    assert lint.cells == ((0, 0, 1), (0, 0, 2), (0, 0, 3), (0, 1, 2), (0, 1, 3))
    assert "head 0 has 5 blocks above the diagonal" in lint.message


def test_identical_heads_are_grouped():
    a, b, c = band(1, 8, 1)[0], band(1, 8, 2)[0], band(1, 8, 3)[0]
    lints = by_code(lints_of(torch.stack([a, b, a, b, c])))["identical-heads"]
    assert [(lint.heads, lint.severity) for lint in lints] == [((0, 2), "info"), ((1, 3), "info")]
    assert lints[0].message.startswith("Heads 0 and 2 share one layout")
    (every,) = by_code(lints_of(band(4, 8, 1)))["identical-heads"]
    assert every.heads == (0, 1, 2, 3) and every.message.startswith("All 4 heads share one layout")
    assert "identical-heads" not in by_code(lints_of(band(1, 8, 1)))


def test_longformer_duplicates_at_deepspeeds_default_width():
    """Block 32: DeepSpeed starts at width 4 and emits the global corner (0, 0) three times."""
    lints = by_code(lints_of(longformer_layout(), block_size=32))
    (lint,) = lints["deepspeed-duplicate-blocks"]
    assert (lint.severity, lint.heads, lint.cells) == ("warning", (0,), ((0, 0, 0),))
    assert lint.message.startswith(
        "DeepSpeed's segmentation at start width 4 (DeepSpeed's default for block size 32, "
        "and this design's) emits 1 block of head 0 more than once (2 extra copies)"
    )
    assert "deepspeed-phantom-blocks" not in lints


def test_deepspeed_default_and_design_width_are_reported_apart():
    own = by_code(lints_of(longformer_layout(), block_size=32, start_width=2))
    (lint,) = own["deepspeed-duplicate-blocks"]  # only DeepSpeed's default, 4
    assert "start width 4 (DeepSpeed's default for block size 32)" in lint.message
    wide = by_code(lints_of(longformer_layout(), block_size=16, start_width=4))
    (lint,) = wide["deepspeed-duplicate-blocks"]  # DeepSpeed's default for block 16 is 2
    assert "start width 4 (this design's start width)" in lint.message


def test_phantom_blocks():
    blocks = torch.cat([torch.ones(1, 3, 4, dtype=torch.int32), PHANTOM_EXAMPLE])
    (lint,) = by_code(lints_of(blocks, block_size=16, start_width=3))["deepspeed-phantom-blocks"]
    assert (lint.severity, lint.heads, lint.cells) == ("warning", (1,), ((1, 0, 0),))
    assert "puts 1 absent block of head 1 into its tiles" in lint.message
    assert "writes them over packed block 0" in lint.message


def test_block_256_gives_deepspeed_no_tiles():
    (lint,) = by_code(lints_of(band(2, 4, 1), block_size=256))["deepspeed-no-tiles"]
    assert (lint.severity, lint.heads) == ("warning", (0, 1))
    assert "DeepSpeed's default segmentation start width (128 // 256) is 0" in lint.message


def test_start_width_zero_makes_no_tiles():
    (lint,) = by_code(lints_of(torch.tril(band(1, 4, 1)), start_width=0))["no-tiles"]
    assert (lint.severity, lint.heads) == ("warning", (0,))


def test_findings_are_sorted_by_severity():
    blocks = torch.zeros(2, 4, 4, dtype=torch.bool)
    blocks[:, 0, 3] = True
    lints = lints_of(blocks, 32, causal=True)
    assert [lint.code for lint in lints] == [
        "causal-violation",
        "empty-query-rows",
        "identical-heads",
        "scattered-for-fused-tiles",
    ]
    assert [SEVERITIES.index(lint.severity) for lint in lints] == [0, 1, 2, 2]


def test_design_is_checked():
    with pytest.raises(TypeError, match=r"design must be a Design, got Layout"):
        lint_design(Layout(band(1, 4, 1), 64))


def test_scattered_small_blocks_report_the_fused_kernels_tile_waste():
    """At block 16 a 64-token tile holds 4 x 4 blocks."""
    blocks = torch.zeros(2, 8, 8, dtype=torch.bool)
    blocks[:, torch.arange(8), torch.arange(8)] = True  # diagonal: 4 of 16 blocks per tile
    blocks[1, 0, 4] = True  # head 1 touches one more tile with one block
    (lint,) = by_code(lints_of(blocks, 16))["scattered-for-fused-tiles"]
    assert lint.severity == "info" and lint.heads == (0, 1)
    assert "fill 21% of the tiles they touch" in lint.message  # 8 + 9 of (2 + 3) tiles x 16
    assert "4.7x the scores" in lint.message
    assert "tiles of at least 64 x 64 tokens" in lint.message


def test_a_grid_that_is_not_whole_tiles_counts_its_last_partial_tiles_whole():
    """6 x 5 blocks at block 16: tiles of rows 0-3 and 4-5 by columns 0-3 and 4; the kernel
    computes the partial tiles whole (16 blocks each)."""
    blocks = torch.zeros(1, 6, 5, dtype=torch.bool)
    blocks[0, 5, 4] = blocks[0, 0, 0] = True  # the last, partial tile and the first
    (lint,) = by_code(lints_of(blocks, 16))["scattered-for-fused-tiles"]
    assert "fill 6% of the tiles they touch" in lint.message  # 2 of 2 x 16
    assert "16.0x the scores" in lint.message


def test_blocks_grouped_into_fused_tiles_or_as_large_cost_nothing_extra():
    squares = torch.zeros(1, 8, 8, dtype=torch.bool)
    squares[0, :4, :4] = squares[0, 4:, 4:] = True  # two whole 64-token squares at block 16
    scattered_64 = torch.rand(2, 6, 6, generator=torch.Generator().manual_seed(1)) < 0.2
    assert "scattered-for-fused-tiles" not in by_code(lints_of(squares, 16))
    assert "scattered-for-fused-tiles" not in by_code(lints_of(scattered_64, 64))
    empty = torch.zeros(1, 8, 8, dtype=torch.bool)
    assert "scattered-for-fused-tiles" not in by_code(lints_of(empty, 16))


def test_partial_blocks_are_counted_with_the_scores_they_mask_away():
    from designer import from_mask_mod
    from designer.analysis import analyse

    layout = from_mask_mod(lambda b, h, q, k: k <= q, heads=1, seq_q=64, seq_k=64, block_size=32)
    (lint,) = [lint for lint in lint_design(Design(layout)) if lint.code == "partial-blocks"]
    assert lint.severity == "warning" and lint.cells == ((0, 0, 0), (0, 1, 1))
    assert (
        "2 blocks of 3 active are partial" in lint.message and "32.3%" in lint.message
    )  # 2 x 496 of 3 x 1024
    tokens = analyse(Design(layout)).tokens
    assert (tokens.full_blocks, tokens.partial_blocks, tokens.empty_blocks) == (1, 2, 1)
    assert tokens.allowed == 64 * 65 // 2 and tokens.computed == 3 * 32 * 32
