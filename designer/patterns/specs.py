"""What a pattern's parameters are, as values the app turns into widgets and the registry checks.

``registry.py`` re-exports these two classes; they live here so the catalogue modules can build
specs without importing the registry that collects them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from designer.validate import (
    check_bool,
    check_choice,
    check_float,
    check_int,
    check_int_list,
    per_head,
)

PARAM_KINDS = ("int", "float", "bool", "choice", "int_list")
FAMILIES = ("generator", "deepspeed")


@dataclass(frozen=True)
class ParamSpec:
    """One parameter: its kind, default, bounds (for numbers and list items) and help text.

    ``per_head`` means the value may also be a list with one value per head.
    """

    name: str
    kind: str  # "int" | "float" | "bool" | "choice" | "int_list"
    default: Any
    low: float | None = None
    high: float | None = None
    choices: tuple = ()
    per_head: bool = False
    help: str = ""

    def __post_init__(self) -> None:
        check_choice(f"kind of parameter {self.name!r}", self.kind, PARAM_KINDS)
        if (self.kind == "choice") != bool(self.choices):
            raise ValueError(f"parameter {self.name!r}: choices go with kind 'choice' only")
        if self.per_head and self.kind not in ("int", "float", "bool", "choice"):
            raise ValueError(f"parameter {self.name!r}: only single values may be per head")
        self.check(self.default, 1)

    def check(self, value: Any, n_heads: int) -> Any:
        """``value`` checked for a layout of ``n_heads`` heads.

        A per-head list stays a list and a single value stays single: some generators give the
        two different meanings (one seed for all heads draws them in turn).
        """
        if not self.per_head:
            return self._check_one(self.name, value)
        checked = per_head(self.name, value, n_heads, self._check_one)
        return checked if isinstance(value, (list, tuple, np.ndarray)) else checked[0]

    def _check_one(self, name: str, value: Any) -> Any:
        low = None if self.low is None else int(self.low)
        high = None if self.high is None else int(self.high)
        if self.kind == "int":
            return check_int(name, value, low=low, high=high)
        if self.kind == "float":
            return check_float(name, value, low=self.low, high=self.high)
        if self.kind == "bool":
            return check_bool(name, value)
        if self.kind == "choice":
            return check_choice(name, value, self.choices)
        return check_int_list(name, value, low=low, high=high)


@dataclass(frozen=True)
class PatternSpec:
    """A pattern the registry can make: its key, names, one-line rule and parameters.

    ``random`` patterns take a ``seed`` parameter; ``square_only`` ones need
    ``n_q_blocks == n_k_blocks`` (DeepSpeed configs build square layouts).
    """

    name: str
    label: str
    family: str  # "generator" | "deepspeed"
    description: str
    params: tuple[ParamSpec, ...]
    random: bool
    square_only: bool

    def __post_init__(self) -> None:
        check_choice(f"family of pattern {self.name!r}", self.family, FAMILIES)
        names = [param.name for param in self.params]
        if len(set(names)) != len(names):
            raise ValueError(f"pattern {self.name!r} has repeated parameter names {names}")
        if self.random != ("seed" in names):
            raise ValueError(f"pattern {self.name!r}: random patterns, and only they, take a seed")

    def param(self, name: str) -> ParamSpec:
        """The parameter called ``name``."""
        for param in self.params:
            if param.name == name:
                return param
        allowed = ", ".join(param.name for param in self.params) or "none"
        raise ValueError(f"pattern {self.name!r} has no parameter {name!r}; allowed: {allowed}")
