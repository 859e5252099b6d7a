"""The ``.pt`` design file: ``torch.save`` of a dict of one tensor and plain values.

Layout of the file (version 1)::

    {"format": "blocksparse-design", "version": 1,
     "layout": int64 [H, M, N] of 0/1, "block_size": int, "seq_len_q": M * block_size,
     "seq_len_k": N * block_size, "causal": bool, "start_width": int | None, "name": str,
     "created": str, "modified": str, "recipe": Recipe.to_dict() | None}

Loading trusts nothing in the file. In order: the raw size is bounded (``max_bytes``); the bytes
must be a zip archive (what ``torch.save`` writes) whose unpacked size is bounded too, which stops
zip bombs; ``torch.load(weights_only=True)`` unpickles only tensors and plain values, so a file
asking to call a function is refused without running it; the layout's shape is checked before any
copy (a tensor may declare 10**9 elements over a one-element storage); then values, sizes, sequence
lengths and the recipe (it must rebuild the stored layout exactly).

A bare ``[H, M, N]`` or ``[M, N]`` 0/1 tensor (DeepSpeed's ``make_layout`` output) loads too. It
carries no block size: pass ``block_size=`` (default 16, DeepSpeed's default block).
``read_design_file`` says which of the two a file was (``LoadedDesign.bare``) and takes the block
size for a bare tensor only, so an upload that may be either is read once, whatever its blocks.
"""

from __future__ import annotations

import io
import os
import re
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass
from typing import IO, Any

import torch

from designer.design import Design
from designer.formats.settings import (
    SETTING_KEYS,
    check_rebuilds,
    check_version,
    design_from_settings,
    design_settings,
)
from designer.layout import MAX_BLOCK_SIZE, Layout
from designer.recipe import recipe_from_dict
from designer.validate import MAX_LAYOUT_CELLS, check_int, check_keys, error_context

FORMAT = "blocksparse-design"
VERSION = 1
#: Tokens per block of a bare tensor when ``block_size`` is not given (DeepSpeed's default).
BARE_BLOCK_SIZE = 16
#: Largest file, raw or unpacked: an int64 layout of the largest size plus room for the rest.
MAX_FILE_BYTES = 8 * MAX_LAYOUT_CELLS + (1 << 20)

PathOrFile = str | os.PathLike | bytes | bytearray | IO[bytes]


@dataclass(frozen=True)
class LoadedDesign:
    """What a ``.pt`` file held: the design, and whether it was a bare layout tensor.

    A bare tensor's design has no recipe and takes its block size from the reader.
    """

    design: Design
    bare: bool


def save_design(design: Design, path_or_file: str | os.PathLike | IO[bytes]) -> None:
    """Write ``design`` as a version-1 ``.pt`` design file to a path or a binary file object.

    >>> buffer = io.BytesIO()
    >>> save_design(Design(Layout.zeros(1, 2, 2, 64), name="empty"), buffer)
    >>> load_design(buffer.getvalue()).name
    'empty'
    """
    settings = design_settings(design)
    if not isinstance(path_or_file, (str, os.PathLike)) and not hasattr(path_or_file, "write"):
        raise TypeError(
            "path_or_file must be a path or a binary file object, "
            f"got {type(path_or_file).__name__}"
        )
    layout = design.layout
    content = {
        "format": FORMAT,
        "version": VERSION,
        "layout": layout.to_int64(),
        "block_size": layout.block_size,
        "seq_len_q": layout.seq_len_q,
        "seq_len_k": layout.seq_len_k,
        **settings,
        "recipe": None if design.recipe is None else design.recipe.to_dict(),
    }
    torch.save(content, path_or_file)


def load_design(
    path_or_file: PathOrFile, *, block_size: int | None = None, max_bytes: int = MAX_FILE_BYTES
) -> Design:
    """Read a ``.pt`` design file (or a bare layout tensor) from bytes, a path or a file object.

    ``block_size`` is the block size of a bare tensor (default 16); a design file carries its own,
    and a different ``block_size`` is refused. Raises ``ValueError`` saying what is wrong with
    anything invalid (``TypeError`` for wrong arguments, ``OSError`` if a path cannot be read).
    """
    if block_size is not None:
        check_int("block_size", block_size, low=1)
    loaded = _load(path_or_file, block_size or BARE_BLOCK_SIZE, max_bytes)
    found = loaded.design.layout.block_size
    if block_size is not None and not loaded.bare and block_size != found:
        raise ValueError(
            f"block_size={block_size} was given, but the design file says block_size={found}"
        )
    return loaded.design


def read_design_file(
    path_or_file: PathOrFile,
    *,
    bare_block_size: int = BARE_BLOCK_SIZE,
    max_bytes: int = MAX_FILE_BYTES,
) -> LoadedDesign:
    """Read a file that may be a design file or a bare tensor, and say which it was.

    ``bare_block_size`` is used for a bare tensor only; a design file keeps its own block size.
    Raises as ``load_design`` does.

    >>> buffer = io.BytesIO()
    >>> torch.save(torch.eye(2, dtype=torch.int64), buffer)
    >>> loaded = read_design_file(buffer.getvalue(), bare_block_size=64)
    >>> loaded.bare, loaded.design.layout.shape, loaded.design.layout.block_size
    (True, (1, 2, 2), 64)
    """
    bare_block_size = check_int("bare_block_size", bare_block_size, low=1, high=MAX_BLOCK_SIZE)
    return _load(path_or_file, bare_block_size, max_bytes)


def _load(path_or_file: PathOrFile, bare_block_size: int, max_bytes: int) -> LoadedDesign:
    max_bytes = check_int("max_bytes", max_bytes, low=1)
    data = _read_bytes(path_or_file, max_bytes)
    _check_archive(data, max_bytes)
    content = _unpickle(data)
    if isinstance(content, torch.Tensor):
        with error_context("bare layout tensor", as_value_error=True):
            return LoadedDesign(Design(Layout.from_array(content, bare_block_size)), bare=True)
    if not isinstance(content, Mapping):
        raise ValueError(
            f"design file must hold a design dict or a layout tensor, got {type(content).__name__}"
        )
    with error_context("design file", as_value_error=True):
        return LoadedDesign(_design_from_content(content), bare=False)


def _read_bytes(path_or_file: PathOrFile, max_bytes: int) -> bytes:
    """The file's bytes, never reading more than ``max_bytes + 1`` of them."""
    if isinstance(path_or_file, (bytes, bytearray)):
        data = bytes(path_or_file)
    elif isinstance(path_or_file, (str, os.PathLike)):
        size = os.stat(path_or_file).st_size
        if size > max_bytes:
            raise ValueError(f"design file is {size:,} bytes, more than the limit of {max_bytes:,}")
        with open(path_or_file, "rb") as file:
            data = file.read(max_bytes + 1)
    elif isinstance(path_or_file, io.TextIOBase):
        raise TypeError("file object must be opened in binary mode ('rb'), got a text file")
    elif hasattr(path_or_file, "read"):
        data = path_or_file.read(max_bytes + 1)
        if not isinstance(data, bytes):
            raise TypeError(f"file object must give bytes, read() gave {type(data).__name__}")
    else:
        raise TypeError(
            f"path_or_file must be bytes, a path or a binary file object, "
            f"got {type(path_or_file).__name__}"
        )
    if len(data) > max_bytes:
        raise ValueError(f"design file is more than the limit of {max_bytes:,} bytes")
    return data


def _check_archive(data: bytes, max_bytes: int) -> None:
    """Refuse anything but a complete zip archive whose contents unpack to at most ``max_bytes``."""
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            unpacked = sum(entry.file_size for entry in archive.infolist())
    except zipfile.BadZipFile as error:
        raise ValueError(
            f"design file is not a torch file, or it is truncated: torch.save writes a zip "
            f"archive and none was found ({error})"
        ) from error
    if unpacked > max_bytes:
        raise ValueError(
            f"design file unpacks to {unpacked:,} bytes, more than the limit of {max_bytes:,}"
        )


def _unpickle(data: bytes) -> Any:
    try:
        return torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    except Exception as error:  # torch raises many kinds; each becomes a ValueError saying why
        text = str(error)
        if "Weights only load failed" in text:
            asked = re.search(r"GLOBAL ([\w.]+)", text)
            detail = re.search(r"WeightsUnpickler error:\s*(.+)", text)
            if asked:
                what = f"it asks for {asked.group(1)}"
            else:
                what = f"its pickle is not plain data ({detail.group(1) if detail else text})"
            raise ValueError(
                f"design file refused: {what}; only tensors and plain values may be loaded, "
                f"since anything else could run code"
            ) from error
        first_line = text.splitlines()[0] if text else "no details"
        raise ValueError(
            f"design file could not be read by torch.load: {type(error).__name__}: {first_line}"
        ) from error


def _design_from_content(content: Mapping[str, Any]) -> Design:
    check_version("design file", content, FORMAT, VERSION)
    sizes = ("layout", "block_size", "seq_len_q", "seq_len_k")
    check_keys("design file", content, ("format", "version", *sizes, *SETTING_KEYS, "recipe"))
    tensor = content["layout"]
    if not isinstance(tensor, torch.Tensor):
        raise TypeError(f"layout must be a tensor, got {type(tensor).__name__}")
    layout = Layout(tensor, content["block_size"])  # checks the shape before copying anything
    for key, count, what in (
        ("seq_len_q", layout.n_q_blocks, "q_blocks"),
        ("seq_len_k", layout.n_k_blocks, "k_blocks"),
    ):
        found = check_int(key, content[key], low=1)
        if found != count * layout.block_size:
            raise ValueError(
                f"{key} = {found} does not match the layout: {count} {what} x "
                f"block_size {layout.block_size} = {count * layout.block_size}"
            )
    recipe = None
    if content["recipe"] is not None:
        recipe = recipe_from_dict(content["recipe"])
        check_rebuilds(recipe, layout)
    return design_from_settings(content, layout, recipe)
