"""Every change a user can make to a design, as a pure function: a design in, a new design out.

The views call these from callbacks and commit the result to the history; errors are
``ValueError``/``TypeError`` whose message the view shows next to the widget, the current design
untouched. A design's layout is always its recipe's ``build()``; a paint edit extends the built
layout (``Recipe.with_edit``) rather than replaying the whole recipe.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from designer.design import Design, now_iso
from designer.edit import Band, Edit, EditOp, apply_edit
from designer.layout import MAX_BLOCK_SIZE, Layout
from designer.patterns.neighborhood_2d import covering_image
from designer.patterns.packed_documents import covering_documents
from designer.recipe import Recipe, RecipeStep
from designer.validate import MAX_BLOCKS, MAX_HEADS, check_bool, check_int

#: Most tokens on a side the app accepts (the layout size limit bounds it further).
MAX_SEQ_LEN = 1 << 20
_STEP_INDEX = re.compile(r"\bsteps\[(\d+)\]")
#: Widest segmentation start width, in blocks (as ``Design`` allows).
MAX_START_WIDTH = 1 << 16


@dataclass(frozen=True)
class Shape:
    """What the setup widgets describe: sequence lengths in tokens, block size, heads. A length
    need not be whole blocks: its last block is cut short (``Layout.seq_q``).

    >>> Shape(4096, 4096, 64, 8).n_q_blocks, Shape(1000, 1000, 64, 8).n_q_blocks
    (64, 16)
    """

    seq_len_q: int
    seq_len_k: int
    block_size: int
    n_heads: int

    def __post_init__(self) -> None:
        check_int("block size", self.block_size, low=1, high=MAX_BLOCK_SIZE)
        check_int("heads", self.n_heads, low=1, high=MAX_HEADS)
        for name, tokens in (("query tokens", self.seq_len_q), ("key tokens", self.seq_len_k)):
            check_int(name, tokens, low=1, high=MAX_SEQ_LEN)

    @property
    def n_q_blocks(self) -> int:
        return -(-self.seq_len_q // self.block_size)

    @property
    def n_k_blocks(self) -> int:
        return -(-self.seq_len_k // self.block_size)

    @classmethod
    def of(cls, layout: Layout) -> Shape:
        return cls(layout.seq_len_q, layout.seq_len_k, layout.block_size, layout.n_heads)


def reshape(design: Design, shape: Shape) -> tuple[Design, str | None]:
    """Rebuild the recipe at a new shape; returns the design and a note for the user, if any.

    Manual edits that no longer fit the grid are dropped (undo brings them back) rather than
    refusing the new shape; pattern parameters that do not fit raise, naming the parameter.
    """
    if design.recipe is None:
        raise ValueError(
            "this layout was imported without a recipe, so its shape is fixed; "
            "pick a pattern to start a recipe at this shape"
        )
    dims = {
        "n_heads": shape.n_heads,
        "n_q_blocks": shape.n_q_blocks,
        "n_k_blocks": shape.n_k_blocks,
        "block_size": shape.block_size,
        "seq_q": shape.seq_len_q,
        "seq_k": shape.seq_len_k,
    }
    try:
        recipe = replace(design.recipe, **dims)
        note = None
    except (ValueError, TypeError):
        recipe = replace(design.recipe, edits=(), **dims)
        note = (
            f"{len(design.recipe.edits)} manual edit(s) did not fit the new shape and were "
            "dropped; undo brings them back"
        )
    return design.with_layout(recipe.build(), recipe=recipe), note


def rebuild(
    design: Design, steps: tuple[RecipeStep, ...], edits: tuple[Edit, ...] | None = None
) -> Design:
    """The design with new pattern steps, and the edits (by default its own) replayed on top.

    A design imported without a recipe starts one at its shape, replacing the imported blocks.
    """
    base = design.recipe or _empty_recipe(design.layout)
    try:
        recipe = replace(base, steps=steps, edits=base.edits if edits is None else edits)
        layout = recipe.build()
    except (ValueError, TypeError) as error:
        raise type(error)(step_names(str(error))) from error
    return design.with_layout(layout, recipe=recipe)


def step_names(message: str) -> str:
    """A recipe message as the app words it: the API's ``steps[1]`` is the app's "Step 2".

    >>> step_names("steps[1] (sliding_window): window_blocks must be in [1, 64], got 0")
    'Step 2 (sliding_window): window_blocks must be in [1, 64], got 0'
    """
    return _STEP_INDEX.sub(lambda match: f"Step {int(match[1]) + 1}", message)


def fitted_step(
    pattern: str, n_q_blocks: int, *, seq_q: int | None = None, **step: Any
) -> RecipeStep:
    """A new step of ``pattern`` with its default parameters, those that depend on the grid
    (document lengths, image size) fitted to ``n_q_blocks`` (token patterns: to ``seq_q``
    tokens) so that no query row is left out.

    >>> fitted_step("neighborhood_2d", 16).params["height"]
    4
    >>> fitted_step("token_documents", 16, seq_q=1000).params["doc_tokens"]
    (375, 625)
    """
    if fit := _FITTED_DEFAULTS.get(pattern):
        return RecipeStep(pattern, fit(n_q_blocks), **step)
    if fit := _FITTED_TOKENS.get(pattern):
        return RecipeStep(pattern, fit(seq_q or n_q_blocks), **step)
    return RecipeStep(pattern, {}, **step)


def set_step(design: Design, index: int, step: RecipeStep) -> Design:
    """Replace pattern step ``index`` (or add it when ``index`` is one past the last)."""
    steps = list(design.recipe.steps) if design.recipe else []
    index = check_int("step", index, low=0, high=len(steps))
    steps[index : index + 1] = [step]
    return rebuild(design, tuple(steps))


def remove_step(design: Design, index: int) -> Design:
    """Drop pattern step ``index``."""
    steps = list(design.recipe.steps) if design.recipe else []
    index = check_int("step", index, low=0, high=len(steps) - 1)
    del steps[index]
    return rebuild(design, tuple(steps))


def clip_causal(design: Design) -> Design:
    """Clear every block above the diagonal (``col > row``), as an edit the recipe keeps."""
    return edit(design, EditOp("clear", Band(1, max(1, design.layout.n_k_blocks))))


def drop_edits(design: Design) -> Design:
    """The design rebuilt from its patterns alone, without the manual edits."""
    return rebuild(design, design.recipe.steps, edits=()) if design.recipe else design


def edit(design: Design, op: Edit) -> Design:
    """Apply one paint edit to the layout and record it in the recipe."""
    if design.recipe is None:
        return design.with_layout(apply_edit(design.layout, op))
    recipe = design.recipe.with_edit(op)
    return design.with_layout(recipe.build(), recipe=recipe)


def settings(design: Design, *, name: str, causal: bool, start_width: int | None) -> Design:
    """The design with a new name, causal flag or segmentation start width (``None``: auto)."""
    if start_width is not None:
        check_int("segmentation start width", start_width, low=0, high=MAX_START_WIDTH)
    changed = replace(
        design, name=name.strip(), causal=check_bool("causal", causal), start_width=start_width
    )
    return replace(changed, modified=now_iso()) if changed != design else design


_FITTED_DEFAULTS: dict[str, Callable[[int], dict[str, Any]]] = {
    "packed_documents": lambda n: {"doc_blocks": covering_documents(n)},
    "neighborhood_2d": lambda n: dict(zip(("height", "width"), covering_image(n), strict=True)),
}


def _squarest_width(tokens: int) -> int:
    """The width of the squarest canvas of ``tokens`` pixels, rows of whole width."""
    return covering_image(min(tokens, MAX_BLOCKS))[1]


_FITTED_TOKENS: dict[str, Callable[[int], dict[str, Any]]] = {
    "token_documents": lambda n: {"doc_tokens": covering_documents(n)},
    "token_causal_documents": lambda n: {"doc_tokens": covering_documents(n)},
    "token_natten": lambda n: {"width": min(_squarest_width(n), 4096)},
}


def _empty_recipe(layout: Layout) -> Recipe:
    return Recipe(layout.n_heads, layout.n_q_blocks, layout.n_k_blocks, layout.block_size,
                  seq_q=layout.seq_q, seq_k=layout.seq_k)  # fmt: skip
