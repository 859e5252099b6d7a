"""FlexAttention ``BlockMask`` tensors read back from a file: the layout, exactly, and causal.

``block_mask_tensors`` writes the ``from_kv_blocks`` arguments and, under ``"layout"``, the
layout its ``mask_mod`` reads; that layout is the answer once the tile lists are checked to be
exactly its tiles. Files without it (from elsewhere, or from before the layout travelled with
the lists) are read from their lists alone, one block per tile.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch

from designer.formats.flex_tiles import check_tiles, listed_tiles
from designer.formats.packing import RUNS_KEYS, read_partials, unpack_blocks, unpack_runs
from designer.formats.runs_block_mask import check_runs_lists
from designer.formats.torch_file import file_tensor
from designer.layout import MAX_BLOCK_SIZE, Layout
from designer.validate import (
    MAX_LAYOUT_CELLS,
    check_bool,
    check_int,
    check_int_list,
    check_keys,
    check_layout_shape,
    error_context,
)

#: The entries a token-exact layout adds to a file's ``"layout"``.
TOKEN_KEYS = ("partials", "seq_lengths")


def layout_from_tensors(tensors: Mapping[str, Any]) -> tuple[Layout, bool]:
    """The layout and causal flag of ``block_mask_tensors`` output read from a file.

    With a ``"layout"`` entry (as ``block_mask_tensors`` writes), the layout is that one, once
    the block lists are checked to be exactly its tiles. Without one (a file from elsewhere, or
    from before the layout travelled with the lists), the tiles are the blocks, and the design
    counts as causal when its partial blocks are all on the diagonal and its full ones all below
    it, which is how a causal mask at the layout's blocks looks. Tensors are checked (shape,
    dtype, ranges, bytes really stored) before any is expanded.
    """
    block = tensors["BLOCK_SIZE"]
    if isinstance(block, (tuple, list)) and len(block) == 2 and block[0] == block[1]:
        block = block[0]
    block = check_int("BLOCK_SIZE", block, low=1, high=MAX_BLOCK_SIZE)
    lengths = tensors["seq_lengths"]
    if not isinstance(lengths, (tuple, list)) or len(lengths) != 2:
        raise ValueError("seq_lengths must be a pair (seq_len_q, seq_len_k)")
    seq_q = check_int("seq_len_q", lengths[0], low=1)
    seq_k = check_int("seq_len_k", lengths[1], low=1)
    stored = tensors.get("layout")
    if stored is None and (seq_q % block or seq_k % block):
        raise ValueError(
            f"seq_lengths ({seq_q}, {seq_k}) must be whole blocks of BLOCK_SIZE {block}"
        )
    if isinstance(stored, Mapping) and "row_runs" in stored:
        return _runs_layout(tensors, stored, block, (seq_q, seq_k))
    n_q, n_k = -(-seq_q // block), -(-seq_k // block)
    found = []
    for num_key, index_key in (
        ("kv_num_blocks", "kv_indices"),
        ("full_kv_num_blocks", "full_kv_indices"),
    ):
        if tensors[num_key] is None and tensors[index_key] is None:
            found.append(None)
            continue
        num = file_tensor(num_key, tensors[num_key])
        indices = file_tensor(index_key, tensors[index_key])
        found.append(_blocks_of(num_key, num, index_key, indices, n_q, n_k))
    partial, full = found
    if partial is None and full is None:
        raise ValueError("kv_num_blocks and full_kv_num_blocks are both None: no blocks at all")
    if stored is not None:
        layout, causal = _stored_layout(stored)
        none = torch.zeros_like(partial if full is None else full)
        check_tiles(
            layout, causal, block, (seq_q, seq_k), none if full is None else full,
            none if partial is None else partial, "file",
        )  # fmt: skip
        if (seq_q, seq_k) != (layout.seq_len_q, layout.seq_len_k):
            raise ValueError(
                f"file seq_lengths ({seq_q}, {seq_k}) are not its layout's token lengths, "
                f"{layout.seq_len_q} x {layout.seq_len_k}"
            )
        return layout, causal
    blocks = partial if full is None else full if partial is None else partial | full
    causal = False
    if partial is not None and full is not None and bool(partial.any()):
        rows, cols = torch.arange(n_q)[:, None], torch.arange(n_k)[None, :]
        causal = not bool((partial & (cols != rows)).any() or (full & (cols >= rows)).any())
    return Layout(blocks, block), causal


def _runs_layout(
    tensors: Mapping[str, Any], stored: Mapping[str, Any], tile: int, lengths: tuple[int, int]
) -> tuple[Layout, bool]:
    """The layout and causal flag of a file whose ``"layout"`` holds row runs (a long-context
    design): its lists are checked against the runs' tiles on the lists alone (no grid)."""
    check_keys("layout", stored, (*RUNS_KEYS, "block_size", "causal"), TOKEN_KEYS)
    runs = unpack_runs({key: stored[key] for key in RUNS_KEYS})
    block = check_int("layout block_size", stored["block_size"], low=1, high=MAX_BLOCK_SIZE)
    causal = check_bool("layout causal", stored["causal"])
    layout = Layout(runs, block, *_token_parts(stored))
    lists = {}
    for key in ("kv_num_blocks", "kv_indices", "full_kv_num_blocks", "full_kv_indices"):
        value = None if tensors[key] is None else file_tensor(key, tensors[key])
        if value is not None and (value.dtype.is_floating_point or value.dtype.is_complex
                                  or value.dtype == torch.bool):  # fmt: skip
            raise ValueError(f"{key} must hold integers, got dtype {value.dtype}")
        lists[key] = value
    check_runs_lists(layout, causal, tile, lengths, lists, "file")
    if lengths != (layout.seq_len_q, layout.seq_len_k):
        raise ValueError(
            f"file seq_lengths {lengths} are not its layout's token lengths, "
            f"{layout.seq_len_q} x {layout.seq_len_k}"
        )
    return layout, causal


def _stored_layout(stored: Any) -> tuple[Layout, bool]:
    """The layout and causal flag of a file's ``"layout"`` entry (with, for a token-exact
    layout, its partial blocks and token lengths)."""
    check_keys("layout", stored, ("bits", "shape", "block_size", "causal"), TOKEN_KEYS)
    blocks = unpack_blocks({"bits": stored["bits"], "shape": stored["shape"]})
    block = check_int("layout block_size", stored["block_size"], low=1, high=MAX_BLOCK_SIZE)
    causal = check_bool("layout causal", stored["causal"])
    return Layout(blocks, block, *_token_parts(stored)), causal


def _token_parts(stored: Mapping[str, Any]) -> tuple:
    """``(partials, seq_q, seq_k)`` of a token-exact layout's entry, or ``()`` for a
    block-level one (no ``seq_lengths``)."""
    if "seq_lengths" not in stored:
        return ()
    lengths = check_int_list("layout seq_lengths", stored["seq_lengths"], low=1, min_len=2,
                             max_len=2)  # fmt: skip
    with error_context("layout partials"):
        partials = read_partials(stored.get("partials"))
    return (partials, *lengths)


def _blocks_of(
    num_key: str, num: torch.Tensor, index_key: str, indices: torch.Tensor, m: int, n: int
) -> torch.Tensor:
    """Bool ``[H, M, N]`` blocks listed by one ``(num [1, H, M], indices [1, H, M, K])`` pair."""
    for key, value, rank in ((num_key, num, 3), (index_key, indices, 4)):
        if value.dtype.is_floating_point or value.dtype.is_complex or value.dtype == torch.bool:
            raise ValueError(f"{key} must hold integers, got dtype {value.dtype}")
        if value.dim() != rank or value.shape[0] != 1:
            raise ValueError(
                f"{key} must have rank {rank} with batch 1, got shape {list(value.shape)}"
            )
    h = num.shape[1]
    check_layout_shape(h, m, n)
    if tuple(num.shape) != (1, h, m) or tuple(indices.shape[:3]) != (1, h, m):
        raise ValueError(
            f"{num_key} {list(num.shape)} and {index_key} {list(indices.shape)} must be "
            f"[1, H, {m}] and [1, H, {m}, K] for {m} query blocks"
        )
    k = indices.shape[3]
    if h * m * k > MAX_LAYOUT_CELLS or k > n:
        raise ValueError(f"{index_key} lists {k} blocks per row, more than the {n} key blocks")
    num = num[0].to(torch.int64)
    if num.numel() and (int(num.min()) < 0 or int(num.max()) > k):
        raise ValueError(f"{num_key} must be in [0, {k}], got [{int(num.min())}, {int(num.max())}]")
    try:
        return listed_tiles(num, indices[0], n)
    except ValueError as error:
        raise ValueError(f"{index_key}: {error}") from error
