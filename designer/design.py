"""A design: a layout plus everything needed to understand, reproduce and reuse it."""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timezone
from typing import TYPE_CHECKING

from designer.layout import Layout
from designer.model_shape import ModelShape
from designer.validate import check_bool, check_int, shown

if TYPE_CHECKING:
    from designer.recipe import Recipe

#: Tokens on the side of the largest square tile the segmentation aims for by default.
DEFAULT_TILE_TOKENS = 128
#: Longest timestamp string a design keeps (ISO 8601 with an offset is 25 characters).
MAX_STAMP_CHARS = 64
#: Longest design name, everywhere (the library's file names too). Files written before this
#: limit held names of up to ``LEGACY_NAME_CHARS``; they read with the name shortened.
MAX_NAME_CHARS = 80
LEGACY_NAME_CHARS = 200


def check_name(name: object) -> str:
    """``name`` if it can name a design: 1 to ``MAX_NAME_CHARS`` characters, not all spaces."""
    if not isinstance(name, str) or not name.strip() or len(name) > MAX_NAME_CHARS:
        raise ValueError(
            f"name must be 1 to {MAX_NAME_CHARS} characters, not only spaces, got {shown(name)}"
        )
    return name


def legacy_name(name: object) -> object:
    """A name read from a file: one longer than ``MAX_NAME_CHARS`` but within what older files
    held (``LEGACY_NAME_CHARS``) is shortened, with "…"; anything else is left to be checked."""
    if isinstance(name, str) and MAX_NAME_CHARS < len(name) <= LEGACY_NAME_CHARS:
        return name[: MAX_NAME_CHARS - 1].rstrip() + "…"
    return name


def default_start_width(block_size: int) -> int:
    """The segmentation start width whose tiles are 128 tokens (at least 1).

    >>> default_start_width(16), default_start_width(64), default_start_width(256)
    (8, 2, 1)
    """
    return max(1, DEFAULT_TILE_TOKENS // check_int("block_size", block_size, low=1))


def now_iso() -> str:
    """The current UTC time, to the second, as ISO 8601."""
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat()


@dataclass(frozen=True)
class Design:
    """A layout with its name, causal flag, segmentation start width, recipe, and the shape of
    the model it is costed in (``model_shape``: batch, heads, kv heads, head dim).

    ``recipe`` (when present) regenerates ``layout`` exactly: patterns, then manual edits.
    ``causal`` means attention also applies ``q_idx >= k_idx`` inside blocks.
    """

    layout: Layout
    name: str = "untitled"
    causal: bool = False
    start_width: int | None = None
    recipe: Recipe | None = None
    created: str = field(default_factory=now_iso)
    modified: str = field(default_factory=now_iso)
    model_shape: ModelShape = field(default_factory=ModelShape)

    def __post_init__(self) -> None:
        if not isinstance(self.layout, Layout):
            raise TypeError(f"layout must be a Layout, got {type(self.layout).__name__}")
        check_name(self.name)
        check_bool("causal", self.causal)
        if not isinstance(self.model_shape, ModelShape):
            raise TypeError(
                f"model_shape must be a ModelShape, got {type(self.model_shape).__name__}"
            )
        self.model_shape.check_serves(self.layout.n_heads)
        if self.start_width is not None:
            check_int("start_width", self.start_width, low=0, high=1 << 16)
        for key in ("created", "modified"):
            stamp = getattr(self, key)
            if not isinstance(stamp, str) or len(stamp) > MAX_STAMP_CHARS:
                raise ValueError(
                    f"{key} must be a timestamp string of at most {MAX_STAMP_CHARS} characters, "
                    f"got {shown(stamp)}"
                )

    @property
    def effective_start_width(self) -> int:
        """The start width to segment with: the chosen one, else 128-token tiles."""
        if self.start_width is not None:
            return self.start_width
        return default_start_width(self.layout.block_size)

    def with_layout(self, layout: Layout, *, recipe: Recipe | None = None) -> Design:
        """The same design with a new layout (and recipe), stamped as modified now."""
        return replace(self, layout=layout, recipe=recipe, modified=now_iso())
