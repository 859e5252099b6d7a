"""FlexAttention ``BlockMask`` both ways.

A ``BlockMask`` lists, for each ``[batch, head, q_tile]`` row, the key tiles to visit: ``full``
ones (every token pair attends, ``mask_mod`` is skipped) and partial ones (``mask_mod`` decides
per token pair). Compiled ``flex_attention`` (GPU) visits only the listed tiles; eager
``flex_attention`` (CPU) ignores the lists and applies ``mask_mod`` to every pair. So an exported
mask carries both, and they agree:

- the tiles are Flex's own 128 tokens unless the layout's blocks are a multiple of 128
  (``flex_tiles.flex_tile_size``), so the compiled forward *and* backward take the mask with
  their default kernel options (torch 2.11's compiled backward refuses 64-token tiles). A tile
  is full, partial or absent by the token pairs it holds (``flex_tiles.tile_classes``); sequence
  lengths that are not a multiple of 128 end in short tiles (``seq_lengths``), and they may end
  inside the layout's last block (``seq_q``, ``seq_k``);
- ``mask_mod(b, h, q_idx, kv_idx)`` is ``layout[h, q_idx // block, kv_idx // block]`` at the
  layout's own block size (and ``kv_idx <= q_idx + d`` when causal: ``d = 0`` aligned top-left,
  ``Sk - Sq`` bottom-right, as ``gpu.plan`` has it), so the attention is the layout's, token for
  token, compiled or eager.

The batch dimension is 1 (it broadcasts); a one-head layout broadcasts over heads.

Every Flex backend runs the mask: Triton (the default), eager, and FLASH, FlexAttention's FA4
backend (``kernel_options={"BACKEND": "FLASH"}``, with ``flash-attn-4`` installed, compiled on a
Hopper or Blackwell GPU). FLASH compiles ``mask_mod`` to CuTe-DSL, which in torch 2.11 reads a
captured tensor only at indices computed from ``mask_mod``'s arguments: ``blocks[0, ...]`` fails
there with "Expected TensorSSA, but got <class 'int'>". So the ``mask_mod`` indexes no constant
(a one-head layout is kept as its ``[M, N]`` plane, read without a head index) and captures no
0-d tensor; its ints (block size, causal offset) are constants, so compile with
``dynamic=False`` (with symbolic ints torch refuses FLASH, saying so). What FA4 itself cannot
run it refuses with an error, never silently: its own tile, chosen by head dim, must divide the
mask's tiles (flash-attn-4 4.0.0b36 on Hopper refuses head dim 256, for one).

Back to a layout: 128-token tiles do not say which 16-token blocks inside them are active, so
the exported ``mask_mod`` carries its layout, as the attributes ``mask_mod.layout`` (a
``Layout``), ``mask_mod.causal`` and ``mask_mod.causal_offset`` (the ``d`` above).
``from_block_mask`` returns that layout once the block lists are checked to be exactly its
tiles; a mask without it is read from its lists alone.

``block_mask_tensors`` is the same mask for a file: the ``BlockMask.from_kv_blocks`` arguments
(tensors and plain values that ``torch.load(..., weights_only=True)`` reads back) plus one more
key, ``"layout"``: the layout bit-packed as in design files (``packing``), with its
``block_size`` and ``causal`` flag. A function cannot travel in such a file, so whoever reads
it pops ``"layout"``, builds ``mask_mod`` from it and passes the rest to ``from_kv_blocks`` (the
FlexAttention snippet shows how); ``read_design_file`` reads the layout back exactly.

>>> bm = to_block_mask(Layout(torch.eye(4, dtype=torch.int64)[None], 64))
>>> bm.BLOCK_SIZE, bm.to_dense()[0, 0].int().tolist(), from_block_mask(bm)[0].block_size
((128, 128), [[1, 0], [0, 1]], 64)
>>> square = Layout(torch.ones(1, 4, 4, dtype=torch.bool), 64)
>>> to_block_mask(square, causal=True, causal_alignment="bottom_right", seq_q=200).seq_lengths
(200, 256)
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.nn.attention.flex_attention import BlockMask

from designer.formats.flex_tiles import (
    check_tiles,
    flex_tile_size,
    kv_lists,
    listed_tiles,
    tile_classes,
)
from designer.formats.packing import pack_blocks
from designer.layout import CAUSAL_ALIGNMENTS, Layout, causal_offset
from designer.validate import check_bool, check_choice, check_int, token_length


def to_block_mask(
    layout: Layout,
    block_size: int | None = None,
    *,
    causal: bool = False,
    causal_alignment: str = "top_left",
    seq_q: int | None = None,
    seq_k: int | None = None,
    device: str | torch.device = "cpu",
) -> BlockMask:
    """A ``BlockMask`` and its ``mask_mod`` giving ``layout``'s attention on ``device``.

    ``block_size`` is the layout's own (the default) and, when given, must equal it; the tile
    size follows from it. ``seq_q`` and ``seq_k`` are the token lengths when the last block row
    or column is partial, ``(M - 1)·block < seq_q <= M·block`` (default: whole blocks), and
    ``causal_alignment`` anchors causal as in ``gpu.plan``: ``"top_left"`` keeps
    ``k_idx <= q_idx``, ``"bottom_right"`` keeps ``k_idx <= q_idx + Sk - Sq``.
    """
    _check_layout(layout)
    block = layout.block_size
    if block_size is not None and check_int("block_size", block_size, low=1) != block:
        raise ValueError(
            f"block_size must be the layout's block size {block}, got {block_size}; the "
            f"BlockMask's tiles follow from the layout's blocks"
        )
    causal = check_bool("causal", causal)
    alignment = check_choice("causal_alignment", causal_alignment, CAUSAL_ALIGNMENTS)
    blocks_text = f"the layout's {{}} blocks of {block}"
    seq_q = token_length(f"seq_q ({blocks_text.format(layout.n_q_blocks)})", seq_q,
                         layout.n_q_blocks, block)  # fmt: skip
    seq_k = token_length(f"seq_k ({blocks_text.format(layout.n_k_blocks)})", seq_k,
                         layout.n_k_blocks, block)  # fmt: skip
    offset = causal_offset(alignment, seq_q, seq_k)
    arguments = _kv_arguments(layout, causal, (seq_q, seq_k), offset)
    for key, value in arguments.items():
        if isinstance(value, torch.Tensor):
            arguments[key] = value.to(device)
    mask_mod = layout_mask_mod(layout, causal, device, causal_offset=offset)
    return BlockMask.from_kv_blocks(**arguments, mask_mod=mask_mod)


def block_mask_tensors(layout: Layout, *, causal: bool = False) -> dict[str, Any]:
    """``to_block_mask(layout, causal=causal)`` for a file: its ``from_kv_blocks`` arguments,
    and under ``"layout"`` the packed layout, block size and causal flag its ``mask_mod`` reads.

    >>> arguments = block_mask_tensors(Layout(torch.ones(1, 2, 2, dtype=torch.int64), 16))
    >>> arguments["full_kv_num_blocks"].tolist(), arguments["seq_lengths"], arguments["BLOCK_SIZE"]
    ([[[1]]], (32, 32), 128)
    >>> arguments["kv_num_blocks"].tolist(), arguments["layout"]["block_size"]
    ([[[0]]], 16)
    """
    _check_layout(layout)
    causal = check_bool("causal", causal)
    stored = {**pack_blocks(layout), "block_size": layout.block_size, "causal": causal}
    lengths = (layout.seq_len_q, layout.seq_len_k)
    return {**_kv_arguments(layout, causal, lengths, 0), "layout": stored}


def _kv_arguments(
    layout: Layout, causal: bool, seq_lengths: tuple[int, int], offset: int
) -> dict[str, Any]:
    tile = flex_tile_size(layout.block_size)
    full, partial = tile_classes(
        layout.blocks, layout.block_size, causal=causal, tile_size=tile,
        seq_lengths=seq_lengths, causal_offset=offset,
    )  # fmt: skip
    kv_num, kv_indices = kv_lists(partial)
    full_num, full_indices = kv_lists(full)
    return {
        "kv_num_blocks": kv_num,
        "kv_indices": kv_indices,
        "full_kv_num_blocks": full_num,
        "full_kv_indices": full_indices,
        "BLOCK_SIZE": tile,
        "seq_lengths": seq_lengths,
    }


def _check_layout(layout: Any) -> None:
    if not isinstance(layout, Layout):
        raise TypeError(f"layout must be a Layout, got {type(layout).__name__}")


def layout_mask_mod(
    layout: Layout,
    causal: bool,
    device: str | torch.device = "cpu",
    *,
    causal_offset: int = 0,
) -> Callable[..., torch.Tensor]:
    """``mask_mod(b, h, q_idx, kv_idx)``: ``blocks[h, q_idx // block, kv_idx // block]`` (and
    ``kv_idx <= q_idx + causal_offset`` when causal), the blocks on ``device``; a one-head layout
    serves every head. It indexes the blocks only with values computed from its arguments, as
    the FLASH backend needs (see above), and carries ``layout``, ``causal`` and
    ``causal_offset`` as attributes of the same names."""
    one_head = layout.n_heads == 1
    blocks = layout.blocks.to(device)
    table = (blocks[0] if one_head else blocks).clone()  # its own storage, at offset 0
    block_size = layout.block_size

    def mask_mod(b, h, q_idx, kv_idx):
        q_block, kv_block = q_idx // block_size, kv_idx // block_size
        allowed = table[q_block, kv_block] if one_head else table[h, q_block, kv_block]
        return allowed & (kv_idx <= q_idx + causal_offset) if causal else allowed

    h, m, n = layout.shape
    rule = f"_causal{causal_offset:+d}" if causal and causal_offset else "_causal" * causal
    mask_mod.__name__ = f"layout_{h}x{m}x{n}_block{block_size}{rule}"
    mask_mod.layout, mask_mod.causal, mask_mod.causal_offset = layout, causal, causal_offset
    return mask_mod


def from_block_mask(block_mask: BlockMask) -> tuple[Layout, int]:
    """The layout of a ``BlockMask`` and its block size.

    A mask from ``to_block_mask`` gives back the layout its ``mask_mod`` carries, at the
    layout's own block size, once its block lists are checked to be exactly that layout's tiles.
    Any other mask is read from its lists, one block per tile, partial and full together (a
    ``mask_mod`` masking tokens inside tiles is not part of a layout): every batch entry must
    list the same tiles, tiles must be square and the sequence lengths whole tiles. So an
    exported mask rebuilt without our ``mask_mod`` (a slice, or ``from_kv_blocks`` with another)
    reads back at its 128-token tiles: the lists alone cannot say which 16-token blocks inside
    a tile are active. ``block_mask_tensors`` files keep the layout for that reason.
    """
    if not isinstance(block_mask, BlockMask):
        raise TypeError(f"block_mask must be a BlockMask, got {type(block_mask).__name__}")
    q_block, kv_block = block_mask.BLOCK_SIZE
    if q_block != kv_block:
        raise ValueError(
            f"block_mask must have square blocks, got BLOCK_SIZE ({q_block}, {kv_block})"
        )
    if block_mask.kv_indices.dim() != 4:
        raise ValueError(
            f"block_mask must list tiles per [batch, head, row], got kv_indices of shape "
            f"{list(block_mask.kv_indices.shape)}"
        )
    seq_q, seq_k = tuple(block_mask.seq_lengths)
    n_k = -(-seq_k // kv_block)
    partial = listed_tiles(block_mask.kv_num_blocks, block_mask.kv_indices, n_k)  # [B, H, M, N]
    full = torch.zeros_like(partial)
    if block_mask.full_kv_num_blocks is not None:
        full = listed_tiles(block_mask.full_kv_num_blocks, block_mask.full_kv_indices, n_k)
    if not torch.equal(partial, partial[:1].expand_as(partial)) or not torch.equal(
        full, full[:1].expand_as(full)
    ):
        raise ValueError(
            f"block_mask must have the same blocks in every batch entry, got a batch of "
            f"{partial.shape[0]} whose entries differ"
        )
    carried = getattr(block_mask.mask_mod, "layout", None)
    if isinstance(carried, Layout):
        causal = bool(getattr(block_mask.mask_mod, "causal", False))
        offset = int(getattr(block_mask.mask_mod, "causal_offset", 0))
        check_tiles(carried, causal, q_block, (seq_q, seq_k), full[0], partial[0], "block_mask",
                    causal_offset=offset)  # fmt: skip
        return carried, carried.block_size
    layout = Layout(partial[0] | full[0], q_block)
    if (seq_q, seq_k) != (layout.seq_len_q, layout.seq_len_k):
        raise ValueError(
            f"block_mask seq_lengths must be whole blocks: {layout.n_q_blocks} x "
            f"{layout.n_k_blocks} blocks of {q_block} tokens cover {layout.seq_len_q} x "
            f"{layout.seq_len_k}, got {seq_q} x {seq_k} (a mask from to_block_mask reads back "
            f"through the layout its mask_mod carries)"
        )
    return layout, q_block
