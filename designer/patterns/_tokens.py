"""Shared by the token patterns: their parameter specs, registry entries and the canvas maths.

A token pattern is a small factory returning a ``mask_mod(b, h, q_idx, kv_idx)`` (usable with
FlexAttention as it is) whose ``__name__`` records its parameters. The registry turns the rule
into full, partial and empty blocks (``designer.from_mask_mod``); the rules use only operations
``designer.mask_bounds`` bounds, so whole blocks are decided without visiting their tokens.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from designer.patterns.specs import ParamSpec, PatternSpec

#: Most tokens a token parameter may name (the longest sequence the app takes).
MAX_TOKENS = 1 << 20

MaskMod = Callable[..., torch.Tensor]


def tokens_param(name: str, default: int, help: str, low: int = 1) -> ParamSpec:
    """A number of tokens in ``[low, MAX_TOKENS]``."""
    return ParamSpec(name, "int", default, low=low, high=MAX_TOKENS, help=help)


def token_spec(
    name: str,
    label: str,
    rule: str,
    params: tuple[ParamSpec, ...],
    factory: Callable[..., MaskMod],
    *,
    order: int,
) -> PatternSpec:
    """The registry's entry for a token pattern: ``factory(**params)`` is its ``mask_mod``."""
    return PatternSpec(
        name, f"Tokens: {label}", "token", rule, params, random=False, square_only=False,
        rule=lambda values, seq_q, seq_k: factory(**values), order=order,
    )  # fmt: skip


def named(mask_mod: MaskMod, name: str) -> MaskMod:
    """``mask_mod`` with ``name`` (its parameters) as ``__name__``, as attention-gym names them."""
    mask_mod.__name__ = name
    return mask_mod


def neighbourhood(query: Any, key: Any, size: int, kernel: int) -> Any:
    """Whether ``key`` is in the ``kernel``-wide window of ``query`` on an axis of ``size``,
    the window's centre clamped so that it stays inside the axis (NATTEN's rule)."""
    half = kernel // 2
    centre = query.clamp(min(half, size - 1), max(half, size - 1 - half))
    return (centre - key).abs() <= half
