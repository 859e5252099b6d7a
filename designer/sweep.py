"""The designs a sweep measures: the current pattern at other lengths or densities, and random
layouts of the same density to compare with.

- Length: the recipe rebuilt at each query length (keys scaled alike), as the setup does.
- Density: the recipe's size parameters (windows, random blocks, global blocks, probabilities...)
  multiplied by each factor; factor 1 is the current design itself. Settings a pattern refuses
  are skipped with a note; factors that give the same layout are kept once.
- Random: for each density point, a layout with the same number of active blocks in every head,
  placed uniformly at random (seeded), so structure is the only difference.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

import torch

from designer.changes import Shape, reshape
from designer.design import Design
from designer.layout import Layout
from designer.patterns.registry import PATTERNS
from designer.recipe import RecipeStep
from designer.validate import check_float, check_int, check_int_list

SWEEP_LENGTHS = (1024, 2048, 4096, 8192, 16384, 32768)
DENSITY_FACTORS = (0.25, 0.5, 1.0, 2.0, 4.0)
#: Parameters that set how much a pattern attends: scaling them scales the density.
DENSITY_PARAMS = frozenset(
    {
        "window_blocks", "sink_blocks", "blocks_per_row", "probability", "chunk_blocks",
        "prefix_blocks", "radius", "num_local_blocks", "num_random_blocks",
        "num_sliding_window_blocks", "num_global_blocks", "local_window_blocks",
    }
)  # fmt: skip


@dataclass(frozen=True)
class SweepPoint:
    """One design of a sweep: ``kind`` is "current", "length", "scaled" or "random"."""

    kind: str
    label: str
    design: Design
    value: float  # the length in tokens, or the density factor


def length_points(design: Design, lengths: tuple[int, ...]) -> tuple[list[SweepPoint], list[str]]:
    """The design rebuilt at each query length (the current one included); and notes on the
    lengths that could not be built."""
    lengths = tuple(check_int_list("lengths", list(lengths), low=1, min_len=1))
    layout = design.layout
    points = [SweepPoint("current", f"current ({layout.seq_len_q})", design, layout.seq_len_q)]
    notes = []
    for length in sorted(set(lengths) - {layout.seq_len_q}):
        block = layout.block_size
        seq_k = max(1, length * layout.seq_len_k // layout.seq_len_q)  # need not be whole blocks
        try:
            shape = Shape(length, seq_k, block, layout.n_heads)
            rebuilt, _ = reshape(design, shape)
        except (ValueError, TypeError) as error:
            notes.append(f"length {length}: {error}")
            continue
        points.append(SweepPoint("length", f"S={length}", rebuilt, length))
    return sorted(points, key=lambda p: p.value), notes


def scaled_step(step: RecipeStep, factor: float) -> RecipeStep:
    """``step`` with its density parameters multiplied by ``factor`` (rounded, within bounds)."""
    spec = PATTERNS[step.pattern]
    params = dict(step.params.to_plain())
    for param in spec.params:
        if param.name not in DENSITY_PARAMS:
            continue
        value = params.get(param.name, param.default)
        params[param.name] = _scaled(value, factor, param.kind, param.low, param.high)
    return replace(step, params=params)


def _scaled(value: Any, factor: float, kind: str, low: float | None, high: float | None) -> Any:
    if isinstance(value, (list, tuple)):
        return [_scaled(item, factor, kind, low, high) for item in value]
    scaled = value * factor
    if kind != "float":
        scaled = int(scaled + 0.5)
    if low is not None:
        scaled = max(scaled, low if kind == "float" else int(low))
    if high is not None:
        scaled = min(scaled, high if kind == "float" else int(high))
    return scaled


def density_points(
    design: Design, factors: tuple[float, ...]
) -> tuple[list[SweepPoint], list[str]]:
    """The design with its density parameters scaled by each factor (1 is the design itself);
    and notes on the factors that were refused or repeated another layout."""
    factors = tuple(check_float("factor", f, low=1e-3, high=1e3) for f in factors)
    points = [SweepPoint("current", "current", design, 1.0)]
    if design.recipe is None:
        return points, ["the design has no recipe, so there are no parameters to scale"]
    recipe = design.recipe
    if not any(p.name in DENSITY_PARAMS for s in recipe.steps for p in PATTERNS[s.pattern].params):
        return points, ["no parameter of this recipe sets its density"]
    seen = {design.layout.nnz: "current"}
    notes = []
    for factor in sorted(set(factors) - {1.0}):
        steps = tuple(scaled_step(step, factor) for step in recipe.steps)
        try:
            new_recipe = replace(recipe, steps=steps)
            layout = new_recipe.build()
        except (ValueError, TypeError) as error:
            notes.append(f"factor {factor:g}: {error}")
            continue
        label = f"×{factor:g}"
        if layout.nnz in seen:
            notes.append(f"factor {factor:g} gives the same density as {seen[layout.nnz]}")
            continue
        seen[layout.nnz] = label
        points.append(
            SweepPoint("scaled", label, design.with_layout(layout, recipe=new_recipe), factor)
        )
    return sorted(points, key=lambda p: p.design.layout.nnz), notes


def random_like(layout: Layout, seed: int = 0) -> Layout:
    """A layout of the same shape with the same number of active blocks in each head, placed
    uniformly at random.

    >>> base = Layout(torch.eye(4, dtype=torch.bool)[None], 16)
    >>> random_like(base, seed=1).blocks.sum().item()
    4
    """
    seed = check_int("seed", seed, low=0)
    gen = torch.Generator().manual_seed(seed)
    heads, rows, cols = layout.shape
    blocks = torch.zeros(heads, rows * cols, dtype=torch.bool)
    for head, count in enumerate(layout.blocks.sum(dim=(1, 2)).tolist()):
        blocks[head, torch.randperm(rows * cols, generator=gen)[:count]] = True
    return Layout(blocks.reshape(heads, rows, cols), layout.block_size)


def random_points(points: list[SweepPoint], seed: int = 0) -> list[SweepPoint]:
    """A random layout of the same per-head counts for each point (designs without a recipe)."""
    return [
        SweepPoint(
            "random",
            f"random like {p.label}",
            replace(
                p.design.with_layout(random_like(p.design.layout, seed)), name=f"random {p.label}"
            ),
            p.value,
        )
        for p in points
    ]
