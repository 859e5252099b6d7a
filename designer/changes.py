"""Every change a user can make to a design, as a pure function: a design in, a new design out.

The views call these from callbacks and commit the result to the history; errors are
``ValueError``/``TypeError`` whose message the view shows next to the widget, the current design
untouched. A design's layout is always its recipe's ``build()``; a paint edit extends the built
layout (``Recipe.with_edit``) rather than replaying the whole recipe.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from typing import Any

from designer.costs import model_heads
from designer.design import Design, now_iso
from designer.edit import Band, Edit, EditOp, apply_edit
from designer.layout import MAX_BLOCK_SIZE, Layout
from designer.model_shape import ModelShape
from designer.patterns.neighborhood_2d import covering_image
from designer.patterns.packed_documents import covering_documents
from designer.patterns.registry import PATTERNS
from designer.recipe import Recipe, RecipeStep
from designer.validate import MAX_BLOCKS, MAX_HEADS, check_bool, check_int

#: Most tokens on a side the app accepts (the layout size limit bounds it further).
MAX_SEQ_LEN = 1 << 20
_STEP_INDEX = re.compile(r"\bsteps\[(\d+)\](?: \((\w+)\))?")
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
        with _step_named():
            recipe = replace(design.recipe, edits=(), **dims)
        note = (
            f"{len(design.recipe.edits)} manual edit(s) did not fit the new shape and were "
            "dropped; undo brings them back"
        )
    shaped = replace(design, model_shape=fitted_model_shape(design.model_shape, shape.n_heads))
    with _step_named():
        return shaped.with_layout(recipe.build(), recipe=recipe), note


@contextlib.contextmanager
def _step_named() -> Iterator[None]:
    """Errors raised inside re-raised with their steps numbered and named as the app does."""
    try:
        yield
    except (ValueError, TypeError) as error:
        raise type(error)(step_names(str(error))) from error


def rebuild(
    design: Design, steps: tuple[RecipeStep, ...], edits: tuple[Edit, ...] | None = None
) -> Design:
    """The design with new pattern steps, and the edits (by default its own) replayed on top.

    A design imported without a recipe starts one at its shape, replacing the imported blocks.
    """
    base = design.recipe or _empty_recipe(design.layout)
    with _step_named():
        recipe = replace(base, steps=steps, edits=base.edits if edits is None else edits)
        layout = recipe.build()
    return design.with_layout(layout, recipe=recipe)


def step_names(message: str) -> str:
    """A recipe message as the app words it: the API's ``steps[1] (sliding_window)`` is the
    app's "Step 2 (Sliding window)", numbered and named as the cards are.

    >>> step_names("steps[1] (sliding_window): window_blocks must be in [1, 64], got 0")
    'Step 2 (Sliding window): window_blocks must be in [1, 64], got 0'
    """

    def named(match: re.Match) -> str:
        pattern = match[2]
        label = f" ({PATTERNS[pattern].label})" if pattern in PATTERNS else ""
        return f"Step {int(match[1]) + 1}{label}"

    return _STEP_INDEX.sub(named, message)


def square_steps(design: Design) -> tuple[str, ...]:
    """Labels of the design's steps whose pattern is self-attention only (DeepSpeed's)."""
    steps = design.recipe.steps if design.recipe else ()
    labels = (PATTERNS[step.pattern].label for step in steps if PATTERNS[step.pattern].square_only)
    return tuple(dict.fromkeys(labels))


def follow_square(design: Design, shape: Shape, moved: str) -> tuple[Shape, str | None]:
    """``shape`` with the other side following the ``moved`` one (``"q"`` or ``"k"``) when the
    design is square and a step needs it square: one edit changes both lengths. Returns the
    shape and a note saying so, if it did.

    >>> from designer.recipe import Recipe
    >>> recipe = Recipe(1, 4, 4, 16, steps=(RecipeStep("deepspeed_dense"),))
    >>> design = Design(recipe.build(), recipe=recipe)
    >>> follow_square(design, Shape(128, 64, 16, 1), "q")[0].seq_len_k
    128
    """
    layout = design.layout
    labels = square_steps(design)
    if not labels or layout.seq_len_q != layout.seq_len_k or moved not in ("q", "k"):
        return shape, None
    tokens = shape.seq_len_q if moved == "q" else shape.seq_len_k
    if shape.seq_len_q == shape.seq_len_k:
        return shape, None
    other = "key" if moved == "q" else "query"
    note = (
        f"{other.capitalize()} tokens follow to {tokens:,}: {', '.join(labels)} is "
        "self-attention (as many query tokens as key tokens)"
    )
    return replace(shape, seq_len_q=tokens, seq_len_k=tokens), note


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
    """Clear every block above the diagonal (``row - col < 0``), as an edit the recipe keeps."""
    return edit(design, EditOp("clear", Band(-max(1, design.layout.n_k_blocks), -1)))


def drop_edits(design: Design) -> Design:
    """The design rebuilt from its patterns alone, without the manual edits."""
    return rebuild(design, design.recipe.steps, edits=()) if design.recipe else design


def edit(design: Design, op: Edit) -> Design:
    """Apply one paint edit to the layout and record it in the recipe."""
    if design.recipe is None:
        return design.with_layout(apply_edit(design.layout, op))
    recipe = design.recipe.with_edit(op)
    return design.with_layout(recipe.build(), recipe=recipe)


def set_model_shape(
    design: Design, *, batch: int, heads: int, kv_heads: int, head_dim: int
) -> Design:
    """The design costed in a model of this shape. ``heads`` equal to the design's own, and
    ``kv_heads`` equal to ``heads``, are kept as "the design's" and "no GQA", so they follow
    the design; a head count the design cannot serve raises, saying which it can."""
    own = design.layout.n_heads
    heads = check_int("heads", heads, low=1, high=MAX_HEADS)
    shape = ModelShape(
        batch=batch,
        heads=None if heads == own else heads,
        kv_heads=None if kv_heads == heads else kv_heads,
        head_dim=head_dim,
    )
    model_heads(design, shape)  # a head count this design can serve
    if shape == design.model_shape:
        return design
    return replace(design, model_shape=shape, modified=now_iso())


def fitted_model_shape(shape: ModelShape, n_heads: int) -> ModelShape:
    """``shape`` for a design of ``n_heads`` heads: query heads it cannot serve (a design of
    several heads serves exactly as many) go back to following the design, and kv heads that
    no longer divide them to none (no GQA)."""
    if n_heads not in (1, shape.query_heads(n_heads)):
        shape = replace(shape, heads=None)
    if shape.query_heads(n_heads) % (shape.kv_heads or 1):
        shape = replace(shape, kv_heads=None)
    return shape


def settings(design: Design, *, name: str, causal: bool, start_width: int | None) -> Design:
    """The design with a new name, causal flag or segmentation start width (``None``: auto)."""
    if start_width is not None:
        check_int("segmentation start width", start_width, low=0, high=MAX_START_WIDTH)
    changed = replace(
        design, name=name.strip(), causal=check_bool("causal", causal), start_width=start_width
    )
    return replace(changed, modified=now_iso()) if changed != design else design


def tokens_text(tokens: int) -> str:
    """A token count as names write it.

    >>> tokens_text(4096), tokens_text(1536), tokens_text(1000)
    ('4k', '1.5k', '1000')
    """
    if tokens % 1024 == 0:
        return f"{tokens // 1024}k"
    return f"{tokens / 1024:g}k" if tokens % 512 == 0 else str(tokens)


def auto_name(design: Design) -> str | None:
    """The name a design gets from what it is: its first pattern and its length ("DeepSpeed
    BigBird 4k", "Sliding window 16k × 4k"); None without a recipe."""
    if design.recipe is None or not design.recipe.steps:
        return None
    label = PATTERNS[design.recipe.steps[0].pattern].label
    sq, sk = design.layout.seq_len_q, design.layout.seq_len_k
    length = tokens_text(sq) if sq == sk else f"{tokens_text(sq)} × {tokens_text(sk)}"
    return f"{label} {length}"


def follow_name(old: Design, new: Design) -> Design:
    """``new`` renamed after what it became when ``old``'s name was the automatic one and the
    change left the name alone: a name the user gave is kept, an automatic one follows the
    pattern and the length (so exports of a design that changed family are named for it)."""
    if new.name != old.name or old.name != auto_name(old):
        return new
    name = auto_name(new)
    return new if name is None or name == new.name else replace(new, name=name)


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
