"""The pattern registry: every pattern the app and recipes can make, by name, with its parameters.

``PATTERNS`` maps a name to its ``PatternSpec`` (what the app turns into widgets); ``make_pattern``
checks a name and parameters and returns the ``Layout``. Random patterns take a ``seed``, so a
recipe that stores it regenerates the same layout.

>>> make_pattern("sliding_window", 2, 8, 8, 64, {"window_blocks": [2, 4]}).shape
(2, 8, 8)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from designer.layout import MAX_BLOCK_SIZE, Layout
from designer.patterns.catalog_deepspeed import DEEPSPEED
from designer.patterns.catalog_generators import GENERATORS
from designer.patterns.specs import ParamSpec, PatternSpec
from designer.validate import check_choice, check_int, check_layout_shape

__all__ = ["PATTERNS", "ParamSpec", "PatternSpec", "make_pattern"]

PATTERNS: dict[str, PatternSpec] = {spec.name: spec for spec, _ in GENERATORS + DEEPSPEED}
_BUILDERS = {spec.name: build for spec, build in GENERATORS + DEEPSPEED}


def make_pattern(
    name: str,
    n_heads: int,
    n_q_blocks: int,
    n_k_blocks: int,
    block_size: int,
    params: Mapping[str, Any],
) -> Layout:
    """The layout of pattern ``name``; missing parameters take their defaults.

    Raises ``ValueError`` for an unknown name (listing the known ones), unknown parameter names,
    values out of range, or a non-square shape for a DeepSpeed pattern; ``TypeError`` for values
    of the wrong type. Python's global ``random`` state is left as it was.
    """
    spec = PATTERNS[check_choice("pattern", name, tuple(PATTERNS))]
    n_heads, n_q_blocks, n_k_blocks = check_layout_shape(n_heads, n_q_blocks, n_k_blocks)
    block_size = check_int("block_size", block_size, low=1, high=MAX_BLOCK_SIZE)
    if not isinstance(params, Mapping):
        raise TypeError(f"params must be a mapping of names to values, got {type(params).__name__}")
    allowed = [param.name for param in spec.params]
    unknown = sorted(str(key) for key in params if key not in allowed)
    if unknown:
        raise ValueError(
            f"pattern {name!r} has no parameters {unknown}; allowed: {', '.join(allowed) or 'none'}"
        )
    if spec.square_only and n_q_blocks != n_k_blocks:
        raise ValueError(
            f"pattern {name!r} needs n_q_blocks == n_k_blocks (DeepSpeed layouts are square), "
            f"got {n_q_blocks} and {n_k_blocks}"
        )
    values = {
        param.name: param.check(params.get(param.name, param.default), n_heads)
        for param in spec.params
    }
    blocks = _BUILDERS[name](n_heads, n_q_blocks, n_k_blocks, block_size, values)
    return Layout(blocks, block_size)
