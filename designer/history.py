"""An immutable undo/redo history that a UI can keep in its state.

Every operation returns a new ``History`` and never changes the old one, so a Streamlit session can
hold it as one value and a rerun can never see it half-updated. It is generic over the value: the
app keeps ``Design`` objects in it, tests keep ints. A push that does not change the value records
no step; "the same" is ``==`` unless the history is given its own ``same`` (the app's designs
carry a modification time that a no-op change still renews).

>>> h = History(1).push(2).push(3)
>>> h.undo().undo().present, h.undo().redo().present, h.undo().push(9).can_redo
(1, 3, False)
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Generic, TypeVar

from designer.validate import check_int

T = TypeVar("T")

#: Undo steps kept by default.
DEFAULT_LIMIT = 100
#: Most undo steps a history may keep (each holds a whole value).
MAX_LIMIT = 10_000


@dataclass(frozen=True)
class History(Generic[T]):
    """The present value, the values before it (oldest first) and the undone ones after it.

    ``limit`` bounds the undo steps kept: pushing beyond it drops the oldest value. ``same``
    tells whether a pushed value is no change from the present (default ``==``).

    >>> History("a", same=str.__eq__).push("a").can_undo
    False
    """

    present: T
    past: tuple[T, ...] = ()
    future: tuple[T, ...] = ()
    limit: int = DEFAULT_LIMIT
    same: Callable[[T, T], bool] | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        check_int("limit", self.limit, low=1, high=MAX_LIMIT)
        for name in ("past", "future"):
            if not isinstance(getattr(self, name), tuple):
                raise TypeError(f"{name} must be a tuple, got {type(getattr(self, name)).__name__}")
        if len(self.past) > self.limit:
            raise ValueError(
                f"past must hold at most limit={self.limit} values, got {len(self.past)}"
            )

    @property
    def can_undo(self) -> bool:
        return bool(self.past)

    @property
    def can_redo(self) -> bool:
        return bool(self.future)

    def push(self, value: T) -> History[T]:
        """Make ``value`` the present and drop the redo branch; an equal value changes nothing."""
        if value is self.present or value == self.present:
            return self
        if self.same is not None and self.same(value, self.present):
            return self
        return self.record(value)

    def record(self, value: T) -> History[T]:
        """``push`` for a value the caller knows to be a change (a stroke that painted blocks):
        no comparison, which for a large value costs as much as making it."""
        past = (*self.past, self.present)[-self.limit :]
        return replace(self, present=value, past=past, future=())

    def undo(self) -> History[T]:
        """Step back one value (nothing to undo: the same history)."""
        if not self.past:
            return self
        return replace(
            self, present=self.past[-1], past=self.past[:-1], future=(self.present, *self.future)
        )

    def redo(self) -> History[T]:
        """Step forward to the last undone value (nothing to redo: the same history)."""
        if not self.future:
            return self
        return replace(
            self, present=self.future[0], past=(*self.past, self.present), future=self.future[1:]
        )
