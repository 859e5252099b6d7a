"""The model design file: a ``ModelDesign`` as one ``torch.save`` file.

Layout of the file (version 1)::

    {"format": "blocksparse-model-design", "version": 1, "name": str, "n_layers": int,
     "groups": int64 [G, 3] tensor of (first layer, last layer, design index),
     "designs": [the dict of a .pt design file (pt_file.design_content), ...]}

Each distinct design is stored once, as its own design file would store it; groups refer to
them by index. Reading trusts nothing, as every reader here: bounded bytes and pickle
(``torch_file``), every key and value checked, layout shapes added up against
``MAX_MODEL_CELLS`` before any is unpacked, and the recipes' estimates added up against one
build budget (``recipe_cost``) before any is built, so a file costs what one design may cost to
read, whatever it holds.

>>> import io, torch
>>> from designer.design import Design
>>> from designer.layout import Layout
>>> from designer.model_design import ModelDesign
>>> design = Design(Layout(torch.ones(1, 2, 2, dtype=torch.bool), 16), name="dense")
>>> model = ModelDesign.uniform("tiny", 12, design)
>>> read_model_file(model_file_bytes(model)) == model
True
"""

from __future__ import annotations

import io
import os
from collections.abc import Mapping
from typing import IO, Any

import torch

from designer.formats.pt_file import (
    MAX_FILE_BYTES,
    design_content,
    design_from_content,
    recipe_estimate_ns,
)
from designer.formats.settings import check_version
from designer.formats.torch_file import (
    MAX_PICKLE_BYTES,
    PathOrFile,
    check_archive,
    file_tensor,
    read_torch_file,
)
from designer.model_design import MAX_LAYERS, MAX_MODEL_DESIGNS, LayerGroup, ModelDesign
from designer.recipe_cost import check_budget
from designer.threads import one_thread
from designer.validate import (
    MAX_LAYOUT_CELLS,
    capped,
    check_int,
    check_int_list,
    check_keys,
    error_context,
)

FORMAT = "blocksparse-model-design"
VERSION = 1
#: Most blocks all the designs of one model file may hold together (memory: one byte each).
MAX_MODEL_CELLS = 2 * MAX_LAYOUT_CELLS
_KEYS = ("format", "version", "name", "n_layers", "groups", "designs")


def model_file_bytes(model: ModelDesign) -> bytes:
    """The bytes of ``model``'s file; ``ValueError`` (nothing written) if a reader would refuse
    them (past ``MAX_FILE_BYTES`` or ``MAX_MODEL_CELLS``)."""
    if not isinstance(model, ModelDesign):
        raise TypeError(f"model must be a ModelDesign, got {type(model).__name__}")
    designs = list(model.designs)
    cells = sum(design.layout.blocks.numel() for design in designs)
    if cells > MAX_MODEL_CELLS:
        raise ValueError(
            f"the model's designs hold {cells:,} blocks together, more than the "
            f"{MAX_MODEL_CELLS:,} a model file may; use fewer distinct designs or smaller ones"
        )
    index = [next(i for i, d in enumerate(designs) if d is g.design or d == g.design)
             for g in model.groups]  # fmt: skip
    groups = torch.tensor(
        [[g.first, g.last, i] for g, i in zip(model.groups, index, strict=True)], dtype=torch.int64
    )
    content = {
        "format": FORMAT,
        "version": VERSION,
        "name": model.name,
        "n_layers": model.n_layers,
        "groups": groups,
        "designs": [design_content(design) for design in designs],
    }
    buffer = io.BytesIO()
    torch.save(content, buffer)
    data = buffer.getvalue()
    check_archive(data, MAX_FILE_BYTES, "model design file")
    if len(data) > MAX_FILE_BYTES:
        raise ValueError(
            f"model design file would be {len(data):,} bytes, more than the {MAX_FILE_BYTES:,} "
            "a reader takes"
        )
    return data


def save_model_design(model: ModelDesign, path_or_file: str | os.PathLike | IO[bytes]) -> None:
    """Write ``model``'s file to a path or a binary file object (checked first: see
    ``model_file_bytes``)."""
    data = model_file_bytes(model)
    if isinstance(path_or_file, (str, os.PathLike)):
        with open(path_or_file, "wb") as file:
            file.write(data)
    elif hasattr(path_or_file, "write"):
        path_or_file.write(data)
    else:
        raise TypeError(
            "path_or_file must be a path or a binary file object, "
            f"got {type(path_or_file).__name__}"
        )


def read_model_file(
    path_or_file: PathOrFile, *, max_bytes: int = MAX_FILE_BYTES, rebuild_recipe: bool = True
) -> ModelDesign:
    """The model design in a file ``model_file_bytes`` wrote, from bytes, a path or a binary
    file object; ``ValueError`` (message capped) saying what is wrong with anything else.
    ``rebuild_recipe=False`` is for files this designer wrote itself (see ``pt_file``)."""
    try:
        with one_thread():
            content = read_torch_file(path_or_file, max_bytes, "model design file",
                                      MAX_PICKLE_BYTES)  # fmt: skip
            with error_context("model design file", as_value_error=True):
                return _model(content, rebuild_recipe)
    except (ValueError, TypeError) as error:
        raise ValueError(capped(str(error))) from error
    except RecursionError as error:
        raise ValueError("model design file nests its values too deeply") from error
    except MemoryError as error:
        raise ValueError("model design file needs more memory than a model may take") from error


def _model(content: Any, rebuild_recipe: bool) -> ModelDesign:
    check_keys("model design", content, _KEYS)
    check_version("model design", content, FORMAT, (VERSION,))
    n_layers = check_int("n_layers", content["n_layers"], low=1, high=MAX_LAYERS)
    stored = content["designs"]
    if not isinstance(stored, list) or not 1 <= len(stored) <= MAX_MODEL_DESIGNS:
        raise ValueError(
            f"designs must be a list of 1 to {MAX_MODEL_DESIGNS} designs, got "
            f"{len(stored) if isinstance(stored, list) else type(stored).__name__}"
        )
    cells = sum(_cells(i, item) for i, item in enumerate(stored))
    if cells > MAX_MODEL_CELLS:
        raise ValueError(
            f"designs hold {cells:,} blocks together, more than the limit of {MAX_MODEL_CELLS:,}"
        )
    spent_ns = 0
    for i, item in enumerate(stored):  # the recipes' estimates together, before any is built
        with error_context(f"designs[{i}]"):
            spent_ns += recipe_estimate_ns(item)
            check_budget(spent_ns)
    designs = []
    for i, item in enumerate(stored):
        with error_context(f"designs[{i}]"):
            designs.append(design_from_content(item, rebuild_recipe=rebuild_recipe))
    return ModelDesign(content["name"], n_layers, _groups(content["groups"], designs, n_layers))


def _cells(index: int, item: Any) -> int:
    """Blocks of one stored design, from its layout's shape alone (nothing unpacked)."""
    with error_context(f"designs[{index}]"):
        if not isinstance(item, Mapping) or not isinstance(item.get("layout"), Mapping):
            raise TypeError("design must be a design file's dict with a packed 'layout'")
        shape = check_int_list("layout shape", item["layout"].get("shape"), min_len=3, max_len=3)
        cells = 1
        for size in shape:
            cells *= check_int("layout size", size, low=1, high=MAX_LAYOUT_CELLS)
        return cells


def _groups(value: Any, designs: list, n_layers: int) -> tuple[LayerGroup, ...]:
    tensor = file_tensor("groups", value)
    if tensor.dtype != torch.int64 or tensor.dim() != 2 or tensor.shape[1] != 3:
        raise ValueError(
            f"groups must be an int64 [G, 3] tensor of (first, last, design), got {tensor.dtype} "
            f"{list(tensor.shape)}"
        )
    if not 1 <= tensor.shape[0] <= n_layers:
        raise ValueError(f"groups must hold 1 to {n_layers} groups, got {tensor.shape[0]}")
    groups = []
    for i, (first, last, index) in enumerate(tensor.tolist()):
        with error_context(f"groups[{i}]"):
            index = check_int("design index", index, low=0, high=len(designs) - 1)
            groups.append(LayerGroup(first, last, designs[index]))
    return tuple(groups)
