"""Argument checks shared by every public function of the designer.

Each check raises ``TypeError`` for a wrong type and ``ValueError`` for a wrong value, and its
message names the parameter, what is allowed and what it got, so a user reading it in the app
knows which widget or argument to fix.
"""

from __future__ import annotations

import numbers
import reprlib
from collections.abc import Callable, Collection, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, TypeVar

import numpy as np
import torch

T = TypeVar("T")

#: The largest layout we accept: 2**26 cells is 16 heads x 2048 x 2048 blocks (bool: 64 MiB).
MAX_LAYOUT_CELLS = 1 << 26
#: The most heads a layout may have.
MAX_HEADS = 1024
#: The most query or key blocks a layout may have.
MAX_BLOCKS = 1 << 16
#: Layouts past ``MAX_LAYOUT_CELLS`` are held as row runs (``designer.block_runs``), whose
#: memory follows the runs and whose work (segmentation, lints, a kernel plan's tables) follows
#: the active blocks. The most active blocks such a layout may have: 2**26, what the largest
#: dense layout could hold, and twice the 34M of 32 heads x 1M tokens of a 4K-token window plus
#: sinks (a plan's int32 column per block: 256 MiB at the limit).
MAX_ACTIVE_BLOCKS = 1 << 26
#: The most runs (8 bytes each: 128 MiB) and block rows (``H * M``, 8 bytes of ``row_ptr``
#: each: 32 MiB) a layout held as runs may have; 32 heads x 16,384 rows is 524,288.
MAX_RUNS = 1 << 24
MAX_RUN_ROWS = 1 << 22
#: Longest error message a loader raises: enough to say what is wrong, never the payload itself.
MAX_MESSAGE_CHARS = 400

_SHOW = reprlib.Repr()
_SHOW.maxlevel, _SHOW.maxstring, _SHOW.maxother = 2, 60, 60
_SHOW.maxlist = _SHOW.maxtuple = _SHOW.maxdict = _SHOW.maxset = 4


def shown(value: Any) -> str:
    """A short ``repr`` of ``value`` for messages: bounded length and depth, whatever it holds.

    >>> shown([[[[1]]]] * 1000)
    '[[[...]], [[...]], [[...]], [[...]], ...]'
    """
    return _SHOW.repr(value)


def capped(text: str, limit: int = MAX_MESSAGE_CHARS) -> str:
    """``text`` cut to ``limit`` characters (with an ellipsis), so no message carries a payload.

    >>> capped("x" * 10, limit=5)
    'xxxx…'
    """
    return text if len(text) <= limit else text[: limit - 1] + "…"


def check_int(name: str, value: Any, *, low: int | None = None, high: int | None = None) -> int:
    """Return ``value`` as a Python int, or raise naming ``name`` and the allowed range.

    >>> check_int("window_blocks", 3, low=1)
    3
    """
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{name} must be an integer, got {type(value).__name__} {shown(value)}")
    value = int(value)
    if (low is not None and value < low) or (high is not None and value > high):
        raise ValueError(f"{name} must be {_range_text(low, high)}, got {value}")
    return value


def check_float(
    name: str, value: Any, *, low: float | None = None, high: float | None = None
) -> float:
    """Return ``value`` as a finite float in ``[low, high]``, or raise naming ``name``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real):
        raise TypeError(f"{name} must be a number, got {type(value).__name__} {shown(value)}")
    value = float(value)
    if not np.isfinite(value):
        raise ValueError(f"{name} must be finite, got {value}")
    if (low is not None and value < low) or (high is not None and value > high):
        raise ValueError(f"{name} must be {_range_text(low, high)}, got {value}")
    return value


def check_bool(name: str, value: Any) -> bool:
    """Return ``value`` if it is a bool (numpy bools too), or raise naming ``name``."""
    if not isinstance(value, (bool, np.bool_)):
        raise TypeError(f"{name} must be True or False, got {type(value).__name__} {shown(value)}")
    return bool(value)


def check_choice(name: str, value: Any, choices: Sequence[T]) -> T:
    """Return ``value`` if it is one of ``choices``, or raise listing them."""
    if value not in choices:
        allowed = ", ".join(repr(c) for c in choices)
        raise ValueError(f"{name} must be one of {allowed}, got {shown(value)}")
    return value


def check_int_list(
    name: str,
    values: Any,
    *,
    low: int | None = None,
    high: int | None = None,
    min_len: int = 0,
    max_len: int | None = None,
) -> list[int]:
    """Return ``values`` as a list of ints, each in ``[low, high]``, or raise naming the item."""
    if isinstance(values, (str, bytes)) or not isinstance(values, (Sequence, np.ndarray)):
        raise TypeError(f"{name} must be a list of integers, got {type(values).__name__}")
    if len(values) < min_len or (max_len is not None and len(values) > max_len):
        raise ValueError(f"{name} must have {_count_text(min_len, max_len)}, got {len(values)}")
    plain = isinstance(values, (list, tuple)) and values and set(map(type, values)) == {int}
    # plain ints (what files and widgets give) in range: checked at C speed, 3M in 0.1 s
    if plain and (low is None or min(values) >= low) and (high is None or max(values) <= high):
        return list(values)
    return [check_int(f"{name}[{i}]", v, low=low, high=high) for i, v in enumerate(values)]


def check_keys(
    name: str, data: Any, required: Collection[str], optional: Collection[str] = ()
) -> Mapping[str, Any]:
    """Check that ``data`` is a dict with all ``required`` keys and no keys but those listed.

    Dicts read from files users upload pass through here, so a typo is reported, never ignored.

    >>> check_keys("edit", {"op": "transpose"}, ("op",))
    {'op': 'transpose'}
    """
    if not isinstance(data, Mapping):
        raise TypeError(f"{name} must be a dict, got {type(data).__name__}")
    missing = [key for key in required if key not in data]
    if missing:
        raise ValueError(f"{name} is missing {', '.join(map(repr, missing))}")
    unknown = [key for key in data if key not in required and key not in optional]
    if unknown:
        allowed = ", ".join(map(repr, [*required, *sorted(optional)]))
        raise ValueError(f"{name} has unknown keys {shown(unknown)}; allowed: {allowed}")
    return data


@contextmanager
def error_context(prefix: str, *, as_value_error: bool = False) -> Iterator[None]:
    """Re-raise a ``ValueError`` or ``TypeError`` from inside with ``prefix:`` before its message.

    ``as_value_error`` turns both into ``ValueError``, for loaders that promise only that.
    """
    try:
        yield
    except (ValueError, TypeError) as error:
        kind = ValueError if as_value_error else type(error)
        raise kind(f"{prefix}: {error}") from error


def check_layout_shape(n_heads: int, n_q_blocks: int, n_k_blocks: int) -> tuple[int, int, int]:
    """Check a ``[n_heads, n_q_blocks, n_k_blocks]`` layout shape before anything is allocated.

    >>> check_layout_shape(2, 3, 4)
    (2, 3, 4)
    """
    shape = _shape(n_heads, n_q_blocks, n_k_blocks)
    cells = shape[0] * shape[1] * shape[2]
    if cells > MAX_LAYOUT_CELLS:
        raise ValueError(
            f"n_heads * n_q_blocks * n_k_blocks must be <= {MAX_LAYOUT_CELLS:,}, "
            f"got {cells:,} {list(shape)}"
        )
    return shape


def check_runs_shape(n_heads: int, n_q_blocks: int, n_k_blocks: int) -> tuple[int, int, int]:
    """Check the shape of a layout held as runs (any number of cells) before anything is built.

    >>> check_runs_shape(32, 16384, 16384)
    (32, 16384, 16384)
    """
    shape = _shape(n_heads, n_q_blocks, n_k_blocks)
    if shape[0] * shape[1] > MAX_RUN_ROWS:
        raise ValueError(
            f"n_heads * n_q_blocks must be <= {MAX_RUN_ROWS:,} for a layout held as runs, "
            f"got {shape[0] * shape[1]:,} {list(shape)}"
        )
    return shape


def _shape(n_heads: int, n_q_blocks: int, n_k_blocks: int) -> tuple[int, int, int]:
    return (
        check_int("n_heads", n_heads, low=1, high=MAX_HEADS),
        check_int("n_q_blocks", n_q_blocks, low=1, high=MAX_BLOCKS),
        check_int("n_k_blocks", n_k_blocks, low=1, high=MAX_BLOCKS),
    )


def check_run_counts(active: int, runs: int) -> None:
    """Refuse a layout held as runs with more than ``MAX_ACTIVE_BLOCKS`` active blocks or
    ``MAX_RUNS`` runs, saying how many it has."""
    if active > MAX_ACTIVE_BLOCKS:
        raise ValueError(
            f"a layout of more than {MAX_LAYOUT_CELLS:,} cells may have at most "
            f"{MAX_ACTIVE_BLOCKS:,} active blocks, got {active:,}; use larger blocks or a "
            f"sparser pattern"
        )
    if runs > MAX_RUNS:
        raise ValueError(
            f"a layout of more than {MAX_LAYOUT_CELLS:,} cells may have at most {MAX_RUNS:,} "
            f"runs of blocks, got {runs:,}; use larger blocks or a less scattered pattern"
        )


def per_head(name: str, value: Any, n_heads: int, check: Callable[[str, Any], T]) -> list[T]:
    """Broadcast a scalar parameter to every head, or check a per-head list of length ``n_heads``.

    ``check(name, item)`` validates one item; it is given ``name[h]`` for list items so the
    message points at the head.

    >>> per_head("window_blocks", [1, 2], 2, lambda n, v: check_int(n, v, low=1))
    [1, 2]
    """
    if isinstance(value, (list, tuple, np.ndarray)):
        if len(value) != n_heads:
            raise ValueError(
                f"{name} must be one value or one per head ({n_heads}), got {len(value)} values"
            )
        return [check(f"{name}[{h}]", v) for h, v in enumerate(value)]
    item = check(name, value)
    return [item] * n_heads


def as_block_tensor(
    name: str, array: Any, *, allow_2d: bool = False, max_cells: int = MAX_LAYOUT_CELLS
) -> torch.Tensor:
    """Return a contiguous CPU ``torch.bool`` copy of a 0/1 block layout, checking everything.

    Accepts a torch tensor or numpy array of bool or integer dtype, of rank 3 ``[H, M, N]``
    (or rank 2 ``[M, N]`` when ``allow_2d``, read as one head). Values must be 0 or 1. The size
    check runs before any copy, so a huge tensor costs nothing.
    """
    if isinstance(array, np.ndarray):
        if array.dtype.kind not in "biu":
            raise TypeError(f"{name} must hold integers or bools, got dtype {array.dtype}")
        shape = tuple(array.shape)
    elif isinstance(array, torch.Tensor):
        if array.is_floating_point() or array.is_complex():
            raise TypeError(f"{name} must hold integers or bools, got dtype {array.dtype}")
        shape = tuple(array.shape)
    else:
        raise TypeError(f"{name} must be a torch tensor or numpy array, got {type(array).__name__}")
    ranks = "2 ([M, N]) or 3 ([H, M, N])" if allow_2d else "3 ([H, M, N])"
    if len(shape) not in ((2, 3) if allow_2d else (3,)):
        raise ValueError(f"{name} must have rank {ranks}, got shape {list(shape)}")
    cells = int(np.prod(shape, dtype=np.int64))
    if cells > max_cells:
        raise ValueError(
            f"{name} has {cells:,} cells {list(shape)}, more than the limit of {max_cells:,}"
        )
    tensor = torch.as_tensor(array).detach().to("cpu")
    if tensor.dtype != torch.bool and cells:
        # numpy: torch has no min or max for uint16, uint32 and uint64
        values = tensor.contiguous().numpy()
        low, high = int(values.min()), int(values.max())
        if low < 0 or high > 1:
            raise ValueError(f"{name} must hold only 0 and 1, got values in [{low}, {high}]")
    tensor = tensor.to(torch.bool)
    if tensor.dim() == 2:
        tensor = tensor.unsqueeze(0)
    return tensor.contiguous().clone()


def token_length(label: str, value: int | None, n_blocks: int, block_size: int) -> int:
    """``value`` (default: whole blocks) if ``n_blocks`` blocks cover it with a partial last block
    at most; ``label`` names it in the error.

    >>> token_length("seq_q", None, 4, 64), token_length("seq_q", 200, 4, 64)
    (256, 200)
    """
    whole = n_blocks * block_size
    if value is None:
        return whole
    return check_int(label, value, low=whole - block_size + 1, high=whole)


def _range_text(low: float | None, high: float | None) -> str:
    """``in [1, 64]``, ``>= 1`` or ``<= 5``: what follows "must be" in a range message."""
    if low is not None and high is not None:
        return f"in [{low}, {high}]"
    return f">= {low}" if low is not None else f"<= {high}"


def _count_text(min_len: int, max_len: int | None) -> str:
    """``2 items``, ``1 to 2 items``, ``at least 1 item`` or ``at most 5 items``."""
    if max_len is None:
        return f"at least {_items(min_len)}"
    if min_len == max_len:
        return _items(max_len)
    if min_len == 0:
        return f"at most {_items(max_len)}"
    return f"{min_len} to {_items(max_len)}"


def _items(count: int) -> str:
    return f"{count} item" if count == 1 else f"{count} items"
