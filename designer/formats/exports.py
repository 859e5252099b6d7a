"""The files a design downloads as: what each holds, its name, and the bytes. Pure.

Bytes are built only when asked (``Export.build``), so the page does not serialise a 16-head
256×256 layout into six formats on every rerun; the app hands ``build`` to Streamlit's deferred
download. Files that hold tensors are ``torch.save`` dicts of tensors and plain values, which
``torch.load(..., weights_only=True)`` reads back.
"""

from __future__ import annotations

import io
import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from designer.design import Design
from designer.formats import (
    MIT_BLOCK_SIZE,
    block_mask_tensors,
    deepspeed_snippet,
    flex_snippet,
    python_snippet,
    recipe_to_json,
    to_base_blockmask,
    to_csr,
)
from designer.storage import design_bytes


@dataclass(frozen=True)
class Export:
    """One download: its button label, file name, MIME type, help, and how to make the bytes.

    ``unavailable`` says why this design cannot be written in this format (then ``build`` is
    not called).
    """

    label: str
    file_name: str
    mime: str
    help: str
    build: Callable[[], bytes]
    unavailable: str | None = None


def file_stem(name: str) -> str:
    """A file-name-safe stem for a design name: letters and digits of any script are kept.

    >>> file_stem("BigBird 8k / v2"), file_stem("ünïcode")
    ('BigBird_8k_v2', 'ünïcode')
    """
    name = unicodedata.normalize("NFC", name)
    stem = re.sub(r"[^\w.-]+", "_", name).strip("._")
    return stem[:80] or "design"


def design_file_name(design: Design) -> str:
    """The name the design's ``.pt`` file downloads as (snippets load it by this name)."""
    return f"{file_stem(design.name)}.pt"


def exports(design: Design) -> list[Export]:
    """Every download the app offers for ``design``."""
    stem = file_stem(design.name)
    layout = design.layout
    return [
        Export(
            "Design (.pt)",
            design_file_name(design),
            "application/octet-stream",
            "Layout, block size, recipe and settings; loads back here and in plain torch.",
            lambda: design_bytes(design),
        ),
        Export(
            "FlexAttention BlockMask",
            f"{stem}_blockmask.pt",
            "application/octet-stream",
            "BlockMask.from_kv_blocks arguments at Flex's 128-token tiles (its compiled forward "
            "and backward take them) and, under 'layout', the packed layout: pop it and build "
            "mask_mod from it, since without one eager flex_attention attends to every token "
            "pair. The FlexAttention snippet shows how.",
            lambda: _torch_bytes(block_mask_tensors(layout, causal=design.causal)),
        ),
        Export(
            "FlexAttention snippet",
            f"flex_{stem}.py",
            "text/x-python",
            "Builds the BlockMask with its mask_mod (a closed form for one causal, window, "
            f"chunk, prefix or sinks step, else from {stem}_blockmask.pt) and runs flex_attention.",
            lambda: flex_snippet(design, f"{stem}_blockmask.pt").encode("utf-8"),
        ),
        Export(
            "DeepSpeed layout",
            f"{stem}_deepspeed.pt",
            "application/octet-stream",
            "A bare int64 [heads, q_blocks, k_blocks] tensor, as make_layout returns.",
            lambda: _torch_bytes(layout.to_int64()),
        ),
        Export(
            "DeepSpeed SparsityConfig",
            f"{stem}_sparsity_config.py",
            "text/x-python",
            f"A SparsityConfig subclass whose make_layout returns {stem}_deepspeed.pt.",
            lambda: deepspeed_snippet(design, f"{stem}_deepspeed.pt").encode("utf-8"),
            unavailable=None
            if layout.n_q_blocks == layout.n_k_blocks
            else "DeepSpeed layouts are square; this one is not",
        ),
        Export(
            "CSR (row_ptr, col_idx)",
            f"{stem}_csr.pt",
            "application/octet-stream",
            "row_ptr [heads, q_blocks + 1] and col_idx [nnz], int64.",
            lambda: _torch_bytes(csr_tensors(design)),
        ),
        Export(
            "MIT base_blockmask",
            f"{stem}_base_blockmask.pt",
            "application/octet-stream",
            "bool [1, heads, q_blocks, k_blocks] for MIT Block-Sparse-Attention.",
            lambda: _torch_bytes({"base_blockmask": to_base_blockmask(layout)}),
            unavailable=None
            if layout.block_size == MIT_BLOCK_SIZE
            else f"needs {MIT_BLOCK_SIZE}-token blocks (this design has {layout.block_size})",
        ),
        Export(
            "JSON recipe",
            f"{stem}.json",
            "application/json",
            "Patterns, parameters, seeds and edits that regenerate the layout exactly.",
            lambda: recipe_to_json(design).encode("utf-8"),
            unavailable=None if design.recipe else "this layout was imported without a recipe",
        ),
        Export(
            "Python snippet",
            f"load_{stem}.py",
            "text/x-python",
            f"Loads {stem}.pt with the designer or with torch alone, and on a CUDA GPU trains "
            "through it as gpu.BlockSparseAttention.",
            lambda: python_snippet(design_file_name(design)).encode("utf-8"),
        ),
    ]


def csr_tensors(design: Design) -> dict[str, Any]:
    """``to_csr`` of the layout, with what it takes to read it back (``from_csr``)."""
    row_ptr, col_idx = to_csr(design.layout)
    return {
        "row_ptr": row_ptr,
        "col_idx": col_idx,
        "n_k_blocks": design.layout.n_k_blocks,
        "block_size": design.layout.block_size,
    }


def _torch_bytes(content: Any) -> bytes:
    buffer = io.BytesIO()
    torch.save(content, buffer)
    return buffer.getvalue()
