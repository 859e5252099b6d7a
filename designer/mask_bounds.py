"""Bounds of a ``mask_mod`` over whole tiles: which tiles it surely allows, surely refuses.

``from_mask_mod`` must be exact, and evaluating every token pair of 65,536² tokens is out of
reach, so it first runs the ``mask_mod`` once over *intervals*: ``q_idx`` is a ``Span`` holding
each query block's first and last token, ``kv_idx`` each key block's. Torch operations on
spans (dispatched through ``__torch_function__``, and Python's operators) give sound bounds:
an integer span is ``[lo, hi]``, a boolean one is ``(surely true, maybe true)``. A tile whose
result is surely true is full, surely false is empty, and only the others are evaluated token
by token. Bounds are conservative, never guessed: where an operation is not one this module
bounds soundly (an unknown function, Python control flow on a value, a negative index), it
raises ``Unbounded`` and every tile is evaluated.

Bounded: ``+ - * abs neg``, ``//`` and ``%`` (by a divisor of known sign), ``min``/``max``/
``clamp``, comparisons, ``& | ^ ~`` and their ``logical_*`` forms, ``torch.where``, dtype casts,
``*_like`` constants, and indexing a captured tensor (document ids, per-head windows) at
spans: with one span index of unknown value, by a range-min/max table along that dimension.

>>> q = Span(torch.tensor([0, 64]), torch.tensor([63, 127]))
>>> k = Span(torch.tensor(0), torch.tensor(63))
>>> surely, maybe = bounds_of(q >= k)
>>> surely.tolist(), maybe.tolist()
([False, True], [True, True])
"""

from __future__ import annotations

import numbers
from typing import Any

import torch

#: Most cells of a range-min/max table over a captured tensor (its size times log2 of the
#: indexed dimension).
MAX_TABLE_CELLS = 1 << 26


class Unbounded(Exception):
    """The mask_mod does something this module cannot bound soundly."""


class Span:
    """Bounds of an integer (``lo <= x <= hi``) or boolean (``lo``: surely true, ``hi``: maybe
    true) tensor, broadcast together."""

    __slots__ = ("hi", "lo", "tables")

    def __init__(self, lo: torch.Tensor, hi: torch.Tensor, tables: dict | None = None) -> None:
        self.lo, self.hi = lo, hi
        self.tables = {} if tables is None else tables

    @property
    def is_bool(self) -> bool:
        return self.lo.dtype == torch.bool

    @property
    def exact(self) -> bool:
        return bool(torch.equal(self.lo, self.hi))

    @property
    def dtype(self) -> torch.dtype:
        return self.lo.dtype

    @property
    def device(self) -> torch.device:
        return self.lo.device

    @property
    def shape(self) -> torch.Size:
        return torch.broadcast_shapes(self.lo.shape, self.hi.shape)

    def dim(self) -> int:
        return len(self.shape)

    def __bool__(self) -> bool:
        raise Unbounded("Python control flow on a mask value")

    __index__ = __int__ = __float__ = __bool__

    @classmethod
    def __torch_function__(cls, func: Any, types: Any, args: tuple = (), kwargs: Any = None):
        name = getattr(func, "__name__", "")
        key = name.strip("_")
        if name.startswith("__r") and key[1:] in _REFLECTED:  # __rsub__(a, b) is b - a
            key, args = key[1:], (args[1], args[0], *args[2:])
        handler = _HANDLERS.get(key)
        if handler is None:
            raise Unbounded(f"torch.{name} is not bounded")
        return handler(*args, **(kwargs or {}))

    # Python's operators, for a plain number on the left (int - span) or spans on both sides.
    def __add__(self, other):
        return _add(self, other)

    def __radd__(self, other):
        return _add(other, self)

    def __sub__(self, other):
        return _sub(self, other)

    def __rsub__(self, other):
        return _sub(other, self)

    def __mul__(self, other):
        return _mul(self, other)

    def __rmul__(self, other):
        return _mul(other, self)

    def __floordiv__(self, other):
        return _floordiv(self, other)

    def __rfloordiv__(self, other):
        return _floordiv(other, self)

    def __mod__(self, other):
        return _remainder(self, other)

    def __rmod__(self, other):
        return _remainder(other, self)

    def __neg__(self):
        return _neg(self)

    def __abs__(self):
        return _abs(self)

    def __and__(self, other):
        return _and(self, other)

    __rand__ = __and__

    def __or__(self, other):
        return _or(self, other)

    __ror__ = __or__

    def __xor__(self, other):
        return _xor(self, other)

    __rxor__ = __xor__

    def __invert__(self):
        return _not(self)

    def __ge__(self, other):
        return _ge(self, other)

    def __gt__(self, other):
        return _gt(self, other)

    def __le__(self, other):
        return _ge(other, self)

    def __lt__(self, other):
        return _gt(other, self)

    def __eq__(self, other):  # type: ignore[override]
        return _eq(self, other)

    def __ne__(self, other):  # type: ignore[override]
        return _not(_eq(self, other))

    __hash__ = None  # type: ignore[assignment]

    def __getitem__(self, item):
        raise Unbounded("indexing a computed value")

    # Tensor methods a mask_mod may call on its arguments.
    def to(self, *args, **kwargs):
        return _to(self, *args, **kwargs)

    def bool(self):
        return _cast(self, torch.bool)

    def int(self):
        return _cast(self, torch.int32)

    def long(self):
        return _cast(self, torch.int64)

    def abs(self):
        return _abs(self)

    def clamp(self, min=None, max=None):
        return _clamp(self, min, max)

    def logical_and(self, other):
        return _and(self, other)

    def logical_or(self, other):
        return _or(self, other)

    def logical_not(self):
        return _not(self)


def bounds_of(value: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """``(surely true, maybe true)`` bool tensors of a mask_mod's result (span or tensor)."""
    span = _bool(_span(value))
    return span.lo, span.hi


# --------------------------------------------------------------------------- operands
def _span(value: Any, tables: dict | None = None) -> Span:
    if isinstance(value, Span):
        return value
    if isinstance(value, torch.Tensor):
        return Span(value, value, tables)
    if isinstance(value, (bool, numbers.Integral)):
        tensor = torch.tensor(value)
        return Span(tensor, tensor, tables)
    raise Unbounded(f"a {type(value).__name__} operand")


def _pair(a: Any, b: Any) -> tuple[Span, Span]:
    first = a.tables if isinstance(a, Span) else b.tables if isinstance(b, Span) else None
    return _span(a, first), _span(b, first)


def _int(span: Span) -> Span:
    """A boolean span as 0/1 integers (its bounds are already 0/1)."""
    if span.is_bool:
        return Span(span.lo.to(torch.int64), span.hi.to(torch.int64), span.tables)
    if span.lo.is_floating_point() or span.lo.is_complex():
        raise Unbounded("floating-point arithmetic")
    return span


def _bool(span: Span) -> Span:
    """A span as booleans: nonzero is true."""
    if span.is_bool:
        return span
    span = _int(span)
    surely = (span.lo > 0) | (span.hi < 0)
    return Span(surely, ~((span.lo == 0) & (span.hi == 0)), span.tables)


def _make(lo: torch.Tensor, hi: torch.Tensor, like: Span) -> Span:
    return Span(lo, hi, like.tables)


# --------------------------------------------------------------------------- arithmetic
def _add(a, b):
    a, b = map(_int, _pair(a, b))
    return _make(a.lo + b.lo, a.hi + b.hi, a)


def _sub(a, b):
    a, b = map(_int, _pair(a, b))
    return _make(a.lo - b.hi, a.hi - b.lo, a)


def _neg(a):
    a = _int(_span(a))
    return _make(-a.hi, -a.lo, a)


def _abs(a):
    a = _int(_span(a))
    lo = torch.where(a.lo >= 0, a.lo, torch.where(a.hi <= 0, -a.hi, torch.zeros_like(a.lo)))
    return _make(lo, torch.maximum(a.lo.abs(), a.hi.abs()), a)


def _corners(a: Span, b: Span, op) -> Span:
    """Bounds of ``op``, monotone in each argument on the box: its extremes are at corners."""
    values = [op(x, y) for x in (a.lo, a.hi) for y in (b.lo, b.hi)]
    lo, hi = values[0], values[0]
    for value in values[1:]:
        lo, hi = torch.minimum(lo, value), torch.maximum(hi, value)
    return _make(lo, hi, a)


def _mul(a, b):
    a, b = map(_int, _pair(a, b))
    return _corners(a, b, torch.mul)


def _signed_divisor(b: Span) -> None:
    if not bool(((b.lo > 0) | (b.hi < 0)).all()):
        raise Unbounded("a divisor that may be 0 or change sign")


def _floordiv(a, b):
    a, b = map(_int, _pair(a, b))
    _signed_divisor(b)
    return _corners(a, b, lambda x, y: torch.div(x, y, rounding_mode="floor"))


def _div(a, b, *, rounding_mode=None):
    if rounding_mode != "floor":
        raise Unbounded("division other than floor division")
    return _floordiv(a, b)


def _remainder(a, b):
    a, b = map(_int, _pair(a, b))
    if not bool((b.lo > 0).all()):
        raise Unbounded("a remainder by a divisor that may be <= 0")
    if b.exact:
        d = b.lo
        same = torch.div(a.lo, d, rounding_mode="floor") == torch.div(
            a.hi, d, rounding_mode="floor"
        )
        zero = torch.zeros_like(a.lo)
        lo = torch.where(same, torch.remainder(a.lo, d), zero)
        hi = torch.where(same, torch.remainder(a.hi, d), d - 1 + zero)
        return _make(lo, hi, a)
    zero = torch.zeros_like(a.lo + b.lo)
    return _make(zero, b.hi - 1 + zero, a)


def _minimum(a, b):
    a, b = map(_int, _pair(a, b))
    return _make(torch.minimum(a.lo, b.lo), torch.minimum(a.hi, b.hi), a)


def _maximum(a, b):
    a, b = map(_int, _pair(a, b))
    return _make(torch.maximum(a.lo, b.lo), torch.maximum(a.hi, b.hi), a)


def _clamp(a, min=None, max=None):
    if min is not None:
        a = _maximum(a, min)
    if max is not None:
        a = _minimum(a, max)
    return _span(a)


def _binary_min_max(op):
    def bounded(a, b=None, *rest, **kwargs):
        if b is None or rest or kwargs or not isinstance(b, (Span, torch.Tensor, numbers.Integral)):
            raise Unbounded("a reduction")
        return op(a, b)

    return bounded


# --------------------------------------------------------------------------- comparisons
def _ge(a, b):
    a, b = map(_int, _pair(a, b))
    return _make(a.lo >= b.hi, a.hi >= b.lo, a)


def _gt(a, b):
    a, b = map(_int, _pair(a, b))
    return _make(a.lo > b.hi, a.hi > b.lo, a)


def _eq(a, b):
    a, b = map(_int, _pair(a, b))
    surely = (a.lo == a.hi) & (b.lo == b.hi) & (a.lo == b.lo)
    return _make(surely, (a.lo <= b.hi) & (b.lo <= a.hi), a)


def _ne(a, b):
    return _not(_eq(a, b))


# --------------------------------------------------------------------------- logic
def _logic_operands(a, b) -> tuple[Span, Span]:
    a, b = _pair(a, b)
    if not (a.is_bool and b.is_bool):
        raise Unbounded("bitwise operations on integers")
    return a, b


def _and(a, b):
    a, b = _logic_operands(a, b)
    return _make(a.lo & b.lo, a.hi & b.hi, a)


def _or(a, b):
    a, b = _logic_operands(a, b)
    return _make(a.lo | b.lo, a.hi | b.hi, a)


def _xor(a, b):
    a, b = _logic_operands(a, b)
    surely = (a.lo & ~b.hi) | (~a.hi & b.lo)
    return _make(surely, (a.hi & ~b.lo) | (~a.lo & b.hi), a)


def _not(a):
    a = _span(a)
    if not a.is_bool:
        raise Unbounded("bitwise not of an integer")
    return _make(~a.hi, ~a.lo, a)


def _logical_not(a):
    return _not(_bool(_span(a)))


def _logical(op):
    return lambda a, b: op(_bool(_span(a)), _bool(_span(b)))


def _where(condition, a=None, b=None):
    if a is None or b is None:
        raise Unbounded("torch.where with one argument")
    c = _bool(_span(condition))
    a, b = _pair(a, b)
    if a.is_bool != b.is_bool:
        a, b = _int(a), _int(b)
    lo = torch.where(c.lo, a.lo, torch.where(~c.hi, b.lo, torch.minimum(a.lo, b.lo)))
    hi = torch.where(c.lo, a.hi, torch.where(~c.hi, b.hi, torch.maximum(a.hi, b.hi)))
    return Span(lo, hi, c.tables)


# --------------------------------------------------------------------------- casts, constants
def _cast(a, dtype: torch.dtype) -> Span:
    a = _span(a)
    if dtype == torch.bool:
        return _bool(a)
    if dtype.is_floating_point or dtype.is_complex:
        raise Unbounded("a cast to floating point")
    a = _int(a)
    return _make(a.lo.to(dtype), a.hi.to(dtype), a)


def _to(a, *args, **kwargs):
    dtype = kwargs.get("dtype")
    for arg in args:
        if isinstance(arg, torch.dtype):
            dtype = arg
    return _span(a) if dtype is None else _cast(a, dtype)


def _like(fill):
    def constant(a, *args, dtype=None, **kwargs):
        a = _span(a)
        value = fill(args)
        tensor = torch.full(a.shape, value, dtype=dtype or a.dtype)
        return Span(tensor, tensor, a.tables)

    return constant


# --------------------------------------------------------------------------- indexing
def _getitem(base, item):
    if isinstance(base, Span):
        raise Unbounded("indexing a computed value")
    parts = item if isinstance(item, tuple) else (item,)
    spans = [p for p in parts if isinstance(p, Span)]
    tables = spans[0].tables if spans else {}
    exact, loose = [], []
    for position, part in enumerate(parts):
        if isinstance(part, Span):
            part = _int(part)
            if bool((part.lo < 0).any()):
                raise Unbounded("a negative index (Python would wrap it)")
            if part.exact:
                exact.append(part.lo)
            else:
                loose.append(position)
                exact.append(part)
        elif isinstance(part, torch.Tensor) and part.dtype != torch.bool:
            exact.append(part)
        elif isinstance(part, numbers.Integral) and not isinstance(part, bool):
            exact.append(torch.tensor(part))
        else:
            raise Unbounded(f"an index of {type(part).__name__}")
    if len(parts) != base.dim():
        raise Unbounded("an index that does not name every dimension")
    if not loose:
        value = base[tuple(exact)]
        return Span(value, value, tables)
    if len(loose) > 1:
        raise Unbounded("two indices of unknown value")
    (dim,) = loose
    span = exact[dim]
    lo_table, hi_table = _range_tables(base, dim, tables)
    size = base.shape[dim]
    first = span.lo.clamp(max=size - 1)
    last = span.hi.clamp(max=size - 1)
    level = torch.floor(torch.log2((last - first + 1).to(torch.float64))).to(torch.int64)
    second = last - (1 << level) + 1
    before, after = exact[:dim], exact[dim + 1 :]

    def read(table, at):
        return table[(level, *before, at, *after)]

    lo = torch.minimum(read(lo_table, first), read(lo_table, second))
    hi = torch.maximum(read(hi_table, first), read(hi_table, second))
    if base.dtype == torch.bool:
        lo, hi = lo.to(torch.bool), hi.to(torch.bool)
    return Span(lo, hi, tables)


def _range_tables(base: torch.Tensor, dim: int, tables: dict) -> tuple[torch.Tensor, torch.Tensor]:
    """Sparse tables of ``base`` along ``dim``: level ``l`` holds the min (max) of the ``2**l``
    entries from each position on (``[levels, *base.shape]``), built once per tensor."""
    key = (id(base), dim)
    if key in tables:
        return tables[key][1:]
    if base.is_floating_point() or base.is_complex():
        raise Unbounded("indexing a floating-point tensor")
    values = base.to(torch.int64) if base.dtype == torch.bool else base
    size = base.shape[dim]
    levels = max(1, size.bit_length())
    if levels * base.numel() > MAX_TABLE_CELLS:
        raise Unbounded("a range table too large")
    lows, highs = [values], [values]
    for level in range(1, levels):
        step = 1 << (level - 1)
        low, high = lows[-1], highs[-1]
        shifted = (torch.arange(size) + step).clamp(max=size - 1)
        lows.append(torch.minimum(low, low.index_select(dim, shifted)))
        highs.append(torch.maximum(high, high.index_select(dim, shifted)))
    made = (base, torch.stack(lows), torch.stack(highs))  # base kept: its id stays its own
    tables[key] = made
    return made[1:]


#: Operators Python calls reflected (``__rsub__``) when the left operand is not a span.
_REFLECTED = ("add", "sub", "mul", "floordiv", "mod", "and", "or", "xor")

_HANDLERS = {
    "add": _add,
    "sub": _sub,
    "subtract": _sub,
    "mul": _mul,
    "multiply": _mul,
    "neg": _neg,
    "negative": _neg,
    "abs": _abs,
    "absolute": _abs,
    "floordiv": _floordiv,
    "floor_divide": _floordiv,
    "div": _div,
    "divide": _div,
    "mod": _remainder,
    "remainder": _remainder,
    "minimum": _minimum,
    "maximum": _maximum,
    "min": _binary_min_max(_minimum),
    "max": _binary_min_max(_maximum),
    "clamp": _clamp,
    "clip": _clamp,
    "ge": _ge,
    "greater_equal": _ge,
    "gt": _gt,
    "greater": _gt,
    "le": lambda a, b: _ge(b, a),
    "less_equal": lambda a, b: _ge(b, a),
    "lt": lambda a, b: _gt(b, a),
    "less": lambda a, b: _gt(b, a),
    "eq": _eq,
    "ne": _ne,
    "not_equal": _ne,
    "and": _and,
    "bitwise_and": _and,
    "or": _or,
    "bitwise_or": _or,
    "xor": _xor,
    "bitwise_xor": _xor,
    "invert": _not,
    "bitwise_not": _not,
    "logical_and": _logical(_and),
    "logical_or": _logical(_or),
    "logical_xor": _logical(_xor),
    "logical_not": _logical_not,
    "where": _where,
    "to": _to,
    "bool": lambda a: _cast(a, torch.bool),
    "int": lambda a: _cast(a, torch.int32),
    "long": lambda a: _cast(a, torch.int64),
    "ones_like": _like(lambda args: 1),
    "zeros_like": _like(lambda args: 0),
    "full_like": _like(lambda args: args[0]),
    "getitem": _getitem,
}
