"""The files a design downloads as: what each holds, its name, and the bytes. Pure.

Bytes are built only when asked (``Export.build``), so the page does not serialise a 16-head
256×256 layout into six formats on every rerun; the app hands ``build`` to Streamlit's deferred
download. Files that hold tensors are ``torch.save`` dicts of tensors and plain values, which
``torch.load(..., weights_only=True)`` reads back.

Every file reads back here, or says why not (``Export.note``). Block-level formats (DeepSpeed,
CSR, MIT's ``base_blockmask``) cannot hold a token-exact design's partial blocks: for such a
design they are ``unavailable``, saying so and what to download instead, and where only its
token lengths are not whole blocks, their ``note`` says that the lengths are not kept.

A tensor file whose plain form would pass what an upload takes (``MAX_FILE_BYTES``) is written
compactly instead, as the importer reads it: its archive deflated (``torch_file.deflated``;
``torch.load`` reads it as it is), the DeepSpeed layout as bool (``.long()`` is
``make_layout``'s int64), CSR indices as int32. A file that would still not come back says
what to load instead, and one whose making alone would take more than ``MAX_EXPORT_BYTES`` of
memory is ``unavailable``, saying why. So is a format that holds a dense grid (DeepSpeed's
layout, MIT's ``base_blockmask``) for a long-context design held as row runs, whose grid is past
what one may hold: its Design (.pt) and CSR files keep it. Its FlexAttention BlockMask file is
made from the runs (``runs_block_mask``): tile lists one entry per key tile wide, as
``BlockMask.from_kv_blocks`` reads them (it transposes them by their width), and the runs
themselves under ``"layout"`` (with its partial blocks' bits and token lengths), which
``read_design_file`` reads back exactly; a runs design with blocks that straddle Flex's tiles
cannot be listed so and says why.
"""

from __future__ import annotations

import re
import tempfile
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
from designer.formats.csr import MAX_CSR_BLOCKS
from designer.formats.flex_snippet import closed_form
from designer.formats.flex_tiles import flex_tile_size
from designer.formats.pt_file import MAX_FILE_BYTES
from designer.formats.torch_file import MAX_UNPACKED_BYTES, deflated
from designer.storage import design_bytes
from designer.units import bytes_text
from designer.validate import MAX_LAYOUT_CELLS

#: Most memory making one download may take (its tensors and their bytes, a few times over).
MAX_EXPORT_BYTES = 512 << 20
#: Peak bytes a tile takes while a runs design's BlockMask file is made, its archive spilling to
#: a temporary file (measured: 336 MB for the lists of the 33.5M tiles of 32 heads x 128K
#: tokens, 400-450 MB for the whole file).
LIST_BUILD_BYTES = 14
#: Bytes of a tensor file's archive held in memory before it spills to a temporary file.
SPOOL_BYTES = 16 << 20
#: What a ``torch.save`` archive adds to its tensors' bytes, at most (pickle, zip records).
ARCHIVE_BYTES = 1 << 16


@dataclass(frozen=True)
class Export:
    """One download: its button label, file name, MIME type, help, and how to make the bytes.

    ``unavailable`` says why this design cannot be written in this format (then ``build`` is
    not called); ``note`` how the file was made smaller, or that it will not load back here
    and what to load instead.
    """

    label: str
    file_name: str
    mime: str
    help: str
    build: Callable[[], bytes]
    unavailable: str | None = None
    note: str | None = None


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
    cells = layout.n_heads * layout.n_q_blocks * layout.n_k_blocks
    nnz = layout.nnz
    tile = flex_tile_size(layout.block_size)
    block_level = _block_level(layout)
    dense_only = _dense_only(layout)
    tiles = layout.n_heads * -(-layout.seq_len_q // tile) * -(-layout.seq_len_k // tile)
    deepspeed_int64 = 8 * cells + ARCHIVE_BYTES <= MAX_FILE_BYTES
    csr_bytes = 8 * (nnz + layout.n_heads * (layout.n_q_blocks + 1))
    csr_int64 = csr_bytes + ARCHIVE_BYTES <= MAX_FILE_BYTES
    csr_dtype = torch.int64 if csr_int64 else torch.int32
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
            **_block_mask_availability(layout, tiles, cells),
        ),
        Export(
            "FlexAttention snippet",
            f"flex_{stem}.py",
            "text/x-python",
            "Builds the BlockMask with its mask_mod (a closed form for one causal, window, "
            f"chunk, prefix or sinks step, else from {stem}_blockmask.pt) and runs flex_attention.",
            lambda: flex_snippet(design, f"{stem}_blockmask.pt").encode("utf-8"),
            unavailable=None
            if closed_form(design)
            else dense_only(
                "Without a closed-form mask_mod the snippet reads the BlockMask "
                "file, whose mask_mod looks blocks up in"
            ),
        ),
        Export(
            "DeepSpeed layout",
            f"{stem}_deepspeed.pt",
            "application/octet-stream",
            "A bare int64 [heads, q_blocks, k_blocks] tensor, as make_layout returns."
            if deepspeed_int64
            else "A bare bool [heads, q_blocks, k_blocks] tensor (.long() gives make_layout's "
            "int64), in a deflated archive that torch.load reads as it is.",
            lambda: _torch_bytes(layout.to_int64() if deepspeed_int64 else layout.blocks),
            unavailable=dense_only("DeepSpeed's layout is")
            or _not_whole("DeepSpeed's layouts", layout)
            or block_level("DeepSpeed"),
            note=_notes(
                None
                if deepspeed_int64
                else f"Saved as bool: as int64 it would be {bytes_text(8 * cells)}, "
                f"more than the {bytes_text(MAX_FILE_BYTES)} an upload takes. "
                + (_size_note(cells, cells) or ""),
                _causal_note(design),
            ),
        ),
        Export(
            "DeepSpeed SparsityConfig",
            f"{stem}_sparsity_config.py",
            "text/x-python",
            f"A SparsityConfig subclass whose make_layout returns {stem}_deepspeed.pt.",
            lambda: deepspeed_snippet(design, f"{stem}_deepspeed.pt").encode("utf-8"),
            unavailable=dense_only("DeepSpeed's layout is")
            or _not_whole("DeepSpeed's layouts", layout)
            or block_level("DeepSpeed")
            or (
                None
                if layout.n_q_blocks == layout.n_k_blocks
                else "DeepSpeed layouts are square; this one is not"
            ),
        ),
        Export(
            "CSR (row_ptr, col_idx)",
            f"{stem}_csr.pt",
            "application/octet-stream",
            f"row_ptr [heads, q_blocks + 1] and col_idx [nnz], {str(csr_dtype)[6:]}.",
            lambda: _torch_bytes(csr_tensors(design, csr_dtype)),
            unavailable=block_level("CSR") or _too_costly("CSR", 16 * nnz),
            note=_notes(
                f"{nnz:,} blocks: more than the {MAX_CSR_BLOCKS:,} a CSR upload may hold here; "
                "load the Design (.pt) instead."
                if nnz > MAX_CSR_BLOCKS
                else _lengths_note(layout) or _size_note(csr_bytes, csr_bytes // 2),
                _causal_note(design),
            ),
        ),
        Export(
            "MIT base_blockmask",
            f"{stem}_base_blockmask.pt",
            "application/octet-stream",
            "bool [1, heads, q_blocks, k_blocks] for MIT Block-Sparse-Attention.",
            lambda: _torch_bytes({"base_blockmask": to_base_blockmask(layout)}),
            unavailable=dense_only("MIT's base_blockmask is")
            or block_level("MIT's base_blockmask")
            or (
                None
                if layout.block_size == MIT_BLOCK_SIZE
                else f"needs {MIT_BLOCK_SIZE}-token blocks (this design has {layout.block_size})"
            ),
            note=_notes(_lengths_note(layout) or _size_note(cells, cells), _causal_note(design)),
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


def _block_mask_availability(layout, tiles: int, cells: int) -> dict[str, str | None]:
    """``unavailable`` and ``note`` of the BlockMask file: a dense layout's lists and packed
    grid, or a layout held as row runs, whose lists come from its runs (``runs_block_mask``)
    one entry per key tile wide, and which stores its runs."""
    if layout.runs is None:
        plain = 8 * tiles + cells // 8
        return {
            "unavailable": _too_costly(
                "BlockMask tile lists", 20 * tiles + 4 * cells * (layout.partials is not None)
            ),
            "note": _size_note(plain, plain),
        }
    tile = flex_tile_size(layout.block_size)
    if tile % layout.block_size:
        return {
            "unavailable": "A BlockMask from a design held as row runs cannot express its "
            f"{layout.block_size}-token blocks, which straddle Flex's {tile}-token tiles; "
            "download the Design (.pt), which keeps them",
            "note": None,
        }
    # Two int32 lists one entry per key tile wide, the runs and the partial blocks' bits.
    plain = (
        8 * tiles + layout.runs.nbytes + (0 if layout.partials is None else layout.partials.nbytes)
    )
    return {"unavailable": _too_costly("BlockMask tile lists", LIST_BUILD_BYTES * tiles),
            "note": _size_note(plain, plain)}  # fmt: skip


def _block_level(layout) -> Callable[[str], str | None]:
    """Why a block-level format cannot hold ``layout``: its partial blocks, if any."""

    def why(what: str) -> str | None:
        if layout.partials is None:
            return None
        return (
            f"{what} lists whole blocks, and this design has {layout.n_partial:,} partial blocks "
            "(token masks inside blocks) it cannot express; download the FlexAttention BlockMask "
            "or the Design (.pt), which keep them"
        )

    return why


def _dense_only(layout) -> Callable[[str], str | None]:
    """Why a format holding a dense ``[heads, q_blocks, k_blocks]`` grid cannot hold
    ``layout``: it is held as row runs, past the cells a grid may have."""

    def why(what: str) -> str | None:
        if layout.runs is None:
            return None
        h, m, n = layout.shape
        return (
            f"{what} a dense [heads, q_blocks, k_blocks] grid, and this design's {h} x {m:,} x "
            f"{n:,} blocks ({layout.cells:,} cells) are past the {MAX_LAYOUT_CELLS:,} one may hold "
            "here; download the CSR (row_ptr, col_idx) or the Design (.pt), which list its "
            "blocks"
        )

    return why


def _not_whole(what: str, layout) -> str | None:
    """Why a format of whole-block sequences cannot hold ``layout``'s token lengths."""
    if layout.seq_q is None and layout.seq_k is None:
        return None
    return (
        f"{what} cover whole blocks, and this design's {layout.seq_len_q} x {layout.seq_len_k} "
        f"tokens end inside its last blocks of {layout.block_size}"
    )


def _lengths_note(layout) -> str | None:
    """That a block-level file does not keep token lengths inside the last blocks."""
    if layout.seq_q is None and layout.seq_k is None:
        return None
    return (
        f"Blocks only: the {layout.seq_len_q} x {layout.seq_len_k} token lengths (inside the last "
        "blocks) are not kept; the Design (.pt) keeps them."
    )


def _causal_note(design: Design) -> str | None:
    """What a causal design's file of a format without a causal flag leaves out."""
    if not design.causal:
        return None
    return (
        "Carries no causal flag: whoever reads it applies q ≥ k inside the blocks (the Design "
        "(.pt), JSON and BlockMask files keep it)."
    )


def _notes(*notes: str | None) -> str | None:
    return " ".join(note for note in notes if note) or None


def _too_costly(what: str, memory: int) -> str | None:
    """Why a download is not offered when making it would take more than its memory budget."""
    if memory <= MAX_EXPORT_BYTES:
        return None
    return (
        f"the {what} of this design would take about {bytes_text(memory)} to make, more than "
        f"{bytes_text(MAX_EXPORT_BYTES)}; download the Design (.pt) and convert it in a script"
    )


def _size_note(plain_bytes: int, unpacked_bytes: int) -> str | None:
    """What to know about a tensor file whose plain form would pass an upload's limit."""
    if plain_bytes + ARCHIVE_BYTES <= MAX_FILE_BYTES:
        return None
    if unpacked_bytes > MAX_UNPACKED_BYTES:
        return (
            f"Too large to load back here ({bytes_text(unpacked_bytes)} unpacked); load the "
            "Design (.pt) instead."
        )
    return (
        f"Deflated: it loads back here if it stays within {bytes_text(MAX_FILE_BYTES)} (a "
        "sparse design's does); the Design (.pt) always does."
    )


def csr_tensors(design: Design, dtype: torch.dtype = torch.int64) -> dict[str, Any]:
    """``to_csr`` of the layout, with what it takes to read it back (``from_csr``)."""
    row_ptr, col_idx = to_csr(design.layout, dtype=dtype)
    return {
        "row_ptr": row_ptr,
        "col_idx": col_idx,
        "n_k_blocks": design.layout.n_k_blocks,
        "block_size": design.layout.block_size,
    }


def _torch_bytes(content: Any) -> bytes:
    """``torch.save`` of ``content``, deflated when plain it would pass an upload's limit (the
    plain archive then spills to a temporary file rather than being held in memory)."""
    with tempfile.SpooledTemporaryFile(max_size=SPOOL_BYTES) as archive:
        torch.save(content, archive)
        size = archive.tell()
        archive.seek(0)
        return deflated(archive) if size > MAX_FILE_BYTES else archive.read()
