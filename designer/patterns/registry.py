"""The pattern registry: every pattern the app and recipes can make, by name, with its parameters.

Each module of this package holds its patterns whole: the function and, in ``SPECS``, each
pattern's name, label, rule, parameters (defaults, ranges, help) and builder. The registry finds
the modules itself, so adding a pattern is adding one module; modules whose names start with
``_`` hold helpers. ``PATTERNS`` maps a name to its ``PatternSpec`` (what the app turns into
widgets) in the specs' ``order``; ``make_pattern`` checks a name and parameters and returns the
``Layout``. Random patterns take a ``seed``, so a recipe that stores it regenerates the same layout.

>>> make_pattern("sliding_window", 2, 8, 8, 64, {"window_blocks": [2, 4]}).shape
(2, 8, 8)
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from designer.block_runs import BlockRuns
from designer.cache import LruCache
from designer.layout import MAX_BLOCK_SIZE, Layout
from designer.mask_mod import TileBounds, layout_of_bounds, tile_bounds
from designer.patterns.specs import ParamSpec, PatternSpec
from designer.threads import one_thread
from designer.validate import (
    MAX_LAYOUT_CELLS,
    check_choice,
    check_int,
    check_layout_shape,
    check_runs_shape,
    token_length,
)

__all__ = ["PATTERNS", "ParamSpec", "PatternSpec", "make_pattern", "pattern_runs"]

#: The modules of this package that hold no patterns of their own.
NOT_PATTERNS = ("registry", "specs")


def collect_specs(package: str, folder: Path) -> dict[str, PatternSpec]:
    """Every ``SPECS`` entry of the modules in ``folder`` (package ``package``), by name, in order.

    Raises ``ImportError`` for a module that declares no ``SPECS`` (a pattern that would be
    missing from the app without a word) and ``ValueError`` for two patterns with one name or
    one order.
    """
    specs: list[PatternSpec] = []
    for module in pkgutil.iter_modules([str(folder)]):
        if module.name.startswith("_") or module.name in NOT_PATTERNS:
            continue
        declared = getattr(importlib.import_module(f"{package}.{module.name}"), "SPECS", None)
        if not declared or not all(isinstance(spec, PatternSpec) for spec in declared):
            raise ImportError(
                f"{package}.{module.name} must declare SPECS, a tuple of PatternSpec "
                "(a helper module's name starts with '_')"
            )
        specs.extend(declared)
    for key in ("name", "order"):
        values = [getattr(spec, key) for spec in specs]
        if repeated := sorted({str(v) for v in values if values.count(v) > 1}):
            raise ValueError(f"patterns must have distinct {key}s, repeated: {repeated}")
    return {spec.name: spec for spec in sorted(specs, key=lambda spec: spec.order)}


PATTERNS: dict[str, PatternSpec] = collect_specs(__package__, Path(__file__).parent)
#: The patterns that can be made past a dense grid's size, as row runs.
RUNS_PATTERNS = tuple(name for name, spec in PATTERNS.items() if spec.build_runs is not None)


#: Pass-1 bounds of token patterns kept (``token_bounds``): a recipe estimates its cost from
#: them when it is made, and its build then starts from them.
_BOUNDS = LruCache(64 << 20, size=lambda bounds: 2 * bounds.full.numel(), ttl_seconds=15 * 60)


def _frozen(value: Any) -> Any:
    return tuple(map(_frozen, value)) if isinstance(value, (list, tuple)) else value


def token_bounds(
    name: str, params: Mapping[str, Any], block_size: int, seq_q: int, seq_k: int
) -> TileBounds:
    """Which blocks of token pattern ``name`` (its parameters checked) are surely full and which
    need their tokens evaluated, for one head (token patterns are the same on every head)."""
    spec = PATTERNS[name]
    key = (name, _frozen(sorted(params.items())), block_size, seq_q, seq_k)

    def bound() -> TileBounds:
        with one_thread():
            rule = spec.rule(dict(params), seq_q, seq_k)
            return tile_bounds(rule, heads=1, seq_q=seq_q, seq_k=seq_k, block_size=block_size)

    return _BOUNDS.get(key, bound)


def make_pattern(
    name: str,
    n_heads: int,
    n_q_blocks: int,
    n_k_blocks: int,
    block_size: int,
    params: Mapping[str, Any],
    *,
    seq_q: int | None = None,
    seq_k: int | None = None,
) -> Layout:
    """The layout of pattern ``name``; missing parameters take their defaults.

    ``seq_q`` and ``seq_k`` are the token lengths when the last block row or column is cut
    short (default: whole blocks); token patterns are made at them, block patterns ignore them.
    Past ``MAX_LAYOUT_CELLS`` cells the layout is made as row runs, by the patterns of
    ``RUNS_PATTERNS``; the others refuse there, naming those.
    Raises ``ValueError`` for an unknown name (listing the known ones), unknown parameter names,
    values out of range, or a non-square shape for a DeepSpeed pattern; ``TypeError`` for values
    of the wrong type. Python's global ``random`` state is left as it was.
    """
    spec = PATTERNS[check_choice("pattern", name, tuple(PATTERNS))]
    n_heads, n_q_blocks, n_k_blocks = check_runs_shape(n_heads, n_q_blocks, n_k_blocks)
    shape = (n_heads, n_q_blocks, n_k_blocks)
    as_runs = n_heads * n_q_blocks * n_k_blocks > MAX_LAYOUT_CELLS
    if as_runs:
        check_runs_pattern(spec.name, shape)
    else:
        check_layout_shape(n_heads, n_q_blocks, n_k_blocks)
    block_size = check_int("block_size", block_size, low=1, high=MAX_BLOCK_SIZE)
    values = _checked(spec, shape, params)
    if as_runs:
        with one_thread():
            return Layout(spec.build_runs(*shape, values), block_size)
    if spec.rule is None:
        return Layout(spec.build(n_heads, n_q_blocks, n_k_blocks, block_size, values), block_size)
    seq_q = token_length("seq_q", seq_q, n_q_blocks, block_size)
    seq_k = token_length("seq_k", seq_k, n_k_blocks, block_size)
    rule = spec.rule(values, seq_q, seq_k)
    bounds = token_bounds(name, values, block_size, seq_q, seq_k)
    with one_thread():
        return layout_of_bounds(rule, bounds, n_heads, seq_q, seq_k, block_size)


def pattern_runs(
    name: str, n_heads: int, n_q_blocks: int, n_k_blocks: int, params: Mapping[str, Any]
) -> BlockRuns:
    """The blocks of pattern ``name`` as row runs at any size, by a pattern of ``RUNS_PATTERNS``
    (the others refuse, naming those), checked as ``make_pattern`` checks them: what a layout
    past a dense grid is made of, with no dense grid at any size."""
    spec = PATTERNS[check_choice("pattern", name, tuple(PATTERNS))]
    shape = check_runs_shape(n_heads, n_q_blocks, n_k_blocks)
    check_runs_pattern(spec.name, shape)
    values = _checked(spec, shape, params)
    with one_thread():
        return spec.build_runs(*shape, values)


def check_runs_pattern(name: str, shape: tuple[int, int, int]) -> None:
    """Refuse pattern ``name`` past a dense grid unless it is made as row runs, naming those."""
    spec = PATTERNS[name]
    if spec.build_runs is None:
        raise ValueError(
            f"{spec.label} ({spec.name!r}) is made on a dense grid, at most "
            f"{MAX_LAYOUT_CELLS:,} cells, got {shape[0] * shape[1] * shape[2]:,} {list(shape)}; "
            f"past that, use a pattern made as row runs: {', '.join(RUNS_PATTERNS)}"
        )


def _checked(
    spec: PatternSpec, shape: tuple[int, int, int], params: Mapping[str, Any]
) -> dict[str, Any]:
    """Every parameter's checked value (defaults filled in) for a layout of ``shape``."""
    if not isinstance(params, Mapping):
        raise TypeError(f"params must be a mapping of names to values, got {type(params).__name__}")
    allowed = [param.name for param in spec.params]
    unknown = sorted(str(key) for key in params if key not in allowed)
    if unknown:
        raise ValueError(
            f"pattern {spec.name!r} has no parameters {unknown}; allowed: "
            f"{', '.join(allowed) or 'none'}"
        )
    n_heads, n_q_blocks, n_k_blocks = shape
    if spec.square_only and n_q_blocks != n_k_blocks:
        raise ValueError(
            f"{spec.label} ({spec.name!r}) is self-attention: it needs as many query blocks as "
            f"key blocks (DeepSpeed layouts are square), got {n_q_blocks} and {n_k_blocks}"
        )
    return {
        param.name: param.check(params.get(param.name, param.default), n_heads)
        for param in spec.params
    }
