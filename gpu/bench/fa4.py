"""FlashAttention-4's own call as a contender (``fa4``), to see what FlexAttention's FLASH
backend adds or costs on top of the same kernels.

``flash_attn.cute.flash_attn_func(q, k, v, ...)`` takes ``[B, S, H, D]`` tensors (ours are
viewed so, never copied), ``causal=True`` for the causal mask, and block sparsity as lists of
*full* and *masked* tiles per query tile (``BlockSparseTensorsTorch``; a backward needs the
same lists per key tile). Masked tiles would need a ``mask_mod`` written in CuTe DSL, which
FlexAttention generates from Python (``flex_flash``). So ``fa4`` runs what needs none: a dense
layout (no lists), the full causal triangle (``causal=True``), and a non-causal layout of
blocks that are a multiple of 64 tokens at tiles of the layout's block, every active tile full.
Anything else is "unavailable" with the reason. It is not among the default contenders:
``tools/probes/fa4_vs_flex.py`` measures it beside ``flex_flash``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from designer.formats.flex_tiles import kv_lists
from gpu.bench.flex import CAUSAL, DENSE, closed_form, tile_classes

#: FA4's block sparsity on Hopper: tiles a multiple of its 64-row query tiles.
MIN_SPARSE_TILE = 64


def fa4_refusal(blocks: torch.Tensor, block_size: int, *, causal: bool) -> str | None:
    """Why FA4's own call cannot run this layout without a CuTe ``mask_mod``, or None."""
    form = closed_form(blocks, causal=causal)
    if form is not None and form[0] in (CAUSAL, DENSE):
        return None
    if causal:
        return (
            "FA4's own call runs the causal mask on the whole lower triangle only; another "
            "causal layout needs a CuTe DSL mask_mod (flex_flash writes one)"
        )
    if block_size % MIN_SPARSE_TILE:
        return (
            f"FA4's own call lists whole tiles of {MIN_SPARSE_TILE} tokens or more; blocks of "
            f"{block_size} tokens need a CuTe DSL mask_mod (flex_flash writes one)"
        )
    return None


def fa4_call(case: Any) -> Callable[[], torch.Tensor]:
    """A zero-argument call of ``flash_attn_func`` on ``case`` (a ``contenders.Case``), returning
    ``[B, H, S, D]``; raises ``ValueError`` when ``fa4_refusal`` says it cannot."""
    from flash_attn.cute import flash_attn_func

    if reason := fa4_refusal(case.blocks, case.block_size, causal=case.causal):
        raise ValueError(reason)
    form = closed_form(case.blocks, causal=case.causal)
    options: dict[str, Any] = {"softmax_scale": case.scale}
    if form is not None and form[0] == CAUSAL:
        options["causal"] = True
    elif form is None:
        options.update(_block_sparsity(case.blocks, case.block_size, case.q.device))
    q, k, v = (x.transpose(1, 2) for x in (case.q, case.k, case.v))
    return lambda: flash_attn_func(q, k, v, **options)[0].transpose(1, 2)


def _block_sparsity(blocks: torch.Tensor, block_size: int, device: torch.device) -> dict:
    """``block_sparse_tensors`` (per query tile) and ``block_sparse_tensors_bwd`` (per key
    tile) listing every active tile as full, none masked."""
    from flash_attn.cute.block_sparsity import BlockSparseTensorsTorch

    full, _ = tile_classes(blocks, block_size, causal=False, tile_size=block_size)  # no partial

    def tensors(tiles: torch.Tensor) -> Any:
        count, index = (x.to(device) for x in kv_lists(tiles))
        no_mask = torch.zeros_like(count), torch.zeros(*count.shape, 1, dtype=torch.int32,
                                                       device=device)  # fmt: skip
        return BlockSparseTensorsTorch(*no_mask, count, index, block_size=(block_size,) * 2)

    return {
        "block_sparse_tensors": tensors(full),
        "block_sparse_tensors_bwd": tensors(full.transpose(1, 2)),
    }
