"""The ``.pt`` design file: ``torch.save`` of a dict of plain values and one uint8 tensor.

Layout of the file (version 3)::

    {"format": "blocksparse-design", "version": 3,
     "layout": {"bits": uint8 [ceil(H * M * N / 8)], "shape": [H, M, N]},   # see packing.py
     "block_size": int, "seq_len_q": M * block_size, "seq_len_k": N * block_size,
     "causal": bool, "start_width": int | None, "name": str, "created": str, "modified": str,
     "model_shape": {"batch": int, "heads": int | None, "kv_heads": int | None,
                     "head_dim": int},
     "recipe": uint8 [n] tensor of the UTF-8 JSON text of Recipe.to_dict() | None}

Version 4 is version 3 with a layout held as row runs (past a dense grid's size) stored by its
runs (``packing.pack_runs``); designs of dense layouts are still written as version 3.
Version 3 adds ``model_shape`` (version 2 reads with the default shape) and, for token-exact
layouts (partial blocks, or lengths that are not whole blocks) only,
``"partials": {"index": int32 [P, 3], "bits": uint8 [P, block, ceil(block / 8)]} | None``
(``designer.partials``); its ``seq_len_q``/``seq_len_k`` may end inside the last block.

The layout is bit-packed, so the largest design (4 × 4096 × 4096 blocks) is an 8 MiB file. The
recipe travels as JSON bytes in a tensor, so the pickle stays a few KiB whatever the edits
(torch unpickles in Python; json parses in C). Version 1 stored ``"layout"`` as an int64
``[H, M, N]`` tensor (512 MiB at that size) and ``"recipe"`` as a dict, and still loads.

Reading (``designer.formats.read_design_file``, ``load_design``) trusts nothing: bounded bytes, a
plain zip, ``weights_only`` unpickling (``torch_file``), then shape, bits, values, sizes,
sequence lengths and the recipe (it must rebuild the stored layout exactly).
"""

from __future__ import annotations

import io
import json
import os
from collections.abc import Mapping
from typing import IO, Any

import torch

from designer.design import Design
from designer.formats.json_recipe import MAX_JSON_CHARS, json_values, parse_json
from designer.formats.packing import (
    pack_blocks,
    pack_partials,
    pack_runs,
    read_partials,
    unpack_blocks,
    unpack_runs,
)
from designer.formats.settings import (
    SETTING_KEYS,
    SHAPE_KEY,
    adopt_layout,
    check_rebuilds,
    check_version,
    design_from_settings,
    design_settings,
)
from designer.formats.torch_file import check_archive, file_tensor
from designer.layout import Layout
from designer.partials import MAX_PARTIAL_BYTES, MAX_PARTIALS
from designer.recipe import Recipe, recipe_from_dict
from designer.recipe_cost import READ_NS_PER_VALUE
from designer.validate import MAX_LAYOUT_CELLS, check_int, check_keys, error_context

FORMAT = "blocksparse-design"
VERSION = 3
#: The version of a design whose layout is held as runs.
RUNS_VERSION = 4
#: Versions read: 1 (int64 layout), 2 (bit-packed layout), 3 (with the model shape, and with
#: partial blocks for token-exact layouts) and 4 (3 with the layout as runs).
READ_VERSIONS = (1, 2, 3, 4)
#: Largest file read: a bit-packed layout of the largest size (8 MiB), room for a recipe as
#: large as the largest JSON recipe and for the most partial blocks a layout may hold (their
#: bits and index). The upload limit in ``.streamlit/config.toml`` is this.
MAX_FILE_BYTES = MAX_LAYOUT_CELLS // 8 + MAX_JSON_CHARS + MAX_PARTIAL_BYTES + 12 * MAX_PARTIALS


def save_design(design: Design, path_or_file: str | os.PathLike | IO[bytes]) -> None:
    """Write ``design`` as a version-3 ``.pt`` design file to a path or a binary file object.

    The file is made and checked in memory first: a design that ``load_design`` would refuse (a
    recipe that does not rebuild the layout, a file past the readers' limits) raises
    ``ValueError`` saying why, and nothing is written.

    >>> import io
    >>> buffer = io.BytesIO()
    >>> save_design(Design(Layout.zeros(4, 4096, 4096, 16), name="largest"), buffer)
    >>> len(buffer.getvalue()) <= 8 * 2**20 + 4096
    True
    """
    if not isinstance(path_or_file, (str, os.PathLike)) and not hasattr(path_or_file, "write"):
        raise TypeError(
            "path_or_file must be a path or a binary file object, "
            f"got {type(path_or_file).__name__}"
        )
    data = design_file_bytes(design)
    if isinstance(path_or_file, (str, os.PathLike)):
        with open(path_or_file, "wb") as file:
            file.write(data)
    else:
        path_or_file.write(data)


def design_file_bytes(design: Design) -> bytes:
    """The bytes of ``design``'s ``.pt`` file, refused (``ValueError``) if a reader would be."""
    buffer = io.BytesIO()
    torch.save(design_content(design), buffer)
    data = buffer.getvalue()
    check_archive(data, MAX_FILE_BYTES, "design file")
    if len(data) > MAX_FILE_BYTES:
        raise ValueError(
            f"design file would be {len(data):,} bytes, more than the {MAX_FILE_BYTES:,} a "
            f"reader takes"
        )
    return data


def design_content(design: Design) -> dict[str, Any]:
    """The dict a ``.pt`` design file holds (a model design file holds one per design); a
    recipe that does not rebuild the layout is refused (``ValueError``)."""
    settings = design_settings(design)
    layout = design.layout
    recipe = None
    if design.recipe is not None:
        with error_context("design", as_value_error=True):
            check_rebuilds(design.recipe, layout)
        recipe = _recipe_tensor(design.recipe)
    as_runs = layout.runs is not None
    content = {
        "format": FORMAT,
        "version": RUNS_VERSION if as_runs else VERSION,
        "layout": pack_runs(layout) if as_runs else pack_blocks(layout),
        "block_size": layout.block_size,
        "seq_len_q": layout.seq_len_q,
        "seq_len_k": layout.seq_len_k,
        **settings,
        "recipe": recipe,
    }
    if not layout.whole_blocks:
        content["partials"] = pack_partials(layout)
    return content


def _recipe_tensor(recipe: Recipe) -> torch.Tensor:
    text = json.dumps(recipe.to_dict(), separators=(",", ":"))
    if len(text) > MAX_JSON_CHARS:
        raise ValueError(
            f"design recipe would be {len(text):,} characters, more than the {MAX_JSON_CHARS:,} "
            f"a reader takes"
        )
    return torch.frombuffer(bytearray(text.encode("utf-8")), dtype=torch.uint8)


def _read_recipe(value: Any, version: int, build: bool) -> Recipe:
    if version == 1:
        return recipe_from_dict(value, build=build)
    tensor = file_tensor("recipe", value)
    if tensor.dtype != torch.uint8 or tensor.dim() != 1:
        raise ValueError(f"recipe must be a uint8 [n] tensor of JSON text, got {tensor.dtype}")
    text = tensor.numpy().tobytes()
    read_ns = json_values(text) * READ_NS_PER_VALUE
    return recipe_from_dict(parse_json(text, "recipe"), read_ns=read_ns, build=build)


def recipe_estimate_ns(content: Mapping[str, Any]) -> int:
    """What reading and building the recipe of a design file's dict is estimated to take
    (nothing is built; 0 without a recipe): a file of several designs checks their sum first."""
    if not isinstance(content, Mapping) or content.get("recipe") is None:
        return 0
    version = check_version("design file", content, FORMAT, READ_VERSIONS)
    recipe = _read_recipe(content["recipe"], version, False)
    return recipe.build_ns


def design_from_content(content: Mapping[str, Any], *, rebuild_recipe: bool = True) -> Design:
    """The design in the dict ``torch.load`` read from a design file, every value checked;
    without ``rebuild_recipe``, the recipe is taken to build the file's layout (its shape is
    checked, not its blocks: for files this designer wrote, see ``settings.adopt_layout``)."""
    version = check_version("design file", content, FORMAT, READ_VERSIONS)
    sizes = ("layout", "block_size", "seq_len_q", "seq_len_k")
    required = ("format", "version", *sizes, *SETTING_KEYS, "recipe")
    check_keys("design file", content, (*required, SHAPE_KEY) if version >= 3 else required,
               (SHAPE_KEY, "partials") if version >= 3 else (SHAPE_KEY,))  # fmt: skip
    tokens = "partials" in content
    if version == 1:
        blocks = file_tensor("layout", content["layout"])
    elif version == RUNS_VERSION:
        blocks = unpack_runs(content["layout"])
    else:
        blocks = unpack_blocks(content["layout"])
    layout = Layout(blocks, content["block_size"])  # checks the shape before copying anything
    lengths = []
    for key, count, what in (
        ("seq_len_q", layout.n_q_blocks, "q_blocks"),
        ("seq_len_k", layout.n_k_blocks, "k_blocks"),
    ):
        found = check_int(key, content[key], low=1)
        whole = count * layout.block_size
        if found != whole and not (tokens and whole - layout.block_size < found < whole):
            inside = " (or, with partial blocks, inside the last block)" * bool(tokens)
            raise ValueError(
                f"{key} = {found} does not match the layout: {count} {what} x "
                f"block_size {layout.block_size} = {whole}{inside}"
            )
        lengths.append(found)
    if tokens:
        with error_context("partials"):
            partials = read_partials(content["partials"])
            layout = Layout(blocks, layout.block_size, partials, *lengths)
    recipe = None
    if content["recipe"] is not None:
        recipe = _read_recipe(content["recipe"], version, build=rebuild_recipe)
        (check_rebuilds if rebuild_recipe else adopt_layout)(recipe, layout)
    return design_from_settings(content, layout, recipe)
