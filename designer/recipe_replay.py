"""Edits replayed in place on a working ``[H, M, N]`` bool grid, for ``Recipe.build``.

``edit.apply_edit`` returns a new ``Layout`` per edit (a copy and a check of the whole grid),
which is right for one edit in the editor and far too slow for 10,000 of them from a file. Here
each edit writes only the cells it paints (its region in its heads), a transpose is a view, and
one ``Layout`` is made at the end; ``recipe_cost`` counts exactly this work.
"""

from __future__ import annotations

import numpy as np
import torch

from designer.edit import Bitmap, CopyHead, Edit, EditOp, Transpose


def replay_edit(blocks: torch.Tensor, op: Edit) -> torch.Tensor:
    """Apply ``op`` to ``blocks`` in place and return the grid (a view after a transpose).

    ``op`` must fit ``blocks`` (``Recipe`` checks every edit's shape when it is made).

    >>> from designer.edit import Row
    >>> replay_edit(torch.zeros(1, 2, 2, dtype=torch.bool), EditOp("set", Row(1))).int().tolist()
    [[[0, 0], [1, 1]]]
    """
    if isinstance(op, Transpose):
        return blocks.transpose(1, 2)
    if isinstance(op, CopyHead):
        blocks[list(op.targets)] = blocks[op.source].clone()  # a target may be the source
        return blocks
    assert isinstance(op, EditOp)
    heads = slice(None) if op.heads is None else list(op.heads)
    if isinstance(op.region, Bitmap):  # only the box is touched
        box = blocks[(slice(None), *op.region.box)]
        box[heads] = _painted(box[heads], op.region.box_mask(), op.action)
        return blocks
    where = op.region.index(blocks.shape[1], blocks.shape[2])
    if op.heads is None:
        index = (slice(None), *where)
    else:
        heads = torch.from_numpy(np.array(op.heads, dtype=np.int64))  # 30x torch.tensor's speed
        advanced = any(
            isinstance(part, torch.Tensor) and part.dtype != torch.bool for part in where
        )
        if advanced:  # cells: pair every head with every listed block
            index = (heads[:, None], *(part[None, :] for part in where))
        elif isinstance(where[0], torch.Tensor):  # a band's mask: one head at a time
            for head in op.heads:
                blocks[head] = _painted(blocks[head], where[0], op.action)
            return blocks
        else:
            index = (heads, *where)
    if op.action == "set":
        blocks[index] = True
    elif op.action == "clear":
        blocks[index] = False
    else:
        blocks[index] = ~blocks[index]
    return blocks


def _painted(head: torch.Tensor, mask: torch.Tensor, action: str) -> torch.Tensor:
    if action == "set":
        return head | mask
    if action == "clear":
        return head & ~mask
    return head ^ mask
