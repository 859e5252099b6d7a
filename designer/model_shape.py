"""The shape of the model a design is used in: batch, query heads, key/value heads, head dim.

Entered once by the user and kept with the design (its files carry it), so every statistic and
estimate the app shows is at the model's shape, not at a fixed head dim with no batch or GQA.
"""

from __future__ import annotations

from dataclasses import dataclass

from designer.validate import MAX_HEADS, check_int

#: Head dims a shape may have, and the largest batch.
MAX_HEAD_DIM = 1024
MAX_BATCH = 1 << 16


@dataclass(frozen=True)
class ModelShape:
    """The model a design is costed in: batch, query heads, key/value heads, head dim.

    ``heads`` None means the design's own head count; ``kv_heads`` None means as many as the
    query heads (no GQA). ``kv_heads`` must divide ``heads``.

    >>> ModelShape(batch=2, heads=32, kv_heads=8, head_dim=128).group
    4
    """

    batch: int = 1
    heads: int | None = None
    kv_heads: int | None = None
    head_dim: int = 128

    def __post_init__(self) -> None:
        check_int("batch", self.batch, low=1, high=MAX_BATCH)
        check_int("head dim", self.head_dim, low=1, high=MAX_HEAD_DIM)
        if self.heads is not None:
            check_int("heads", self.heads, low=1, high=MAX_HEADS)
        if self.kv_heads is not None:
            check_int("kv heads", self.kv_heads, low=1, high=MAX_HEADS)
            if self.heads is not None and self.heads % self.kv_heads:
                raise ValueError(
                    f"kv heads must divide heads (grouped-query attention), got {self.kv_heads} "
                    f"kv heads for {self.heads} heads"
                )

    def query_heads(self, n_heads: int) -> int:
        """The query heads of a model using a design of ``n_heads`` heads."""
        return self.heads or n_heads

    def check_serves(self, n_heads: int) -> None:
        """Raise unless a design of ``n_heads`` heads can serve this model: one head serves any
        number, several exactly as many; kv heads divide the query heads."""
        heads = self.query_heads(n_heads)
        if n_heads not in (1, heads):
            raise ValueError(
                f"heads must be {n_heads} for this {n_heads}-head design (or draw it with 1 "
                f"head, which serves any number), got {heads}"
            )
        if heads % (self.kv_heads or heads):
            raise ValueError(
                f"kv heads must divide heads, got {self.kv_heads} kv heads for {heads} heads"
            )

    @property
    def group(self) -> int | None:
        """Query heads per key/value head, when both are known."""
        if self.heads is None:
            return None
        return self.heads // (self.kv_heads or self.heads)

    def to_dict(self) -> dict[str, int | None]:
        return {"batch": self.batch, "heads": self.heads, "kv_heads": self.kv_heads,
                "head_dim": self.head_dim}  # fmt: skip


def model_shape_from_dict(data: object) -> ModelShape:
    """A shape written by ``ModelShape.to_dict``, every key and value checked."""
    if not isinstance(data, dict):
        raise TypeError(f"model shape must be a dict, got {type(data).__name__}")
    allowed = ("batch", "heads", "kv_heads", "head_dim")
    unknown = sorted(str(key) for key in data if key not in allowed)
    if unknown or set(data) != set(allowed):
        raise ValueError(f"model shape must have the keys {list(allowed)}, got {sorted(data)}")
    return ModelShape(**data)
