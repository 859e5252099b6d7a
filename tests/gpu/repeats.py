"""Gradients run after run: what a deterministic backward must give bit for bit."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch


def repeated_gradients(
    call: Callable[..., torch.Tensor],
    leaves: Sequence[torch.Tensor],
    grad_out: torch.Tensor,
    times: int = 3,
) -> tuple[torch.Tensor, ...]:
    """The gradients of ``call(*leaves)`` against ``grad_out``, computed ``times`` times; fails
    unless every run equals the first bitwise."""
    runs = [torch.autograd.grad(call(*leaves), leaves, grad_out) for _ in range(times)]
    for again in runs[1:]:
        for name, first, second in zip("qkv", runs[0], again, strict=True):
            assert torch.equal(first, second), f"d{name} differs between two runs"
    return runs[0]
