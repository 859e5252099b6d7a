"""What a pattern is, as values: its parameters (the app's widgets, the registry's checks) and
the call that builds it.

Each pattern module declares its ``SPECS`` with these classes; ``registry.py`` collects them and
re-exports the classes. They live apart from the registry so that a pattern module can build its
specs without importing the registry that imports it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import torch

from designer.validate import (
    check_bool,
    check_choice,
    check_float,
    check_int,
    check_int_list,
    per_head,
)

PARAM_KINDS = ("int", "float", "bool", "choice", "int_list")
FAMILIES = ("generator", "deepspeed", "token")

#: Makes a pattern: ``(n_heads, n_q_blocks, n_k_blocks, block_size, params) -> [H, M, N]``, with
#: ``params`` every parameter of the spec, already checked.
Builder = Callable[[int, int, int, int, dict[str, Any]], torch.Tensor]
#: Makes a pattern as row runs, at any size: ``(n_heads, n_q_blocks, n_k_blocks, params) ->
#: BlockRuns`` (the same blocks ``build`` gives where both can be made).
RunsBuilder = Callable[[int, int, int, dict[str, Any]], Any]
#: Makes a token pattern's rule: ``(params, seq_q, seq_k) -> mask_mod(b, h, q_idx, kv_idx)``.
RuleMaker = Callable[[dict[str, Any], int, int], Callable[..., torch.Tensor]]


def calls(generator: Callable[..., torch.Tensor]) -> Builder:
    """A builder passing the parameters to ``generator`` as keywords (block size unused)."""
    return lambda n_heads, n_q, n_k, _block_size, params: generator(n_heads, n_q, n_k, **params)


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
    """A pattern the registry can make: its key, names, one-line rule, parameters and builder.

    ``random`` patterns take a ``seed`` parameter; ``square_only`` ones need
    ``n_q_blocks == n_k_blocks`` (DeepSpeed configs build square layouts). ``order`` places the
    pattern in the registry, so in menus and in messages that list the names (ascending:
    generators from 10, DeepSpeed's configs from 200, token patterns from 300, in steps of 10
    to leave room). A block pattern has a ``build``; a ``token`` pattern has a ``rule`` instead,
    a ``mask_mod`` over token indices that ``designer.from_mask_mod`` turns into full, partial
    and empty blocks. A pattern with ``build_runs`` can also be made as row runs, at sizes past
    a dense grid's (long contexts).
    """

    name: str
    label: str
    family: str  # "generator" | "deepspeed"
    description: str
    params: tuple[ParamSpec, ...]
    random: bool
    square_only: bool
    build: Builder | None = field(default=None, kw_only=True, compare=False, repr=False)
    order: int = field(kw_only=True)
    rule: RuleMaker | None = field(default=None, kw_only=True, compare=False, repr=False)
    build_runs: RunsBuilder | None = field(default=None, kw_only=True, compare=False, repr=False)

    def __post_init__(self) -> None:
        check_choice(f"family of pattern {self.name!r}", self.family, FAMILIES)
        if (self.family == "token") != (self.rule is not None) or (self.build is None) == (
            self.rule is None
        ):
            raise ValueError(
                f"pattern {self.name!r}: token patterns have a rule, the others a build"
            )
        check_int(f"order of pattern {self.name!r}", self.order, low=0)
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
