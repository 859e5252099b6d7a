"""How a layout was made, as a value that rebuilds it exactly: pattern steps, then manual edits.

``build()`` starts from an empty ``[n_heads, n_q_blocks, n_k_blocks]`` layout, applies each
``RecipeStep`` to its heads in order (the pattern is generated for those heads only, so a per-head
parameter has one value per listed head), then replays the edits. ``seq_q`` and ``seq_k`` are
the token lengths when the last block row or column is cut short (``None``: whole blocks); a
token pattern (``designer.patterns``, family ``token``) makes partial blocks at them, steps
combine token by token where partial blocks meet, and edits act on whole blocks
(``designer.edit``). Random patterns take a ``seed``
parameter, so the same recipe always gives the same layout. ``to_dict`` / ``recipe_from_dict``
carry it through JSON and ``.pt`` files; reading checks every key, name, range and parameter.

Every recipe reads back: one past a limit of the readers (its estimated build time, its size in
a file, its number of edits) is refused when made, and ``with_edit`` flattens a recipe rather
than pass one (``recipe_size``), so painting never makes a design that cannot be saved.

A recipe past a dense grid (more than ``RUNS_CELLS`` cells: 32 heads x 128K tokens and up) is
built as row runs instead, from patterns made as runs, its estimates counted in runs
(``recipe_runs``); its layout is held as runs and never made dense.

>>> from designer.edit import EditOp, Row
>>> recipe = Recipe(2, 4, 4, 64, steps=(RecipeStep("causal"),))
>>> recipe.with_edit(EditOp("clear", Row(0), heads=(1,))).build().blocks.sum().item()
19
"""

from __future__ import annotations

import functools
import numbers
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field, fields, replace
from typing import Any

import numpy as np
import torch

from designer.block_runs import BlockRuns
from designer.cache import LruCache
from designer.edit import (
    Bitmap,
    CopyHead,
    Edit,
    EditOp,
    Shape,
    Transpose,
    apply_edit,
    check_heads,
    edit_from_dict,
    edited_partials,
    fit_heads,
)
from designer.layout import MAX_BLOCK_SIZE, Layout
from designer.mask_mod import (
    CHUNK_PAIRS,
    NS_PER_BOUNDED_BLOCK,
    check_evaluation,
    evaluation_cost,
)
from designer.partials import row_bytes
from designer.patterns.registry import PATTERNS, make_pattern, pattern_runs, token_bounds
from designer.recipe_cost import (
    COPY_NS,
    RecipeCost,
    RecipeTooLarge,
    build_bytes,
    check_budget,
    copy_ns,
    edit_bytes,
    edit_ns,
    step_bytes,
    step_ns,
)
from designer.recipe_replay import replay_edit
from designer.recipe_runs import RunsBound, edit_runs_cost, replay_edit_runs, step_runs_cost
from designer.recipe_size import check_size, compact, edit_size, snapshot_edits, step_size
from designer.threads import one_thread
from designer.validate import (
    MAX_LAYOUT_CELLS,
    check_choice,
    check_float,
    check_int,
    check_keys,
    check_layout_shape,
    check_run_counts,
    check_runs_shape,
    error_context,
    token_length,
)

#: How a step's pattern meets the blocks its heads already have.
COMBINES = ("replace", "union", "intersect", "subtract")
#: Most steps and edits a recipe may hold (files users upload are read against these).
MAX_STEPS = 256
MAX_EDITS = 10_000
#: Most items in one list-valued parameter, and the longest string parameter.
MAX_PARAM_ITEMS = 4096
MAX_PARAM_CHARS = 200
#: Recipes of more cells are built as row runs (``recipe_runs``): past a dense grid.
RUNS_CELLS = MAX_LAYOUT_CELLS


# --------------------------------------------------------------------------- parameters
def _freeze(name: str, value: Any, depth: int = 0) -> Any:
    """A JSON-plain value made immutable: lists (up to two levels) become tuples."""
    if value is None or isinstance(value, (bool, np.bool_)):
        return None if value is None else bool(value)
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return check_float(name, value)
    if isinstance(value, str):
        if len(value) > MAX_PARAM_CHARS:
            raise ValueError(f"{name} must have at most {MAX_PARAM_CHARS} characters")
        return value
    if isinstance(value, (list, tuple, np.ndarray)) and depth < 2:
        if len(value) > MAX_PARAM_ITEMS:
            raise ValueError(f"{name} must have at most {MAX_PARAM_ITEMS} items, got {len(value)}")
        return tuple(_freeze(f"{name}[{i}]", item, depth + 1) for i, item in enumerate(value))
    raise TypeError(
        f"{name} must be a number, string, bool, None or a list of them (two levels at most), "
        f"got {type(value).__name__}"
    )


def _thaw(value: Any) -> Any:
    return [_thaw(item) for item in value] if isinstance(value, tuple) else value


class Params(Mapping[str, Any]):
    """Read-only, hashable pattern parameters holding JSON values only (lists become tuples)."""

    __slots__ = ("_items",)

    def __init__(self, params: Mapping[str, Any] | None = None) -> None:
        params = {} if params is None else params
        if not isinstance(params, Mapping):
            raise TypeError(f"params must be a dict, got {type(params).__name__}")
        for key in params:
            if not isinstance(key, str):
                raise TypeError(f"params names must be strings, got {key!r}")
        self._items = {key: _freeze(f"params[{key!r}]", params[key]) for key in sorted(params)}

    def __getitem__(self, key: str) -> Any:
        return self._items[key]

    def __iter__(self) -> Iterator[str]:
        return iter(self._items)

    def __len__(self) -> int:
        return len(self._items)

    def __hash__(self) -> int:
        return hash(tuple(self._items.items()))

    def __repr__(self) -> str:
        return f"Params({self._items!r})"

    def to_plain(self) -> dict[str, Any]:
        """The parameters as a JSON-ready dict (tuples back to lists)."""
        return {key: _thaw(value) for key, value in self._items.items()}


# --------------------------------------------------------------------------- steps
@dataclass(frozen=True)
class RecipeStep:
    """Generate ``pattern`` with ``params`` for ``heads`` (``None``: all) and ``combine`` it in."""

    pattern: str
    params: Mapping[str, Any] = field(default_factory=Params)
    heads: tuple[int, ...] | None = None
    combine: str = "replace"

    def __post_init__(self) -> None:
        check_choice("pattern", self.pattern, tuple(PATTERNS))
        params = Params(self.params)
        for name in params:
            PATTERNS[self.pattern].param(name)  # raises naming the allowed parameters
        object.__setattr__(self, "params", params)
        if self.heads is not None:
            object.__setattr__(self, "heads", check_heads("heads", self.heads))
        check_choice("combine", self.combine, COMBINES)

    def to_dict(self) -> dict[str, Any]:
        return {
            "pattern": self.pattern,
            "params": self.params.to_plain(),
            "heads": None if self.heads is None else list(self.heads),
            "combine": self.combine,
        }


def _check_items(name: str, values: Any, limit: int) -> list | tuple:
    """Check that ``values`` is a list of at most ``limit`` steps or edits."""
    if not isinstance(values, (list, tuple)):
        raise TypeError(f"{name} must be a list, got {type(values).__name__}")
    if len(values) > limit:
        raise RecipeTooLarge(f"{name} must have at most {limit} items, got {len(values)}")
    return values


def _edited_shape(index: int, op: Any, shape: Shape) -> Shape:
    """The layout shape after ``edits[index]``, checking that it is an edit that fits ``shape``."""
    if not isinstance(op, (EditOp, CopyHead, Transpose)):
        raise TypeError(
            f"edits[{index}] must be an EditOp, CopyHead or Transpose, got {type(op).__name__}"
        )
    with error_context(f"edits[{index}]"):
        return op.output_shape(shape)


#: Generated step patterns kept for the next build (cells; a cell is one byte), and how long:
#: changing one step of a large design (a seed, say) then regenerates that step alone.
STEP_CACHE_CELLS = 256 << 20
STEP_CACHE_SECONDS = 15 * 60
_STEPS = LruCache(STEP_CACHE_CELLS, size=lambda made: made.nbytes if isinstance(
    made, BlockRuns) else made.blocks.numel() + (
    made.partials.nbytes if made.partials is not None else 0),
    ttl_seconds=STEP_CACHE_SECONDS)  # fmt: skip


def clear_step_cache() -> None:
    """Forget the step patterns kept (for measurements of a build from nothing)."""
    _STEPS.clear()


def _step_layout(
    step: RecipeStep, n_heads: int, n_q: int, n_k: int, block_size: int, seq: tuple | None
) -> Layout | BlockRuns:
    """The ``[n_heads, n_q, n_k]`` layout of one step, generated once per its arguments
    (read-only: builds combine it into their own grid); ``seq`` the token lengths, or
    ``None`` for the step's row runs (``pattern_runs``)."""
    token = PATTERNS[step.pattern].family == "token"
    key = (step.pattern, step.params, n_heads, n_q, n_k, block_size, seq if token else None,
           seq is None)  # fmt: skip
    params = step.params.to_plain()
    if seq is None:
        return _STEPS.get(key, lambda: pattern_runs(step.pattern, n_heads, n_q, n_k, params))
    lengths = {"seq_q": seq[0], "seq_k": seq[1]} if token else {}
    return _STEPS.get(
        key, lambda: make_pattern(step.pattern, n_heads, n_q, n_k, block_size, params, **lengths)
    )


def _combined(current: Layout | BlockRuns, made: Layout | BlockRuns, how: str) -> Any:
    """``current`` combined with ``made`` (two layouts, or two ``BlockRuns``: one algebra)."""
    if how == "union":
        return current.union(made)
    if how == "intersect":
        return current.intersection(made)
    if how == "subtract":
        return current.difference(made)
    return made


def _combine(current: torch.Tensor, made: torch.Tensor, how: str) -> torch.Tensor:
    if how == "union":
        return current | made
    if how == "intersect":
        return current & made
    if how == "subtract":
        return current & ~made
    return made


# --------------------------------------------------------------------------- recipes
@dataclass(frozen=True)
class Recipe:
    """Shape, block size and token lengths, the pattern steps, then the edits: everything
    ``build()`` needs."""

    n_heads: int
    n_q_blocks: int
    n_k_blocks: int
    block_size: int
    steps: tuple[RecipeStep, ...] = ()
    edits: tuple[Edit, ...] = ()
    seq_q: int | None = None
    seq_k: int | None = None

    def __post_init__(self) -> None:
        shape = check_runs_shape(self.n_heads, self.n_q_blocks, self.n_k_blocks)
        as_runs = shape[0] * shape[1] * shape[2] > RUNS_CELLS
        if not as_runs:
            check_layout_shape(*shape)
        for name, value in zip(("n_heads", "n_q_blocks", "n_k_blocks"), shape, strict=True):
            object.__setattr__(self, name, value)
        block_size = check_int("block_size", self.block_size, low=1, high=MAX_BLOCK_SIZE)
        object.__setattr__(self, "block_size", block_size)
        for name, count in (("seq_q", shape[1]), ("seq_k", shape[2])):
            length = token_length(name, getattr(self, name), count, block_size)
            object.__setattr__(self, name, None if length == count * block_size else length)
        seq = self.token_lengths
        steps = tuple(_check_items("steps", self.steps, MAX_STEPS))
        for i, step in enumerate(steps):
            if not isinstance(step, RecipeStep):
                raise TypeError(f"steps[{i}] must be a RecipeStep, got {type(step).__name__}")
            fit_heads(f"steps[{i}].heads", step.heads or (), self.n_heads)
        ns, chars, values, transient, bound = 0, 0, 0, 0, RunsBound()
        for i, step in enumerate(steps):
            heads = self.n_heads if step.heads is None else len(step.heads)
            if as_runs:
                with error_context(f"steps[{i}] ({step.pattern})"):
                    *step_cost, bound = step_runs_cost(
                        step.pattern, step.params, heads, shape, step.combine, bound
                    )
            elif PATTERNS[step.pattern].family == "token":
                with error_context(f"steps[{i}] ({step.pattern})"):
                    step_cost = token_step_cost(step, heads, shape, block_size, seq)
            else:
                step_cost = (step_ns(step.pattern, step.params, heads, *shape[1:]),
                             step_bytes(step.pattern, step.params, heads, *shape[1:]))  # fmt: skip
            ns += step_cost[0]
            transient = max(transient, step_cost[1])
            size = step_size(step)
            chars, values = chars + size[0] + 1, values + size[1] + 1
        edits = tuple(_check_items("edits", self.edits, MAX_EDITS))
        edits = tuple(compact(op) if isinstance(op, EditOp) else op for op in edits)
        for i, op in enumerate(edits):
            new_shape = _edited_shape(i, op, shape)
            if as_runs:
                with error_context(f"edits[{i}]"):
                    edit_ns_, edit_bytes_, bound = edit_runs_cost(op, shape, bound)
            else:
                edit_ns_, edit_bytes_ = edit_ns(op, shape), edit_bytes(op, shape)
            ns += edit_ns_
            transient = max(transient, edit_bytes_)
            size = edit_size(op)
            chars, values = chars + size[0] + 1, values + size[1] + 1
            shape = new_shape
        transposes = sum(isinstance(op, Transpose) for op in edits)
        cost = RecipeCost(ns, transposes, chars, transient, values, tuple(bound))
        check_budget(*_build_estimate(cost, shape, as_runs), runs=as_runs)
        check_size(chars, values)
        object.__setattr__(self, "steps", steps)
        object.__setattr__(self, "edits", edits)
        self.__dict__["_shape_after_edits"] = shape  # what the next edit must fit
        self.__dict__["_cost"] = cost
        self.__dict__["_as_runs"] = as_runs

    @property
    def token_lengths(self) -> tuple[int, int]:
        """``(seq_q, seq_k)`` in tokens: the given lengths, or whole blocks."""
        return (
            self.n_q_blocks * self.block_size if self.seq_q is None else self.seq_q,
            self.n_k_blocks * self.block_size if self.seq_k is None else self.seq_k,
        )

    def build(self) -> Layout:
        """The layout this recipe makes (built once, then shared: layouts are immutable)."""
        return self._layout

    @property
    def as_runs(self) -> bool:
        """Whether this recipe is built as row runs (past a dense grid, ``recipe_runs``)."""
        return self.__dict__["_as_runs"]

    @functools.cached_property
    def _layout(self) -> Layout:
        """Steps and edits applied in place to one working grid, then one ``Layout`` made (or,
        past a dense grid, combined as row runs)."""
        with one_thread():
            return self._built_runs() if self.as_runs else self._built()

    def _built_runs(self) -> Layout:
        """Steps made as row runs and combined by the runs algebra, then the edits painted as
        runs (``recipe_runs``): no dense grid at any point, one ``Layout`` at the end."""
        runs = BlockRuns.empty(self.n_heads, self.n_q_blocks, self.n_k_blocks)
        for i, step in enumerate(self.steps):
            heads = None if step.heads is None else list(step.heads)
            with error_context(f"steps[{i}] ({step.pattern})"):
                made = _step_layout(
                    step, self.n_heads if heads is None else len(heads), self.n_q_blocks,
                    self.n_k_blocks, self.block_size, None,
                )  # fmt: skip
                if heads is None:
                    runs = _combined(runs, made, step.combine)
                else:
                    runs = runs.with_heads(heads, _combined(runs.select_heads(heads), made,
                                                            step.combine))  # fmt: skip
                check_run_counts(runs.nnz, runs.n_runs)
        for i, op in enumerate(self.edits):
            with error_context(f"edits[{i}]"):
                runs = replay_edit_runs(runs, op)
                check_run_counts(runs.nnz, runs.n_runs)
        return Layout(runs, self.block_size, None, *self.token_lengths)

    def _built(self) -> Layout:
        """Block-level steps combine in place on one grid; where partial blocks take part, the
        step combines token by token through ``Layout`` (``_combined``)."""
        b, seq = self.block_size, self.token_lengths
        blocks = torch.zeros(self.n_heads, self.n_q_blocks, self.n_k_blocks, dtype=torch.bool)
        partials = None
        for i, step in enumerate(self.steps):
            heads = slice(None) if step.heads is None else list(step.heads)
            with error_context(f"steps[{i}] ({step.pattern})"):
                made = _step_layout(
                    step, self.n_heads if step.heads is None else len(step.heads),
                    self.n_q_blocks, self.n_k_blocks, b, seq,
                )  # fmt: skip
            if made.partials is None and partials is None:
                blocks[heads] = _combine(blocks[heads], made.blocks, step.combine)
                continue
            current = Layout(blocks, b, partials, *seq)
            made = Layout(made.blocks, b, made.partials, *seq)
            if step.heads is None:
                current = _combined(current, made, step.combine)
            else:
                part = _combined(current.select_heads(heads), made, step.combine)
                current = current.with_heads(heads, part)
            blocks, partials = current.blocks.clone(), current.partials
        for op in self.edits:
            partials = edited_partials(partials, op, tuple(blocks.shape), b)
            blocks = replay_edit(blocks, op)
            if isinstance(op, Transpose):
                seq = seq[::-1]
        return Layout(blocks, b, partials, *seq)

    def with_step(self, step: RecipeStep) -> Recipe:
        """The same recipe with one more pattern step (before the edits)."""
        return replace(self, steps=(*self.steps, step))

    def with_edit(self, op: Edit) -> Recipe:
        """The same recipe with one more edit at the end.

        Only ``op`` is checked (against the shape the earlier edits leave), and if this recipe was
        built, the new one starts from that layout plus ``op`` instead of rebuilding, so painting
        stays cheap however long the edit list grows. When one more edit would pass a limit of
        the readers (build time, size in a file, number of edits), the recipe flattens first
        (``flattened``), and if even that is too large, into a snapshot of the layout with
        ``op`` applied: the design is kept exactly, its steps and edits become its layout. A
        recipe past a dense grid has no snapshot (its bitmaps would be the grid): the edit
        past its limits is refused (``RecipeTooLarge``) and the recipe stays as it was.
        """
        op = compact(op)
        try:
            return self._extended(op)
        except RecipeTooLarge:
            if self.as_runs:  # past a dense grid there is no flat form: the limit stands
                raise
        try:
            return self.flattened()._extended(op)
        except RecipeTooLarge:
            return _snapshot(_edited(self.build(), op, self.as_runs))

    def _extended(self, op: Edit) -> Recipe:
        edits = tuple(_check_items("edits", (*self.edits, op), MAX_EDITS))
        before = self.__dict__["_shape_after_edits"]
        shape = _edited_shape(len(self.edits), op, before)
        cost, (chars, values) = self.__dict__["_cost"], edit_size(op)
        if self.as_runs:
            op_ns, op_bytes, bound = edit_runs_cost(op, before, RunsBound(*cost.runs))
        else:
            op_ns, op_bytes, bound = edit_ns(op, before), edit_bytes(op, before), RunsBound()
        cost = RecipeCost(
            cost.ns + op_ns,
            cost.transposes + isinstance(op, Transpose),
            cost.chars + chars + 1,
            max(cost.transient_bytes, op_bytes),
            cost.values + values + 1,
            tuple(bound),
        )
        check_budget(*_build_estimate(cost, shape, self.as_runs), runs=self.as_runs)
        check_size(cost.chars, cost.values)
        extended = object.__new__(Recipe)  # fields already checked: no __post_init__ again
        extended.__dict__.update(
            {f.name: getattr(self, f.name) for f in fields(self)},
            edits=edits,
            _shape_after_edits=shape,
            _cost=cost,
            _as_runs=self.as_runs,
        )
        if "_layout" in self.__dict__:
            extended.__dict__["_layout"] = _edited(self._layout, op, self.as_runs)
        return extended

    @property
    def flat(self) -> bool:
        """Whether this recipe is a snapshot of a layout: no steps, only ``set`` bitmaps."""
        return not self.steps and all(
            isinstance(op, EditOp) and op.action == "set" and isinstance(op.region, Bitmap)
            for op in self.edits
        )

    def flattened(self) -> Recipe:
        """The recipe of this one's layout alone: no steps, its blocks as ``set`` bitmaps
        (``recipe_size.snapshot_edits``), the same layout."""
        return _snapshot(self.build())

    @property
    def cost(self) -> RecipeCost:
        """What building this recipe is estimated to take (``recipe_cost``)."""
        return self.__dict__["_cost"]

    @property
    def shape_after_edits(self) -> tuple[int, int, int]:
        """The shape of the layout this recipe builds (a transpose swaps the grid)."""
        return self.__dict__["_shape_after_edits"]

    @property
    def build_ns(self) -> int:
        """The estimated nanoseconds of ``build()`` from scratch, its final copy included."""
        return _build_estimate(self.cost, self.shape_after_edits, self.as_runs)[0]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready dict that ``recipe_from_dict`` reads back to an equal recipe (the token
        lengths only when they are not whole blocks: block-level recipes read as before)."""
        lengths = {key: getattr(self, key) for key in ("seq_q", "seq_k") if getattr(self, key)}
        return {
            "n_heads": self.n_heads,
            "n_q_blocks": self.n_q_blocks,
            "n_k_blocks": self.n_k_blocks,
            "block_size": self.block_size,
            **lengths,
            "steps": [step.to_dict() for step in self.steps],
            "edits": [op.to_dict() for op in self.edits],
        }


def token_step_cost(
    step: RecipeStep, heads: int, shape: Shape, block_size: int, seq: tuple[int, int]
) -> tuple[int, int]:
    """``(nanoseconds, bytes)`` of one token step, from its pass-1 bounds (``token_bounds``,
    cached for the build), refused before those bounds are made when they alone would pass
    the budget."""
    _, n_q, n_k = shape
    check_budget(n_q * n_k * NS_PER_BOUNDED_BLOCK)
    spec = PATTERNS[step.pattern]
    values = {p.name: p.check(step.params.get(p.name, p.default), heads) for p in spec.params}
    bounds = token_bounds(step.pattern, values, block_size, *seq)
    pairs, ns = evaluation_cost(bounds, block_size)
    check_evaluation(pairs, f"pattern {step.pattern!r}")
    partial_bytes = bounds.evaluated_blocks * heads * block_size * row_bytes(block_size)
    ns += n_q * n_k * NS_PER_BOUNDED_BLOCK + heads * n_q * n_k * COPY_NS
    return ns, 16 * min(pairs, CHUNK_PAIRS) + 3 * partial_bytes + heads * n_q * n_k


def _build_estimate(cost: RecipeCost, shape: Shape, as_runs: bool) -> tuple[int, int]:
    """``(nanoseconds, bytes)`` of a whole build: a dense grid adds its final copy and the grid
    itself; runs are counted in ``cost`` already."""
    if as_runs:
        return cost.ns, cost.transient_bytes
    return cost.ns + copy_ns(shape, cost.transposes), build_bytes(shape, cost.transient_bytes)


def _edited(layout: Layout, op: Edit, as_runs: bool) -> Layout:
    """``layout`` after ``op``: on its runs for a recipe past a dense grid."""
    if not as_runs:
        return apply_edit(layout, op)
    runs = replay_edit_runs(layout.to_runs(), op)
    return Layout(runs, layout.block_size, None, layout.seq_q, layout.seq_k)


def _snapshot(layout: Layout) -> Recipe:
    """A flat recipe that builds ``layout`` (already built: it is ``layout`` itself); a layout
    with partial blocks has none (edits paint whole blocks), nor has one past a dense grid
    (its bitmaps would be the grid), so either raises ``RecipeTooLarge``."""
    if layout.cells > RUNS_CELLS:
        raise RecipeTooLarge(
            f"this design's recipe is at its limits (build time, size or edits), and a layout "
            f"of {layout.cells:,} cells, past a dense grid, cannot be flattened into bitmap "
            f"edits; drop some edits or steps"
        )
    if layout.partials is not None:
        raise RecipeTooLarge(
            "this design's recipe is at its limits (build time, size or edits), and its partial "
            "blocks cannot be flattened into edits of whole blocks; drop some edits or steps"
        )
    recipe = Recipe(*layout.shape, layout.block_size, edits=snapshot_edits(layout),
                    seq_q=layout.seq_q, seq_k=layout.seq_k)  # fmt: skip
    recipe.__dict__["_layout"] = layout
    return recipe


def recipe_from_dict(data: Any, *, read_ns: int = 0, build: bool = True) -> Recipe:
    """Read a recipe written by ``Recipe.to_dict()``, checking everything, parameters included.

    Parameters are checked by building the layout once (the registry validates them), so a recipe
    that comes back from here always builds. ``read_ns`` is what reading the file was estimated
    to take: reading and building share one budget, checked before the build. ``build=False``
    skips the build, for a recipe this designer wrote with the layout it built (the caller
    gives it that layout, ``formats.settings.adopt_layout``).
    """
    keys = ("n_heads", "n_q_blocks", "n_k_blocks", "block_size", "steps", "edits")
    check_keys("recipe", data, keys, ("seq_q", "seq_k"))
    steps = _check_items("recipe steps", data["steps"], MAX_STEPS)
    edits = _check_items("recipe edits", data["edits"], MAX_EDITS)
    read_steps = []
    for i, step in enumerate(steps):
        with error_context(f"recipe steps[{i}]"):
            check_keys("step", step, ("pattern", "params", "heads", "combine"))
            read_steps.append(RecipeStep(**step))
    read_edits = []
    for i, op in enumerate(edits):
        with error_context(f"recipe edits[{i}]"):
            read_edits.append(edit_from_dict(op))
    with error_context("recipe"):
        recipe = Recipe(
            data["n_heads"],
            data["n_q_blocks"],
            data["n_k_blocks"],
            data["block_size"],
            tuple(read_steps),
            tuple(read_edits),
            data.get("seq_q"),
            data.get("seq_k"),
        )
        check_budget(read_ns + recipe.build_ns)
        if build:
            recipe.build()
    return recipe
