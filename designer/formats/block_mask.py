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
  ``Sk - Sq`` bottom-right, as ``gpu.plan`` has it), and inside a partial block its own token
  mask (a table of slots ``[H, M, N]`` points at it among the distinct masks, one bool a pair,
  slot 0 being all true), so the attention is the layout's, token for token, compiled or eager.

The batch dimension is 1 (it broadcasts); a one-head layout broadcasts over heads.

A layout held as row runs (a long-context design, past a dense grid's size) gets its lists,
their transpose and its ``mask_mod`` from the runs instead (``runs_block_mask``): no grid, no
``[H, M, N]`` table; ``from_block_mask`` and the file check its lists against the runs' tiles on
the lists alone, and the file stores the runs under ``"layout"``.

Every Flex backend runs the mask: Triton (the default), eager, and FLASH, FlexAttention's FA4
backend (``kernel_options={"BACKEND": "FLASH"}``, with ``flash-attn-4`` installed, compiled on a
Hopper or Blackwell GPU). FLASH compiles ``mask_mod`` to CuTe-DSL, which in torch 2.11 reads a
captured tensor only at indices computed from ``mask_mod``'s arguments: ``blocks[0, ...]`` fails
there with "Expected TensorSSA, but got <class 'int'>". So the ``mask_mod`` indexes no constant
(a one-head layout is kept as its ``[M, N]`` plane, read without a head index) and captures no
0-d tensor, and reads a partial block's tokens as bools, not as bits (FLASH compiles no bit
shift, ``tools/probes/flash_token_mask.py``); its ints (block size, causal offset) are constants,
so compile with
``dynamic=False`` (with symbolic ints torch refuses FLASH, saying so). What FA4 itself cannot
run it refuses with an error, never silently: its own tile, chosen by head dim, must divide the
mask's tiles (flash-attn-4 4.0.0b36 on Hopper refuses head dim 256, for one).

Back to a layout: 128-token tiles do not say which 16-token blocks inside them are active, so
the exported ``mask_mod`` carries its layout, as the attributes ``mask_mod.layout`` (a
``Layout``), ``mask_mod.causal`` and ``mask_mod.causal_offset`` (the ``d`` above).
``from_block_mask`` returns that layout once the block lists are checked to be exactly its
tiles. Any other mask (``create_block_mask``'s) is read token-exact at its tiles: full tiles
are full blocks, and inside each partial tile the mask's own ``mask_mod`` is evaluated
(``designer.mask_mod``); a ``mask_mod`` that cannot be evaluated raises rather than guess.

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
    layout_tiles,
    listed_tiles,
)
from designer.formats.packing import pack_blocks, pack_partials, pack_runs
from designer.formats.runs_block_mask import check_runs_lists, runs_block_mask, runs_kv_arguments
from designer.layout import CAUSAL_ALIGNMENTS, Layout, causal_offset
from designer.mask_mod import check_evaluation, evaluate_blocks, head_dependent
from designer.partials import distinct_masks
from designer.threads import one_thread
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
    or column is partial, ``(M - 1)·block < seq_q <= M·block`` (default: the layout's own; a
    layout with token lengths or partial blocks runs at its own only), and
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
    given_q, given_k = seq_q is not None, seq_k is not None
    blocks_text = f"the layout's {{}} blocks of {block}"
    seq_q = token_length(f"seq_q ({blocks_text.format(layout.n_q_blocks)})", seq_q,
                         layout.n_q_blocks, block)  # fmt: skip
    seq_k = token_length(f"seq_k ({blocks_text.format(layout.n_k_blocks)})", seq_k,
                         layout.n_k_blocks, block)  # fmt: skip
    if not layout.whole_blocks:
        own = (layout.seq_len_q, layout.seq_len_k)
        asked = (seq_q if given_q else own[0], seq_k if given_k else own[1])
        if asked != own:
            raise ValueError(
                f"seq_q, seq_k must be the layout's own token lengths {own[0]} x {own[1]} (its "
                f"partial blocks are masks at them), got {asked[0]} x {asked[1]}"
            )
        seq_q, seq_k = own
    offset = causal_offset(alignment, seq_q, seq_k)
    if layout.runs is not None:  # lists and mask_mod from the runs, never a dense grid
        return runs_block_mask(layout, causal=causal, seq_lengths=(seq_q, seq_k),
                               causal_offset=offset, device=device)  # fmt: skip
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
    packed = pack_blocks(layout) if layout.runs is None else pack_runs(layout)
    stored = {**packed, "block_size": layout.block_size, "causal": causal}
    if not layout.whole_blocks:  # token-exact layouts: their masks and lengths travel too
        stored["partials"] = pack_partials(layout)
        stored["seq_lengths"] = (layout.seq_len_q, layout.seq_len_k)
    if layout.runs is not None:  # the lists from the runs, and the runs themselves
        arguments = runs_kv_arguments(layout, causal, width="tiles", q_lists=False)
        kept = ("kv_num_blocks", "kv_indices", "full_kv_num_blocks", "full_kv_indices")
        return {
            **{key: arguments[key] for key in kept},
            "BLOCK_SIZE": arguments["BLOCK_SIZE"][0],
            "seq_lengths": arguments["seq_lengths"],
            "layout": stored,
        }
    lengths = (layout.seq_len_q, layout.seq_len_k)
    return {**_kv_arguments(layout, causal, lengths, 0), "layout": stored}


def _kv_arguments(
    layout: Layout, causal: bool, seq_lengths: tuple[int, int], offset: int
) -> dict[str, Any]:
    tile = flex_tile_size(layout.block_size)
    full, partial = layout_tiles(layout, causal, tile, seq_lengths, offset)
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
    slots, masks = _slots(layout, device)

    def mask_mod(b, h, q_idx, kv_idx):
        q_block, kv_block = q_idx // block_size, kv_idx // block_size
        allowed = table[q_block, kv_block] if one_head else table[h, q_block, kv_block]
        if slots is not None:
            slot = slots[q_block, kv_block] if one_head else slots[h, q_block, kv_block]
            row, col = q_idx - q_block * block_size, kv_idx - kv_block * block_size
            allowed = allowed & masks[slot, row, col]
        return allowed & (kv_idx <= q_idx + causal_offset) if causal else allowed

    h, m, n = layout.shape
    rule = f"_causal{causal_offset:+d}" if causal and causal_offset else "_causal" * causal
    mask_mod.__name__ = f"layout_{h}x{m}x{n}_block{block_size}{rule}"
    mask_mod.layout, mask_mod.causal, mask_mod.causal_offset = layout, causal, causal_offset
    return mask_mod


def _slots(layout: Layout, device) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """``(slots, masks)`` of the partial blocks for ``layout_mask_mod``: ``slots`` int32
    ``[H, M, N]`` (``[M, N]`` for one head; an index must be int32 or int64) holds a partial
    block's slot in ``masks``, 0 elsewhere; ``masks`` is bool ``[1 + U, b, b]``, an all-true
    slot 0 and each distinct token mask once (``distinct_masks``)."""
    partials = layout.partials
    if partials is None:
        return None, None
    masks, slot_of = distinct_masks(partials)
    slots = torch.zeros(layout.shape, dtype=torch.int32)
    slots[tuple(partials.index.to(torch.int64).T)] = slot_of
    slots = slots[0] if layout.n_heads == 1 else slots
    return slots.to(device).contiguous(), masks.to(device)


def from_block_mask(block_mask: BlockMask) -> tuple[Layout, int]:
    """The token-exact layout of a ``BlockMask`` and its block size.

    A mask from ``to_block_mask`` gives back the layout its ``mask_mod`` carries, at the
    layout's own block size, once its block lists are checked to be exactly that layout's tiles.
    Any other mask is read at its tiles (square, the same in every batch entry): a full tile is
    a full block, and each partial tile is evaluated token by token with the mask's own
    ``mask_mod`` (``b`` = 0), so ``create_block_mask``'s masks come back exactly, their sequence
    lengths too. A ``mask_mod`` that fails on index tensors, or that reads the head while the
    mask lists one head for all, raises ``ValueError``: the tokens inside its partial tiles
    cannot be known. (Causal masks come back as their tokens, causal diagonal tiles partial.)
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
    carried = getattr(block_mask.mask_mod, "layout", None)
    if isinstance(carried, Layout) and carried.runs is not None:  # checked on the lists alone
        names = [f"{prefix}{side}_{part}" for prefix in ("", "full_") for side in ("kv", "q")
                 for part in ("num_blocks", "indices")]  # fmt: skip
        check_runs_lists(
            carried, bool(getattr(block_mask.mask_mod, "causal", False)), q_block,
            (seq_q, seq_k), {name: getattr(block_mask, name) for name in names}, "block_mask",
            causal_offset=int(getattr(block_mask.mask_mod, "causal_offset", 0)),
        )  # fmt: skip
        return carried, carried.block_size
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
    if isinstance(carried, Layout):
        causal = bool(getattr(block_mask.mask_mod, "causal", False))
        offset = int(getattr(block_mask.mask_mod, "causal_offset", 0))
        check_tiles(carried, causal, q_block, (seq_q, seq_k), full[0], partial[0], "block_mask",
                    causal_offset=offset)  # fmt: skip
        return carried, carried.block_size
    with one_thread():
        return _token_layout(block_mask, full[0], partial[0] & ~full[0], q_block), q_block


def _token_layout(block_mask: BlockMask, full, partial, block: int) -> Layout:
    """The layout of ``full`` tiles and of ``partial`` ones evaluated with ``mask_mod``."""
    seq_q, seq_k = tuple(block_mask.seq_lengths)
    mask_mod = block_mask.mask_mod
    what = "block_mask's mask_mod"
    if mask_mod is None:
        raise ValueError(f"{what} is None: the tokens inside its partial tiles are unknown")
    heads = full.shape[0]
    try:
        reads_head = head_dependent(mask_mod, max(heads, 2))
    except (ValueError, TypeError) as error:
        try:  # a one-head mask whose mask_mod takes head 0 alone serves one head
            reads_head = heads > 1 or head_dependent(mask_mod, 1)
        except (ValueError, TypeError):
            raise ValueError(f"{what} cannot tell its partial tiles' tokens: {error}") from error
    if heads == 1 and reads_head:
        raise ValueError(
            f"{what} reads the head, but block_mask lists its tiles for one head (broadcast "
            "over every head): the tokens of each head's partial tiles cannot be known"
        )
    tiles = partial.nonzero()
    check_evaluation(len(tiles) * block * block, what)
    found = evaluate_blocks(mask_mod, tiles, block, seq_q, seq_k, what=what)
    blocks = full.clone()
    blocks[tuple(tiles[found.active].T)] = True
    partials = found.partials if found.partials.count else None
    return Layout(blocks, block, partials, seq_q, seq_k)
