"""FlashAttention-4's own call as a contender (``fa4``), to see what FlexAttention's FLASH
backend adds or costs on top of the same kernels.

``flash_attn.cute.flash_attn_func(q, k, v, ...)`` takes ``[B, S, H, D]`` tensors (ours are
viewed so, never copied), ``causal=True`` for the causal mask, and block sparsity as lists of
*full* and *masked* tiles per query tile (``BlockSparseTensorsTorch``; a backward needs the
same lists per key tile). Masked tiles would need a ``mask_mod`` written in CuTe DSL, which
FlexAttention generates from Python (``flex_flash``). Block lists of whole 64-token tiles, every
active tile full, gave a wrong result on the H200 (band 7 % at block 64, D=64, S=1024: relative
error 0.44 against fp64, 2026-12-01; the harness refused to time it). So ``fa4`` runs what needs
no lists: a dense layout and the full causal triangle (``causal=True``); any other layout is
"unavailable" with the reason, and runs on FA4 through ``flex_flash``. It is not among the
default contenders: ``tools/probes/fa4_vs_flex.py`` measures it beside ``flex_flash``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from gpu.bench.flex import CAUSAL, DENSE, closed_form


def fa4_refusal(blocks: torch.Tensor, block_size: int, *, causal: bool) -> str | None:
    """Why FA4's own call cannot run this layout, or None (dense, or the full causal triangle)."""
    form = closed_form(blocks, causal=causal)
    if form is not None and form[0] in (CAUSAL, DENSE):
        return None
    return (
        "FA4's own call runs dense attention and the whole causal triangle only: its block lists "
        "gave wrong results here (2026-12-01), so sparse layouts run on FA4 through flex_flash"
    )


def fa4_call(case: Any) -> Callable[[], torch.Tensor]:
    """A zero-argument call of ``flash_attn_func`` on ``case`` (a ``contenders.Case``), returning
    ``[B, H, S, D]``; raises ``ValueError`` when ``fa4_refusal`` says it cannot."""
    from flash_attn.cute import flash_attn_func

    if reason := fa4_refusal(case.blocks, case.block_size, causal=case.causal):
        raise ValueError(reason)
    form = closed_form(case.blocks, causal=case.causal)
    options: dict[str, Any] = {"softmax_scale": case.scale, "causal": form[0] == CAUSAL}
    q, k, v = (x.transpose(1, 2) for x in (case.q, case.k, case.v))
    return lambda: flash_attn_func(q, k, v, **options)[0].transpose(1, 2)
