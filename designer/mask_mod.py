"""Any FlexAttention ``mask_mod`` as a token-exact layout: ``from_mask_mod``.

``mask_mod(b, h, q_idx, kv_idx) -> bool`` is Flex's signature: an elementwise function of index
tensors (Flex calls it under ``vmap``). The layout is made tile by tile in two passes:

1. **Bounds** (``mask_bounds``): the ``mask_mod`` runs once over every block at a time, on
   intervals of token indices, in chunks of query-block rows; a block it surely allows is full,
   one it surely refuses is empty. When it cannot be bounded, every block goes to pass 2.
2. **Tokens**: the remaining blocks are evaluated token by token, many at once by
   broadcasting (``q_idx`` ``[T, b, 1]``, ``kv_idx`` ``[T, 1, b]``), ``CHUNK_PAIRS`` pairs at a
   time; each comes out full, empty or partial (its bits kept).

Both passes see ``h`` as an ``[H, 1, 1]`` tensor, so a ``mask_mod`` that ignores the head gives
a result without a head dimension and is evaluated once for all heads. Tokens past ``seq_q`` or
``seq_k`` are never passed to it (a ``mask_mod`` reading document ids of ``seq_q`` tokens would
read past its table). ``b`` is 0: a layout has no batch dimension.

Work is bounded before it is done: more than ``MAX_EVAL_PAIRS`` token pairs to evaluate is
refused, saying how many, and partial blocks past ``partials.MAX_PARTIAL_BYTES`` too.

Long contexts: the bounds are a dense grid of the heads the ``mask_mod`` tells apart (one, when
it ignores ``h``), at most ``MAX_LAYOUT_CELLS`` cells; a layout larger than a dense grid holds
(``layout.DENSE_CELLS``: 32 heads x 128K tokens of a head-independent window) is then its one
head's layout copied to every head, held as row runs, with each head's partial blocks.

With ``causal=True`` the layout is meant for a causal design (``Design(causal=True)``,
``gpu.plan(causal=True)``), whose closed-form rule masks above the diagonal: a block whose
allowed pairs are exactly the causal ones (the diagonal of a causal document mask) is stored as
full, and a ``mask_mod`` that allows a pair the causal rule masks is refused.

>>> window = lambda b, h, q, k: (q - k >= 0) & (q - k < 100)
>>> layout = from_mask_mod(window, heads=2, seq_q=1000, seq_k=1000, block_size=64)
>>> layout.shape, layout.seq_len_q, layout.n_partial
((2, 16, 16), 1000, 90)
>>> from_mask_mod(window, heads=1, seq_q=1000, seq_k=1000, block_size=64, causal=True).n_partial
29
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from designer.layout import CAUSAL_ALIGNMENTS, MAX_BLOCK_SIZE, Layout, causal_offset
from designer.mask_bounds import Span, bounds_of
from designer.partials import PartialBlocks, check_partial_size, pack_masks, row_bytes
from designer.threads import one_thread
from designer.validate import (
    MAX_BLOCKS,
    MAX_HEADS,
    MAX_LAYOUT_CELLS,
    check_bool,
    check_choice,
    check_int,
    check_runs_shape,
)

MaskMod = Callable[..., torch.Tensor]

#: Token pairs evaluated at once (their int64 temporaries: a few times 32 MiB).
CHUNK_PAIRS = 1 << 22
#: Blocks bounded at once in pass 1.
BOUND_CHUNK_CELLS = 1 << 22
#: Most token pairs pass 2 may evaluate (about 10 s for a mask_mod of a few operations).
MAX_EVAL_PAIRS = 1 << 31
#: Nanoseconds per token pair evaluated and per block bounded, for estimates (one core,
#: 2026-12-02: 1.3-3.1 ns per pair for attention-gym's families, 40-90 ns per bounded block).
NS_PER_PAIR = 4
NS_PER_BOUNDED_BLOCK = 120


@dataclass(frozen=True, eq=False)
class TileBounds:
    """Pass 1's answer: bool ``[H', M, N]`` blocks surely full and blocks to evaluate, ``H'``
    being the layout's heads, or 1 when the ``mask_mod`` ignores the head."""

    full: torch.Tensor
    unknown: torch.Tensor
    bounded: bool

    @property
    def evaluated_blocks(self) -> int:
        return int(self.unknown.sum())


def _check_mask_mod(mask_mod: object) -> None:
    if not callable(mask_mod):
        raise TypeError(
            f"mask_mod must be a function mask_mod(b, h, q_idx, kv_idx), got "
            f"{type(mask_mod).__name__}"
        )


def _lengths(heads: int, seq_q: int, seq_k: int, block_size: int) -> tuple[int, int, int, int]:
    heads = check_int("heads", heads, low=1, high=MAX_HEADS)
    block = check_int("block_size", block_size, low=1, high=MAX_BLOCK_SIZE)
    seq_q = check_int("seq_q", seq_q, low=1, high=MAX_BLOCKS * block)
    seq_k = check_int("seq_k", seq_k, low=1, high=MAX_BLOCKS * block)
    check_runs_shape(heads, -(-seq_q // block), -(-seq_k // block))
    return heads, seq_q, seq_k, block


def _call(mask_mod: MaskMod, h, q, k) -> object:
    return mask_mod(torch.tensor(0), h, q, k)


def head_dependent(mask_mod: MaskMod, heads: int) -> bool:
    """Whether ``mask_mod``'s result has a head dimension (it reads ``h``); raises
    ``ValueError`` if it cannot take index tensors as Flex gives them."""
    zero = torch.zeros(1, 1, 1, dtype=torch.int64)
    try:
        out = _call(mask_mod, torch.arange(heads).view(heads, 1, 1), zero, zero)
    except Exception as error:
        raise ValueError(
            f"mask_mod(b, h, q_idx, kv_idx) must take index tensors, as FlexAttention calls it; "
            f"it raised {type(error).__name__}: {error}"
        ) from error
    if not isinstance(out, torch.Tensor | bool):
        raise TypeError(f"mask_mod must return a bool tensor, got {type(out).__name__}")
    shape = torch.as_tensor(out).shape
    return heads > 1 and len(shape) == 3 and shape[0] == heads


def _check_bounds_grid(shown: int, m: int, n: int) -> None:
    """Refuse bounds past a dense grid's cells, saying what would fit."""
    if shown * m * n <= MAX_LAYOUT_CELLS:
        return
    if shown > 1:
        raise ValueError(
            f"this mask_mod reads the head, so it is bounded on a grid of {shown} heads x {m} x "
            f"{n} blocks ({shown * m * n:,} cells), more than the {MAX_LAYOUT_CELLS:,} allowed; "
            f"use fewer heads or larger blocks, or a mask_mod that is the same on every head"
        )
    raise ValueError(
        f"a mask_mod is bounded on a grid of {m} x {n} blocks, at most {MAX_LAYOUT_CELLS:,} "
        f"cells, got {m * n:,}; use larger blocks or shorter sequences"
    )


def tile_bounds(
    mask_mod: MaskMod, *, heads: int, seq_q: int, seq_k: int, block_size: int
) -> TileBounds:
    """Pass 1 (see the module docstring): which blocks are surely full, which to evaluate."""
    _check_mask_mod(mask_mod)
    heads, seq_q, seq_k, b = _lengths(heads, seq_q, seq_k, block_size)
    m, n = -(-seq_q // b), -(-seq_k // b)
    shown = heads if head_dependent(mask_mod, heads) else 1
    _check_bounds_grid(shown, m, n)
    full = torch.zeros(shown, m, n, dtype=torch.bool)
    unknown = torch.zeros(shown, m, n, dtype=torch.bool)
    tables: dict = {}
    k_lo = torch.arange(n) * b
    kv = Span(k_lo.view(1, 1, n), (k_lo + b).clamp(max=seq_k).sub(1).view(1, 1, n), tables)
    h = torch.arange(shown).view(shown, 1, 1)
    rows = max(1, BOUND_CHUNK_CELLS // (shown * n))
    try:
        for r0 in range(0, m, rows):
            r1 = min(m, r0 + rows)
            q_lo = torch.arange(r0, r1) * b
            q = Span(q_lo.view(1, -1, 1), (q_lo + b).clamp(max=seq_q).sub(1).view(1, -1, 1), tables)
            surely, maybe = bounds_of(_call(mask_mod, h, q, kv))
            full[:, r0:r1] = surely.expand(shown, r1 - r0, n)
            unknown[:, r0:r1] = (maybe & ~surely).expand(shown, r1 - r0, n)
    except Exception:  # Unbounded, or any other failure: no bounds, so every block is evaluated
        return TileBounds(torch.zeros_like(full), torch.ones_like(unknown), bounded=False)
    return TileBounds(full, unknown, bounded=True)


def evaluation_cost(bounds: TileBounds, block_size: int) -> tuple[int, int]:
    """``(token pairs, estimated nanoseconds)`` of pass 2 for these bounds."""
    pairs = bounds.evaluated_blocks * block_size * block_size
    return pairs, pairs * NS_PER_PAIR


def check_evaluation(pairs: int, what: str = "mask_mod") -> None:
    """Refuse more than ``MAX_EVAL_PAIRS`` token pairs to evaluate, saying how many."""
    if pairs > MAX_EVAL_PAIRS:
        raise ValueError(
            f"{what} needs {pairs:,} token pairs evaluated "
            f"(about {pairs * NS_PER_PAIR / 1e9:.0f} s), "
            f"more than the limit of {MAX_EVAL_PAIRS:,}: its blocks could not be bounded, or too "
            f"many are partial; use larger blocks or shorter sequences"
        )


@dataclass(frozen=True, eq=False)
class Evaluated:
    """Pass 2's answer for ``T`` blocks: which allow any pair, and the partial ones'
    ``(head, q_block, k_block)`` rows and bits."""

    active: torch.Tensor
    partials: PartialBlocks


def evaluate_blocks(
    mask_mod: MaskMod,
    blocks: torch.Tensor,
    block_size: int,
    seq_q: int,
    seq_k: int,
    *,
    offset: int | None = None,
    copies: int = 1,
    what: str = "mask_mod",
) -> Evaluated:
    """Evaluate ``mask_mod`` on every token pair of the int64 ``[T, 3]`` ``(head, q_block,
    k_block)`` ``blocks`` (sorted), ``CHUNK_PAIRS`` pairs at a time.

    With ``offset`` (causal), a block is full when it allows exactly the causal pairs
    ``k <= q + offset`` inside the lengths, and a pair outside them raises. ``copies`` is how
    many heads each partial block will be stored for (the size check counts them).
    """
    b = block_size
    per_chunk = max(1, CHUNK_PAIRS // (b * b))
    span = torch.arange(b, dtype=torch.int32)  # int32 indices, as Flex gives them on a GPU
    actives, index_parts, bit_parts, kept = [], [], [], 0
    for t0 in range(0, len(blocks), per_chunk):
        chunk = blocks[t0 : t0 + per_chunk]
        chunk32 = chunk.to(torch.int32)
        h = chunk32[:, 0].view(-1, 1, 1)
        q_raw = (chunk32[:, 1] * b).view(-1, 1, 1) + span.view(1, b, 1)
        k_raw = (chunk32[:, 2] * b).view(-1, 1, 1) + span.view(1, 1, b)
        cut = bool((chunk[:, 1] * b + b > seq_q).any() or (chunk[:, 2] * b + b > seq_k).any())
        q_idx, k_idx = q_raw, k_raw
        if cut:  # tokens past the lengths: evaluated at the last token, then masked
            q_idx, k_idx = q_raw.clamp(max=seq_q - 1), k_raw.clamp(max=seq_k - 1)
        try:
            out = torch.as_tensor(_call(mask_mod, h, q_idx, k_idx)).to(torch.bool)
            out = out.expand(len(chunk), b, b)
        except Exception as error:
            raise ValueError(
                f"{what} could not be evaluated on index tensors: {type(error).__name__}: {error}"
            ) from error
        target = (q_raw < seq_q) & (k_raw < seq_k) if cut else None
        if target is not None:
            out = out & target
        if offset is not None:
            causal = k_raw <= q_raw + offset
            if bool((wrong := out & ~causal).any()):
                t, i, j = (int(v) for v in wrong.nonzero()[0])
                raise ValueError(
                    f"{what} allows head {int(chunk[t, 0])}, q_idx {int(q_raw[t, i, 0])}, kv_idx "
                    f"{int(k_raw[t, 0, j])}, which the causal rule masks (kv_idx <= q_idx + "
                    f"{offset}); with causal=True every allowed pair must be causal"
                )
            target = causal if target is None else target & causal
        active = out.flatten(1).any(dim=1)
        same = out if target is None else out == target
        full = same.flatten(1).all(dim=1) & active
        partial = active & ~full
        kept += int(partial.sum())
        check_partial_size(kept * copies, b)
        actives.append(active)
        index_parts.append(chunk[partial].to(torch.int32))
        bit_parts.append(pack_masks(out[partial]))
    if not actives:
        return Evaluated(torch.zeros(0, dtype=torch.bool), PartialBlocks.empty(b))
    zero_bits = torch.zeros(0, b, row_bytes(b), dtype=torch.uint8)
    partials = PartialBlocks(torch.cat(index_parts), torch.cat([zero_bits, *bit_parts]))
    return Evaluated(torch.cat(actives), partials)


def wholly_causal(n_q: int, n_k: int, block_size: int, seq_q: int, seq_k: int, offset: int):
    """Bool ``[M, N]``: blocks whose every pair inside the lengths is causal (``k <= q + d``)."""
    first_q = torch.arange(n_q)[:, None] * block_size
    last_k = ((torch.arange(n_k)[None, :] + 1) * block_size).clamp(max=seq_k) - 1
    return last_k <= first_q + offset


def from_mask_mod(
    mask_mod: MaskMod,
    *,
    heads: int,
    seq_q: int,
    seq_k: int,
    block_size: int,
    causal: bool = False,
    causal_alignment: str = "top_left",
) -> Layout:
    """The token-exact layout of ``mask_mod`` at ``block_size``: full, partial and empty
    blocks, and the token lengths (see the module docstring).

    ``causal`` says the layout will run under a causal rule (aligned as ``causal_alignment``,
    as in ``gpu.plan``): blocks whose pairs are exactly the causal ones are stored full, and a
    ``mask_mod`` allowing a non-causal pair raises ``ValueError``. Raises ``ValueError`` for a
    ``mask_mod`` that fails on index tensors, and for work or partial masks past the limits.
    """
    _check_mask_mod(mask_mod)
    heads, seq_q, seq_k, b = _lengths(heads, seq_q, seq_k, block_size)
    causal = check_bool("causal", causal)
    alignment = check_choice("causal_alignment", causal_alignment, CAUSAL_ALIGNMENTS)
    offset = causal_offset(alignment, seq_q, seq_k) if causal else None
    with one_thread():  # small tensor operations: a second thread only adds contention
        bounds = tile_bounds(mask_mod, heads=heads, seq_q=seq_q, seq_k=seq_k, block_size=b)
        return layout_of_bounds(mask_mod, bounds, heads, seq_q, seq_k, b, offset)


def layout_of_bounds(
    mask_mod: MaskMod,
    bounds: TileBounds,
    heads: int,
    seq_q: int,
    seq_k: int,
    b: int,
    offset: int | None = None,
) -> Layout:
    """Pass 2 of ``from_mask_mod`` (arguments checked) after pass 1 gave ``bounds``."""
    check_evaluation(evaluation_cost(bounds, b)[0])
    shown, m, n = bounds.full.shape
    blocks = bounds.full.clone()
    if offset is not None:
        crossed = blocks & ~wholly_causal(m, n, b, seq_q, seq_k, offset)
        if bool(crossed.any()):
            head, row, col = (int(v) for v in crossed.nonzero()[0])
            raise ValueError(
                f"mask_mod allows every pair of block (head {head}, q_block {row}, k_block "
                f"{col}), which the causal rule partly masks; with causal=True every allowed "
                f"pair must be causal"
            )
    todo = bounds.unknown.nonzero()
    found = evaluate_blocks(mask_mod, todo, b, seq_q, seq_k, offset=offset,
                            copies=heads // shown)  # fmt: skip
    blocks[tuple(todo[found.active].T)] = True
    layout = Layout(blocks, b, found.partials if found.partials.count else None, seq_q, seq_k)
    return layout.broadcast_heads(heads) if shown != heads else layout
