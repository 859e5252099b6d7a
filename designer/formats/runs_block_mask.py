"""A FlexAttention ``BlockMask`` of a layout held as row runs, never building a dense grid.

The tile lists come from the runs (``runs_tiles``): ``kv_num_blocks`` / ``kv_indices`` of the
partial tiles, ``full_kv_*`` of the full ones (where compiled Flex skips ``mask_mod``), and the
transposed ``q_*`` lists the backward reads, made from the transposed tile runs rather than
by ``from_kv_blocks``, which would expand them into the ``[B, H, Mt, Nt]`` tile grid.

The lists' width (``width``): ``"tiles"``, one entry per key (query) tile, the width
``create_block_mask`` gives and the one torch's own helpers read (``from_kv_blocks`` transposes
by it; ``to_dense``, ``to_string``); FA4, the FLASH backend, checks it. ``"compact"``, the
longest row's tiles plus one, which Flex's Triton forward reads by its strides: on the H200
(torch 2.11, ``tools/probes/flex_long_context.py``) its compiled backward raised an illegal
address on compact lists at 32K and 128K tokens and ran on ``"tiles"`` ones, so a BlockMask
with compact lists is forward only (``q_lists=False``). ``"auto"`` (the default) takes
``"tiles"`` where the lists fit ``MAX_LIST_ENTRIES`` (``H·Mt·Nt`` int32 a list) and compact
forward lists past it. Lists are rectangular, so even compact ones are as wide as their
longest row: the ``q`` lists as the most-attended key tile, and a sink is attended by every
query. The ``q`` lists are made only when asked (``q_lists``; the forward never reads them),
and lists past ``MAX_LIST_ENTRIES`` are refused: at 32 heads x 1M tokens only the compact
forward lists fit.

``mask_mod`` reads no dense table either:

- ``sinks_window_mask_mod``: a closed form for the causal sliding window plus sinks
  (``attention_sinks``: ``kb <= qb`` and ``kb < sink_blocks`` or ``qb - kb < window_blocks``),
  used when the runs are exactly that family on every head (``sinks_window``);
- ``runs_mask_mod``: any runs layout, its ``row_ptr``, ``starts`` and ``stops`` on the device
  and ``MAX_MASK_RUNS`` unrolled reads of a block row's runs; a layout with more runs in some
  row raises ``ValueError`` (the unrolled lookup would grow with it). With full tiles marked
  full, compiled Flex evaluates it only inside partial tiles; eager Flex everywhere.

A layout's partial blocks (token masks) make their tiles partial, and its ``mask_mod`` reads
their bits too (``partial_bits_mask_mod``): each block row's partial blocks by a row pointer, at
most ``MAX_MASK_PARTIALS`` of them in an unrolled loop, then one byte of the block's bits; a
layout with more in some row raises ``ValueError``. All of these read tensors only at indices
computed from their arguments and keep their ints as constants, as FLASH's CuTe-DSL lowering
needs (``block_mask.py``).

>>> from designer.patterns.attention_sinks import attention_sinks_runs
>>> runs = attention_sinks_runs(2, 16, 16, sink_blocks=1, window_blocks=4)
>>> sinks_window(runs)
(1, 4)
>>> mask = runs_block_mask(Layout(runs, 64), causal=True)
>>> mask.BLOCK_SIZE, mask.kv_num_blocks.shape, mask.q_num_blocks.shape
((128, 128), torch.Size([1, 2, 8]), torch.Size([1, 2, 8]))
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch
from torch.nn.attention.flex_attention import BlockMask

from designer.block_runs import BlockRuns
from designer.formats.flex_tiles import check_tile_geometry, flex_tile_size
from designer.formats.runs_tiles import kv_lists_of_runs, tile_runs
from designer.layout import Layout
from designer.partials import PartialBlocks, distinct_masks
from designer.patterns.attention_sinks import attention_sinks_runs
from designer.validate import check_choice

#: Most runs in one block row that ``runs_mask_mod`` reads (unrolled, per token pair).
MAX_MASK_RUNS = 8
#: Most partial blocks in one block row that ``partial_bits_mask_mod`` reads (unrolled).
MAX_MASK_PARTIALS = 16
#: The forms of ``layout_runs_mask_mod``: the first that applies, the sinks-and-window closed
#: form, the runs read in place.
MASK_FORMS = ("auto", "sinks", "runs")
#: ``runs_block_mask``'s list widths: compact, one entry per key tile (FA4's check), or the
#: second where it fits.
WIDTHS = ("compact", "tiles", "auto")
#: Most int32 entries a BlockMask's lists may hold together (1 GiB).
MAX_LIST_ENTRIES = 1 << 28


def sinks_window(runs: BlockRuns) -> tuple[int, int] | None:
    """``(sink_blocks, window_blocks)`` when ``runs`` is exactly ``attention_sinks_runs`` of
    them on every head (square layouts), else None. Read from the runs, checked against the
    generator's runs: O(runs)."""
    heads, n_q, n_k = runs.shape
    if n_q != n_k:
        return None
    counts = (runs.row_ptr[1 : n_q + 1] - runs.row_ptr[:n_q]).tolist()  # head 0's rows
    two = [m for m, count in enumerate(counts) if count == 2]
    if two:  # a row whose window has left the sinks: both read off it
        m = two[-1]
        first = int(runs.row_ptr[m])
        sink, window = int(runs.stops[first]), m + 1 - int(runs.starts[first + 1])
    elif counts[-1] == 1:  # the window never leaves the sinks, or there are none
        start = int(runs.starts[int(runs.row_ptr[n_q - 1])])
        sink, window = 0, n_q - start if start else n_q
    else:
        return None
    if window < 1 or attention_sinks_runs(heads, n_q, n_k, sink_blocks=sink,
                                          window_blocks=window) != runs:  # fmt: skip
        return None
    return sink, window


def sinks_window_mask_mod(
    block_size: int, sink_blocks: int, window_blocks: int, *, causal: bool, causal_offset: int = 0
) -> Callable[..., torch.Tensor]:
    """``(kb <= qb) & ((kb < sink_blocks) | (qb - kb < window_blocks))`` over block indices
    ``qb = q_idx // block_size``, ``kb = kv_idx // block_size`` (and ``kv_idx <= q_idx +
    causal_offset`` when causal)."""

    def mask_mod(b, h, q_idx, kv_idx):
        q_block, kv_block = q_idx // block_size, kv_idx // block_size
        allowed = (kv_block <= q_block) & (
            (kv_block < sink_blocks) | (q_block - kv_block < window_blocks)
        )
        return allowed & (kv_idx <= q_idx + causal_offset) if causal else allowed

    rule = f"_causal{causal_offset:+d}" if causal and causal_offset else "_causal" * causal
    mask_mod.__name__ = f"sinks{sink_blocks}_window{window_blocks}_block{block_size}{rule}"
    return mask_mod


def runs_mask_mod(
    runs: BlockRuns,
    block_size: int,
    *,
    causal: bool,
    causal_offset: int = 0,
    device: str | torch.device = "cpu",
    spare_rows: int = 0,
) -> Callable[..., torch.Tensor]:
    """Whether key block ``kv_idx // block_size`` lies in one of the runs of block row
    ``(h, q_idx // block_size)`` (and ``kv_idx <= q_idx + causal_offset`` when causal): at most
    ``MAX_MASK_RUNS`` runs a row, read in an unrolled loop; a one-head layout serves every head.
    ``spare_rows`` empty rows follow the last one, for the query rows of a short last tile."""
    heads, n_q, _ = runs.shape
    most = _unrolled_reads(runs.row_ptr[1:] - runs.row_ptr[:-1], MAX_MASK_RUNS, "runs_mask_mod",
                           "runs")  # fmt: skip
    pad = torch.full((spare_rows + 1,), int(runs.row_ptr[-1]), dtype=torch.int64)
    row_ptr = torch.cat([runs.row_ptr, pad]).to(device, torch.int32)
    spare = torch.zeros(most + 1, dtype=torch.int32)  # reads past the last run stay inside
    starts = torch.cat([runs.starts, spare]).to(device)
    stops = torch.cat([runs.stops, spare]).to(device)
    one_head = heads == 1

    def mask_mod(b, h, q_idx, kv_idx):
        q_block, kv_block = q_idx // block_size, kv_idx // block_size
        row = q_block if one_head else h * n_q + q_block
        first, last = row_ptr[row], row_ptr[row + 1]
        allowed = (first < last) & (starts[first] <= kv_block) & (kv_block < stops[first])
        for i in range(1, most):
            at = first + i
            allowed = allowed | ((at < last) & (starts[at] <= kv_block) & (kv_block < stops[at]))
        return allowed & (kv_idx <= q_idx + causal_offset) if causal else allowed

    rule = f"_causal{causal_offset:+d}" if causal and causal_offset else "_causal" * causal
    mask_mod.__name__ = f"runs_{heads}x{n_q}x{runs.shape[2]}_block{block_size}{rule}"
    return mask_mod


def _unrolled_reads(counts: torch.Tensor, allowed: int, reader: str, what: str) -> int:
    """How many reads a row's unrolled loop makes (the most ``what`` in one block row, at least
    one), or ``ValueError`` past ``allowed``."""
    most = int(counts.max()) if counts.numel() else 0
    if most > allowed:
        raise ValueError(
            f"{reader} reads at most {allowed} {what} in a block row, and this layout has {most} "
            "in one; its mask_mod would need a dense table"
        )
    return max(most, 1)


def partial_bits_mask_mod(
    allowed_blocks: Callable[..., torch.Tensor],
    partials: PartialBlocks,
    shape: tuple[int, int, int],
    *,
    device: str | torch.device = "cpu",
    spare_rows: int = 0,
) -> Callable[..., torch.Tensor]:
    """``allowed_blocks`` (a block-level ``mask_mod``) and, inside each of the ``[H, M, N]``
    layout's ``partials``, the block's own bool for the token pair (``distinct_masks``, each
    distinct mask stored once): a block row's partial blocks are found by a row pointer, at most
    ``MAX_MASK_PARTIALS`` a row, read in an unrolled loop (slot 0 is all true: a pair in no
    partial block keeps what ``allowed_blocks`` says).
    ``spare_rows`` empty rows follow the last one, as for ``runs_mask_mod``."""
    heads, n_q, _ = shape
    block = partials.block_size
    index = partials.index.to(torch.int64)
    rows = index[:, 1] if heads == 1 else index[:, 0] * n_q + index[:, 1]
    counts = torch.bincount(rows, minlength=heads * n_q + spare_rows)
    most = _unrolled_reads(counts, MAX_MASK_PARTIALS, "the mask_mod of a layout held as runs",
                           "partial blocks")  # fmt: skip
    row_ptr = torch.cat([torch.zeros(1, dtype=torch.int64), counts.cumsum(0)])
    spare = torch.zeros(most, dtype=torch.int32)  # reads past the last one stay inside
    cols = torch.cat([index[:, 2].to(torch.int32), spare]).to(device)
    masks, slot_of = distinct_masks(partials)
    masks = masks.to(device)
    mask_of = torch.cat([torch.zeros(1, dtype=torch.int32), slot_of]).to(device)
    row_ptr = row_ptr.to(device, torch.int32)
    one_head = heads == 1

    def mask_mod(b, h, q_idx, kv_idx):
        q_block, kv_block = q_idx // block, kv_idx // block
        row = q_block if one_head else h * n_q + q_block
        first, last = row_ptr[row], row_ptr[row + 1]
        slot = ((first < last) & (cols[first] == kv_block)) * (first + 1)
        for i in range(1, most):
            at = first + i
            slot = slot + ((at < last) & (cols[at] == kv_block)) * (at + 1)
        row_in, col_in = q_idx - q_block * block, kv_idx - kv_block * block
        return allowed_blocks(b, h, q_idx, kv_idx) & masks[mask_of[slot], row_in, col_in]

    mask_mod.__name__ = f"{allowed_blocks.__name__}_partials{partials.count}"
    return mask_mod


def layout_runs_mask_mod(
    layout: Layout,
    causal: bool,
    device: str | torch.device = "cpu",
    *,
    causal_offset: int = 0,
    form: str = "auto",
) -> Callable[..., torch.Tensor]:
    """The ``mask_mod`` of a layout held as runs, in ``form`` (of ``MASK_FORMS``): the
    sinks-and-window closed form (``"sinks"``; ``ValueError`` unless the layout is that
    family), ``runs_mask_mod`` (``"runs"``), or the first where it applies (``"auto"``), and
    its partial blocks' bits (``partial_bits_mask_mod``); it carries ``layout``, ``causal`` and
    ``causal_offset`` as attributes, as ``block_mask.layout_mask_mod`` does."""
    check_choice("form", form, MASK_FORMS)
    runs = _runs_of(layout)
    block = layout.block_size
    found = None if form == "runs" else sinks_window(runs)
    if form == "sinks" and found is None:
        raise ValueError("the layout is not a causal window plus sinks")
    spare = flex_tile_size(block) // block
    if found is not None:
        mask_mod = sinks_window_mask_mod(block, *found, causal=causal, causal_offset=causal_offset)
    else:
        mask_mod = runs_mask_mod(runs, block, causal=causal, causal_offset=causal_offset,
                                 device=device, spare_rows=spare)  # fmt: skip
    if layout.partials is not None:
        mask_mod = partial_bits_mask_mod(mask_mod, layout.partials, layout.shape, device=device,
                                         spare_rows=spare)  # fmt: skip
    mask_mod.layout, mask_mod.causal, mask_mod.causal_offset = layout, causal, causal_offset
    return mask_mod


def runs_kv_arguments(
    layout: Layout,
    causal: bool,
    seq_lengths: tuple[int, int] | None = None,
    causal_offset: int = 0,
    *,
    width: str = "compact",
    q_lists: bool = True,
) -> dict[str, Any]:
    """The ``BlockMask`` lists of a runs ``layout`` at Flex's tile (``flex_tile_size``): the
    ``kv`` lists and, with ``q_lists``, the transposed ``q`` ones, partial and full (None
    without), ``BLOCK_SIZE`` and ``seq_lengths``. Raises ``ValueError`` past
    ``MAX_LIST_ENTRIES``."""
    runs = _runs_of(layout)
    width = _resolved_width(layout, width, 4 if q_lists else 2)
    block, tile = layout.block_size, flex_tile_size(layout.block_size)
    if tile % block:
        raise ValueError(
            f"a BlockMask from runs needs blocks that divide {tile}-token tiles, got "
            f"block_size {block}"
        )
    lengths = seq_lengths or (layout.seq_len_q, layout.seq_len_k)
    cells = None if layout.partials is None else layout.partials.index
    full, partial = tile_runs(runs, block, causal=causal, tile_size=tile, seq_lengths=lengths,
                              causal_offset=causal_offset, partial_cells=cells)  # fmt: skip
    heads, n_q, n_k = full.shape
    lists = {("", "kv"): (partial, n_k), ("full_", "kv"): (full, n_k)}
    if q_lists:
        lists |= {("", "q"): (partial.transpose(), n_q), ("full_", "q"): (full.transpose(), n_q)}
    widths = {key: count if width == "tiles" else _longest(tiles) + 1
              for key, (tiles, count) in lists.items()}  # fmt: skip
    entries = sum(tiles.shape[0] * tiles.shape[1] * widths[key]
                  for key, (tiles, _) in lists.items())  # fmt: skip
    if entries > MAX_LIST_ENTRIES:
        raise ValueError(
            f"the BlockMask lists of this {heads} x {n_q:,} x {n_k:,}-tile layout would hold "
            f"{entries:,} int32 entries, more than the {MAX_LIST_ENTRIES:,} allowed: "
            + ("they are one entry per tile wide, as from_kv_blocks, Flex's compiled backward "
               "and FA4 (the FLASH backend) read them" if width == "tiles" else
               "Flex's lists are rectangular, as wide as their longest row (the q lists the "
               "backward reads: the most-attended key tile)")
        )  # fmt: skip
    arguments: dict[str, Any] = {"seq_lengths": tuple(lengths), "BLOCK_SIZE": (tile, tile)}
    for prefix in ("", "full_"):
        for side in ("kv", "q"):
            found = (None, None)
            if (prefix, side) in lists:
                found = kv_lists_of_runs(lists[prefix, side][0], widths[prefix, side])
            arguments[f"{prefix}{side}_num_blocks"], arguments[f"{prefix}{side}_indices"] = found
    return arguments


def _resolved_width(layout: Layout, width: str, lists: int) -> str:
    """``width``, with ``"auto"`` resolved for ``lists`` lists."""
    check_choice("width", width, WIDTHS)
    if width != "auto":
        return width
    return "tiles" if _tiles_fit(layout, lists) else "compact"


def _tiles_fit(layout: Layout, lists: int) -> bool:
    """Whether ``lists`` lists one entry per tile wide fit ``MAX_LIST_ENTRIES``."""
    tile = flex_tile_size(layout.block_size)
    tiles = layout.n_heads * -(-layout.seq_len_q // tile) * -(-layout.seq_len_k // tile)
    return lists * tiles <= MAX_LIST_ENTRIES


def _longest(tiles: BlockRuns) -> int:
    counts = tiles.row_counts()
    return int(counts.max()) if counts.numel() else 0


def runs_block_mask(
    layout: Layout,
    *,
    causal: bool,
    seq_lengths: tuple[int, int] | None = None,
    causal_offset: int = 0,
    device: str | torch.device = "cpu",
    width: str = "auto",
    mask_mod: Callable[..., torch.Tensor] | None = None,
    q_lists: bool = True,
) -> BlockMask:
    """The ``BlockMask`` of a runs ``layout`` on ``device`` (see the module doc), with
    ``mask_mod`` (default: ``layout_runs_mask_mod``); without ``q_lists`` it runs forward
    only. Raises ``ValueError`` for ``q_lists`` on compact lists, which Flex's compiled
    backward cannot read."""
    width = _resolved_width(layout, width, 4 if q_lists else 2)
    if width == "compact" and q_lists:
        raise ValueError(
            "a BlockMask for the backward needs lists one entry per tile wide: Flex's compiled "
            "backward reads compact ones out of range (on the H200, torch 2.11); "
            + ("pass width='tiles', or q_lists=False for a forward-only BlockMask"
               if _tiles_fit(layout, 4) else
               f"those of this {layout.n_heads}-head layout would pass the "
               f"{MAX_LIST_ENTRIES:,}-entry budget, so only a forward-only BlockMask "
               "(q_lists=False) can be made")
        )  # fmt: skip
    arguments = runs_kv_arguments(layout, causal, seq_lengths, causal_offset, width=width,
                                  q_lists=q_lists)  # fmt: skip
    if mask_mod is None:
        mask_mod = layout_runs_mask_mod(layout, causal, device, causal_offset=causal_offset)
    tensors = {key: value.to(device) if isinstance(value, torch.Tensor) else value
               for key, value in arguments.items()}  # fmt: skip
    return BlockMask(mask_mod=mask_mod, **tensors)


def check_runs_lists(
    layout: Layout,
    causal: bool,
    tile_size: int,
    seq_lengths: tuple[int, int],
    lists: dict[str, torch.Tensor | None],
    what: str,
    *,
    causal_offset: int = 0,
) -> None:
    """Raise ``ValueError`` naming ``what`` unless ``lists`` (``kv_num_blocks``,
    ``kv_indices``, ``full_kv_*``, and where present the ``q_*`` ones; ``[B, H, rows]`` and
    ``[B, H, rows, K]``, each batch entry alike) list exactly the tiles of the runs ``layout``
    at ``tile_size`` (each row's tiles in any order, entries past its count ignored). Works on
    the lists, never on a ``[B, H, Mt, Nt]`` grid."""
    lengths = check_tile_geometry(layout, tile_size, seq_lengths, what)
    with_q = any(lists.get(f"{prefix}q_{part}") is not None
                 for prefix in ("", "full_") for part in ("num_blocks", "indices"))  # fmt: skip
    wanted = runs_kv_arguments(layout, causal, lengths, causal_offset, q_lists=with_q)
    for prefix in ("", "full_"):
        for side in ("kv", "q") if with_q else ("kv",):
            num_key, index_key = f"{prefix}{side}_num_blocks", f"{prefix}{side}_indices"
            num, indices = lists.get(num_key), lists.get(index_key)
            want_num, want_indices = wanted[num_key], wanted[index_key]
            if num is None or indices is None:  # no full tiles listed: as if none
                if int(want_num.sum()):
                    kind = prefix or "partial "
                    raise ValueError(f"{what} lists no {kind}tiles, and its layout has some")
                continue
            if not _same_lists(num, indices, want_num, want_indices):
                raise ValueError(f"{what} {index_key} are not the tiles of its layout")


def _same_lists(num, indices, want_num, want_indices) -> bool:
    """Whether every batch entry of ``(num, indices)`` lists the tiles of ``(want_num,
    want_indices)``, each row in any order."""
    num, indices = num.to("cpu", torch.int64), indices.to("cpu", torch.int64)
    if num.dim() != 3 or indices.dim() != 4 or num.shape[1:] != want_num.shape[1:]:
        return False
    if indices.shape[:3] != num.shape:
        return False
    width = want_indices.shape[-1] - 1  # the longest row's tiles
    if not torch.equal(num, want_num.to(torch.int64).expand_as(num)):
        return False
    if indices.shape[-1] < width:
        return False
    given = indices[..., :width]
    beyond = torch.arange(width) >= num[..., None]
    given = torch.sort(given.masked_fill(beyond, -1), dim=-1, descending=True).values
    want = want_indices[..., :width].to(torch.int64).masked_fill(beyond[:1], -1)
    return torch.equal(given, torch.sort(want, dim=-1, descending=True).values.expand_as(given))


def _runs_of(layout: Any) -> BlockRuns:
    if not isinstance(layout, Layout):
        raise TypeError(f"layout must be a Layout, got {type(layout).__name__}")
    return layout.to_runs()
