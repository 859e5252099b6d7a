"""The token catalogue against independent token-level references (numpy, pixel by pixel)."""

import numpy as np
import pytest
import torch

from designer.patterns import PATTERNS, make_pattern
from designer.recipe import Recipe, RecipeStep


def _grid(seq_q, seq_k):
    return np.arange(seq_q)[:, None], np.arange(seq_k)[None, :]


def _document_ids(lengths, total):
    ids = np.full(total, len(lengths))  # past the listed documents: one more
    start = 0
    for doc, length in enumerate(lengths):
        ids[start : start + length] = doc
        start += length
    return ids


def _pixels(index, width, tile=None):
    if tile is None:
        return index // width, index % width
    th, tw = tile
    tile_index, inside = index // (th * tw), index % (th * tw)
    across = width // tw
    return (tile_index // across) * th + inside // tw, (tile_index % across) * tw + inside % tw


def _window(q, k, size, kernel):
    half = kernel // 2
    centre = np.clip(q, min(half, size - 1), max(half, size - 1 - half))
    return np.abs(centre - k) <= half


def reference(name, params, seq_q, seq_k):
    q, k = _grid(seq_q, seq_k)
    if name in ("token_sliding_window", "token_dilated_window"):
        w = params["window_tokens"]
        mask = (q >= k) & (q - k <= w) if params["causal"] else np.abs(q - k) <= w
        return mask & ((q - k) % params["dilation"] == 0) if "dilation" in params else mask
    if name == "token_prefix_lm":
        return (k <= q) | (k < params["prefix_tokens"])
    if name in ("token_documents", "token_causal_documents"):
        ids = _document_ids(params["doc_tokens"], max(seq_q, seq_k))
        same = ids[q] == ids[k]
        return same & (k <= q) if name == "token_causal_documents" else same
    if name == "token_global":
        return (q < params["global_tokens"]) | (k < params["global_tokens"])
    if name == "token_sinks":
        return (k <= q) & ((k < params["sink_tokens"]) | (q - k <= params["window_tokens"]))
    tile = None
    if name != "token_natten":
        tile = (params["tile_height"], params["tile_width"])
        width = params["tiles_across"] * params["tile_width"]
    else:
        width = params["width"]
    height = -(-seq_k // width)
    (qr, qc), (kr, kc) = _pixels(q, width, tile), _pixels(k, width, tile)
    if name == "token_sliding_tiles":
        th, tw = tile
        across, down = width // tw, -(-height // th)
        qt, kt = q // (th * tw), k // (th * tw)
        rows = _window(qt // across, kt // across, down, params["window_tiles_h"])
        return rows & _window(qt % across, kt % across, across, params["window_tiles_w"])
    rows = _window(qr, kr, height, params["kernel_height"])
    return rows & _window(qc, kc, width, params["kernel_width"])


TOKEN_PATTERNS = [name for name, spec in PATTERNS.items() if spec.family == "token"]
CASES = {
    "token_sliding_window": [{"window_tokens": 37, "causal": False}, {"window_tokens": 100}],
    "token_dilated_window": [{"window_tokens": 90, "dilation": 3, "causal": False}],
    "token_prefix_lm": [{"prefix_tokens": 70}, {"prefix_tokens": 0}],
    "token_documents": [{"doc_tokens": [50, 1, 130]}, {"doc_tokens": [300]}],
    "token_causal_documents": [{"doc_tokens": [17, 100, 40]}],
    "token_global": [{"global_tokens": 20}],
    "token_sinks": [{"sink_tokens": 5, "window_tokens": 40}],
    "token_natten": [{"width": 12, "kernel_height": 5, "kernel_width": 3}],
    "token_tiled_natten": [
        {
            "tiles_across": 3,
            "tile_height": 2,
            "tile_width": 4,
            "kernel_height": 3,
            "kernel_width": 7,
        }
    ],
    "token_sliding_tiles": [
        {
            "tiles_across": 4,
            "tile_height": 3,
            "tile_width": 2,
            "window_tiles_h": 3,
            "window_tiles_w": 1,
        }
    ],
}


@pytest.mark.parametrize("name", TOKEN_PATTERNS)
@pytest.mark.parametrize("block", [16, 32, 64, 128])
@pytest.mark.parametrize("lengths", [(250, 250), (144, 200)])
def test_families_match_their_references(name, block, lengths):
    seq_q, seq_k = lengths
    n_q, n_k = -(-seq_q // block), -(-seq_k // block)
    defaults = {param.name: param.default for param in PATTERNS[name].params}
    for params in [{}, *CASES[name]]:
        values = {**defaults, **params}
        layout = make_pattern(name, 2, n_q, n_k, block, params, seq_q=seq_q, seq_k=seq_k)
        expected = torch.from_numpy(reference(name, values, seq_q, seq_k))
        assert torch.equal(layout.token_mask(), expected.expand(2, -1, -1)), params


def test_a_token_step_combines_with_block_patterns_and_edits():
    from designer.edit import EditOp, Rect

    steps = (
        RecipeStep("token_causal_documents", {"doc_tokens": [90, 200]}),
        RecipeStep("global_tokens", {"global_blocks": [0]}, combine="union"),
        RecipeStep("token_sliding_window", {"window_tokens": 30}, heads=(1,), combine="intersect"),
    )
    recipe = Recipe(2, 10, 10, 32, steps, (EditOp("clear", Rect(0, 0, 0, 9), heads=(0,)),),
                    seq_q=300, seq_k=300)  # fmt: skip
    docs = torch.from_numpy(
        reference("token_causal_documents", {"doc_tokens": [90, 200]}, 300, 300)
    )
    q, k = torch.arange(300)[:, None], torch.arange(300)[None, :]
    globals_ = (q < 32) | (k < 32)
    window = (q >= k) & (q - k <= 30)
    expected = torch.stack([docs | globals_, (docs | globals_) & window])
    expected[0, :32] = False
    assert torch.equal(recipe.build().token_mask(), expected)


@pytest.mark.parametrize(
    ("name", "params", "message"),
    [
        ("token_sliding_window", {"window_tokens": 0}, r"window_tokens must be in \[1, "),
        ("token_documents", {"doc_tokens": []}, r"doc_tokens must have 1 to 4096 items, got 0"),
        ("token_documents", {"doc_tokens": [3, 0]}, r"doc_tokens\[1\] must be in \[1, "),
        ("token_natten", {"kernel_width": 0}, r"kernel_width must be in \[1, 4096\]"),
        ("token_dilated_window", {"dilation": 0}, r"dilation must be in \[1, "),
    ],
)
def test_parameters_are_validated(name, params, message):
    with pytest.raises(ValueError, match=message):
        make_pattern(name, 1, 4, 4, 16, params)


def test_the_factories_are_mask_mods_for_flex():
    from torch.nn.attention.flex_attention import create_mask

    from designer.patterns.token_window import token_sliding_window

    rule = token_sliding_window(5, causal=False)
    assert rule.__name__ == "sliding_window_5"
    q, k = _grid(40, 40)
    expected = torch.from_numpy(np.abs(q - k) <= 5)
    assert torch.equal(create_mask(rule, 1, 1, 40, 40, device="cpu")[0, 0], expected)
