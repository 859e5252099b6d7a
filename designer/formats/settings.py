"""The design settings every file format carries, and the checks shared by the loaders."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import torch

from designer.design import Design, legacy_name
from designer.edit import Transpose
from designer.layout import Layout
from designer.model_shape import model_shape_from_dict
from designer.recipe import Recipe
from designer.validate import check_int, shown

#: The keys of a design's settings every file version carries (``design_settings``), and the
#: model shape that later versions add (older files read with the default shape).
SETTING_KEYS = ("name", "causal", "start_width", "created", "modified")
SHAPE_KEY = "model_shape"


def design_settings(design: Design) -> dict[str, Any]:
    """A design's name, causal flag, start width, timestamps and model shape, as plain values."""
    if not isinstance(design, Design):
        raise TypeError(f"design must be a Design, got {type(design).__name__}")
    settings = {key: getattr(design, key) for key in SETTING_KEYS}
    return {**settings, SHAPE_KEY: design.model_shape.to_dict()}


def design_from_settings(
    settings: Mapping[str, Any], layout: Layout, recipe: Recipe | None
) -> Design:
    """A design from settings read out of a file (``Design`` checks every value; an older
    file's long name is shortened, ``legacy_name``)."""
    values = {key: settings[key] for key in SETTING_KEYS}
    values["name"] = legacy_name(values["name"])
    if SHAPE_KEY in settings:
        values[SHAPE_KEY] = model_shape_from_dict(settings[SHAPE_KEY])
    return Design(layout, recipe=recipe, **values)


def check_version(
    name: str, data: Mapping[str, Any], format_name: str, versions: tuple[int, ...]
) -> int:
    """Check a file's ``format`` and ``version`` before reading anything; return the version."""
    if data.get("format") != format_name:
        raise ValueError(f"{name} format must be {format_name!r}, got {shown(data.get('format'))}")
    found = check_int(f"{name} version", data.get("version"), low=1)
    if found not in versions:
        readable = " and ".join(map(str, versions))
        if len(versions) > 2:
            readable = ", ".join(map(str, versions[:-1])) + f" and {versions[-1]}"
        raise ValueError(
            f"{name} version {found} is not supported; this designer reads version {readable}"
        )
    return found


def check_rebuilds(recipe: Recipe, layout: Layout) -> None:
    """Raise unless ``recipe`` builds exactly ``layout`` (shape, block size and every block)."""
    built = recipe.build()
    if built.shape != layout.shape or built.block_size != layout.block_size:
        raise ValueError(
            f"recipe builds a {list(built.shape)} layout with block_size {built.block_size}, "
            f"but the layout is {list(layout.shape)} with block_size {layout.block_size}"
        )
    if built.runs is not None or layout.runs is not None:  # past a dense grid: by their runs
        if built.to_runs() != layout.to_runs():
            differ = built.to_runs().difference(layout.to_runs()).nnz
            differ += layout.to_runs().difference(built.to_runs()).nnz
            raise ValueError(
                f"recipe does not rebuild the layout: {differ:,} of {layout.cells:,} blocks differ"
            )
    elif not torch.equal(built.blocks, layout.blocks):  # counted only when they differ
        differ = int(np.count_nonzero(built.to_numpy() != layout.to_numpy()))
        raise ValueError(
            f"recipe does not rebuild the layout: {differ} of {layout.blocks.numel()} blocks differ"
        )
    if (built.seq_len_q, built.seq_len_k) != (layout.seq_len_q, layout.seq_len_k):
        raise ValueError(
            f"recipe builds {built.seq_len_q} x {built.seq_len_k} tokens, but the layout has "
            f"{layout.seq_len_q} x {layout.seq_len_k}"
        )
    if built.partials != layout.partials:
        raise ValueError(
            f"recipe does not rebuild the layout's token masks: it makes {built.n_partial} "
            f"partial blocks, the layout has {layout.n_partial}, and they differ"
        )


def adopt_layout(recipe: Recipe, layout: Layout) -> None:
    """Take ``layout`` as what ``recipe`` builds, without building it: for files this designer
    wrote itself, whose writer checked that the recipe rebuilds the layout (``check_rebuilds``).
    Shape and block size are still checked."""
    shape = recipe.shape_after_edits
    lengths = recipe.token_lengths
    if sum(isinstance(op, Transpose) for op in recipe.edits) % 2:
        lengths = lengths[::-1]
    if lengths != (layout.seq_len_q, layout.seq_len_k):
        raise ValueError(
            f"recipe builds {lengths[0]} x {lengths[1]} tokens, but the layout has "
            f"{layout.seq_len_q} x {layout.seq_len_k}"
        )
    if shape != layout.shape or recipe.block_size != layout.block_size:
        raise ValueError(
            f"recipe builds a {list(shape)} layout with block_size {recipe.block_size}, "
            f"but the layout is {list(layout.shape)} with block_size {layout.block_size}"
        )
    recipe.__dict__["_layout"] = layout
