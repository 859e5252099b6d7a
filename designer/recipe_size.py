"""How large a recipe is in a file, and how painting keeps it within what the readers take.

A recipe travels as compact JSON (the ``.pt`` file's recipe tensor, the JSON download), and the
readers refuse text past ``formats.json_recipe.MAX_JSON_CHARS`` characters or ``MAX_JSON_VALUES``
values (counted as commas before anything is parsed: parsing and checking costs about 300 ns a
value). Whatever the app or a script accepts must read back, so a recipe counts both as it grows
(``edit_size``, ``step_size``) and keeps under ``MAX_RECIPE_CHARS`` and ``MAX_RECIPE_VALUES``:

- ``compact`` stores a cell list of more than ``COMPACT_CELLS`` blocks as a ``Bitmap`` of the
  same blocks: a lasso of 0.9M blocks is a few KiB of deflated bits, not 10 MB of pairs;
- ``snapshot_edits`` is a layout as edits of its own, one ``set`` bitmap per distinct head:
  ``Recipe.with_edit`` flattens into it (the steps and edits so far become the layout they
  built) when the next edit would pass a limit. A snapshot of the largest layout, however
  scattered, is at most 11.2 MB of text and builds in about 0.5 s.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np

from designer.edit import Cells, Edit, EditOp
from designer.layout import Layout
from designer.recipe_cost import RecipeTooLarge
from designer.regions import COMPACT_CELLS, Bitmap

#: Most characters of a recipe's compact JSON: 1 MiB under the 16 MiB a JSON file may hold,
#: room for the design's settings and the download's indentation.
MAX_RECIPE_CHARS = 15 << 20
#: Most values (commas + 1) a JSON text may hold: about 0.6 s to parse and check at most.
MAX_JSON_VALUES = 1 << 21
#: Most values of a recipe's JSON, leaving room for the design's settings.
MAX_RECIPE_VALUES = MAX_JSON_VALUES - 4096

_COMPACT = (",", ":")


def edit_size(op: Edit) -> tuple[int, int]:
    """``(characters, commas)`` of ``op`` in a recipe's compact JSON, at most: a bitmap's text
    and a head list are counted, not encoded (either may be long)."""
    data = op.to_dict()
    chars = commas = 0
    region = data.get("region", {})
    if region.get("kind") == "bitmap":
        chars += len(region["deflated"])
        data = {**data, "region": {**region, "deflated": ""}}
    for key in ("heads", "targets"):
        if data.get(key):  # at most as long as its largest number, each: no encoding needed
            chars += len(data[key]) * (len(str(max(data[key]))) + 1)
            commas += len(data[key])
            data = {**data, key: []}
    text = json.dumps(data, separators=_COMPACT)
    return len(text) + chars, text.count(",") + commas


def step_size(step: Any) -> tuple[int, int]:
    """``(characters, commas)`` of a ``RecipeStep`` in a recipe's compact JSON."""
    text = json.dumps(step.to_dict(), separators=_COMPACT)
    return len(text), text.count(",")


def check_size(chars: int, values: int) -> None:
    """Raise ``RecipeTooLarge`` if a recipe of ``chars`` characters and ``values`` values would
    not read back."""
    if chars > MAX_RECIPE_CHARS:
        raise RecipeTooLarge(
            f"recipe would be {chars:,} characters in a file, more than the {MAX_RECIPE_CHARS:,} "
            f"a file may hold; use fewer or smaller edits"
        )
    if values > MAX_RECIPE_VALUES:
        raise RecipeTooLarge(
            f"recipe would hold {values:,} values in a file, more than the {MAX_RECIPE_VALUES:,} "
            f"a file may hold; use fewer edits or heads per edit"
        )


def compact(op: Edit) -> Edit:
    """``op`` with a long cell list stored as a bitmap of the same blocks (else ``op``)."""
    if not isinstance(op, EditOp) or not isinstance(op.region, Cells):
        return op
    if len(op.region.cells) <= COMPACT_CELLS:
        return op
    return EditOp(op.action, Bitmap.of_cells(op.region.array), op.heads)


def snapshot_edits(layout: Layout) -> tuple[EditOp, ...]:
    """Edits that paint ``layout`` onto an empty grid: one ``set`` bitmap per distinct head
    content (``heads=None`` when every head is the same), none for empty heads.

    >>> blocks = torch.eye(3, dtype=torch.bool).expand(2, 3, 3)
    >>> [(op.region.count, op.heads) for op in snapshot_edits(Layout(blocks, 16))]
    [(3, None)]
    """
    heads: dict[bytes, list[int]] = {}
    for head, blocks in enumerate(layout.to_numpy()):
        heads.setdefault(np.packbits(blocks, axis=None).tobytes(), []).append(head)
    edits = []
    for group in heads.values():
        region = Bitmap.of(layout.to_numpy()[group[0]])
        if region is not None:
            every = len(group) == layout.n_heads
            edits.append(EditOp("set", region, None if every else tuple(group)))
    return tuple(edits)
