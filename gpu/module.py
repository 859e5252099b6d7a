"""``BlockSparseAttention``: a designed layout as a ``torch.nn.Module`` a model can hold.

The layout lives in the module as a bool buffer ``blocks`` ``[H or 1, M, N]``, and the rest of
the design (block size, causal rule, token lengths, name) as the module's extra state, so
``state_dict`` / ``load_state_dict`` carry the whole design, also into a module built from
another one. The module's ``gpu.plan`` is built lazily on the buffer's device, once per layout:
a forward call only checks shapes and launches (no host sync, no copy, no hashing). Moving the
module (``.to``, ``.cuda``), loading a state dict or editing ``blocks`` in place gives a new plan
on the next call.

>>> attn = BlockSparseAttention(torch.ones(1, 2, 2, dtype=torch.bool), 16, impl="reference")
>>> q = k = v = torch.randn(1, 4, 32, 8)
>>> attn(q, k, v).shape
torch.Size([1, 4, 32, 8])
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass
from typing import IO, Any

import torch
from torch import nn

from designer.design import Design
from designer.formats import load_design
from designer.validate import as_block_tensor, check_bool, check_choice, check_int
from gpu.api import IMPLS, block_sparse_attention
from gpu.plans import CAUSAL_ALIGNMENTS, BlockSparsePlan, layout_blocks, token_length
from gpu.plans import plan as build_plan
from gpu.runtime import GpuUnavailableError, unavailable_reason
from gpu.support import BLOCK_SIZES

#: Memory orders ``forward`` takes: ``[B, H, S, D]`` or ``[B, S, H, D]``.
TENSOR_LAYOUTS = ("bhsd", "bshd")
MAX_NAME_CHARS = 200


@dataclass(frozen=True)
class _Settings:
    """Everything about the design beside its blocks (the module's extra state)."""

    block_size: int
    causal: bool
    causal_alignment: str
    seq_q: int
    seq_k: int
    name: str | None

    @classmethod
    def checked(cls, shape: tuple[int, ...], impl: str, **values: Any) -> _Settings:
        """Settings validated against the layout's ``[H, M, N]`` shape and the implementation."""
        block = check_int("block_size", values["block_size"], low=1)
        if impl != "reference":
            check_choice(f'block_size (impl="{impl}")', block, BLOCK_SIZES)
        _, n_q_blocks, n_k_blocks = shape
        lengths = [
            token_length(f"{key} ({n_blocks} blocks of {block})", values[key], n_blocks, block)
            for key, n_blocks in (("seq_q", n_q_blocks), ("seq_k", n_k_blocks))
        ]
        name = values["name"]
        if name is not None and (not isinstance(name, str) or len(name) > MAX_NAME_CHARS):
            raise TypeError(f"name must be a string of at most {MAX_NAME_CHARS} characters or None")
        return cls(
            block_size=block,
            causal=check_bool("causal", values["causal"]),
            causal_alignment=check_choice(
                "causal_alignment", values["causal_alignment"], CAUSAL_ALIGNMENTS
            ),
            seq_q=lengths[0],
            seq_k=lengths[1],
            name=name,
        )


class BlockSparseAttention(nn.Module):
    """Softmax attention over a block layout: ``softmax(scale·QKᵀ | layout) V``.

    Args:
        layout: a ``designer.Layout`` or a ``[H or 1, M, N]`` (or ``[M, N]``) 0/1 tensor or
            array; one head serves every query head.
        block_size: tokens per block side (taken from a ``Layout``; must agree if given).
        causal, causal_alignment: also keep only keys ``k <= q`` (``"top_left"``) or
            ``k <= q + Sk - Sq`` (``"bottom_right"``) inside blocks.
        seq_q, seq_k: token lengths when the last block row or column is partial (default:
            whole blocks). Inputs must have exactly these lengths.
        name: the design's name, shown by ``repr``.
        impl: ``"fused"`` (our CUDA kernel, differentiable), ``"sdd"`` (inference only) or
            ``"reference"`` (dense masked torch on any device, for CPUs and checks). A CUDA
            implementation on a machine without a usable GPU raises ``GpuUnavailableError``.
        device: where the layout buffer lives (default: torch's default device).
    """

    def __init__(
        self,
        layout: Any,
        block_size: int | None = None,
        *,
        causal: bool = False,
        causal_alignment: str = "top_left",
        seq_q: int | None = None,
        seq_k: int | None = None,
        name: str | None = None,
        impl: str = "fused",
        device: Any = None,
    ) -> None:
        super().__init__()
        self.impl = check_choice("impl", impl, IMPLS)
        if impl != "reference" and (reason := unavailable_reason()) is not None:
            raise GpuUnavailableError(
                f'impl="{impl}" needs a CUDA GPU: {reason.rstrip(".")}; pass impl="reference" '
                "for the dense torch reference"
            )
        blocks, block_size = layout_blocks(layout, block_size, allow_2d=True)
        self._settings = _Settings.checked(
            tuple(blocks.shape), impl, block_size=block_size, causal=causal,
            causal_alignment=causal_alignment, seq_q=seq_q, seq_k=seq_k, name=name,
        )  # fmt: skip
        self.register_buffer("blocks", blocks.to(device))
        self._plan: BlockSparsePlan | None = None
        self._plan_key: tuple | None = None

    @classmethod
    def from_design(
        cls,
        design: Design | str | os.PathLike | IO[bytes] | bytes,
        *,
        device: Any = None,
        impl: str = "fused",
    ) -> BlockSparseAttention:
        """The module of a design: a ``Design``, or a file ``designer.formats.load_design`` reads
        (the app's ``.pt`` download, ``save_design`` output; checked, ``ValueError`` if invalid).

        >>> import io
        >>> from designer.layout import Layout
        >>> from designer.formats import save_design
        >>> buffer = io.BytesIO()
        >>> save_design(Design(Layout(torch.ones(1, 2, 2, dtype=torch.bool), 16), name="d"), buffer)
        >>> BlockSparseAttention.from_design(buffer.getvalue(), impl="reference").name
        'd'
        """
        if not isinstance(design, Design):
            design = load_design(design)
        return cls(design.layout, causal=design.causal, name=design.name, impl=impl, device=device)

    # ----------------------------------------------------------------- description
    @property
    def block_size(self) -> int:
        return self._settings.block_size

    @property
    def causal(self) -> bool:
        return self._settings.causal

    @property
    def causal_alignment(self) -> str:
        return self._settings.causal_alignment

    @property
    def seq_q(self) -> int:
        return self._settings.seq_q

    @property
    def seq_k(self) -> int:
        return self._settings.seq_k

    @property
    def name(self) -> str | None:
        return self._settings.name

    @property
    def density(self) -> float:
        """The fraction of active blocks (reads the buffer: a device sync on a GPU)."""
        return float(self.blocks.float().mean())

    def extra_repr(self) -> str:
        heads, n_q_blocks, n_k_blocks = self.blocks.shape
        causal = f"causal={self.causal_alignment}" if self.causal else "causal=False"
        name = "" if self.name is None else f"name={self.name!r}, "
        return (
            f"{name}heads={heads}, blocks={n_q_blocks}x{n_k_blocks} of {self.block_size}, "
            f"seq={self.seq_q}x{self.seq_k}, density={self.density:.2%}, {causal}, "
            f"impl={self.impl!r}, device={self.blocks.device}"
        )

    # ----------------------------------------------------------------- compute
    def forward(
        self,
        q: torch.Tensor,
        k: torch.Tensor,
        v: torch.Tensor,
        *,
        scale: float | None = None,
        layout: str = "bhsd",
    ) -> torch.Tensor:
        """Attention of q ``[B, Hq, Sq, D]`` over k, v ``[B, Hkv, Sk, D]`` (``Hkv`` divides
        ``Hq``: GQA), or all three ``[B, S, H, D]`` with ``layout="bshd"`` (read in place, no
        copy). The result comes in q's layout. ``scale`` defaults to ``D ** -0.5``."""
        check_choice("layout", layout, TENSOR_LAYOUTS)
        for name, x in (("q", q), ("k", k), ("v", v)):
            if not isinstance(x, torch.Tensor):
                raise TypeError(f"{name} must be a torch tensor, got {type(x).__name__}")
            if x.dim() != 4:
                shape = "[B, H, S, D]" if layout == "bhsd" else "[B, S, H, D]"
                raise ValueError(
                    f'{name} must be a {shape} tensor (layout="{layout}"), got {list(x.shape)}'
                )
        if q.device != self.blocks.device:
            raise ValueError(
                f"q is on {q.device} but the module's layout is on {self.blocks.device}; move "
                f"the module with .to({str(q.device)!r})"
            )
        if layout == "bshd":
            q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        out = block_sparse_attention(q, k, v, self.plan(), scale=scale, impl=self.impl)
        return out.transpose(1, 2) if layout == "bshd" else out

    def plan(self) -> BlockSparsePlan:
        """The ``gpu.plan`` of the layout as it is now, on the buffer's device (built once).

        Building it is host work that ``torch.compile`` cannot trace: a compiled call without a
        plan breaks the graph there once, so call ``plan()`` (or the module) before compiling
        with ``fullgraph=True``. Compiled code keeps the plan it was traced with until the plan
        changes: moving the module or loading a state dict drops it (the next call rebuilds it;
        call ``plan()`` first under ``fullgraph=True``), but an in-place edit of ``blocks`` is
        seen only by eager calls or an eager ``plan()``.
        """
        if self._plan is not None and (
            torch.compiler.is_compiling() or self._plan_key == self._current_key()
        ):
            return self._plan
        return self._build_plan()

    @torch.compiler.disable
    def _build_plan(self) -> BlockSparsePlan:
        s = self._settings
        # the reference reads the layout on the host; our kernels read look-up tables uploaded
        # to the buffer's device once
        device = "cpu" if self.impl == "reference" else self.blocks.device
        self._plan = build_plan(
            self.blocks, s.block_size, causal=s.causal, causal_alignment=s.causal_alignment,
            seq_q=s.seq_q, seq_k=s.seq_k, device=device,
        )  # fmt: skip
        self._plan_key = self._current_key()
        return self._plan

    def _current_key(self) -> tuple:
        return (self.blocks.device, self.blocks._version, self._settings)

    # ----------------------------------------------------------------- state
    def get_extra_state(self) -> dict[str, Any]:
        return asdict(self._settings)

    def set_extra_state(self, state: Any) -> None:
        self._settings = _settings_from_state(state, tuple(self.blocks.shape), self.impl)
        self._plan = None

    def _load_from_state_dict(self, state_dict, prefix, local_metadata, strict, *args) -> None:
        """Take the incoming design whole, whatever its shape, after checking it all first."""
        blocks = state_dict.get(prefix + "blocks")
        state = state_dict.get(prefix + "_extra_state")
        if blocks is not None:
            blocks = as_block_tensor(prefix + "blocks", blocks)
            if state is not None:
                _settings_from_state(state, tuple(blocks.shape), self.impl)
            elif blocks.shape != self.blocks.shape:
                raise ValueError(
                    f"{prefix}blocks has shape {list(blocks.shape)}, not this module's "
                    f"{list(self.blocks.shape)}, and the state dict holds no settings for it"
                )
            if blocks.shape != self.blocks.shape:
                self.blocks = torch.empty(blocks.shape, dtype=torch.bool, device=self.blocks.device)
            state_dict = {**state_dict, prefix + "blocks": blocks}
        self._plan = None
        super()._load_from_state_dict(state_dict, prefix, local_metadata, strict, *args)

    def _apply(self, fn, recurse=True):
        self._plan = None  # a move gives a new buffer: the plan must follow it
        return super()._apply(fn, recurse)


def _settings_from_state(state: Any, shape: tuple[int, ...], impl: str) -> _Settings:
    fields = tuple(_Settings.__dataclass_fields__)
    if not isinstance(state, dict) or set(state) != set(fields):
        keys = sorted(state) if isinstance(state, dict) else type(state).__name__
        raise ValueError(f"extra state must be a dict with keys {list(fields)}, got {keys}")
    return _Settings.checked(shape, impl, **state)
